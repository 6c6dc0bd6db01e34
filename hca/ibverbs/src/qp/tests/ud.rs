//! UD through the C ABI: `IBV_QPT_UD` QPs moved with Q_Keys, `ibv_create_ah`, `ibv_post_send`
//! with `wr.ud`, receive completions with `IBV_WC_GRH` and `src_qp`, the GRH area read back by
//! `ibv_init_ah_from_wc` / `ibv_create_ah_from_wc`, and `ibv_wr_set_ud_addr` on an `ibv_qp_ex`.

use super::*;
use crate::ah::{ibv_create_ah, ibv_create_ah_from_wc, ibv_destroy_ah, ibv_init_ah_from_wc};

const QKEY: u32 = 0x1234_5678;

fn ud_attr(fx: &Fx) -> ibv_qp_init_attr {
    ibv_qp_init_attr { qp_type: IBV_QPT_UD, ..init_attr(fx, cap(8, 0)) }
}

/// RESET -> INIT -> RTR -> RTS as ibv_ud_pingpong moves its QP.
fn ready(qp: NonNull<ibv_qp>) {
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qkey: QKEY, ..Default::default() };
    assert_eq!(modify(qp, &mut a, STATE | 1 << 4 | 1 << 5 | 1 << 6), 0, "INIT");
    let mut a = ibv_qp_attr { qp_state: 2, ..Default::default() };
    assert_eq!(modify(qp, &mut a, STATE), 0, "RTR");
    let mut a = ibv_qp_attr { qp_state: 3, sq_psn: 5, ..Default::default() };
    assert_eq!(modify(qp, &mut a, STATE | 1 << 16), 0, "RTS");
}

fn ah(fx: &Fx) -> *mut ibv_ah {
    let grh = ibv_global_route { dgid: ibv_gid { raw: fx.gid }, hop_limit: 64, ..Default::default() };
    let mut attr = ibv_ah_attr { grh, is_global: 1, port_num: 1, ..Default::default() };
    // SAFETY: a PD of this library and the attributes.
    let ah = unsafe { ibv_create_ah(fx.pd, &mut attr) };
    assert!(!ah.is_null(), "ibv_create_ah: errno {}", errno());
    ah
}

fn ud_send(wr_id: u64, sg: &mut [ibv_sge], ah: *mut ibv_ah, qpn: u32, imm: Option<u32>) -> ibv_send_wr {
    let opcode = if imm.is_some() { IBV_WR_SEND_WITH_IMM } else { IBV_WR_SEND };
    let mut wr = send_wr(wr_id, sg, opcode, IBV_SEND_SIGNALED);
    wr.imm_data = imm.unwrap_or(0).to_be();
    wr.wr = ibv_send_wr_wr { ud: ibv_send_wr_ud { ah, remote_qpn: qpn, remote_qkey: QKEY } };
    wr
}

/// One completion of the fixture's CQ as the C API returns it.
fn poll_one(fx: &Fx) -> ibv_wc {
    let mut wc = ibv_wc::default();
    let got = ib_core::time::poll_until(Duration::from_secs(5), || {
        // SAFETY: the fixture's CQ and room for one completion.
        unsafe { crate::cq::poll_cq(fx.cq, 1, &mut wc) == 1 }
    });
    assert!(got, "a completion");
    wc
}

