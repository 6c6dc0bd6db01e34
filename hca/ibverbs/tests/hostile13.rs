//! Issue 13's verbs through the C ABI with hostile arguments: each test a bug once found here.

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::process::{Command, Stdio};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// Set in the child process that runs a test which, broken, would loop and grow without bound.
const CHILD: &str = "IBVERBS_HOSTILE13_CHILD";

/// Runs test `name` of this binary in a child process with its address space capped (1 GiB)
/// and a deadline (30 s); true if it ran and passed. A child that loops allocating dies of the
/// cap or is killed at the deadline, so a regression fails instead of wedging the machine.
fn passes_in_bounded_child(name: &str) -> bool {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::env::temp_dir().join(format!("hostile13-{}-{name}.out", std::process::id()));
    let file = std::fs::File::create(&out).expect("the child's output file");
    let mut child = Command::new(exe)
        .args(["--exact", name, "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(file)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            let _ = std::fs::remove_file(&out);
            return status.success() && text.contains("1 passed");
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// In the child: caps the address space so a runaway allocation aborts.
fn cap_memory() {
    let lim = libc::rlimit { rlim_cur: 1 << 30, rlim_max: 1 << 30 };
    // SAFETY: setrlimit reads the struct; lowering our own limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
}

/// A receive chain that loops back on itself (`wr.next == &wr`) posted to a 4-WR SRQ (then to a
/// QP's RQ, and a looping send chain to its SQ): as
/// rdma-core's pvrdma provider (which posts until the ring is full), the answer is `ENOMEM`
/// with `bad_wr` at the first WR that found no room. Before the fix the library collected the
/// chain before posting it and never came back, allocating without bound.
#[test]
fn cyclic_work_request_chains_fail_instead_of_looping() {
    if std::env::var_os(CHILD).is_none() {
        assert!(passes_in_bounded_child("cyclic_work_request_chains_fail_instead_of_looping"));
        return;
    }
    cap_memory();
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        let dev = *list;
        test_model(dev).expect("a model device");
        let ctx = ibv_open_device(dev);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        let mut init =
            ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 4, max_sge: 1, srq_limit: 0 } };
        let srq = ibv_create_srq(pd, &mut init);
        assert!(!srq.is_null());
        let mut sge = ibv_sge { addr: buf.as_ptr() as u64, length: 64, lkey: (*mr).lkey };
        let mut wr = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: &mut sge, num_sge: 1 };
        wr.next = &mut wr;
        let mut bad = null_mut();
        let post = (*ctx).ops.post_srq_recv.expect("post_srq_recv");
        assert_eq!(post(srq.cast(), &mut wr, &mut bad), libc::ENOMEM);
        assert_eq!(bad, &mut wr as *mut _);
        // The same through a QP's receive queue (8 WRs).
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let mut qa = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap: ibv_qp_cap { max_send_wr: 1, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        let qp = ibv_create_qp(pd, &mut qa);
        assert!(!qp.is_null());
        // INIT (1) with IBV_QP_STATE | ACCESS_FLAGS | PKEY_INDEX | PORT.
        let mut attr = ibv_qp_attr { qp_state: 1, port_num: 1, ..Default::default() };
        assert_eq!(ibv_modify_qp(qp, &mut attr, 1 | 8 | 16 | 32), 0);
        bad = null_mut();
        assert_eq!(((*ctx).ops.post_recv.unwrap())(qp, &mut wr, &mut bad), libc::ENOMEM);
        assert_eq!(bad, &mut wr as *mut _);
        // And a looping send chain: a QP before RTS refuses the first WR (EINVAL, as rdma-core).
        let mut sw: ibv_send_wr = std::mem::zeroed();
        (sw.wr_id, sw.sg_list, sw.num_sge, sw.opcode) = (2, &mut sge, 1, IBV_WR_SEND);
        sw.next = &mut sw;
        let mut sbad = null_mut();
        assert_eq!(((*ctx).ops.post_send.unwrap())(qp, &mut sw, &mut sbad), libc::EINVAL);
        assert_eq!(sbad, &mut sw as *mut _);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_srq(srq), 0);
    }
}

