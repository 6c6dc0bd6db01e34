//! Attacks on the C entry points: NULLs and bad values, lifetimes, two contexts on one device,
//! concurrency and events. Each must get libibverbs's answer, never a panic (EIO), crash or
//! hang; every wait is bounded.

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use pvrdma_abi::event::EqeType;
use std::ptr::null_mut;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e }
}

/// A context on the first device and its model.
fn open() -> (*mut ibv_context, hca::platform::sim::SimPlatform) {
    // SAFETY: the list is NULL-terminated, the first entry a device of this library.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        assert!(!list.is_null() && !(*list).is_null(), "the default model device");
        let dev = *list;
        let ctx = ibv_open_device(dev);
        let model = test_model(dev).expect("a model device");
        ibv_free_device_list(list);
        assert!(!ctx.is_null());
        (ctx, model)
    }
}

/// A context with a PD, one CQ, a registered buffer.
struct Fx {
    ctx: *mut ibv_context,
    model: hca::platform::sim::SimPlatform,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    mr: *mut ibv_mr,
    buf: Vec<u8>,
}

fn fixture(cqe: i32) -> Fx {
    let (ctx, model) = open();
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: an open context; the buffer outlives the MR (dropped after `ibv_dereg_mr`).
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, cqe, null_mut(), null_mut(), 0);
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 7);
        assert!(!pd.is_null() && !cq.is_null() && !mr.is_null());
        Fx { ctx, model, pd, cq, mr, buf }
    }
}

impl Fx {
    fn sge(&self, off: usize, len: u32) -> ibv_sge {
        // SAFETY: a live MR.
        let lkey = unsafe { (*self.mr).lkey };
        ibv_sge { addr: self.buf.as_ptr() as u64 + off as u64, length: len, lkey }
    }

    fn close(self) {
        // SAFETY: objects of this fixture, no longer used.
        unsafe {
            assert_eq!(ibv_dereg_mr(self.mr), 0);
            assert_eq!(ibv_destroy_cq(self.cq), 0);
            assert_eq!(ibv_dealloc_pd(self.pd), 0);
            assert_eq!(ibv_close_device(self.ctx), 0);
        }
    }
}

fn init_attr(scq: *mut ibv_cq, rcq: *mut ibv_cq, send: u32, inline: u32) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: null_mut(),
        send_cq: scq,
        recv_cq: rcq,
        srq: null_mut(),
        cap: ibv_qp_cap {
            max_send_wr: send,
            max_recv_wr: 256,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: inline,
        },
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    }
}

fn create_qp(pd: *mut ibv_pd, cq: *mut ibv_cq, send: u32) -> *mut ibv_qp {
    let mut a = init_attr(cq, cq, send, 0);
    // SAFETY: a PD and CQ of this library.
    let qp = unsafe { ibv_create_qp(pd, &mut a) };
    assert!(!qp.is_null(), "create_qp: errno {}", errno());
    qp
}

fn create_qp_ex(ctx: *mut ibv_context, pd: *mut ibv_pd, cq: *mut ibv_cq, inline: u32) -> *mut ibv_qp {
    let b = init_attr(cq, cq, 16, inline);
    let mut a = ibv_qp_init_attr_ex {
        qp_context: null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: null_mut(),
        cap: b.cap,
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
        comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        pd,
        xrcd: null_mut(),
        create_flags: 0,
        max_tso_header: 0,
        rwq_ind_tbl: null_mut(),
        rx_hash_conf: [0; 3],
        source_qpn: 0,
        send_ops_flags: IBV_QP_EX_WITH_SEND,
    };
    // SAFETY: an open context of this library and its objects.
    let qp = unsafe { ((*ctx_ex(ctx)).create_qp_ex.unwrap())(ctx, &mut a) };
    assert!(!qp.is_null(), "create_qp_ex: errno {}", errno());
    qp
}

/// The `verbs_context` of `ctx` (it ends with the `ibv_context`), as the header finds it.
fn ctx_ex(ctx: *mut ibv_context) -> *mut verbs_context {
    let at = std::mem::offset_of!(verbs_context, context);
    // SAFETY: every context of this library is the last field of a `verbs_context`.
    unsafe { ctx.cast::<u8>().sub(at).cast() }
}

fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) -> i32 {
    // SAFETY: a live QP of this library.
    unsafe { ibv_modify_qp(qp, a, mask as i32) }
}

const STATE: u32 = 1;
const INIT_MASK: u32 = STATE | 1 << 3 | 1 << 4 | 1 << 5;
const RTR_MASK: u32 = STATE | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20;
const RTS_MASK: u32 = STATE | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 16;

