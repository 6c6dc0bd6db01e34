//! The verbs semantics the core and the pvrdma provider keep together, each kind with the input
//! that once got through: events for objects the consumer does not have, objects of one context
//! used with another's, the dispatcher state a consumer reads being the one that acts, IBTA's
//! posting rules against the device's own QP state, and every handle the device returns checked
//! the same way.

use doorbell::ArmEncoding;
use ib_core::{Error, NotifyFlags, NotifyStatus, QpState, UpcallPolicy, Wc, WcStatus};
use ib_core::{RecvWr, SendWr, Sge, WrOpcode};
use pvrdma_abi::event::EqeType;
use pvrdma_sim::SimConfig;
use std::sync::{mpsc, Arc, Mutex};
use tests::events::{cqe, drain, wait_for};
use tests::fixture::*;
use tests::rewrite::Rewrite;

/// Kind 1: an async event whose handle names no live object of the consumer's — never created,
/// destroyed (before or after it was queued), or of an unknown type — is counted and dropped.
#[test]
fn events_for_objects_the_consumer_does_not_have_are_dropped_and_counted() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device().clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    dev.set_async_event_handler(move |e| sink.lock().unwrap().push(ev(e)));
    let dropped = |n: u64| {
        wait_for(WAIT, "the driver to drop the event", || stats(&dev).dropped_async_events >= n);
    };
    let base = stats(&dev).dropped_async_events;
    d.inject_async_event(EqeType::CqErr, 0xabcdef);
    dropped(base + 1);
    d.inject_async_event(EqeType::QpFatal, 0xabcdef);
    dropped(base + 2);
    d.inject_async_event(EqeType::PortActive, 0);
    dropped(base + 3);
    d.inject_async_event(EqeType::SrqErr, 1);
    dropped(base + 4);
    // A CQ destroyed before its event is dequeued.
    let cq = dev.create_cq(8, None).unwrap();
    let h = cq.handle();
    drop(cq);
    d.inject_async_event(EqeType::CqErr, h);
    dropped(base + 5);
    std::thread::sleep(SETTLE);
    assert!(seen.lock().unwrap().is_empty(), "handed to the consumer: {:?}", seen.lock().unwrap());
    // A live CQ's event reaches it; one queued (no handler) and not read when the CQ is destroyed
    // is removed with it.
    dev.clear_async_event_handler();
    let cq = dev.create_cq(8, None).unwrap();
    d.inject_async_event(EqeType::CqErr, cq.handle());
    wait_for(WAIT, "the event to be queued", || dev.async_event_counts().0 >= 1);
    cq.destroy(None).map_err(|(_, e)| e).unwrap();
    assert_eq!(dev.get_async_event(SETTLE).map(|e| e.event_type), Err(Error::Timeout));
    assert_eq!(dev.async_event_counts(), (1, 1), "one delivered, one removed unread");
}

/// Kind 2: a channel belongs to one context; mixing is an error, and every event names its CQ
/// unambiguously (devices reuse handles: two devices' first CQs share one).
#[test]
fn objects_of_one_context_cannot_be_used_with_anothers() {
    let (dev1, _s1) = hca::open_sim(SimConfig::default()).unwrap();
    let (dev2, s2) = hca::open_sim(SimConfig::default()).unwrap();
    let ch1 = dev1.create_comp_channel().unwrap();
    assert!(matches!(dev2.create_cq(16, Some(&ch1)), Err(Error::InvalidArgument(_))));
    let uctx = dev1.alloc_ucontext().unwrap();
    assert!(matches!(uctx.create_cq(16, Some(&ch1)), Err(Error::InvalidArgument(_))));
    let ch2 = dev2.create_comp_channel().unwrap();
    let a = dev1.create_cq_with(16, Some(&ch1), 0xa).unwrap();
    let b = dev2.create_cq_with(16, Some(&ch2), 0xb).unwrap();
    assert_eq!(a.handle(), b.handle(), "the two devices hand out the same handle");
    b.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    assert!(s2.device().post_cqe(b.handle(), &cqe(1), false));
    let got = ch2.get_cq_event(WAIT).unwrap();
    assert_eq!(got.cq_context(), 0xb);
    assert!(got == *b.cq_ref() && got != *a.cq_ref(), "the event names b, not a");
    got.ack_events(1);
    assert_no_event(&ch1);
}

/// Kind 3: a SINGLE_INSTANCE dispatcher that has fired reads DISABLE and acts disabled: a later
/// overflow gives it no upcall until it is enabled again.
#[test]
fn a_spent_single_instance_dispatcher_gets_no_overrun_upcall() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device().clone();
    let cq = dev.create_cq(1, None).unwrap();
    let (tx, rx) = mpsc::channel();
    cq.set_upcall(UpcallPolicy::SingleInstance, move |_, st| {
        let _ = tx.send(st);
    })
    .unwrap();
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    assert_eq!(rx.recv_timeout(WAIT), Ok(NotifyStatus::Success));
    assert_eq!(cq.upcall_policy(), Some(UpcallPolicy::Disable));
    assert!(d.post_cqe(cq.handle(), &cqe(2), false)); // overflows: CQ_ERR
    wait_for(WAIT, "CQ_ERR", || stats(&dev).async_events >= 1);
    assert_eq!(rx.recv_timeout(SETTLE), Err(mpsc::RecvTimeoutError::Timeout), "the spent dispatcher got an upcall");
    cq.modify_upcall(UpcallPolicy::ManyInstance).unwrap();
    assert_eq!(rx.recv_timeout(WAIT), Ok(NotifyStatus::Overrun), "delivered once enabled again");
    assert_eq!(drain(&cq), vec![1]);
    let mut wc = [Wc::default(); 2];
    assert_eq!(cq.poll(&mut wc), Err(Error::CqOverrun));
}