#[test]
fn a_ud_exchange_through_the_c_api() {
    let fx = fixture();
    let (mut aa, mut ba) = (ud_attr(&fx), ud_attr(&fx));
    // SAFETY: a PD and CQs of this library.
    let (a, b) = unsafe { (ibv_create_qp(fx.pd, &mut aa), ibv_create_qp(fx.pd, &mut ba)) };
    let (a, b) = (NonNull::new(a).expect("UD QP a"), NonNull::new(b).expect("UD QP b"));
    ready(a);
    ready(b);
    let mut q = ibv_qp_attr::default();
    let mut init = ud_attr(&fx);
    init.qp_type = 0;
    // SAFETY: a live QP and attributes to fill.
    assert_eq!(unsafe { ibv_query_qp(b.as_ptr(), &mut q, 1 << 6 | 1, &mut init) }, 0);
    assert_eq!((q.qkey, q.qp_state, init.qp_type), (QKEY, 3, IBV_QPT_UD));
    let ah = ah(&fx);
    let mut r = sge(&fx, 10_000, 40 + 64);
    assert_eq!(recv(b, 1, &mut r), 0);
    fx.buf.write(0, b"datagram").unwrap();
    let mut s = [sge(&fx, 0, 8)];
    let mut wr = ud_send(9, &mut s, ah, qpn(b), Some(0xfeed));
    assert_eq!(send(a, &mut wr), 0);
    let mut wcs = [poll_one(&fx), poll_one(&fx)];
    wcs.sort_by_key(|w| w.opcode);
    let (sent, got) = (wcs[0], wcs[1]);
    assert_eq!((sent.status, sent.wr_id), (0, 9));
    assert_eq!((got.status, got.wr_id, got.opcode, got.byte_len), (0, 1, IBV_WC_RECV, 48));
    assert_eq!((got.src_qp, got.qp_num), (qpn(a), qpn(b)));
    assert_eq!(got.wc_flags, IBV_WC_GRH | IBV_WC_WITH_IMM);
    assert_eq!(u32::from_be(got.imm_data), 0xfeed);
    assert_eq!(read(&fx, 10_040, 8), b"datagram");
    let mut back = ibv_ah_attr::default();
    let grh = (fx.buf.addr() + 10_000) as usize as *mut libc::c_void;
    let mut w = got;
    // SAFETY: the context, the completion and its receive buffer's GRH area.
    assert_eq!(unsafe { ibv_init_ah_from_wc(fx.ctx, 1, &mut w, grh, &mut back) }, 0, "errno {}", errno());
    assert_eq!((back.is_global, back.port_num, back.grh.sgid_index), (1, 1, 0));
    assert_eq!(back.grh.dgid.raw, fx.gid, "the sender's GID");
    // SAFETY: as above.
    let reply = unsafe { ibv_create_ah_from_wc(fx.pd, &mut w, grh, 1) };
    assert!(!reply.is_null());
    // Without IBV_WC_GRH: no global route, as libibverbs.
    w.wc_flags = 0;
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_init_ah_from_wc(fx.ctx, 1, &mut w, grh, &mut back) }, 0);
    assert_eq!(back.is_global, 0);
    // Issue 21 §3: an RC opcode on a UD QP is posted, as rdma-core's pvrdma provider posts it
    // (it checks no opcode), and the device fails it.
    let mut bad = send_wr(3, &mut s, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED);
    bad.wr = ibv_send_wr_wr { ud: ibv_send_wr_ud { ah, remote_qpn: qpn(b), remote_qkey: QKEY } };
    assert_eq!(send(a, &mut bad), 0);
    let w = poll_one(&fx);
    assert_eq!((w.wr_id, w.status), (3, 2), "LOC_QP_OP_ERR: {w:?}");
    // SAFETY: AHs and QPs of this library, destroyed once.
    unsafe {
        assert_eq!(ibv_destroy_ah(reply), 0);
        assert_eq!(ibv_destroy_ah(ah), 0);
        assert_eq!(ibv_destroy_ah(null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_qp(a.as_ptr()), 0);
        assert_eq!(ibv_destroy_qp(b.as_ptr()), 0);
    }
}