fn gid(ctx: *mut ibv_context) -> [u8; 16] {
    let mut g = ibv_gid::default();
    // SAFETY: an open context.
    assert_eq!(unsafe { ibv_query_gid(ctx, 1, 0, &mut g) }, 0);
    g.raw
}

fn connect(qp: *mut ibv_qp, remote: *mut ibv_qp) {
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qp_access_flags: 7, ..Default::default() };
    assert_eq!(modify(qp, &mut a, INIT_MASK), 0, "INIT");
    // SAFETY: live QPs.
    let (ctx, rqpn) = unsafe { ((*qp).context, (*remote).qp_num) };
    let grh = ibv_global_route { dgid: ibv_gid { raw: gid(ctx) }, hop_limit: 64, ..Default::default() };
    let ah_attr = ibv_ah_attr { grh, is_global: 1, port_num: 1, ..Default::default() };
    let mut a = ibv_qp_attr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: rqpn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr,
        ..Default::default()
    };
    assert_eq!(modify(qp, &mut a, RTR_MASK), 0, "RTR");
    let mut a =
        ibv_qp_attr { qp_state: 3, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1, ..Default::default() };
    assert_eq!(modify(qp, &mut a, RTS_MASK), 0, "RTS");
}

fn send_wr(wr_id: u64, sg: *mut ibv_sge, num_sge: i32) -> ibv_send_wr {
    // SAFETY: all-zero is a valid `ibv_send_wr` (NULL pointers, opcode RDMA_WRITE).
    let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
    w.wr_id = wr_id;
    w.sg_list = sg;
    w.num_sge = num_sge;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    w
}

fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: &mut *mut ibv_send_wr) -> i32 {
    // SAFETY: a live QP; the chain is ours.
    unsafe { ((*(*qp).context).ops.post_send.unwrap())(qp, wr, bad) }
}

fn post_recv(qp: *mut ibv_qp, wr_id: u64, sg: *mut ibv_sge) -> i32 {
    let mut w = ibv_recv_wr { wr_id, next: null_mut(), sg_list: sg, num_sge: 1 };
    let mut bad = null_mut();
    // SAFETY: a live QP; the WR is ours.
    unsafe { ((*(*qp).context).ops.post_recv.unwrap())(qp, &mut w, &mut bad) }
}

