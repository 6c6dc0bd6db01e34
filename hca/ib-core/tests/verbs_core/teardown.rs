//! Teardown and event races in the verbs core, on the scripted provider: objects dropped
//! while events for them are in flight, fatal errors during ack waits, upcalls that destroy or
//! create objects, over-acking, and the device list while only user contexts remain.

use crate::scripted::{open, scq, script};
use ib_core::provider::CqError;
use ib_core::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(5);

fn cap() -> QpCap {
    QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
}

fn qp_on(pd: &Pd, cq: &Cq) -> Qp {
    let attr = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap: cap(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 7,
        srq: None,
    };
    pd.create_qp(&attr).unwrap()
}

/// A CQ the consumer dropped while a QP still completes into it lives on in the core until the
/// QP goes, but a CQ error reported for it meanwhile must not reach the consumer: it no longer
/// has the CQ.
#[test]
fn cq_err_for_a_dropped_cq_still_held_by_a_qp_is_not_queued() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq_with(8, None, 0xdead).unwrap();
    let stale = scq(&cq).0.clone();
    let qp = qp_on(&pd, &cq);
    drop(cq); // the consumer no longer has the CQ
    let accepted = stale.events.error(CqError::Overrun);
    let got = dev.get_async_event(Duration::from_millis(300));
    let seen = got.as_ref().ok().map(|e| (e.event_type, e.cq().map(|c| c.cq_context())));
    if let Ok(e) = got {
        e.ack();
    }
    drop(qp);
    assert!(!accepted && seen.is_none(), "accepted={accepted}, event for the dropped CQ: {seen:?}");
}

#[test]
fn cq_err_for_a_dropped_cq_still_held_by_a_qp_reaches_no_handler() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq_with(8, None, 0xdead).unwrap();
    let stale = scq(&cq).0.clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    {
        let seen = seen.clone();
        dev.set_async_event_handler(move |e| {
            seen.lock().unwrap().push((e.event_type, e.cq().map(|c| c.cq_context())));
        });
    }
    let qp = qp_on(&pd, &cq);
    drop(cq);
    stale.events.error(CqError::Overrun);
    drop(qp);
    let seen = seen.lock().unwrap().clone();
    assert!(seen.is_empty(), "handler got an event for a CQ the consumer dropped: {seen:?}");
}

/// The device goes fatal while `destroy` waits for an ack that will never come: on a fatal
/// device nothing is waited for.
#[test]
fn fatal_during_cq_destroy_ack_wait_cuts_the_wait_short() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    scq(&cq).publish(false);
    let _ev = ch.get_cq_event(WAIT).unwrap(); // taken, never acked (consumer loop died)
    let d2 = dev.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        script(&d2).go_fatal();
    });
    let t0 = Instant::now();
    let r = cq.destroy(Some(Duration::from_secs(3))).map_err(|(_, e)| e);
    let took = t0.elapsed();
    t.join().unwrap();
    assert!(took < Duration::from_secs(1), "destroy waited {took:?} after the device went fatal: {r:?}");
}

#[test]
fn fatal_during_qp_destroy_ack_wait_cuts_the_wait_short() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let qp = qp_on(&pd, &cq);
    script(&dev).qp_events(qp.qpn()).event(AsyncEventType::QpFatal);
    let _ev = dev.get_async_event(WAIT).unwrap();
    let d2 = dev.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        script(&d2).go_fatal();
    });
    let t0 = Instant::now();
    let r = qp.destroy(Some(Duration::from_secs(3))).map_err(|(_, e)| e);
    let took = t0.elapsed();
    t.join().unwrap();
    assert!(took < Duration::from_secs(1), "QP destroy waited {took:?} after fatal: {r:?}");
}