/// `ibv_create_srq` with `max_wr` and `max_sge` 0: rdma-core's pvrdma provider asks the kernel
/// for one of each and writes them back, so the SRQ is made with room for one WR of one SGE.
/// Before the fix the library answered EINVAL.
#[test]
fn create_srq_takes_zero_sizes_as_one_as_rdma_core() {
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        let mut init =
            ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 0, max_sge: 0, srq_limit: 0 } };
        let srq = ibv_create_srq(pd, &mut init);
        assert!(!srq.is_null(), "errno {}", std::io::Error::last_os_error());
        assert_eq!((init.attr.max_wr, init.attr.max_sge), (1, 1));
        let mut sge = ibv_sge { addr: buf.as_ptr() as u64, length: 64, lkey: (*mr).lkey };
        let mut wr = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: &mut sge, num_sge: 1 };
        let mut bad = null_mut();
        let post = (*ctx).ops.post_srq_recv.expect("post_srq_recv");
        assert_eq!(post(srq.cast(), &mut wr, &mut bad), 0);
        assert_eq!(post(srq.cast(), &mut wr, &mut bad), libc::ENOMEM, "one WR fills it");
        let mut three =
            ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 3, max_sge: 2, srq_limit: 0 } };
        let s3 = ibv_create_srq(pd, &mut three);
        assert!(!s3.is_null());
        assert_eq!((three.attr.max_wr, three.attr.max_sge), (4, 2), "rounded up; SGEs as asked");
        assert_eq!(ibv_destroy_srq(s3), 0);
        assert_eq!(ibv_destroy_srq(srq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// `ibv_create_ah` with a bad port or `sgid_index`: `EINVAL` for port 0 or 2, an index past the
/// GID table, and (before the fix, made) an index within it naming no GID — an AH the first UD
/// send through would have failed with, moving its QP to the error state. rdma-core's pvrdma
/// provider resolves the source address from that GID and refuses too; the device refuses such
/// an address vector for an RC QP at RTR.
#[test]
fn create_ah_refuses_a_bad_port_or_an_empty_sgid_index() {
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let mut gid = ibv_gid { raw: [0; 16] };
        let empty = (1..16).find(|&i| ibv_query_gid(ctx, 1, i, &mut gid) == 0 && gid.raw == [0; 16]);
        let empty = empty.expect("an empty GID slot") as u8;
        let dgid = ibv_gid { raw: std::net::Ipv4Addr::new(127, 0, 0, 9).to_ipv6_mapped().octets() };
        let attr = |port_num: u8, sgid_index: u8| ibv_ah_attr {
            grh: ibv_global_route { dgid, flow_label: 0, sgid_index, hop_limit: 64, traffic_class: 0 },
            is_global: 1,
            port_num,
            ..Default::default()
        };
        let good = ibv_create_ah(pd, &mut attr(1, 0));
        assert!(!good.is_null(), "GID 0 is bound: {}", std::io::Error::last_os_error());
        for (port, index) in [(0, 0), (2, 0), (1, 255), (1, empty)] {
            assert!(ibv_create_ah(pd, &mut attr(port, index)).is_null(), "port {port} sgid_index {index}");
            assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EINVAL));
        }
        assert_eq!(ibv_destroy_ah(good), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// A UD QP in RTS (INIT with P_Key index, port and Q_Key, then RTR, then RTS from PSN 0).
///
/// # Safety
/// `pd` and `cq` are live objects of this library.
unsafe fn ud_qp(pd: *mut ibv_pd, cq: *mut ibv_cq, qkey: u32) -> *mut ibv_qp {
    let mut qa = ibv_qp_init_attr {
        qp_context: null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: null_mut(),
        cap: ibv_qp_cap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 },
        qp_type: 4, // IBV_QPT_UD
        sq_sig_all: 0,
    };
    // SAFETY: the caller's promise.
    unsafe {
        let qp = ibv_create_qp(pd, &mut qa);
        assert!(!qp.is_null());
        let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qkey, ..Default::default() };
        assert_eq!(ibv_modify_qp(qp, &mut a, 1 | 16 | 32 | 64), 0, "INIT");
        a.qp_state = 2;
        assert_eq!(ibv_modify_qp(qp, &mut a, 1), 0, "RTR");
        a.qp_state = 3;
        assert_eq!(ibv_modify_qp(qp, &mut a, 1 | (1 << 16)), 0, "RTS");
        qp
    }
}

