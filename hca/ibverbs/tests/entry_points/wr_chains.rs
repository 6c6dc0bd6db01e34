//! Work-request chains through `ibv_post_send` / `ibv_post_recv` / `ibv_post_srq_recv`: a bad WR
//! in the middle is returned in `bad_wr` with only those before it posted, long inline chains,
//! a chain that loops back on itself, a NULL chain or `bad_wr`, and chains posted from several
//! threads while another polls. Every wait is bounded. (From the breaker rounds on the library
//! and from issue 13, whose bugs these tests keep fixed.)

use crate::fx::*;
use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::process::{Command, Stdio};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

#[test]
fn a_bad_wr_in_the_middle_is_returned_and_only_those_before_it_posted() {
    let fx = fixture(256);
    let (a, b) = pair(&fx, 16);
    for i in 0..8 {
        let mut s = fx.sge(4096 + i * 64, 64);
        assert_eq!(post_recv(b, 1000 + i as u64, &mut s), 0);
    }
    let mut sg = [fx.sge(0, 8), fx.sge(8, 8), fx.sge(16, 8)];
    type Spoil = (&'static str, fn(&mut ibv_send_wr));
    // (An unknown opcode or flag, or IBV_SEND_INLINE on an RDMA READ, is posted, as rdma-core's
    // pvrdma provider posts it: issue 21 §3.)
    let bads: [Spoil; 4] = [
        ("negative num_sge", |w| w.num_sge = -1),
        ("more SGEs than max_send_sge", |w| w.num_sge = 3),
        ("inline with more SGEs than max_send_sge", |w| {
            w.num_sge = 3;
            w.send_flags |= IBV_SEND_INLINE;
        }),
        ("a NULL SGE list with SGEs", |w| w.sg_list = null_mut()),
    ];
    let mut id = 0;
    for (what, spoil) in bads {
        let mut w =
            [send_wr(id, sg.as_mut_ptr(), 1), send_wr(id + 1, sg.as_mut_ptr(), 1), send_wr(id + 2, sg.as_mut_ptr(), 1)];
        spoil(&mut w[1]);
        let p = w.as_mut_ptr();
        // SAFETY: indices within the array.
        unsafe {
            w[0].next = p.add(1);
            w[1].next = p.add(2);
        }
        let mut bad = null_mut();
        let r = post_send(a, &mut w[0], &mut bad);
        assert!(r == libc::EINVAL || r == libc::ENOMEM, "{what}: {r}");
        assert_eq!(bad, &mut w[1] as *mut _, "{what}: bad_wr names the middle WR");
        let got = poll_n(fx.cq, 2);
        // SAFETY: a live QP.
        let qpn = unsafe { (*a).qp_num };
        let ids: Vec<_> = got.iter().filter(|c| c.qp_num == qpn).map(|c| c.wr_id).collect();
        assert_eq!(ids, [id], "{what}: only the first was posted");
        assert!(got.iter().all(|c| c.status == 0));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(poll(fx.cq, &mut [ibv_wc::default(); 4]), 0, "{what}: nothing else completes");
        id += 10;
    }
    destroy_qp(a);
    destroy_qp(b);
    fx.close();
}

#[test]
fn long_inline_chains_post_exactly_the_wrs_before_bad_wr() {
    let mut fx = fixture(512);
    let mk = |fx: &Fx, inline| {
        let mut a = init_attr(fx.cq, fx.cq, 4, inline);
        // SAFETY: a PD and CQ of this library.
        let q = unsafe { ibv_create_qp(fx.pd, &mut a) };
        assert!(!q.is_null());
        q
    };
    let (a, b) = (mk(&fx, 64), mk(&fx, 0));
    connect(a, b);
    connect(b, a);
    for i in 0..32u64 {
        fx.buf[i as usize * 8..i as usize * 8 + 8].copy_from_slice(&(0xa0 + i).to_ne_bytes());
    }
    let mut next_recv = 0u64;
    for (len, bad_at, spoil) in [(10usize, 6usize, 99u32), (3, 1, 99), (12, 11, 99), (9, 8, 0)] {
        for _ in 0..16 {
            let mut s = fx.sge(8192 + (next_recv as usize % 64) * 64, 64);
            assert_eq!(post_recv(b, 5000 + next_recv, &mut s), 0);
            next_recv += 1;
        }
        let mut sg: Vec<ibv_sge> = (0..len).map(|i| fx.sge(i * 8, 8)).collect();
        let mut w: Vec<ibv_send_wr> = (0..len).map(|i| send_wr(i as u64, &mut sg[i], 1)).collect();
        for x in &mut w {
            x.send_flags |= IBV_SEND_INLINE;
        }
        if spoil == 99 {
            w[bad_at].num_sge = -1;
        } else {
            w[bad_at].sg_list = null_mut();
            w[bad_at].num_sge = 1;
        }
        let p = w.as_mut_ptr();
        for (i, x) in w.iter_mut().enumerate().take(len - 1) {
            // SAFETY: within the vector.
            x.next = unsafe { p.add(i + 1) };
        }
        let mut bad = null_mut();
        let r = post_send(a, p, &mut bad);
        assert!(r == libc::EINVAL || r == libc::ENOMEM, "{r}");
        // SAFETY: `bad` points into `w`.
        let k = unsafe { bad.offset_from(p) } as usize;
        assert!(k <= bad_at, "bad_wr {k} past the bad WR {bad_at}");
        assert_eq!(r == libc::EINVAL, k == bad_at);
        let got = poll_n(fx.cq, 2 * k);
        let mut sends: Vec<_> = got.iter().filter(|c| c.opcode != IBV_WC_RECV).map(|c| c.wr_id).collect();
        sends.sort_unstable();
        assert_eq!(sends, (0..k as u64).collect::<Vec<_>>(), "exactly the WRs before bad_wr");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(poll(fx.cq, &mut [ibv_wc::default(); 4]), 0);
        for c in got.iter().filter(|c| c.opcode == IBV_WC_RECV) {
            let slot = (c.wr_id - 5000) as usize % 64;
            let v = u64::from_ne_bytes(fx.buf[8192 + slot * 64..8192 + slot * 64 + 8].try_into().unwrap());
            assert!((0xa0..0xa0 + k as u64).contains(&v), "payload {v:#x}");
        }
        // Leftover receives are reused by the next round's sends.
        next_recv -= 16 - k as u64;
    }
    destroy_qp(a);
    destroy_qp(b);
    fx.close();
}

#[test]
fn concurrent_posters_and_a_poller_see_each_completion_once() {
    const THREADS: u64 = 4;
    const EACH: u64 = 200;
    let mut fx = fixture(2048);
    let (a, b) = pair(&fx, 64);
    // Each send's 8 bytes are its own wr_id.
    for t in 0..THREADS {
        for i in 0..EACH {
            let off = ((t * EACH + i) * 8) as usize;
            fx.buf[off..off + 8].copy_from_slice(&(t << 32 | i).to_ne_bytes());
        }
    }
    let total = (THREADS * EACH) as usize;
    // Receives for every send, in waves (the RQ holds 256).
    let addr = |p: *mut ibv_qp| p as usize;
    // SAFETY: a live MR.
    let lkey = unsafe { (*fx.mr).lkey };
    let (qa, qb, cq, base) = (addr(a), addr(b), fx.cq as usize, fx.buf.as_ptr() as u64);
    let mut recv_posted = 0u64;
    let mut post_recvs = |upto: u64| {
        while recv_posted < upto.min(THREADS * EACH) {
            let mut s = ibv_sge { addr: base + 32768 + (recv_posted % 256) * 64, length: 64, lkey };
            match post_recv(qb as *mut ibv_qp, 1_000_000 + recv_posted, &mut s) {
                0 => recv_posted += 1,
                // The RQ slot of a polled receive may be freed just after its CQE is visible.
                libc::ENOMEM => return,
                e => panic!("post_recv: {e}"),
            }
        }
    };
    post_recvs(256);
    let posters: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let end = Instant::now() + Duration::from_secs(30);
                let mut i = 0;
                while i < EACH {
                    let off = (t * EACH + i) * 8;
                    let mut s = ibv_sge { addr: base + off, length: 8, lkey };
                    let mut w = send_wr(t << 32 | i, &mut s, 1);
                    let mut bad = null_mut();
                    match post_send(qa as *mut ibv_qp, &mut w, &mut bad) {
                        0 => i += 1,
                        libc::ENOMEM => std::thread::yield_now(),
                        e => panic!("post_send: {e}"),
                    }
                    assert!(Instant::now() < end, "posting stalled");
                }
            })
        })
        .collect();
    let mut seen_send = std::collections::HashSet::new();
    let mut payloads = std::collections::HashSet::new();
    let mut recvs = 0usize;
    let end = Instant::now() + Duration::from_secs(40);
    let mut wc = [ibv_wc::default(); 32];
    while seen_send.len() < total || recvs < total {
        let k = poll(cq as *mut ibv_cq, &mut wc);
        assert!(k >= 0, "poll: {k}");
        for c in &wc[..k as usize] {
            assert_eq!(c.status, 0, "wr {:#x}", c.wr_id);
            if c.opcode == IBV_WC_RECV {
                let slot = (c.wr_id - 1_000_000) % 256;
                let at = (base + 32768 + slot * 64) as usize as *const u64;
                // SAFETY: the receive's bytes in our buffer, not reposted before this read.
                let v = unsafe { at.read_volatile() };
                assert_eq!(c.byte_len, 8);
                assert!(v >> 32 < THREADS && (v & 0xffff_ffff) < EACH, "payload {v:#x}");
                assert!(payloads.insert(v), "payload {v:#x} twice");
                recvs += 1;
            } else {
                assert!(seen_send.insert(c.wr_id), "send {:#x} completed twice", c.wr_id);
            }
        }
        post_recvs(recvs as u64 + 256);
        assert!(Instant::now() < end, "{} sends, {recvs} receives of {total}", seen_send.len());
    }
    for p in posters {
        p.join().expect("poster");
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(poll(fx.cq, &mut wc), 0, "no extra completion");
    destroy_qp(a);
    destroy_qp(b);
    fx.close();
}

/// Set in the child process that runs a test which, broken, would loop and grow without bound.
const CHILD: &str = "IBVERBS_BOUNDED_CHILD";

/// Runs the calling test (named by its thread, as libtest names it: with its module path) in a
/// child process of this binary with its address space capped (1 GiB) and a deadline (30 s); true if it ran and passed. A child that loops allocating dies of the
/// cap or is killed at the deadline, so a regression fails instead of wedging the machine.
fn passes_in_bounded_child() -> bool {
    let name = std::thread::current().name().expect("a test's own thread, named after the test").to_string();
    let name = name.as_str();
    let exe = std::env::current_exe().expect("the test binary");
    let out =
        std::env::temp_dir().join(format!("bounded-child-{}-{}.out", std::process::id(), name.replace("::", "-")));
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
        assert!(passes_in_bounded_child());
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
