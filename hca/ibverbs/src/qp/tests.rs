//! QPs and posting through the C entry points, on the default model device (in-process
//! loopback). PDs and CQs are made through the core underneath (their entry points are
//! written elsewhere); completions are polled through the core CQ.

use crate::abi::*;
use crate::cq::Cq;
use crate::pd::Pd;
use crate::qp::{create_qp_ex, ibv_create_qp, ibv_destroy_qp, ibv_modify_qp, ibv_qp_to_qp_ex, ibv_query_qp};
use crate::qp::{post_recv, post_send};
use ib_core::{access, UserBuffer, Wc, WcOpcode, WcStatus};
use std::ptr::{null_mut, NonNull};
use std::time::Duration;

struct Fx {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    gid: [u8; 16],
    buf: UserBuffer,
    lkey: u32,
    rkey: u32,
}

fn fixture() -> Fx {
    // SAFETY: the library's own entry points with valid arguments.
    let ctx = unsafe {
        let list = crate::ibv_get_device_list(null_mut());
        assert!(!list.is_null() && !(*list).is_null(), "the default model device");
        let ctx = crate::ibv_open_device(*list);
        crate::ibv_free_device_list(list);
        ctx
    };
    // SAFETY: opened just now.
    let c = unsafe { crate::context::context(ctx) }.expect("a context");
    let core_pd = c.core.alloc_pd().expect("alloc_pd");
    let pd = Box::leak(Box::new(Pd { ibv: ibv_pd { context: ctx, handle: core_pd.handle() }, core: core_pd }));
    let core_cq = c.core.create_cq(64, None).expect("create_cq");
    let ibv = ibv_cq {
        context: ctx,
        channel: null_mut(),
        cq_context: null_mut(),
        handle: core_cq.handle(),
        cqe: core_cq.cqe() as i32,
        mutex: pthread_mutex_t([0; 5]),
        cond: pthread_cond_t([0; 6]),
        comp_events_completed: 0,
        async_events_completed: 0,
    };
    let cq = Box::leak(Box::new(Cq { ibv, core: core_cq }));
    let gid = c.dev.core.query_gid(1, 0).expect("GID 0");
    let buf = UserBuffer::new(1 << 16).expect("buffer");
    let flags = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    let mr = Box::leak(Box::new(pd.core.reg_buffer(&buf, flags).expect("reg_buffer")));
    Fx { ctx, pd: &mut pd.ibv, cq: &mut cq.ibv, gid, buf, lkey: mr.lkey(), rkey: mr.rkey() }
}

fn init_attr(fx: &Fx, cap: ibv_qp_cap) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: 7 as *mut libc::c_void,
        send_cq: fx.cq,
        recv_cq: fx.cq,
        srq: null_mut(),
        cap,
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    }
}

fn cap(send: u32, inline: u32) -> ibv_qp_cap {
    ibv_qp_cap { max_send_wr: send, max_recv_wr: 16, max_send_sge: 2, max_recv_sge: 2, max_inline_data: inline }
}

fn create(fx: &Fx, c: ibv_qp_cap) -> NonNull<ibv_qp> {
    let mut a = init_attr(fx, c);
    // SAFETY: a PD and CQs of this library.
    NonNull::new(unsafe { ibv_create_qp(fx.pd, &mut a) }).expect("ibv_create_qp")
}

fn create_ex(fx: &Fx, c: ibv_qp_cap, comp_mask: u32, send_ops_flags: u64) -> *mut ibv_qp {
    let b = init_attr(fx, c);
    let mut a = ibv_qp_init_attr_ex {
        qp_context: b.qp_context,
        send_cq: b.send_cq,
        recv_cq: b.recv_cq,
        srq: null_mut(),
        cap: b.cap,
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
        comp_mask,
        pd: fx.pd,
        xrcd: null_mut(),
        create_flags: 0,
        max_tso_header: 0,
        rwq_ind_tbl: null_mut(),
        rx_hash_conf: [0; 3],
        source_qpn: 0,
        send_ops_flags,
    };
    // SAFETY: as above.
    unsafe { create_qp_ex(fx.ctx, &mut a) }
}