#[test]
fn ibv_wr_set_ud_addr_addresses_a_qp_ex_send() {
    let fx = fixture();
    let b0 = ud_attr(&fx);
    let mut x = ibv_qp_init_attr_ex {
        qp_context: b0.qp_context,
        send_cq: fx.cq,
        recv_cq: fx.cq,
        srq: null_mut(),
        cap: b0.cap,
        qp_type: IBV_QPT_UD,
        sq_sig_all: 0,
        comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        pd: fx.pd,
        xrcd: null_mut(),
        create_flags: 0,
        max_tso_header: 0,
        rwq_ind_tbl: null_mut(),
        rx_hash_conf: [0; 3],
        source_qpn: 0,
        send_ops_flags: IBV_QP_EX_WITH_SEND,
    };
    // SAFETY: the fixture's context and attributes.
    let a = NonNull::new(unsafe { create_qp_ex(fx.ctx, &mut x) }).expect("UD qp_ex");
    let mut ba = ud_attr(&fx);
    // SAFETY: as above.
    let b = NonNull::new(unsafe { ibv_create_qp(fx.pd, &mut ba) }).expect("UD QP");
    ready(a);
    ready(b);
    let ah = ah(&fx);
    let mut r = sge(&fx, 20_000, 40 + 16);
    assert_eq!(recv(b, 4, &mut r), 0);
    fx.buf.write(100, b"via qp_ex").unwrap();
    let q = qpx(a);
    let set_ud = q.wr_set_ud_addr.expect("wr_set_ud_addr on a UD qp_ex");
    // SAFETY: the QP's own functions; the buffers outlive the calls.
    unsafe {
        let xp: *mut ibv_qp_ex = q;
        (q.wr_start.unwrap())(xp);
        (*xp).wr_id = 11;
        (*xp).wr_flags = IBV_SEND_SIGNALED;
        (q.wr_send.unwrap())(xp);
        set_ud(xp, ah, qpn(b), QKEY);
        (q.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr() + 100, 9);
        assert_eq!((q.wr_complete.unwrap())(xp), 0);
    }
    let mut wcs = [poll_one(&fx), poll_one(&fx)];
    wcs.sort_by_key(|w| w.opcode);
    assert_eq!((wcs[0].status, wcs[0].wr_id), (0, 11));
    assert_eq!((wcs[1].status, wcs[1].byte_len, wcs[1].src_qp), (0, 49, qpn(a)));
    assert_eq!(read(&fx, 20_040, 9), b"via qp_ex");
    // SAFETY: destroyed once.
    unsafe {
        assert_eq!(ibv_destroy_ah(ah), 0);
        assert_eq!(ibv_destroy_qp(a.as_ptr()), 0);
        assert_eq!(ibv_destroy_qp(b.as_ptr()), 0);
    }
}

/// Issue 21 §3: an AH takes a flow label of 2^20 or more (no layer of the real stack refuses it)
/// and the datagram carries its low 20 bits, the traffic class untouched; the receiver's GRH area
/// shows both (IPv6 header word 0: version, traffic class, flow label).
#[test]
fn an_ah_keeps_the_low_20_bits_of_any_flow_label() {
    let fx = fixture();
    let (mut aa, mut ba) = (ud_attr(&fx), ud_attr(&fx));
    // SAFETY: a PD and CQs of this library.
    let (a, b) = unsafe { (ibv_create_qp(fx.pd, &mut aa), ibv_create_qp(fx.pd, &mut ba)) };
    let (a, b) = (NonNull::new(a).expect("UD QP a"), NonNull::new(b).expect("UD QP b"));
    ready(a);
    ready(b);
    let grh = ibv_global_route {
        dgid: ibv_gid { raw: fx.gid },
        hop_limit: 64,
        traffic_class: 0x20,
        flow_label: 0xfff1_2345,
        ..Default::default()
    };
    let mut attr = ibv_ah_attr { grh, is_global: 1, port_num: 1, ..Default::default() };
    // SAFETY: a PD of this library and the attributes.
    let ah = unsafe { ibv_create_ah(fx.pd, &mut attr) };
    assert!(!ah.is_null(), "ibv_create_ah: errno {}", errno());
    let mut r = sge(&fx, 20_000, 40 + 64);
    assert_eq!(recv(b, 1, &mut r), 0);
    let mut s = [sge(&fx, 0, 8)];
    let mut wr = ud_send(2, &mut s, ah, qpn(b), None);
    assert_eq!(send(a, &mut wr), 0);
    let wcs = [poll_one(&fx), poll_one(&fx)];
    assert!(wcs.iter().all(|w| w.status == 0), "{wcs:?}");
    let word0 = u32::from_be_bytes(read(&fx, 20_000, 4).try_into().unwrap());
    assert_eq!((word0 >> 28, (word0 >> 20) & 0xff, word0 & 0xf_ffff), (6, 0x20, 0x1_2345));
    // SAFETY: the AH and QPs of this library, destroyed once.
    unsafe {
        assert_eq!(ibv_destroy_ah(ah), 0);
        assert_eq!(ibv_destroy_qp(a.as_ptr()), 0);
        assert_eq!(ibv_destroy_qp(b.as_ptr()), 0);
    }
}