fn poll(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> i32 {
    // SAFETY: a live CQ; `wc` has room for its length.
    unsafe { ((*(*cq).context).ops.poll_cq.unwrap())(cq, wc.len() as i32, wc.as_mut_ptr()) }
}

/// Polls until `n` completions arrived (bounded).
fn poll_n(cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
    let end = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    let mut wc = [ibv_wc::default(); 16];
    while out.len() < n {
        let k = poll(cq, &mut wc);
        assert!(k >= 0, "poll: {k}");
        out.extend_from_slice(&wc[..k as usize]);
        assert!(Instant::now() < end, "only {} of {n} completions", out.len());
        if k == 0 {
            std::thread::yield_now();
        }
    }
    out
}

fn destroy_qp(qp: *mut ibv_qp) {
    // SAFETY: a live QP of this library, not used after.
    assert_eq!(unsafe { ibv_destroy_qp(qp) }, 0);
}

#[test]
fn nulls_and_bad_values_get_errnos() {
    let fx = fixture(64);
    let mut wc = [ibv_wc::default(); 4];
    // SAFETY: every pointer passed is NULL or ours.
    unsafe {
        assert!(ibv_alloc_pd(null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(null_mut()), libc::EINVAL);
        assert!(ibv_reg_mr(null_mut(), fx.buf.as_ptr() as *mut _, 8, 1).is_null());
        assert!(ibv_reg_mr(fx.pd, fx.buf.as_ptr() as *mut _, 0, 1).is_null(), "zero length");
        assert!(ibv_reg_mr(fx.pd, 0x1000 as *mut _, usize::MAX, 1).is_null(), "wrapping range");
        assert!(ibv_reg_mr(fx.pd, fx.buf.as_ptr() as *mut _, 8, 2).is_null(), "remote write without local");
        assert_eq!(ibv_dereg_mr(null_mut()), libc::EINVAL);
        assert!(ibv_create_cq(fx.ctx, i32::MAX, null_mut(), null_mut(), 0).is_null());
        assert!(ibv_create_cq(fx.ctx, i32::MIN, null_mut(), null_mut(), 0).is_null());
        assert!(ibv_create_cq(fx.ctx, 4, null_mut(), null_mut(), i32::MAX).is_null());
        assert_eq!(errno(), libc::EINVAL);
        let poll_cq = (*fx.ctx).ops.poll_cq.unwrap();
        assert_eq!(poll_cq(null_mut(), 1, wc.as_mut_ptr()), -libc::EINVAL);
        assert_eq!(poll_cq(fx.cq, -1, wc.as_mut_ptr()), 0);
        assert_eq!(poll_cq(fx.cq, i32::MIN, wc.as_mut_ptr()), 0);
        assert_eq!(poll_cq(fx.cq, 4, null_mut()), -libc::EINVAL);
        assert_eq!(((*fx.ctx).ops.req_notify_cq.unwrap())(null_mut(), 0), libc::EINVAL);
        ibv_ack_cq_events(null_mut(), 5);
        ibv_ack_cq_events(fx.cq, u32::MAX);
        assert_eq!(ibv_get_cq_event(null_mut(), null_mut(), null_mut()), -1);
        assert_eq!(ibv_get_async_event(null_mut(), null_mut()), -1);
        assert_eq!(ibv_get_async_event(fx.ctx, null_mut()), -1);
        ibv_ack_async_event(null_mut());
        assert!(ibv_create_comp_channel(null_mut()).is_null());
        assert_eq!(ibv_destroy_comp_channel(null_mut()), libc::EINVAL);
        assert_eq!(ibv_close_device(null_mut()), libc::EINVAL);
        // QPs: NULL PD, attr, CQs; bad type; huge sizes. (Any max_inline_data is taken: issue 21.)
        let mut a = init_attr(fx.cq, fx.cq, 16, 0);
        assert!(ibv_create_qp(null_mut(), &mut a).is_null());
        assert!(ibv_create_qp(fx.pd, null_mut()).is_null());
        for bad in [
            init_attr(null_mut(), fx.cq, 16, 0),
            init_attr(fx.cq, null_mut(), 16, 0),
            ibv_qp_init_attr { qp_type: 77, ..init_attr(fx.cq, fx.cq, 16, 0) },
            ibv_qp_init_attr { qp_type: IBV_QPT_UC, ..init_attr(fx.cq, fx.cq, 16, 0) },
            init_attr(fx.cq, fx.cq, u32::MAX, 0),
            ibv_qp_init_attr { cap: ibv_qp_cap { max_send_sge: u32::MAX, ..a.cap }, ..a },
            ibv_qp_init_attr { cap: ibv_qp_cap { max_recv_wr: 1 << 31, ..a.cap }, ..a },
        ] {
            let mut b = bad;
            set_errno(0);
            assert!(ibv_create_qp(fx.pd, &mut b).is_null());
            assert!(matches!(errno(), libc::EINVAL | libc::EOPNOTSUPP | libc::ENOMEM), "errno {}", errno());
        }
        let create_ex = (*ctx_ex(fx.ctx)).create_qp_ex.unwrap();
        assert!(create_ex(fx.ctx, null_mut()).is_null());
        assert_eq!(ibv_destroy_qp(null_mut()), libc::EINVAL);
        assert!(ibv_qp_to_qp_ex(null_mut()).is_null());
        let qp = create_qp(fx.pd, fx.cq, 16);
        let mut at = ibv_qp_attr::default();
        let mut init = init_attr(null_mut(), null_mut(), 0, 0);
        assert_eq!(ibv_modify_qp(null_mut(), &mut at, 1), libc::EINVAL);
        assert_eq!(ibv_modify_qp(qp, null_mut(), 1), libc::EINVAL);
        assert_eq!(ibv_query_qp(null_mut(), &mut at, 1, &mut init), libc::EINVAL);
        assert_eq!(ibv_query_qp(qp, null_mut(), 1, &mut init), libc::EINVAL);
        assert_eq!(ibv_query_qp(qp, &mut at, 1, null_mut()), libc::EINVAL);
        assert_eq!(ibv_query_qp(qp, &mut at, -1, &mut init), 0, "any mask is answered");
        // Posting with NULLs.
        let mut bad = null_mut();
        assert_eq!(post_send(qp, null_mut(), &mut bad), 0, "an empty chain");
        let ps = (*fx.ctx).ops.post_send.unwrap();
        let mut w = send_wr(1, null_mut(), 0);
        assert_eq!(ps(null_mut(), &mut w, &mut bad), libc::EINVAL);
        assert_eq!(ps(qp, &mut w, null_mut()), libc::EINVAL, "before RTS, bad_wr NULL");
        let pr = (*fx.ctx).ops.post_recv.unwrap();
        let mut r = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: null_mut(), num_sge: 3 };
        let mut rbad = null_mut();
        assert_eq!(pr(qp, &mut r, &mut rbad), libc::EINVAL, "NULL list with num_sge 3");
        assert_eq!(rbad, &mut r as *mut _);
        r.num_sge = -1;
        assert_eq!(pr(qp, &mut r, null_mut()), libc::EINVAL);
        assert_eq!(((*fx.ctx).ops.post_srq_recv.unwrap())(null_mut(), null_mut(), null_mut()), libc::EINVAL);
        assert_eq!(
            ibv_read_sysfs_file(c"/proc/self".as_ptr(), c"comm".as_ptr(), null_mut(), 0),
            0,
            "size 0, NULL buffer"
        );
        assert_eq!(ibv_read_sysfs_file(c"/nonexistent".as_ptr(), c"x".as_ptr(), null_mut(), 0), -1);
        let mut pa: ibv_port_attr = std::mem::zeroed();
        for port in [0u8, 2, 255] {
            assert_eq!(ibv_query_port(fx.ctx, port, &mut pa), libc::EINVAL, "port {port}");
        }
        let mut g = ibv_gid::default();
        assert_eq!(ibv_query_gid(fx.ctx, 1, i32::MAX, &mut g), -1);
        assert_eq!(ibv_query_gid(fx.ctx, 0, 0, &mut g), -1);
        let mut pk = 0u16;
        assert_eq!(ibv_query_pkey(fx.ctx, 1, 70_000, &mut pk), -1);
        assert_eq!(ibv_query_pkey(fx.ctx, 1, -1, &mut pk), -1);
        assert_eq!(ibv_get_pkey_index(fx.ctx, 9, 0xffff), -1);
        let mut ge: ibv_gid_entry = std::mem::zeroed();
        assert_eq!(
            _ibv_query_gid_ex(fx.ctx, 1 << 20, 0, &mut ge, 0, std::mem::size_of::<ibv_gid_entry>()),
            libc::EINVAL
        );
        assert_eq!(
            _ibv_query_gid_ex(fx.ctx, 1, u32::MAX, &mut ge, 0, std::mem::size_of::<ibv_gid_entry>()),
            libc::EINVAL
        );
        assert_eq!(
            _ibv_query_gid_table(fx.ctx, null_mut(), 0, 0, std::mem::size_of::<ibv_gid_entry>()),
            -(libc::EINVAL as isize),
            "max_entries 0: Linux's UVERBS_METHOD_QUERY_GID_TABLE refuses an empty array"
        );
        assert!(ibv_get_device_name(null_mut()).is_null());
        assert_eq!(ibv_get_device_index(null_mut()), -1);
        ibv_free_device_list(null_mut());
        destroy_qp(qp);
    }
    fx.close();
}

#[test]
fn modify_with_out_of_range_enums_is_einval_and_keeps_the_qp() {
    let fx = fixture(64);
    let qp = create_qp(fx.pd, fx.cq, 16);
    for state in [7, 8, u32::MAX] {
        let mut a = ibv_qp_attr { qp_state: state, ..Default::default() };
        assert_eq!(modify(qp, &mut a, STATE), libc::EINVAL, "state {state}");
        let mut a = ibv_qp_attr { qp_state: 1, cur_qp_state: state, ..Default::default() };
        assert_eq!(modify(qp, &mut a, STATE | 2), libc::EINVAL, "cur state {state}");
    }
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qp_access_flags: 7, ..Default::default() };
    // Mask bits past IBV_QP_DEST_QPN: libibverbs's legacy command and Linux's
    // `ib_uverbs_modify_qp` refuse them with EOPNOTSUPP (issue 21 §3).
    assert_eq!(modify(qp, &mut a, u32::MAX), libc::EOPNOTSUPP, "every mask bit");
    assert_eq!(modify(qp, &mut a, 1 << 30), libc::EOPNOTSUPP, "an unknown bit");
    assert_eq!(modify(qp, &mut a, INIT_MASK | 1 << 19), libc::EINVAL, "IBV_QP_CAP: no transition takes it");
    assert_eq!(modify(qp, &mut a, INIT_MASK), 0);
    let mut r = ibv_qp_attr { qp_state: 2, path_mtu: 3, dest_qp_num: 1, min_rnr_timer: 12, ..Default::default() };
    r.ah_attr = ibv_ah_attr { is_global: 1, port_num: 1, ..Default::default() };
    assert_eq!(modify(qp, &mut r, RTR_MASK), libc::EINVAL, "a zero dgid: the device finds no route");
    let mut q = ibv_qp_attr::default();
    let mut init = init_attr(null_mut(), null_mut(), 0, 0);
    // SAFETY: a live QP.
    let r = unsafe { ibv_query_qp(qp, &mut q, STATE as i32, &mut init) };
    assert_eq!(r, 0);
    // SAFETY: a live QP.
    assert_eq!((q.qp_state, unsafe { (*qp).state }), (1, 1), "still INIT");
    destroy_qp(qp);
    fx.close();
}