fn modify(qp: NonNull<ibv_qp>, a: &mut ibv_qp_attr, mask: u32) -> i32 {
    // SAFETY: a live QP of this library.
    unsafe { ibv_modify_qp(qp.as_ptr(), a, mask as i32) }
}

const STATE: u32 = 1;
const INIT_MASK: u32 = STATE | 1 << 3 | 1 << 4 | 1 << 5;
const RTR_MASK: u32 = STATE | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20;
const RTS_MASK: u32 = STATE | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 16;

/// Brings `qp` to RTS towards `remote` through ibv_modify_qp, as ibv_rc_pingpong does.
fn connect(qp: NonNull<ibv_qp>, remote: u32, gid: [u8; 16]) {
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qp_access_flags: 7, ..Default::default() };
    assert_eq!(modify(qp, &mut a, INIT_MASK), 0, "INIT");
    let grh = ibv_global_route { dgid: ibv_gid { raw: gid }, hop_limit: 64, ..Default::default() };
    let ah_attr = ibv_ah_attr { grh, is_global: 1, port_num: 1, ..Default::default() };
    let mut a = ibv_qp_attr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: remote,
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

fn qpn(qp: NonNull<ibv_qp>) -> u32 {
    // SAFETY: a live QP.
    unsafe { qp.as_ref().qp_num }
}

/// Two QPs connected to each other.
fn pair(fx: &Fx, c: ibv_qp_cap) -> (NonNull<ibv_qp>, NonNull<ibv_qp>) {
    let (a, b) = (create(fx, c), create(fx, c));
    connect(a, qpn(b), fx.gid);
    connect(b, qpn(a), fx.gid);
    (a, b)
}

/// `n` completions of `cq`, within 5 s.
fn poll(cq: *mut ibv_cq, n: usize) -> Vec<Wc> {
    // SAFETY: a live CQ of the fixture.
    let cq = unsafe { crate::cq::cq(cq) }.expect("CQ");
    let mut got = Vec::new();
    let done = ib_core::time::poll_until(Duration::from_secs(5), || {
        let mut wc = [Wc::default(); 8];
        let k = cq.core.poll(&mut wc).expect("poll");
        got.extend_from_slice(&wc[..k]);
        got.len() >= n
    });
    assert!(done, "{n} completions expected, {} arrived: {got:?}", got.len());
    got
}

fn sge(fx: &Fx, off: u64, len: u32) -> ibv_sge {
    ibv_sge { addr: fx.buf.addr() + off, length: len, lkey: fx.lkey }
}

fn send_wr(wr_id: u64, sg: &mut [ibv_sge], opcode: u32, flags: u32) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        next: null_mut(),
        sg_list: sg.as_mut_ptr(),
        num_sge: sg.len() as i32,
        opcode,
        send_flags: flags,
        imm_data: 0,
        wr: ibv_send_wr_wr { rdma: ibv_send_wr_rdma { remote_addr: 0, rkey: 0 } },
        qp_type: 0,
        bind_mw: [0; 6],
    }
}

fn recv(qp: NonNull<ibv_qp>, wr_id: u64, sg: &mut ibv_sge) -> i32 {
    let mut wr = ibv_recv_wr { wr_id, next: null_mut(), sg_list: sg, num_sge: 1 };
    let mut bad = null_mut();
    // SAFETY: a live QP; the WR and its SGE outlive the call.
    unsafe { post_recv(qp.as_ptr(), &mut wr, &mut bad) }
}

fn send(qp: NonNull<ibv_qp>, wr: &mut ibv_send_wr) -> i32 {
    let mut bad = null_mut();
    // SAFETY: as above.
    unsafe { post_send(qp.as_ptr(), wr, &mut bad) }
}