/// Many threads blocked on one channel; N events: exactly N get one each, the rest time out.
#[test]
fn many_waiters_get_one_event_each() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cqs: Vec<Cq> = (0..4).map(|i| dev.create_cq_with(8, Some(&ch), i).unwrap()).collect();
    let got = Arc::new(AtomicUsize::new(0));
    let ts: Vec<_> = (0..8)
        .map(|_| {
            let ch = ch.clone();
            let got = got.clone();
            std::thread::spawn(move || {
                if let Ok(c) = ch.get_cq_event(Duration::from_millis(800)) {
                    got.fetch_add(1, Ordering::SeqCst);
                    c.ack_events(1);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    for cq in &cqs {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        assert!(scq(cq).publish(false));
    }
    for t in ts {
        t.join().unwrap();
    }
    assert_eq!(got.load(Ordering::SeqCst), 4);
    assert_eq!(ch.pending(), 0);
}

/// After fatal the channel fd is readable and stays so once the remaining events are taken; a
/// purge of events after fatal does not clear it.
#[test]
fn channel_fd_stays_readable_across_fatal_and_purge() {
    fn readable(fd: i32) -> bool {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
    }
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let a = dev.create_cq(8, Some(&ch)).unwrap();
    let b = dev.create_cq(8, Some(&ch)).unwrap();
    for cq in [&a, &b] {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        scq(cq).publish(false);
    }
    script(&dev).go_fatal();
    assert!(readable(ch.fd()));
    drop(a); // purges its event
    assert!(readable(ch.fd()), "fatal count eaten by purge");
    let e = ch.get_cq_event(Duration::ZERO).unwrap();
    e.ack_events(1);
    assert!(readable(ch.fd()), "after the last event, fatal must keep the fd readable");
    assert_eq!(ch.get_cq_event(Duration::ZERO), Err(Error::DeviceFatal));
    drop(b);
    assert!(readable(ch.fd()));
}

/// An upcall's view of a CQ must not create a QP on it while the owner destroys it: either the
/// create fails or the destroy does, never both succeed.
#[test]
fn upcall_view_cannot_create_a_qp_on_a_cq_being_destroyed() {
    let dev = open();
    let pd = Arc::new(dev.alloc_pd().unwrap());
    let cq = dev.create_cq(8, None).unwrap();
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let started_tx = Mutex::new(started_tx);
    let pd2 = pd.clone();
    cq.set_upcall(UpcallPolicy::SingleInstance, move |view, _| {
        let _ = started_tx.lock().unwrap().send(());
        let _ = go_rx.lock().unwrap().recv_timeout(WAIT);
        let attr = QpInitAttr {
            send_cq: view,
            recv_cq: view,
            cap: cap(),
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 1,
            srq: None,
        };
        let r = pd2.create_qp(&attr);
        let _ = tx.send(r);
    })
    .unwrap();
    scq(&cq).publish(false);
    let stale = scq(&cq).0.clone();
    started_rx.recv_timeout(WAIT).unwrap();
    // destroy in a thread; it passes the Busy check, then waits for the running upcall
    let h = std::thread::spawn(move || cq.destroy(None).map_err(|(_, e)| e));
    std::thread::sleep(Duration::from_millis(100));
    go_tx.send(()).unwrap();
    let made = rx.recv_timeout(WAIT).unwrap();
    let destroyed = h.join().unwrap();
    let dev_destroyed = stale.destroyed.load(Ordering::SeqCst);
    let qpn = made.as_ref().map(|q| q.qpn()).ok();
    // The QP lives on; the consumer was told its CQ is destroyed.
    if let Ok(qp) = &made {
        qp.modify_to_init(1, 0).unwrap();
    }
    drop(made);
    assert!(
        !(qpn.is_some() && destroyed.is_ok()),
        "QP {qpn:?} created on a CQ whose destroy returned {destroyed:?} (device CQ destroyed while the QP lived: {dev_destroyed})"
    );
}

/// A QP made from an upcall's view of a CQ another upcall has destroyed is refused.
#[test]
fn upcall_view_cannot_create_a_qp_on_a_destroyed_cq() {
    let dev = open();
    let pd = Arc::new(dev.alloc_pd().unwrap());
    let a = dev.create_cq(8, None).unwrap();
    let a_dev = scq(&a).0.clone();
    let slot = Arc::new(Mutex::new(Some(a)));
    let (tx, rx) = mpsc::channel();
    // A's upcall is blocked; B's upcall destroys A (does not wait for A's upcall); then A's upcall
    // creates a QP on its view of the (destroyed) CQ.
    let (rel_tx, rel_rx) = mpsc::channel::<()>();
    let rel_rx = Mutex::new(rel_rx);
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let started_tx = Mutex::new(started_tx);
    {
        let pd = pd.clone();
        let tx = tx.clone();
        slot.lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .set_upcall(UpcallPolicy::SingleInstance, move |view, _| {
                let _ = started_tx.lock().unwrap().send(());
                let _ = rel_rx.lock().unwrap().recv_timeout(WAIT);
                let attr = QpInitAttr {
                    send_cq: view,
                    recv_cq: view,
                    cap: cap(),
                    qp_type: QpType::Rc,
                    sq_sig_all: false,
                    qp_context: 1,
                    srq: None,
                };
                let r = pd.create_qp(&attr).map(|q| {
                    let n = q.qpn();
                    std::mem::forget(q);
                    n
                });
                let _ = tx.send(("qp on A", format!("{r:?}")));
            })
            .unwrap();
    }
    let b = dev.create_cq(8, None).unwrap();
    {
        let slot = slot.clone();
        let tx = tx.clone();
        b.set_upcall(UpcallPolicy::SingleInstance, move |_, _| {
            let a = slot.lock().unwrap().take().unwrap();
            let r = a.destroy(None).map_err(|(_, e)| e);
            let _ = tx.send(("destroy A", format!("{r:?}")));
        })
        .unwrap();
    }
    a_dev.publish(false);
    started_rx.recv_timeout(WAIT).unwrap();
    scq(&b).publish(false);
    let first = rx.recv_timeout(WAIT).unwrap();
    rel_tx.send(()).unwrap();
    let second = rx.recv_timeout(WAIT).unwrap();
    assert!(!second.1.starts_with("Ok"), "{first:?} then {second:?}");
}

/// QP modify refuses unknown mask bits, out-of-range values, attributes the transition does not
/// take, and a `CUR_STATE` the QP cannot be in.
#[test]
fn modify_qp_refuses_unknown_masks_and_bad_values() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let qp = qp_on(&pd, &cq);
    let init = QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() };
    let m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    assert!(qp.modify_qp(&init, m | QpAttrMask(1 << 30)).is_err(), "unknown mask bit");
    assert!(qp.modify_qp(&QpAttr { pkey_index: 1, ..init }, m).is_err(), "pkey index 1 of 1");
    assert!(qp.modify_qp(&QpAttr { port_num: 0, ..init }, m).is_err());
    // (Any qp_access_flags go to the device, as Linux passes them: issue 21 §3.)
    // cur_qp_state lie: RESET QP says it is RTS and asks RTS->RTS
    let lie = QpAttr { qp_state: QpState::Rts, cur_qp_state: QpState::Rts, ..Default::default() };
    assert_eq!(qp.modify_qp(&lie, QpAttrMask::STATE | QpAttrMask::CUR_STATE), Err(Error::InvalidState));
    let mr = pd.alloc_mr(64, 0).unwrap();
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    let send = SendWr { wr_id: 1, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
    assert!(qp.post_send(&send).is_err(), "a RESET QP takes no sends");
    // No STATE bit at all on a RESET QP with some attributes
    let r = qp.modify_qp(&QpAttr { timeout: 3, ..Default::default() }, QpAttrMask::TIMEOUT);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert_eq!(qp.modify_qp(&init, m), Ok(()));
}

/// An async handler may drop the last Device handle and destroy the event's CQ while it runs:
/// the destroy is refused as a deadlock, nothing hangs.
#[test]
fn async_handler_may_drop_the_device_and_its_objects() {
    let dev = open();
    let cq = dev.create_cq(8, None).unwrap();
    let stale = scq(&cq).0.clone();
    let slot: Arc<Mutex<Option<(Device, Cq)>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    {
        let slot = slot.clone();
        dev.set_async_event_handler(move |e| {
            let taken = slot.lock().unwrap().take();
            if let Some((d, c)) = taken {
                let r = c.destroy(None).map_err(|(_, e)| e);
                drop(d);
                let _ = tx.send(format!("{:?} {r:?}", e.event_type));
            }
        });
    }
    *slot.lock().unwrap() = Some((dev.clone(), cq));
    drop(dev);
    let t = std::thread::spawn(move || stale.events.error(CqError::Overrun));
    let got = rx.recv_timeout(WAIT);
    let accepted = t.join().unwrap();
    let got = got.expect("the handler ran");
    assert!(got.starts_with("CqErr Err(WouldDeadlock"), "{got}");
    assert!(accepted);
}

/// Acking more than was taken, or through another CQ, neither pre-pays later events nor breaks
/// destroy's count.
#[test]
fn over_acking_neither_pre_pays_nor_breaks_destroy() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let a = dev.create_cq(8, Some(&ch)).unwrap();
    let b = dev.create_cq(8, Some(&ch)).unwrap();
    a.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    scq(&a).publish(false);
    let ev = ch.get_cq_event(WAIT).unwrap();
    b.ack_events(u32::MAX);
    b.cq_ref().ack_events(u32::MAX);
    let (a, e) = a.destroy(None).unwrap_err();
    assert_eq!(e, Error::EventsNotAcked(1));
    ev.ack_events(u32::MAX);
    ev.ack_events(u32::MAX);
    assert_eq!(a.unacked_events(), 0);
    a.destroy(None).map_err(|(_, e)| e).unwrap();
    // a second event taken later for b after over-ack must still count
    b.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    scq(&b).publish(false);
    let _ev = ch.get_cq_event(WAIT).unwrap();
    assert_eq!(b.unacked_events(), 1, "an ack before the event must not pre-pay it");
    let (b, e) = b.destroy(None).unwrap_err();
    assert_eq!(e, Error::EventsNotAcked(1));
    b.ack_events(1);
    b.destroy(None).map_err(|(_, e)| e).unwrap();
}

/// A CQ dropped inside its own upcall is destroyed once the upcall returns; no event for it is
/// left on its channel.
#[test]
fn cq_dropped_inside_its_own_upcall_is_destroyed_after_it() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    let stale = scq(&cq).0.clone();
    let slot = Arc::new(Mutex::new(None::<Cq>));
    let (tx, rx) = mpsc::channel();
    {
        let slot = slot.clone();
        cq.set_upcall(UpcallPolicy::ManyInstance, move |view, _| {
            let c = slot.lock().unwrap().take();
            let _ = tx.send(c.is_some());
            drop(c);
            // poll on view after the owner is gone
            let _ = view.poll(&mut [Wc::default(); 2]);
            let _ = view.req_notify(NotifyFlags::NEXT_COMPLETION);
        })
        .unwrap();
    }
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    *slot.lock().unwrap() = Some(cq);
    stale.publish(false);
    assert_eq!(rx.recv_timeout(WAIT), Ok(true));
    std::thread::sleep(Duration::from_millis(100));
    // after the upcall returned, the CQ should be gone on the device and the channel empty
    assert!(stale.destroyed.load(Ordering::SeqCst), "CQ never destroyed on the device");
    assert_eq!(ch.pending(), 0, "event for a CQ the consumer dropped");
    assert!(ch.destroy().is_ok(), "channel still busy after its CQ was dropped");
}

/// After an overrun, `req_notify` is refused rather than arming a CQ that can never complete
/// (a consumer would sleep its whole timeout).
#[test]
fn req_notify_after_overrun_is_refused() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    scq(&cq).0.events.error(CqError::Overrun);
    dev.get_async_event(WAIT).unwrap().ack();
    let r = cq.req_notify(NotifyFlags::NEXT_COMPLETION);
    let armed = cq.armed();
    let got = ch.get_cq_event(Duration::from_millis(200)).map(|c| c.handle());
    assert_eq!(r, Err(Error::CqOverrun), "armed {armed:?}, then get_cq_event {got:?}");
}