/// `ibv_post_send` on a UD QP whose WR names no AH (`wr.ud.ah` NULL): `EINVAL` with `bad_wr` at
/// that WR, the WRs before it posted (rdma-core's pvrdma provider would dereference the NULL
/// AH); and an AH destroyed right after the post does not disturb the send (the WQE carries a
/// copy of its address vector, as `pvrdma_post_send` copies it).
#[test]
fn a_ud_send_without_an_ah_is_refused_and_a_destroyed_ah_is_not_needed() {
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        let (a, b) = (ud_qp(pd, cq, 0x77), ud_qp(pd, cq, 0x77));
        let mut gid = ibv_gid { raw: [0; 16] };
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        let mut attr = ibv_ah_attr {
            grh: ibv_global_route { dgid: gid, flow_label: 0, sgid_index: 0, hop_limit: 64, traffic_class: 0 },
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        let ah = ibv_create_ah(pd, &mut attr);
        assert!(!ah.is_null());
        let mut rsge = ibv_sge { addr: buf.as_ptr() as u64 + 1024, length: 1024, lkey: (*mr).lkey };
        let mut rwr = ibv_recv_wr { wr_id: 3, next: null_mut(), sg_list: &mut rsge, num_sge: 1 };
        let mut rbad = null_mut();
        assert_eq!(((*ctx).ops.post_recv.unwrap())(b, &mut rwr, &mut rbad), 0);
        let mut sge = ibv_sge { addr: buf.as_ptr() as u64, length: 16, lkey: (*mr).lkey };
        let mut wrs: [ibv_send_wr; 2] = [std::mem::zeroed(), std::mem::zeroed()];
        for (i, w) in wrs.iter_mut().enumerate() {
            (w.wr_id, w.sg_list, w.num_sge, w.opcode, w.send_flags) = (10 + i as u64, &mut sge, 1, IBV_WR_SEND, 2);
            w.wr.ud = ibv_send_wr_ud { ah, remote_qpn: (*b).qp_num, remote_qkey: 0x77 };
        }
        wrs[1].wr.ud.ah = null_mut();
        wrs[0].next = &mut wrs[1];
        let mut bad = null_mut();
        assert_eq!(((*ctx).ops.post_send.unwrap())(a, &mut wrs[0], &mut bad), libc::EINVAL);
        assert_eq!(bad, &mut wrs[1] as *mut _, "the WR without an AH");
        assert_eq!(ibv_destroy_ah(ah), 0, "the posted send keeps its own address vector");
        let mut wc: [ibv_wc; 4] = std::mem::zeroed();
        let (mut got, end) = (Vec::new(), Instant::now() + Duration::from_secs(5));
        while got.len() < 2 && Instant::now() < end {
            let n = ((*ctx).ops.poll_cq.unwrap())(cq, 4, wc.as_mut_ptr());
            got.extend(wc[..n.max(0) as usize].iter().map(|w| (w.wr_id, w.status, w.qp_num)));
        }
        got.sort_unstable();
        assert_eq!(got, vec![(3, 0, (*b).qp_num), (10, 0, (*a).qp_num)], "the first WR went out; only it");
        for qp in [a, b] {
            assert_eq!(ibv_destroy_qp(qp), 0);
        }
    }
}

/// A program makes more AHs than the device's `max_ah`: rdma-core's pvrdma provider builds a
/// user AH in user space and counts it against nothing (the device's `max_ah` bounds the
/// kernel's AHs, which Linux's `pvrdma_create_ah` counts), so every one is made. Before the fix
/// the library answered ENOMEM past `max_ah` (64 on the model), failing e.g. a UD program with
/// one AH per peer.
#[test]
fn user_ahs_are_not_bounded_by_the_kernels_max_ah() {
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let mut attr: ibv_device_attr = std::mem::zeroed();
        assert_eq!(ibv_query_device(ctx, &mut attr), 0);
        let max = attr.max_ah as usize;
        assert!(max > 0);
        let pd = ibv_alloc_pd(ctx);
        let mut gid = ibv_gid { raw: [0; 16] };
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        let mut a = ibv_ah_attr {
            grh: ibv_global_route { dgid: gid, flow_label: 0, sgid_index: 0, hop_limit: 64, traffic_class: 0 },
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        let ahs: Vec<*mut ibv_ah> = (0..2 * max).map(|_| ibv_create_ah(pd, &mut a)).collect();
        let made = ahs.iter().filter(|p| !p.is_null()).count();
        assert_eq!(made, 2 * max, "errno {}", std::io::Error::last_os_error());
        for ah in ahs {
            assert_eq!(ibv_destroy_ah(ah), 0);
        }
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// `ibv_post_recv` / `ibv_post_srq_recv` with a NULL chain or a NULL `bad_wr`: `EINVAL` and
/// nothing posted, as rdma-core's pvrdma provider answers. Before the fix a NULL chain answered
/// 0 and a NULL `bad_wr` posted the chain.
#[test]
fn receive_posts_without_a_chain_or_bad_wr_are_refused() {
    // SAFETY: every pointer is an object of this library created here, or NULL on purpose.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        let mut init =
            ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 1, max_sge: 1, srq_limit: 0 } };
        let srq = ibv_create_srq(pd, &mut init);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let qp = ud_qp(pd, cq, 1);
        let mut sge = ibv_sge { addr: buf.as_ptr() as u64, length: 64, lkey: (*mr).lkey };
        let mut wr = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: &mut sge, num_sge: 1 };
        let mut bad = null_mut();
        let (srq_post, qp_post) = ((*ctx).ops.post_srq_recv.unwrap(), (*ctx).ops.post_recv.unwrap());
        assert_eq!(srq_post(srq.cast(), null_mut(), &mut bad), libc::EINVAL);
        assert_eq!(qp_post(qp, null_mut(), &mut bad), libc::EINVAL);
        assert_eq!(srq_post(srq.cast(), &mut wr, null_mut()), libc::EINVAL);
        assert_eq!(srq_post(srq.cast(), &mut wr, &mut bad), 0, "nothing was posted: room for the one WR");
        assert_eq!(qp_post(qp, &mut wr, null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_srq(srq), 0);
    }
}