fn read(fx: &Fx, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fx.buf.read(off, &mut v).expect("read");
    v
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The `ibv_qp_ex` of `qp` and its functions.
fn qpx(qp: NonNull<ibv_qp>) -> &'static mut ibv_qp_ex {
    // SAFETY: a live QP of this library.
    let x = unsafe { ibv_qp_to_qp_ex(qp.as_ptr()) };
    // SAFETY: non-NULL: the QP's own ibv_qp_ex, alive for the test.
    unsafe { x.as_mut() }.expect("an ibv_qp_ex")
}

#[test]
fn create_modify_query_destroy() {
    let fx = fixture();
    let mut a = init_attr(&fx, ibv_qp_cap { max_send_wr: 3, max_recv_wr: 5, ..Default::default() });
    // SAFETY: a PD and CQs of this library.
    let qp = NonNull::new(unsafe { ibv_create_qp(fx.pd, &mut a) }).expect("created");
    let c = a.cap;
    // Inline room for the one send SGE (16 bytes), as rxe grants it although none was asked.
    assert_eq!((c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data), (4, 8, 1, 1, 16));
    // SAFETY: a live QP.
    let b = unsafe { qp.as_ref() };
    assert!(b.qp_num > 1 && b.state == 0 && b.qp_type == IBV_QPT_RC && b.pd == fx.pd);
    assert_eq!(b.qp_context as usize, 7);
    // SAFETY: a live QP.
    assert!(unsafe { ibv_qp_to_qp_ex(qp.as_ptr()) }.is_null(), "no ibv_qp_ex without send_ops_flags");

    let mut to_rtr = ibv_qp_attr { qp_state: 2, ..Default::default() };
    assert_eq!(modify(qp, &mut to_rtr, STATE), libc::EINVAL, "RESET -> RTR is illegal");
    let mut init = ibv_qp_attr { qp_state: 1, port_num: 1, ..Default::default() };
    assert_eq!(modify(qp, &mut init, STATE | 1 << 5), libc::EINVAL, "INIT needs the access flags and P_Key index");
    let mut bad_state = ibv_qp_attr { qp_state: 9, ..Default::default() };
    assert_eq!(modify(qp, &mut bad_state, STATE), libc::EINVAL);
    assert_eq!(modify(qp, &mut bad_state, 0), 0, "an empty mask does nothing");
    // SAFETY: a live QP.
    assert_eq!(unsafe { qp.as_ref().state }, 0);

    connect(qp, qpn(qp), fx.gid);
    // SAFETY: a live QP.
    assert_eq!(unsafe { qp.as_ref().state }, 3, "qp->state follows a modify");
    let mut attr = ibv_qp_attr::default();
    let mut ia = init_attr(&fx, ibv_qp_cap::default());
    ia.qp_context = null_mut();
    // SAFETY: a live QP and room for both answers.
    assert_eq!(unsafe { ibv_query_qp(qp.as_ptr(), &mut attr, 0x1f_ffff, &mut ia) }, 0);
    assert_eq!((attr.qp_state, attr.dest_qp_num, attr.path_mtu, attr.port_num), (3, qpn(qp), 3, 1));
    assert_eq!(attr.ah_attr.grh.dgid.raw, fx.gid);
    assert_eq!((attr.cap.max_send_wr, ia.cap.max_recv_wr, ia.qp_context as usize), (4, 8, 7));
    assert_eq!((ia.send_cq, ia.qp_type, ia.sq_sig_all), (fx.cq, IBV_QPT_RC, 0));
    // SAFETY: a live QP; NULL answers are refused.
    assert_eq!(unsafe { ibv_query_qp(qp.as_ptr(), null_mut(), 1, &mut ia) }, libc::EINVAL);
    // SAFETY: a live QP, destroyed once.
    assert_eq!(unsafe { ibv_destroy_qp(qp.as_ptr()) }, 0);
    // SAFETY: NULL is refused.
    assert_eq!(unsafe { ibv_destroy_qp(null_mut()) }, libc::EINVAL);
}