/// Two connected QPs on one fixture, each with a handful of receives posted.
fn pair(fx: &Fx, send: u32) -> (*mut ibv_qp, *mut ibv_qp) {
    let (a, b) = (create_qp(fx.pd, fx.cq, send), create_qp(fx.pd, fx.cq, send));
    connect(a, b);
    connect(b, a);
    (a, b)
}

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

/// The `ibv_qp_ex` of `qp`'s functions, called as the header's inline `ibv_wr_*` do.
fn qpx(qp: *mut ibv_qp) -> &'static mut ibv_qp_ex {
    // SAFETY: a live QP with the API.
    unsafe { &mut *ibv_qp_to_qp_ex(qp) }
}

#[test]
fn the_wr_api_misused_answers_and_posts_nothing_bad() {
    let fx = fixture(64);
    let a = create_qp_ex(fx.ctx, fx.pd, fx.cq, 64);
    let b = create_qp(fx.pd, fx.cq, 16);
    connect(a, b);
    connect(b, a);
    let x = qpx(a);
    let p: *mut ibv_qp_ex = x;
    let lkey = {
        // SAFETY: a live MR.
        unsafe { (*fx.mr).lkey }
    };
    let addr = fx.buf.as_ptr() as u64;
    // SAFETY: the QP's own functions with its own pointer; buffers ours.
    unsafe {
        // Setters with no WR, then complete: the error, nothing posted.
        (x.wr_start.unwrap())(p);
        (x.wr_set_sge.unwrap())(p, lkey, addr, 8);
        (x.wr_set_inline_data.unwrap())(p, fx.buf.as_ptr() as *mut _, 8);
        assert_eq!((x.wr_complete.unwrap())(p), libc::EINVAL);
        // Complete with no WR, nested start, abort with nothing open.
        (x.wr_start.unwrap())(p);
        assert_eq!((x.wr_complete.unwrap())(p), 0);
        (x.wr_abort.unwrap())(p);
        assert_eq!((x.wr_complete.unwrap())(p), 0);
        (x.wr_start.unwrap())(p);
        (x.wr_start.unwrap())(p);
        assert_eq!((x.wr_complete.unwrap())(p), 0);
        // Inline lengths that wrap when added: ENOMEM (beyond max_inline_data), no panic.
        let bufs = [
            ibv_data_buf { addr: fx.buf.as_ptr() as *mut _, length: usize::MAX },
            ibv_data_buf { addr: fx.buf.as_ptr() as *mut _, length: 2 },
        ];
        (x.wr_start.unwrap())(p);
        x.wr_id = 5;
        x.wr_flags = IBV_SEND_SIGNALED;
        (x.wr_send.unwrap())(p);
        set_errno(0);
        (x.wr_set_inline_data_list.unwrap())(p, 2, bufs.as_ptr());
        assert_ne!(errno(), libc::EIO, "no panic");
        assert_eq!((x.wr_complete.unwrap())(p), libc::ENOMEM);
        // A huge SGE list count: EINVAL, no panic.
        (x.wr_start.unwrap())(p);
        (x.wr_send.unwrap())(p);
        (x.wr_set_sge_list.unwrap())(p, usize::MAX, null_mut());
        assert_eq!((x.wr_complete.unwrap())(p), libc::EINVAL);
        // And then it still works.
        let mut rs = fx.sge(4096, 64);
        assert_eq!(post_recv(b, 77, &mut rs), 0);
        (x.wr_start.unwrap())(p);
        x.wr_id = 6;
        (x.wr_send.unwrap())(p);
        (x.wr_set_sge.unwrap())(p, lkey, addr, 8);
        assert_eq!((x.wr_complete.unwrap())(p), 0);
    }
    let got = poll_n(fx.cq, 2);
    let mut ids: Vec<_> = got.iter().map(|c| c.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [6, 77]);
    destroy_qp(a);
    destroy_qp(b);
    fx.close();
}

