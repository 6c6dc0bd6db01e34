//! Objects through the C entry points: a busy object refuses its destroy and stays usable,
//! objects of two contexts on one device do not mix (their QPs still connect), and closing a
//! context with objects open leaves the other contexts working. (From the breaker rounds on the
//! library.)

use crate::fx::*;
use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;

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