#[test]
fn create_refuses_what_it_does_not_carry() {
    let fx = fixture();
    let mut a = init_attr(&fx, cap(4, 0));
    // SAFETY: NULL PD and attributes are refused before anything is read.
    unsafe {
        assert!(ibv_create_qp(null_mut(), &mut a).is_null() && errno() == libc::EINVAL);
        assert!(ibv_create_qp(fx.pd, null_mut()).is_null() && errno() == libc::EINVAL);
    }
    let try_create = |f: &dyn Fn(&mut ibv_qp_init_attr)| {
        let mut a = init_attr(&fx, cap(4, 0));
        f(&mut a);
        // SAFETY: a PD and CQs of this library (or NULL).
        let q = unsafe { ibv_create_qp(fx.pd, &mut a) };
        assert!(q.is_null());
        errno()
    };
    // Issue 21 §3: each QP type answers as libibverbs 44 and Linux do.
    assert_eq!(try_create(&|a| a.qp_type = IBV_QPT_UC), libc::EOPNOTSUPP);
    assert_eq!(try_create(&|a| a.qp_type = IBV_QPT_XRC_SEND), libc::EOPNOTSUPP);
    assert_eq!(try_create(&|a| a.qp_type = IBV_QPT_DRIVER), libc::EOPNOTSUPP);
    assert_eq!(try_create(&|a| a.qp_type = IBV_QPT_XRC_RECV), libc::EINVAL, "no XRC domain through ibv_create_qp");
    assert_eq!(try_create(&|a| a.qp_type = 77), libc::EINVAL, "a type libibverbs does not know");
    // Linux's IB_QPT_SMI and IB_QPT_GSI (0, 1) are no `ibv_qp_type`: QP0 and QP1 are the kernel's.
    assert_eq!(try_create(&|a| a.qp_type = 0), libc::EINVAL, "QP0");
    assert_eq!(try_create(&|a| a.qp_type = 1), libc::EINVAL, "QP1 (the verbs core's GSI agent's)");
    let raw = if super::has_cap_net_raw() { libc::EOPNOTSUPP } else { libc::EPERM };
    assert_eq!(try_create(&|a| a.qp_type = IBV_QPT_RAW_PACKET), raw);
    assert_eq!(try_create(&|a| a.recv_cq = null_mut()), libc::EINVAL);
    assert_eq!(try_create(&|a| a.send_cq = null_mut()), libc::EINVAL);
    // An XRC send QP takes no receive CQ (rdma_xclient -c x passes none through librdmacm): the
    // refusal is still the driver's EOPNOTSUPP, not EINVAL.
    let xrc_send = |a: &mut ibv_qp_init_attr| {
        a.qp_type = IBV_QPT_XRC_SEND;
        a.recv_cq = null_mut();
    };
    assert_eq!(try_create(&xrc_send), libc::EOPNOTSUPP);
    if !super::has_cap_net_raw() {
        let raw_no_cq = |a: &mut ibv_qp_init_attr| {
            a.qp_type = IBV_QPT_RAW_PACKET;
            a.recv_cq = null_mut();
        };
        assert_eq!(try_create(&raw_no_cq), libc::EPERM, "the capability is checked before the CQs");
    }
    assert_eq!(try_create(&|a| a.cap.max_send_wr = 1 << 30), libc::EINVAL);
    let pd_ops = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    assert!(create_ex(&fx, cap(4, 0), pd_ops, 1 << 12).is_null(), "atomic write is not carried");
    assert_eq!(errno(), libc::EOPNOTSUPP);
    assert!(create_ex(&fx, cap(4, 0), pd_ops | 1 << 3, 0).is_null(), "create flags are not carried");
    assert_eq!(errno(), libc::EOPNOTSUPP);
    assert!(create_ex(&fx, cap(4, 0), IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 0).is_null(), "a PD is needed");
    assert_eq!(errno(), libc::EINVAL);
}

