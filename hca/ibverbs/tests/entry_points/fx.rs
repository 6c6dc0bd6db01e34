//! The helpers of the C-entry-point tests that run on the default model device: a context and
//! its model, a fixture of PD, CQ and registered buffer, QPs made and connected through the C
//! entry points, posts and polls, and the async-event queue read with a bound.

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e }
}

/// A context on the first device and its model.
pub fn open() -> (*mut ibv_context, hca::platform::sim::SimPlatform) {
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
pub struct Fx {
    pub ctx: *mut ibv_context,
    pub model: hca::platform::sim::SimPlatform,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub mr: *mut ibv_mr,
    pub buf: Vec<u8>,
}

pub fn fixture(cqe: i32) -> Fx {
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
    pub fn sge(&self, off: usize, len: u32) -> ibv_sge {
        // SAFETY: a live MR.
        let lkey = unsafe { (*self.mr).lkey };
        ibv_sge { addr: self.buf.as_ptr() as u64 + off as u64, length: len, lkey }
    }

    pub fn close(self) {
        // SAFETY: objects of this fixture, no longer used.
        unsafe {
            assert_eq!(ibv_dereg_mr(self.mr), 0);
            assert_eq!(ibv_destroy_cq(self.cq), 0);
            assert_eq!(ibv_dealloc_pd(self.pd), 0);
            assert_eq!(ibv_close_device(self.ctx), 0);
        }
    }
}

pub fn init_attr(scq: *mut ibv_cq, rcq: *mut ibv_cq, send: u32, inline: u32) -> ibv_qp_init_attr {
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

pub fn create_qp(pd: *mut ibv_pd, cq: *mut ibv_cq, send: u32) -> *mut ibv_qp {
    let mut a = init_attr(cq, cq, send, 0);
    // SAFETY: a PD and CQ of this library.
    let qp = unsafe { ibv_create_qp(pd, &mut a) };
    assert!(!qp.is_null(), "create_qp: errno {}", errno());
    qp
}

pub fn create_qp_ex(ctx: *mut ibv_context, pd: *mut ibv_pd, cq: *mut ibv_cq, inline: u32) -> *mut ibv_qp {
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
pub fn ctx_ex(ctx: *mut ibv_context) -> *mut verbs_context {
    let at = std::mem::offset_of!(verbs_context, context);
    // SAFETY: every context of this library is the last field of a `verbs_context`.
    unsafe { ctx.cast::<u8>().sub(at).cast() }
}

pub fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) -> i32 {
    // SAFETY: a live QP of this library.
    unsafe { ibv_modify_qp(qp, a, mask as i32) }
}

pub const STATE: u32 = 1;

pub const INIT_MASK: u32 = STATE | 1 << 3 | 1 << 4 | 1 << 5;

pub const RTR_MASK: u32 = STATE | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20;

pub const RTS_MASK: u32 = STATE | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 16;

pub fn gid(ctx: *mut ibv_context) -> [u8; 16] {
    let mut g = ibv_gid::default();
    // SAFETY: an open context.
    assert_eq!(unsafe { ibv_query_gid(ctx, 1, 0, &mut g) }, 0);
    g.raw
}

pub fn connect(qp: *mut ibv_qp, remote: *mut ibv_qp) {
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

pub fn send_wr(wr_id: u64, sg: *mut ibv_sge, num_sge: i32) -> ibv_send_wr {
    // SAFETY: all-zero is a valid `ibv_send_wr` (NULL pointers, opcode RDMA_WRITE).
    let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
    w.wr_id = wr_id;
    w.sg_list = sg;
    w.num_sge = num_sge;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    w
}

pub fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: &mut *mut ibv_send_wr) -> i32 {
    // SAFETY: a live QP; the chain is ours.
    unsafe { ((*(*qp).context).ops.post_send.unwrap())(qp, wr, bad) }
}

pub fn post_recv(qp: *mut ibv_qp, wr_id: u64, sg: *mut ibv_sge) -> i32 {
    let mut w = ibv_recv_wr { wr_id, next: null_mut(), sg_list: sg, num_sge: 1 };
    let mut bad = null_mut();
    // SAFETY: a live QP; the WR is ours.
    unsafe { ((*(*qp).context).ops.post_recv.unwrap())(qp, &mut w, &mut bad) }
}

pub fn poll(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> i32 {
    // SAFETY: a live CQ; `wc` has room for its length.
    unsafe { ((*(*cq).context).ops.poll_cq.unwrap())(cq, wc.len() as i32, wc.as_mut_ptr()) }
}

/// Polls until `n` completions arrived (bounded).
pub fn poll_n(cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
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

pub fn destroy_qp(qp: *mut ibv_qp) {
    // SAFETY: a live QP of this library, not used after.
    assert_eq!(unsafe { ibv_destroy_qp(qp) }, 0);
}

/// Two connected QPs on one fixture, each with a handful of receives posted.
pub fn pair(fx: &Fx, send: u32) -> (*mut ibv_qp, *mut ibv_qp) {
    let (a, b) = (create_qp(fx.pd, fx.cq, send), create_qp(fx.pd, fx.cq, send));
    connect(a, b);
    connect(b, a);
    (a, b)
}

/// The `ibv_qp_ex` of `qp`'s functions, called as the header's inline `ibv_wr_*` do.
pub fn qpx(qp: *mut ibv_qp) -> &'static mut ibv_qp_ex {
    // SAFETY: a live QP with the API.
    unsafe { &mut *ibv_qp_to_qp_ex(qp) }
}

pub fn get_async(ctx: *mut ibv_context, within: Duration) -> Option<ibv_async_event> {
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

/// A UD QP in RTS (INIT with P_Key index, port and Q_Key, then RTR, then RTS from PSN 0).
///
/// # Safety
/// `pd` and `cq` are live objects of this library.
pub unsafe fn ud_qp(pd: *mut ibv_pd, cq: *mut ibv_cq, qkey: u32) -> *mut ibv_qp {
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