#[test]
fn busy_objects_refuse_destroy_and_stay_usable() {
    let fx = fixture(64);
    // SAFETY: objects of this library.
    unsafe {
        assert_eq!(ibv_dealloc_pd(fx.pd), libc::EBUSY, "an MR on it");
        let qp = create_qp(fx.pd, fx.cq, 16);
        assert_eq!(ibv_destroy_cq(fx.cq), libc::EBUSY, "a QP uses it");
        let ch = ibv_create_comp_channel(fx.ctx);
        let cq2 = ibv_create_cq(fx.ctx, 8, null_mut(), ch, 0);
        assert_eq!(ibv_destroy_comp_channel(ch), libc::EBUSY);
        assert_eq!(ibv_destroy_cq(cq2), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        let mr = fx.mr;
        let fx2 = Fx { mr, ..fx };
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(fx2.pd), libc::EBUSY, "a QP on it");
        // The PD and CQ still work.
        let mr2 = ibv_reg_mr(fx2.pd, fx2.buf.as_ptr() as *mut _, 64, 1);
        assert!(!mr2.is_null());
        let qp2 = create_qp(fx2.pd, fx2.cq, 4);
        destroy_qp(qp2);
        destroy_qp(qp);
        Fx { mr: mr2, ..fx2 }.close();
    }
}

