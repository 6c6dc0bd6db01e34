//! Async events and completion events on the scripted provider: the per-context queue read and
//! acknowledged, destroy waiting for acknowledgements, no event ever reaching a consumer for an
//! object it no longer has, the dispatcher's disabled and spent states, and the deterministic
//! arm/poll race.

use crate::scripted::{open, scq, script};
use ib_core::provider::CqError;
use ib_core::{AsyncEventType, Error, NotifyFlags, NotifyKind, NotifyStatus, QpCap, QpInitAttr};
use ib_core::{QpType, UpcallPolicy};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn async_events_go_to_the_owning_context_and_destroy_waits_for_their_ack() {
    let dev = open();
    let uctx = dev.alloc_ucontext().unwrap();
    let cq = uctx.create_cq_with(8, None, 0xc0ffee).unwrap();
    assert!(scq(&cq).0.events.error(CqError::Overrun));
    assert_eq!(dev.get_async_event(Duration::ZERO).map(|e| e.event_type), Err(Error::Timeout), "not the kernel's");
    let ev = uctx.get_async_event(WAIT).unwrap();
    assert_eq!(ev.event_type, AsyncEventType::CqErr);
    assert_eq!(ev.cq().map(|c| (c.handle(), c.cq_context())), Some((cq.handle(), 0xc0ffee)));
    assert_eq!(cq.unacked_events(), 1);
    let cq = match cq.destroy(None) {
        Err((cq, Error::EventsNotAcked(1))) => cq,
        other => panic!("destroy with an unacknowledged async event: {other:?}"),
    };
    ev.ack();
    cq.destroy(None).map_err(|(_, e)| e).unwrap();
    // Port events reach every context.
    script(&dev).port_event(1, AsyncEventType::PortActive);
    for ctx in [&*dev, &uctx] {
        let ev = ctx.get_async_event(WAIT).unwrap();
        assert_eq!((ev.event_type, ev.port()), (AsyncEventType::PortActive, Some(1)));
        ev.ack();
    }
}

#[test]
fn no_event_reaches_a_consumer_for_a_cq_or_qp_it_no_longer_has() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    let stale_cq = scq(&cq).0.clone();
    // Queued, never taken: destroying the CQ removes them.
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    assert!(stale_cq.publish(false));
    assert!(stale_cq.events.error(CqError::Overrun));
    assert_eq!(ch.pending(), 1);
    cq.destroy(None).map_err(|(_, e)| e).unwrap();
    assert_eq!(ch.pending(), 0, "its completion event left the channel");
    assert!(ch.try_get_cq_event().is_none());
    assert_eq!(dev.get_async_event(Duration::ZERO).map(|e| e.event_type), Err(Error::Timeout));
    assert_eq!(dev.async_event_counts(), (1, 1), "one delivered, one removed unread");
    // Reported after the destroy returned: the core no longer has the CQ, says so, delivers nothing.
    assert!(stale_cq.events.completion().is_none());
    assert!(!stale_cq.events.error(CqError::Overrun));
    assert!(stale_cq.events.recover_dropped().is_none());
    assert!(stale_cq.destroyed.load(Ordering::SeqCst));
    // The same for a QP.
    let pd = dev.alloc_pd().unwrap();
    let cq2 = dev.create_cq(8, None).unwrap();
    let cap = QpCap { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: &cq2,
        recv_cq: &cq2,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 5,
        srq: None,
    };
    let qp = pd.create_qp(&attr).unwrap();
    let stale_qp = script(&dev).qp_events(qp.qpn());
    assert!(stale_qp.event(AsyncEventType::QpFatal));
    let ev = dev.get_async_event(WAIT).unwrap();
    assert_eq!(ev.qp().map(|q| (q.qp_num(), q.qp_context())), Some((qp.qpn(), 5)));
    ev.ack();
    assert!(stale_qp.event(AsyncEventType::QpReqErr));
    drop(qp);
    assert!(!stale_qp.event(AsyncEventType::QpFatal));
    assert_eq!(dev.get_async_event(Duration::ZERO).map(|e| e.event_type), Err(Error::Timeout));
}

#[test]
fn a_disabled_or_spent_dispatcher_gets_no_error_until_enabled_again() {
    let dev = open();
    let cq = dev.create_cq(8, None).unwrap();
    let (tx, rx) = mpsc::channel();
    cq.set_upcall(UpcallPolicy::SingleInstance, move |_, st| {
        let _ = tx.send(st);
    })
    .unwrap();
    assert!(scq(&cq).publish(false));
    assert_eq!(rx.recv_timeout(WAIT), Ok(NotifyStatus::Success));
    assert_eq!(cq.upcall_policy(), Some(UpcallPolicy::Disable), "SINGLE_INSTANCE is spent");
    assert!(scq(&cq).0.events.error(CqError::Overrun));
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(200)),
        Err(mpsc::RecvTimeoutError::Timeout),
        "a spent dispatcher got the overrun"
    );
    cq.modify_upcall(UpcallPolicy::SingleInstance).unwrap();
    assert_eq!(rx.recv_timeout(WAIT), Ok(NotifyStatus::Overrun), "delivered once enabled again");
    assert_eq!(cq.upcall_policy(), Some(UpcallPolicy::Disable), "and that spent it");
    let ev = dev.get_async_event(WAIT).unwrap();
    ev.ack();
}

#[test]
fn a_cqe_published_between_the_last_poll_and_the_arm_is_reported_not_lost() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    let mut wc = [ib_core::Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc), Ok(0));
    // The device publishes now: not armed, so no event (IBTA: CQEs before an arm raise none).
    assert!(!scq(&cq).publish(false));
    let missed = cq.req_notify(NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS);
    assert_eq!(missed, Ok(true), "the re-poll after arming found it");
    let req = cq.notify(NotifyKind::Next, true).unwrap();
    assert_eq!(req.status(), Some(NotifyStatus::Success), "a request's missed-events check too");
    assert_eq!(cq.poll(&mut wc), Ok(1));
    assert_eq!(scq(&cq).arms(), vec![ib_core::ArmKind::Next], "one hardware arm for both clients");
    assert!(scq(&cq).publish(false), "the arm is still set for the next CQE");
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    cq.ack_events(1);
}

#[test]
fn several_requests_complete_on_one_event_and_error_only_does_not_arm() {
    let dev = open();
    let cq = dev.create_cq(8, None).unwrap();
    let reqs: Vec<_> = (0..3).map(|_| cq.notify(NotifyKind::Next, false).unwrap()).collect();
    let err = cq.notify(NotifyKind::ErrorOnly, false).unwrap();
    assert_eq!(scq(&cq).arms(), vec![ib_core::ArmKind::Next]);
    assert!(scq(&cq).publish(false));
    for r in &reqs {
        assert_eq!(r.status(), Some(NotifyStatus::Success));
    }
    assert_eq!(err.status(), None);
    assert_eq!(cq.armed(), None, "ERROR_ONLY does not re-arm");
    assert!(scq(&cq).0.events.error(CqError::Failure));
    assert_eq!(err.wait(WAIT), Ok(NotifyStatus::Failure), "failure, not overrun");
    dev.get_async_event(WAIT).unwrap().ack();
}