#[test]
fn send_and_receive_with_sges_and_immediate() {
    let fx = fixture();
    let (a, b) = pair(&fx, cap(8, 0));
    fx.buf.write(0, b"hello, ").unwrap();
    fx.buf.write(100, b"world").unwrap();
    let mut rsge = sge(&fx, 1000, 64);
    assert_eq!(recv(b, 11, &mut rsge), 0);
    let mut sg = [sge(&fx, 0, 7), sge(&fx, 100, 5)];
    let mut wr = send_wr(21, &mut sg, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_FENCE);
    wr.imm_data = 0x1234_5678u32.to_be();
    assert_eq!(send(a, &mut wr), 0);
    let wcs = poll(fx.cq, 2);
    let r = wcs.iter().find(|w| w.wr_id == 11).expect("the receive");
    assert_eq!(
        (r.status, r.opcode, r.byte_len, r.imm_data),
        (WcStatus::Success, WcOpcode::Recv, 12, Some(0x1234_5678))
    );
    assert!(wcs.iter().any(|w| w.wr_id == 21 && w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    assert_eq!(read(&fx, 1000, 12), b"hello, world");
}

#[test]
fn bad_wr_names_the_first_wr_not_posted() {
    let fx = fixture();
    let lone = create(&fx, cap(8, 0));
    let mut sg = [sge(&fx, 0, 4)];
    let mut wr = send_wr(1, &mut sg, IBV_WR_SEND, IBV_SEND_SIGNALED);
    let mut bad = null_mut();
    // SAFETY: a live QP; the WR outlives the call.
    assert_eq!(unsafe { post_send(lone.as_ptr(), &mut wr, &mut bad) }, libc::EINVAL, "before RTS");
    assert_eq!(bad, &mut wr as *mut _);

    let (a, b) = pair(&fx, cap(8, 0));
    let mut rsge = sge(&fx, 2000, 64);
    assert_eq!(recv(b, 5, &mut rsge), 0);
    let (mut s0, mut s1, mut s2) = ([sge(&fx, 0, 4)], [sge(&fx, 0, 4)], [sge(&fx, 0, 4)]);
    let mut w2 = send_wr(32, &mut s2, IBV_WR_SEND, IBV_SEND_SIGNALED);
    let mut w1 = send_wr(31, &mut s1, IBV_WR_SEND, IBV_SEND_SIGNALED);
    w1.num_sge = 3;
    w1.next = &mut w2;
    let mut w0 = send_wr(30, &mut s0, IBV_WR_SEND, IBV_SEND_SIGNALED);
    w0.next = &mut w1;
    let mut bad = null_mut();
    // SAFETY: as above.
    assert_eq!(unsafe { post_send(a.as_ptr(), &mut w0, &mut bad) }, libc::EINVAL, "more SGEs than max_send_sge");
    assert_eq!(bad, &mut w1 as *mut _);
    let wcs = poll(fx.cq, 2);
    assert!(wcs.iter().any(|w| w.wr_id == 30 && w.status == WcStatus::Success), "the WR before it was posted");
    assert!(wcs.iter().all(|w| w.wr_id != 32), "the WR after it was not");

    let mut too_many = [sge(&fx, 0, 1), sge(&fx, 1, 1), sge(&fx, 2, 1)];
    let mut w = send_wr(40, &mut too_many, IBV_WR_SEND, 0);
    assert_eq!(send(a, &mut w), libc::EINVAL, "more SGEs than max_send_sge");

    let mut rs = [sge(&fx, 3000, 8), sge(&fx, 3100, 8)];
    let mut r1 = ibv_recv_wr { wr_id: 51, next: null_mut(), sg_list: rs[1..].as_mut_ptr(), num_sge: -1 };
    let mut r0 = ibv_recv_wr { wr_id: 50, next: &mut r1, sg_list: rs.as_mut_ptr(), num_sge: 1 };
    let mut rbad = null_mut();
    // SAFETY: a live QP; the WRs outlive the call.
    assert_eq!(unsafe { post_recv(b.as_ptr(), &mut r0, &mut rbad) }, libc::EINVAL);
    assert_eq!(rbad, &mut r1 as *mut _);
}

#[test]
fn a_full_send_queue_is_enomem() {
    let fx = fixture();
    let (a, _b) = pair(&fx, cap(2, 0));
    let mut sg = [sge(&fx, 0, 8)];
    let mut wrs: Vec<ibv_send_wr> = (0..64).map(|i| send_wr(i, &mut sg, IBV_WR_RDMA_WRITE, 0)).collect();
    for w in &mut wrs {
        w.wr = ibv_send_wr_wr { rdma: ibv_send_wr_rdma { remote_addr: fx.buf.addr() + 8192, rkey: fx.rkey } };
    }
    for i in 0..63 {
        let next: *mut ibv_send_wr = &mut wrs[i + 1];
        wrs[i].next = next;
    }
    let mut bad = null_mut();
    // SAFETY: a live QP; the chain outlives the call.
    let r = unsafe { post_send(a.as_ptr(), wrs.as_mut_ptr(), &mut bad) };
    assert_eq!(r, libc::ENOMEM, "64 unpolled WRs do not fit a queue of 2");
    assert!(bad != wrs.as_mut_ptr() && !bad.is_null());
}

#[test]
fn inline_sends_take_the_bytes_at_post() {
    let fx = fixture();
    let (a, b) = pair(&fx, cap(4, 64));
    // SAFETY: a live QP of this library.
    assert_eq!(unsafe { crate::qp::qp(a.as_ptr()) }.unwrap().max_inline(), 64);
    // More posts than bounce slots (3 x 4), each overwritten right after its post.
    for i in 0..40u64 {
        let mut rsge = sge(&fx, 4096, 64);
        assert_eq!(recv(b, 1000 + i, &mut rsge), 0);
        let mut mine = *b"inline payload #..";
        mine[16] = b'a' + (i % 26) as u8;
        let mut sg = [
            ibv_sge { addr: mine.as_ptr() as u64, length: 10, lkey: 0 },
            ibv_sge { addr: mine[10..].as_ptr() as u64, length: 8, lkey: 0xdead },
        ];
        let mut wr = send_wr(i, &mut sg, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
        assert_eq!(send(a, &mut wr), 0);
        let expected = mine;
        mine.fill(b'X');
        let wcs = poll(fx.cq, 2);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert_eq!(read(&fx, 4096, 18), expected, "post {i}");
    }
    // Issue 21 §3: beyond max_inline_data, or on a QP without inline data, the WR's SGEs are
    // posted by their lkeys, as rdma-core's pvrdma provider posts every inline WR.
    fx.buf.write(8000, &[7u8; 65]).unwrap();
    let mut rsge = sge(&fx, 4096, 128);
    assert_eq!(recv(b, 95, &mut rsge), 0);
    let mut sg = [sge(&fx, 8000, 65)];
    let mut wr = send_wr(99, &mut sg, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    assert_eq!(send(a, &mut wr), 0, "beyond max_inline_data: the SGEs");
    let wcs = poll(fx.cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(read(&fx, 4096, 65), [7u8; 65]);
    // A QP that asked for no inline data has the room of its two send SGEs (32 bytes), as on
    // rxe: 16 unregistered bytes with lkey 0 go inline (rdma_xclient's send), 40 do not.
    let (plain, peer) = pair(&fx, cap(4, 0));
    let unregistered = [5u8; 40];
    let mut rsge = sge(&fx, 4096, 128);
    assert_eq!(recv(peer, 96, &mut rsge), 0);
    let mut sg = [ibv_sge { addr: unregistered.as_ptr() as u64, length: 16, lkey: 0 }];
    let mut wr = send_wr(98, &mut sg, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    assert_eq!(send(plain, &mut wr), 0, "16 bytes inline on a QP that asked for none");
    let wcs = poll(fx.cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(read(&fx, 4096, 16), [5u8; 16]);
    let mut sg = [ibv_sge { addr: unregistered.as_ptr() as u64, length: 40, lkey: 0 }];
    let mut wr = send_wr(97, &mut sg, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    assert_eq!(send(plain, &mut wr), 0, "beyond the QP's inline room: its SGE, lkey 0, is posted");
    let wcs = poll(fx.cq, 1);
    assert_eq!(wcs[0].status, WcStatus::LocProtErr, "the device refuses lkey 0: {wcs:?}");
}

mod ex;
mod ud;