#[test]
fn objects_of_two_contexts_do_not_mix_but_their_qps_connect() {
    let fa = fixture(64);
    let fb = fixture(64);
    // SAFETY: objects of this library.
    unsafe {
        let mut a = init_attr(fa.cq, fa.cq, 16, 0);
        assert!(ibv_create_qp(fb.pd, &mut a).is_null(), "CQs of A with a PD of B");
        assert_eq!(errno(), libc::EINVAL);
        let mut a = init_attr(fa.cq, fb.cq, 16, 0);
        assert!(ibv_create_qp(fb.pd, &mut a).is_null(), "send CQ of A");
        let create_ex = (*ctx_ex(fa.ctx)).create_qp_ex.unwrap();
        let b = init_attr(fb.cq, fb.cq, 16, 0);
        let mut x = ibv_qp_init_attr_ex {
            qp_context: null_mut(),
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: null_mut(),
            cap: b.cap,
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
            comp_mask: IBV_QP_INIT_ATTR_PD,
            pd: fb.pd,
            xrcd: null_mut(),
            create_flags: 0,
            max_tso_header: 0,
            rwq_ind_tbl: null_mut(),
            rx_hash_conf: [0; 3],
            source_qpn: 0,
            send_ops_flags: 0,
        };
        assert!(create_ex(fa.ctx, &mut x).is_null(), "A's create_qp_ex with B's PD");
        assert_eq!(errno(), libc::EINVAL);
        x.pd = fa.pd;
        assert!(create_ex(fa.ctx, &mut x).is_null(), "A's PD with B's CQs");
        assert_eq!(errno(), libc::EINVAL);
        let ch = ibv_create_comp_channel(fa.ctx);
        assert!(ibv_create_cq(fb.ctx, 4, null_mut(), ch, 0).is_null(), "a channel of A");
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
    }
    // QPs of two contexts of one device connect.
    let qa = create_qp(fa.pd, fa.cq, 16);
    let qb = create_qp(fb.pd, fb.cq, 16);
    connect(qa, qb);
    connect(qb, qa);
    let mut rs = fb.sge(128, 64);
    assert_eq!(post_recv(qb, 9, &mut rs), 0);
    let mut s = fa.sge(0, 16);
    let mut w = send_wr(8, &mut s, 1);
    let mut bad = null_mut();
    assert_eq!(post_send(qa, &mut w, &mut bad), 0);
    assert_eq!(poll_n(fa.cq, 1)[0].wr_id, 8);
    let r = poll_n(fb.cq, 1)[0];
    assert_eq!((r.wr_id, r.status, r.byte_len), (9, 0, 16));
    destroy_qp(qa);
    destroy_qp(qb);
    fa.close();
    fb.close();
}

