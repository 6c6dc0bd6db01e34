//! Async events through `ibv_get_async_event`: a QP event names its QP and none names a
//! destroyed one, a reader blocked while a CQ overflows, and no event for a CQ destroyed before
//! its events were taken. Every wait is bounded. (From the breaker rounds on the library.)

use crate::fx::*;
use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use pvrdma_abi::event::EqeType;
use std::ptr::null_mut;
use std::time::Duration;

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