/// A running upcall that never returns holds a CQ's drop for at most `RETIRE_WAIT`.
#[test]
fn drop_waits_a_bounded_time_for_a_stuck_upcall() {
    let dev = open();
    let cq = dev.create_cq(8, None).unwrap();
    let (tx, rx) = mpsc::channel();
    cq.set_upcall(UpcallPolicy::SingleInstance, move |_, _| {
        let _ = tx.send(());
        std::thread::sleep(Duration::from_secs(9)); // a consumer bug: stuck
    })
    .unwrap();
    scq(&cq).publish(false);
    rx.recv_timeout(WAIT).unwrap();
    let t = Instant::now();
    drop(cq);
    let took = t.elapsed();
    assert!(took <= RETIRE_WAIT + Duration::from_millis(500), "drop blocked {took:?} on a stuck upcall");
}

/// Objects mixed across contexts of the same device: a user context's channel with a kernel CQ,
/// a kernel PD with a user CQ, and a CQ of context A in QP of context B's PD.
#[test]
fn cross_context_mixing_is_refused() {
    let dev = open();
    let u1 = dev.alloc_ucontext().unwrap();
    let u2 = dev.alloc_ucontext().unwrap();
    let ch_u1 = u1.create_comp_channel().unwrap();
    assert!(u2.create_cq(8, Some(&ch_u1)).is_err());
    assert!(dev.create_cq(8, Some(&ch_u1)).is_err());
    let cq1 = u1.create_cq(8, Some(&ch_u1)).unwrap();
    let cq2 = u2.create_cq(8, None).unwrap();
    let pd2 = u2.alloc_pd().unwrap();
    let kpd = dev.alloc_pd().unwrap();
    let attr = QpInitAttr {
        send_cq: &cq2,
        recv_cq: &cq1,
        cap: cap(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    assert!(pd2.create_qp(&attr).is_err());
    let attr = QpInitAttr {
        send_cq: &cq1,
        recv_cq: &cq1,
        cap: cap(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    assert!(kpd.create_qp(&attr).is_err());
    // A user context's async queue gets its own CQ's events only.
    scq(&cq1).0.events.error(CqError::Overrun);
    assert!(u2.get_async_event(Duration::from_millis(50)).is_err());
    assert!(dev.get_async_event(Duration::from_millis(50)).is_err());
    u1.get_async_event(WAIT).unwrap().ack();
}

/// A device in use only through a user context stays listed and can be opened by name.
#[test]
fn device_stays_listed_while_a_user_context_lives() {
    let dev = open();
    let name = dev.name();
    let ctx = dev.alloc_ucontext().unwrap();
    let _cq = ctx.create_cq(8, None).unwrap();
    drop(dev);
    let listed = ib_core::device_list().iter().any(|d| d.name == name);
    let opened = ib_core::open_device(&name).map(|d| d.name());
    assert!(listed && opened.is_ok(), "device {name} still used by {ctx:?}: listed {listed}, open_device {opened:?}");
}