#[test]
fn closing_a_context_with_objects_open_leaves_other_contexts_working() {
    let fa = fixture(64);
    let (x, y) = pair(&fa, 16);
    let _ = (x, y);
    // SAFETY: an open context of this library; its objects are not used after.
    unsafe {
        let ch = ibv_create_comp_channel(fa.ctx);
        let _cq = ibv_create_cq(fa.ctx, 8, null_mut(), ch, 0);
        assert_eq!(ibv_close_device(fa.ctx), 0);
    }
    // The MR's memory is ours; its registration went with the context.
    drop(fa.buf);
    let fb = fixture(64);
    let (a, b) = pair(&fb, 16);
    let mut rs = fb.sge(128, 64);
    assert_eq!(post_recv(b, 2, &mut rs), 0);
    let mut s = fb.sge(0, 16);
    let mut w = send_wr(1, &mut s, 1);
    let mut bad = null_mut();
    assert_eq!(post_send(a, &mut w, &mut bad), 0);
    assert_eq!(poll_n(fb.cq, 2).len(), 2);
    destroy_qp(a);
    destroy_qp(b);
    fb.close();
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

#[test]
fn get_cq_event_in_one_thread_while_another_arms_and_acks() {
    let (ctx, model) = open();
    // SAFETY: objects of this library.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 256, 0x77 as *mut _, ch, 0);
        let (chu, cqu) = (ch as usize, cq as usize);
        const N: usize = 50;
        let waiter = std::thread::spawn(move || {
            let mut got = 0;
            while got < N {
                let (mut c, mut t) = (null_mut(), null_mut());
                assert_eq!(ibv_get_cq_event(chu as *mut ibv_comp_channel, &mut c, &mut t), 0);
                assert_eq!((c as usize, t as usize), (cqu, 0x77));
                TAKEN.fetch_add(1, Ordering::SeqCst);
                got += 1;
            }
        });
        let end = Instant::now() + Duration::from_secs(20);
        let mut wc = [ibv_wc::default(); 8];
        for i in 0..N {
            assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq, 0), 0);
            let cqe = pvrdma_abi::wqe::Cqe { wr_id: zerocopy::little_endian::U64::new(i as u64), ..Default::default() };
            assert!(model.device().post_cqe((*cq).handle, &cqe, false));
            assert_eq!(poll_n(cq, 1)[0].wr_id, i as u64);
            // Wait for the waiter to take it before arming again, then ack it from here.
            while TAKEN.load(Ordering::SeqCst) <= i {
                assert!(Instant::now() < end, "event {i} not taken");
                std::thread::sleep(Duration::from_millis(1));
            }
            ibv_ack_cq_events(cq, 1);
            assert_eq!(poll(cq, &mut wc), 0);
        }
        waiter.join().expect("waiter");
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// Completion events the waiter of `get_cq_event_in_one_thread_while_another_arms_and_acks` took.
static TAKEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn destroy_cq_waits_for_an_ack_from_another_thread() {
    let (ctx, model) = open();
    // SAFETY: objects of this library.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 8, null_mut(), ch, 0);
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq, 0), 0);
        let cqe = pvrdma_abi::wqe::Cqe::default();
        assert!(model.device().post_cqe((*cq).handle, &cqe, false));
        let (mut c, mut t) = (null_mut(), null_mut());
        assert_eq!(ibv_get_cq_event(ch, &mut c, &mut t), 0);
        assert_eq!(c, cq);
        let cqu = cq as usize;
        let acker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ibv_ack_cq_events(cqu as *mut ibv_cq, 1);
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let destroyer = std::thread::spawn(move || tx.send(ibv_destroy_cq(cqu as *mut ibv_cq)).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(0), "destroy completes once acked");
        acker.join().unwrap();
        destroyer.join().unwrap();
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn get_cq_event_blocked_while_its_cq_is_destroyed_and_the_channel_gets_another() {
    let (ctx, model) = open();
    // SAFETY: objects of this library.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 8, null_mut(), ch, 0);
        let chu = ch as usize;
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let (mut c, mut t) = (null_mut(), null_mut());
            let r = ibv_get_cq_event(chu as *mut ibv_comp_channel, &mut c, &mut t);
            tx.send((r, c as usize)).unwrap();
        });
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(ibv_destroy_cq(cq), 0, "nothing taken for it");
        let cq2 = ibv_create_cq(ctx, 8, null_mut(), ch, 0);
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq2, 0), 0);
        assert!(model.device().post_cqe((*cq2).handle, &pvrdma_abi::wqe::Cqe::default(), false));
        let (r, c) = rx.recv_timeout(Duration::from_secs(10)).expect("the waiter wakes");
        assert_eq!((r, c), (0, cq2 as usize), "the event names the live CQ");
        waiter.join().unwrap();
        ibv_ack_cq_events(cq2, 1);
        assert_eq!(ibv_destroy_cq(cq2), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

fn get_async(ctx: *mut ibv_context, within: Duration) -> Option<ibv_async_event> {
    // SAFETY: an open context.
    let fd = unsafe { (*ctx).async_fd };
    // SAFETY: F_GETFL/F_SETFL on the context's fd.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK) };
    let end = Instant::now() + within;
    let mut ev = ibv_async_event { element: ibv_async_event_element { port_num: -1 }, event_type: 99 };
    loop {
        // SAFETY: as above; `ev` is writable.
        if unsafe { ibv_get_async_event(ctx, &mut ev) } == 0 {
            return Some(ev);
        }
        assert_eq!(errno(), libc::EAGAIN);
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_qp_event_names_its_qp_and_none_names_a_destroyed_one() {
    let fx = fixture(64);
    let qp = create_qp(fx.pd, fx.cq, 16);
    // SAFETY: a live QP.
    let qpn = unsafe { (*qp).qp_num };
    fx.model.device().inject_async_event(EqeType::QpFatal, qpn);
    let mut ev = get_async(fx.ctx, Duration::from_secs(10)).expect("QP fatal");
    // SAFETY: the union holds the QP for a QP event.
    let got = unsafe { ev.element.qp };
    assert_eq!((ev.event_type, got), (1, qp), "IBV_EVENT_QP_FATAL names the QP");
    // SAFETY: the event just taken.
    unsafe { ibv_ack_async_event(&mut ev) };
    // Another event for it, not taken, then destroy: it must not come out afterwards.
    fx.model.device().inject_async_event(EqeType::QpFatal, qpn);
    std::thread::sleep(Duration::from_millis(30));
    destroy_qp(qp);
    let cq = fx.cq;
    // SAFETY: a live CQ.
    let h = unsafe { (*cq).handle };
    fx.model.device().inject_async_event(EqeType::CqErr, h);
    let ev = get_async(fx.ctx, Duration::from_secs(10)).expect("the CQ event");
    // SAFETY: as above.
    let got = unsafe { ev.element.cq };
    assert_eq!((ev.event_type, got), (0, cq), "the QP's stale event was dropped");
    let mut ev = ev;
    // SAFETY: the event just taken.
    unsafe { ibv_ack_async_event(&mut ev) };
    fx.close();
}

#[test]
fn get_async_event_blocked_while_the_cq_overflows() {
    let fx = fixture(1);
    let ctxu = fx.ctx as usize;
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut ev = ibv_async_event { element: ibv_async_event_element { port_num: -1 }, event_type: 99 };
        // SAFETY: an open context (closed only after this thread is joined).
        let r = unsafe { ibv_get_async_event(ctxu as *mut ibv_context, &mut ev) };
        // SAFETY: the union holds the CQ for a CQ event.
        tx.send((r, ev.event_type, unsafe { ev.element.cq } as usize)).unwrap();
    });
    std::thread::sleep(Duration::from_millis(30));
    // SAFETY: a live CQ.
    let (cqe, h) = unsafe { ((*fx.cq).cqe, (*fx.cq).handle) };
    for i in 0..=cqe as u64 + 1 {
        let c = pvrdma_abi::wqe::Cqe { wr_id: zerocopy::little_endian::U64::new(i), ..Default::default() };
        fx.model.device().post_cqe(h, &c, false);
    }
    let (r, ty, cq) = rx.recv_timeout(Duration::from_secs(10)).expect("the waiter wakes");
    assert_eq!((r, ty, cq), (0, 0, fx.cq as usize), "IBV_EVENT_CQ_ERR names the CQ");
    waiter.join().unwrap();
    let mut ev = ibv_async_event { element: ibv_async_event_element { cq: fx.cq }, event_type: 0 };
    let mut wc = [ibv_wc::default(); 64];
    let k = poll(fx.cq, &mut wc);
    assert!(k == cqe || k == -libc::EOVERFLOW, "queued CQEs then overflow: {k}");
    // SAFETY: the taken event; then the CQ can go.
    unsafe { ibv_ack_async_event(&mut ev) };
    fx.close();
}

#[test]
fn no_event_names_a_cq_destroyed_before_its_events_were_taken() {
    let (ctx, model) = open();
    // SAFETY: objects of this library.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 1, null_mut(), ch, 0);
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq, 0), 0);
        let h = (*cq).handle;
        for i in 0..4 {
            let c = pvrdma_abi::wqe::Cqe { wr_id: zerocopy::little_endian::U64::new(i), ..Default::default() };
            model.device().post_cqe(h, &c, false);
        }
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(ibv_destroy_cq(cq), 0, "nothing taken for it");
        // Its completion event and its CQ_ERR are gone with it.
        let fd = (*ch).fd;
        libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
        let (mut c, mut t) = (null_mut(), null_mut());
        assert_eq!(ibv_get_cq_event(ch, &mut c, &mut t), -1);
        assert_eq!(errno(), libc::EAGAIN);
        assert!(get_async(ctx, Duration::from_millis(50)).is_none(), "no event of the freed CQ");
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
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