/// Kind 4: IBTA's posting rules against the device's state. The device moves a QP to ERR on its
/// own (its CQ overflowed): `state()` asks the device and reads ERR; posting to it is accepted
/// and completes with WR_FLUSH_ERR carrying each wr_id.
#[test]
fn a_qp_the_device_moved_to_err_reads_err_and_flushes_what_is_posted() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(1, None).unwrap();
    let rcq = dev.create_cq(32, None).unwrap();
    let p = pair(&dev, &pd, (&scq, &rcq), (&scq, &rcq));
    for i in 0..2 {
        p.recv_b(i, 0, 64);
        p.send_a(i, 0, b"o", WrOpcode::Send, false);
    }
    poll_n(&rcq, 2);
    wait_for(WAIT, "the overflow's CQ_ERR", || stats(&dev).async_events >= 1);
    assert_eq!(p.a.state(), Ok(QpState::Err), "the device moved the QP to ERR: QUERY_QP says so");
    let sge = [Sge { addr: p.mr_a.addr(), length: 4, lkey: p.mr_a.lkey() }];
    p.a.post_recv(&RecvWr { wr_id: 41, sg_list: &sge }).unwrap();
    let wr = SendWr { wr_id: 42, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
    p.a.post_send(&wr).unwrap();
    let flushed = poll_n(&rcq, 1);
    assert_eq!((flushed[0].wr_id, flushed[0].status), (41, WcStatus::WrFlushErr));
    // The send CQ is in error (overrun): its flush is dropped and counted by the model.
    let _ = drain(&scq);
}

/// Kind 5: every handle the device returns for an object doorbells name is checked the same way.
/// A device answers CREATE_CQ (or CREATE_QP) with the handle of a live object plus bit 24 — a
/// doorbell for it would ring the live one. The driver refuses the answer (no driver object for
/// it, nothing armed or rung), asks the device to destroy what it named, and the live object is
/// untouched.
#[test]
fn a_cq_or_qp_handle_wider_than_24_bits_is_refused() {
    use pvrdma_abi::cmd::opcode::{CREATE_CQ, CREATE_QP};
    let declared = hca::ProbeOptions { arm_encoding: Some(ArmEncoding::Ibta), ..Default::default() };
    for (opcode, what) in [(CREATE_CQ, "CQ"), (CREATE_QP, "QP")] {
        // Once set, the answer's handle becomes `alias | 1 << 24`.
        let alias = Arc::new(Mutex::new(None::<u32>));
        let set = alias.clone();
        let plat = Arc::new(Rewrite::new(opcode, 16, move |h| set.lock().unwrap().map_or(h, |a| a | 1 << 24)));
        let sim = plat.sim.clone();
        let dev = hca::probe(plat, declared.clone()).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let live = dev.create_cq(8, None).unwrap();
        let qp = rc_qp(&pd, &live, &live);
        let live_handle = if opcode == CREATE_CQ { live.handle() } else { qp.qpn() };
        *alias.lock().unwrap() = Some(live_handle);
        let d = sim.device();
        let failed = d.stats().failed_commands;
        let err = if opcode == CREATE_CQ {
            dev.create_cq(8, None).map(|_| ()).unwrap_err()
        } else {
            let attr = ib_core::QpInitAttr {
                send_cq: &live,
                recv_cq: &live,
                cap: cap(),
                qp_type: ib_core::QpType::Rc,
                sq_sig_all: false,
                qp_context: 0,
                srq: None,
            };
            pd.create_qp(&attr).map(|_| ()).unwrap_err()
        };
        assert!(matches!(err, Error::BadResponse(_)), "{what}: {err:?}");
        assert_eq!(d.stats().failed_commands, failed + 1, "{what}: DESTROY of the wide handle, refused by the device");
        assert_eq!(d.cq_status(live.handle()).unwrap().arm, pvrdma_sim::ArmState::Disarmed, "{what}: nothing armed");
        assert!(d.qp_state(qp.qpn()).is_some() && !dev.is_fatal(), "{what}: the live objects are untouched");
        live.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        assert_eq!(d.cq_status(live.handle()).unwrap().arm, pvrdma_sim::ArmState::Next);
    }
}

/// An async handler runs the consumer's code: destroying a QP from inside a QP event's handler
/// must not wait for the driver's own table lock (it once held the QP table across the handler).
#[test]
fn a_qp_destroyed_from_inside_a_qp_events_handler_does_not_deadlock() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let (x, y) = (rc_qp(&pd, &cq, &cq), rc_qp(&pd, &cq, &cq));
    let victim = Arc::new(Mutex::new(Some(y)));
    let (tx, rx) = mpsc::channel();
    let slot = victim.clone();
    let xqpn = x.qpn();
    dev.set_async_event_handler(move |e| {
        if e.qp().map(|q| q.qp_num()) == Some(xqpn) {
            drop(slot.lock().unwrap().take());
            let _ = tx.send(());
        }
    });
    sim.device().inject_async_event(EqeType::QpFatal, xqpn);
    if rx.recv_timeout(WAIT).is_err() {
        // A deadlocked driver thread would hang this test's teardown too: fail fast instead.
        eprintln!("the async handler deadlocked destroying a QP; aborting");
        std::process::abort();
    }
    assert!(victim.lock().unwrap().is_none());
    drop(x);
}
