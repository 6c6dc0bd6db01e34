//! Object lifetimes against events, on the whole stack: no event reaches a consumer for an object
//! it no longer has — not through a destroy racing the event rings, not through a number the
//! device handed out again (QEMU 7.2 reuses the lowest free QPN and CQ handle), not through a
//! handler that destroys or creates objects while the event thread runs it.
use ib_core::{AsyncEventType, Cq, Device, Error, NotifyFlags, QpInitAttr, QpType, Wc};
use pvrdma_abi::cmd::opcode;
use pvrdma_abi::event::EqeType;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tests::events::{cqe, wait_for};
use tests::faults::Faults;
use tests::fixture::*;
use tests::lowest_free::LowestFree;

type Seen = Arc<Mutex<Vec<(AsyncEventType, Option<u64>)>>>;
type HandlerRun = (Option<String>, bool);

fn ibta() -> hca::ProbeOptions {
    hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() }
}

fn short_timeouts() -> hca::ProbeOptions {
    hca::ProbeOptions { cmd_timeout: Duration::from_millis(300), ..Default::default() }
}

/// Creates and destroys QPs on two threads for `run`: the device never goes fatal and every
/// create succeeds, whichever numbers the device hands out.
fn qp_churn(plat: Arc<dyn hca::platform::Platform>, run: Duration) {
    let dev = hca::probe(plat, ibta()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let deadline = Instant::now() + run;
    let failure = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while Instant::now() < deadline && failure.lock().unwrap().is_none() {
                    if let Err(e) = pd.create_qp(&attr(&cq, 0)) {
                        *failure.lock().unwrap() = Some(e);
                    }
                }
            });
        }
    });
    assert_eq!(failure.into_inner().unwrap(), None);
    assert!(!dev.is_fatal());
}

fn attr(cq: &Cq, qp_context: u64) -> QpInitAttr<'_> {
    QpInitAttr { send_cq: cq, recv_cq: cq, cap: cap(), qp_type: QpType::Rc, sq_sig_all: false, qp_context, srq: None }
}

/// A QP created while another is destroyed, on a device that hands the destroyed QPN straight
/// back: the number is free in the driver's tables before the device can reuse it.
#[test]
fn qp_churn_with_lowest_free_qpns() {
    qp_churn(Arc::new(LowestFree::new()), Duration::from_secs(3));
}

/// The same churn on the model's own rotating numbers.
#[test]
fn qp_churn_with_rotating_qpns() {
    qp_churn(Arc::new(hca::platform::sim::SimPlatform::new(Default::default())), Duration::from_secs(1));
}

/// A device whose async handler is busy (a slow handler on PORT_ACTIVE) while an object fails
/// and is destroyed, and a new one takes its number: what the handler records.
fn slow_handler_dev() -> (Device, Arc<tests::intercept::Intercept<LowestFree>>, Seen) {
    let plat = Arc::new(LowestFree::new());
    let dev = hca::probe(plat.clone(), ibta()).unwrap();
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    dev.set_async_event_handler(move |e| {
        if e.event_type == AsyncEventType::PortActive {
            std::thread::sleep(Duration::from_millis(300));
            return;
        }
        let ctx = e.qp().map(|q| q.qp_context()).or_else(|| e.cq().map(|c| c.cq_context()));
        sink.lock().unwrap().push((e.event_type, ctx));
    });
    (dev, plat, seen)
}

/// QP_FATAL for a destroyed QP, still in the async ring, does not reach the new QP that got the
/// same number.
#[test]
fn a_stale_qp_event_misses_the_qp_that_reused_its_number() {
    let (dev, plat, seen) = slow_handler_dev();
    let d = plat.sim.device().clone();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let old = pd.create_qp(&attr(&cq, 1)).unwrap();
    d.inject_async_event(EqeType::PortActive, 1);
    std::thread::sleep(Duration::from_millis(50));
    d.inject_async_event(EqeType::QpFatal, old.qpn());
    let n = old.qpn();
    drop(old);
    let new = pd.create_qp(&attr(&cq, 2)).unwrap();
    assert_eq!(new.qpn(), n, "the device reused the number");
    wait_for(WAIT, "the slow handler", || dev.async_event_counts().0 >= 1);
    std::thread::sleep(Duration::from_millis(400));
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.contains(&(AsyncEventType::QpFatal, Some(2))), "the new QP got the old QP's QP_FATAL: {seen:?}");
}

/// CQ_ERR of a destroyed CQ does not mark the new CQ that got its handle as overrun.
#[test]
fn a_stale_cq_err_misses_the_cq_that_reused_its_handle() {
    let (dev, plat, seen) = slow_handler_dev();
    let d = plat.sim.device().clone();
    let old = dev.create_cq_with(8, None, 1).unwrap();
    d.inject_async_event(EqeType::PortActive, 1);
    std::thread::sleep(Duration::from_millis(50));
    d.inject_async_event(EqeType::CqErr, old.handle());
    let h = old.handle();
    drop(old);
    let new = dev.create_cq_with(8, None, 2).unwrap();
    assert_eq!(new.handle(), h, "the device reused the handle");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(new.poll(&mut [Wc::default(); 4]), Ok(0), "a fresh, empty CQ reports an overrun it never had");
    assert!(new.req_notify(NotifyFlags::NEXT_COMPLETION).is_ok());
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.iter().any(|e| e.1 == Some(2)), "{seen:?}");
}

/// The device overflows a CQ the consumer dropped while a QP still completes into it: the
/// consumer, who no longer has the CQ, gets no CQ_ERR for it.
#[test]
fn no_cq_err_for_a_dropped_cq_still_held_by_a_qp() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq_with(1, None, 0xdead).unwrap();
    let h = cq.handle();
    let qp = rc_qp(&pd, &cq, &cq);
    drop(cq);
    for i in 0..4 {
        sim.device().post_cqe(h, &cqe(i), false);
    }
    let got = dev.get_async_event(Duration::from_millis(500)).map(|e| ev(&e));
    drop(qp);
    assert_eq!(got, Err(Error::Timeout), "an async event for a CQ the consumer dropped");
}

/// Injects QP_FATAL (and CQ_ERR) for objects while they are destroyed, with a reader holding each
/// event a moment before acking it: no reader ever holds an event for an object whose destroy
/// has returned (destroy waits for the acks of the events it did not discard).
fn destroy_racing_async_events(cq_too: bool) {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let d = sim.device().clone();
    let pd = dev.alloc_pd().unwrap();
    let gone: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let violations: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (dev, gone, stop, violations) = (dev.clone(), gone.clone(), stop.clone(), violations.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                let Ok(e) = dev.get_async_event(Duration::from_millis(20)) else { continue };
                let key = e.qp().map(|q| q.qp_context()).or_else(|| e.cq().map(|c| c.cq_context()));
                std::thread::sleep(Duration::from_micros(300));
                if let Some(k) = key.filter(|k| gone.lock().unwrap().contains(k)) {
                    violations.lock().unwrap().push(k);
                }
                e.ack();
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    for round in 1u64.. {
        if Instant::now() >= deadline {
            break;
        }
        let cq = dev.create_cq_with(4, None, round).unwrap();
        let qp = pd.create_qp(&attr(&cq, round)).unwrap();
        let (qpn, h) = (qp.qpn(), cq.handle());
        let d2 = d.clone();
        let injector = std::thread::spawn(move || {
            for _ in 0..3 {
                d2.inject_async_event(EqeType::QpFatal, qpn);
                if cq_too {
                    d2.inject_async_event(EqeType::CqErr, h);
                }
                std::thread::yield_now();
            }
        });
        std::thread::sleep(Duration::from_micros(round % 200));
        drop(qp);
        drop(cq);
        gone.lock().unwrap().insert(round);
        injector.join().unwrap();
    }
    stop.store(true, SeqCst);
    reader.join().unwrap();
    assert_eq!(*violations.lock().unwrap(), Vec::<u64>::new());
}

#[test]
fn qp_destroy_racing_async_events() {
    destroy_racing_async_events(false);
}

#[test]
fn qp_and_cq_destroy_racing_async_events() {
    destroy_racing_async_events(true);
}

/// An event queued for a QP (or CQ) before its destroy starts, taken while the destroy command
/// is in flight (held here): the destroy has already discarded it, so nobody holds it.
fn taken_during_destroy(op: u32) {
    let plat = Arc::new(Faults::new(Default::default()));
    let dev = hca::probe(plat.clone(), Default::default()).unwrap();
    let d = plat.sim.device().clone();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq_with(4, None, 0xc0).unwrap();
    let qp = rc_qp(&pd, &cq, &cq);
    let object: Box<dyn Send> = if op == opcode::DESTROY_QP {
        d.inject_async_event(EqeType::QpFatal, qp.qpn());
        Box::new(qp)
    } else {
        drop(qp);
        d.inject_async_event(EqeType::CqErr, cq.handle());
        Box::new(cq)
    };
    wait_for(WAIT, "the event queued", || dev.async_event_counts().0 >= 1);
    plat.hold_next(op);
    let destroyer = std::thread::spawn(move || drop(object));
    wait_for(WAIT, "the destroy command in flight", || plat.holding());
    let got = dev.get_async_event(Duration::ZERO).map(|e| ev(&e));
    plat.release();
    destroyer.join().unwrap();
    assert_eq!(got, Err(Error::Timeout), "an event for an object being destroyed was handed out");
}

#[test]
fn a_qp_event_is_not_taken_during_its_destroy() {
    taken_during_destroy(opcode::DESTROY_QP);
}

#[test]
fn a_cq_event_is_not_taken_during_its_destroy() {
    taken_during_destroy(opcode::DESTROY_CQ);
}

/// A CQ dropped in the async handler (the vector-1 thread) while the CQ-notification thread
/// delivers its completion event: no event for it is left on the channel.
#[test]
fn a_cq_dropped_in_its_handler_leaves_no_event_behind() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let d = sim.device().clone();
    let ch = dev.create_comp_channel().unwrap();
    let slot: Arc<Mutex<Option<Cq>>> = Arc::default();
    let dropped = Arc::new(AtomicU64::new(0));
    {
        let (slot, dropped) = (slot.clone(), dropped.clone());
        dev.set_async_event_handler(move |e| {
            let cq = slot.lock().unwrap().take().filter(|_| e.event_type == AsyncEventType::CqErr);
            if let Some(cq) = cq {
                drop(cq);
                dropped.fetch_add(1, SeqCst);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut stale = 0;
    for round in 1u64.. {
        if Instant::now() >= deadline {
            break;
        }
        let cq = dev.create_cq(4, Some(&ch)).unwrap();
        let h = cq.handle();
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        *slot.lock().unwrap() = Some(cq);
        let d2 = d.clone();
        let poster = std::thread::spawn(move || d2.post_cqe(h, &cqe(1), false));
        d.inject_async_event(EqeType::CqErr, h);
        poster.join().unwrap();
        wait_for(WAIT, "the handler's drop", || dropped.load(SeqCst) == round);
        std::thread::sleep(Duration::from_micros(200));
        while let Some(e) = ch.try_get_cq_event() {
            stale += 1;
            e.ack_events(1);
        }
    }
    assert_eq!(stale, 0, "events for CQs the handler dropped");
}

/// CREATE_CQ answers the driver must not believe: a handle beyond 24 bits is refused; a handle
/// already live makes the device fatal (its tables and the driver's disagree for good) and leaves
/// the live CQ and its channel intact.
#[test]
fn hostile_cq_handles() {
    use tests::rewrite::Rewrite;
    let plat = Arc::new(Rewrite::new(opcode::CREATE_CQ, 16, |h| h | 0x0100_0000));
    let dev = hca::probe(plat, ibta()).unwrap();
    assert!(matches!(dev.create_cq(8, None).map(|c| c.handle()), Err(Error::BadResponse(_))));
    assert!(!dev.is_fatal());
    let mut first = None;
    let plat = Arc::new(Rewrite::new(opcode::CREATE_CQ, 16, move |h| *first.get_or_insert(h)));
    let dev = hca::probe(plat.clone(), ibta()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let a = dev.create_cq(8, Some(&ch)).unwrap();
    assert_eq!(dev.create_cq(8, Some(&ch)).map(|c| c.handle()), Err(Error::DeviceFatal));
    assert!(plat.sim.device().cq_status(a.handle()).is_some(), "the live CQ was torn down");
    drop(a);
    assert!(ch.destroy().is_ok(), "the refused CQ left the channel attached");
}

/// Runs `handler` as the async handler on QP_FATAL for a fresh QP; it must return (the event
/// thread holds no lock a handler's verbs take).
fn qp_fatal_handler(handler: impl Fn(ib_core::Qp, &ib_core::Pd, &Cq) + Send + Sync + 'static) {
    let (dev, sim) = hca::open_sim_with(Default::default(), short_timeouts()).unwrap();
    let pd = Arc::new(dev.alloc_pd().unwrap());
    let cq = Arc::new(dev.create_cq(8, None).unwrap());
    let qp = rc_qp(&pd, &cq, &cq);
    let qpn = qp.qpn();
    let slot = Mutex::new(Some(qp));
    let (tx, rx) = mpsc::channel();
    let (pd2, cq2) = (pd.clone(), cq.clone());
    dev.set_async_event_handler(move |e| {
        let qp = slot.lock().unwrap().take().filter(|_| e.event_type == AsyncEventType::QpFatal);
        if let Some(qp) = qp {
            handler(qp, &pd2, &cq2);
            let _ = tx.send(());
        }
    });
    sim.device().inject_async_event(EqeType::QpFatal, qpn);
    let r = rx.recv_timeout(Duration::from_secs(3));
    if r.is_err() {
        std::mem::forget(dev); // its event thread is stuck: dropping would join it for ever
    }
    assert!(r.is_ok(), "the async handler never returned: the event thread is deadlocked");
}

#[test]
fn a_handler_may_destroy_the_qp_its_event_names() {
    qp_fatal_handler(|qp, _, _| drop(qp));
}

#[test]
fn a_handler_may_create_a_qp() {
    qp_fatal_handler(|qp, pd, cq| {
        let fresh = rc_qp(pd, cq, cq);
        assert_ne!(fresh.qpn(), qp.qpn());
    });
}

/// A command timeout inside `modify_qp` makes the device fatal on the modifying thread; the
/// consumer's DEVICE_FATAL handler, which formats the QP, runs elsewhere, so neither waits for
/// the other.
#[test]
fn fatal_inside_modify_qp_does_not_deadlock_the_handler() {
    let plat = Arc::new(Faults::new(Default::default()));
    let dev = hca::probe(plat.clone(), short_timeouts()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let qp = Arc::new(rc_qp(&pd, &cq, &cq));
    let (htx, hrx) = mpsc::channel();
    let q = qp.clone();
    dev.set_async_event_handler(move |e| {
        if e.event_type == AsyncEventType::DeviceFatal {
            let _ = htx.send(format!("{q:?}"));
        }
    });
    plat.swallow_next(opcode::MODIFY_QP);
    let (tx, rx) = mpsc::channel();
    let q = qp.clone();
    std::thread::spawn(move || {
        let _ = tx.send(q.modify_to_init(1, 0));
    });
    let r = rx.recv_timeout(Duration::from_secs(3));
    let handled = hrx.recv_timeout(Duration::from_secs(3));
    if r.is_err() || handled.is_err() {
        std::mem::forget((dev, pd, cq, qp));
    }
    assert!(matches!(r, Ok(Err(_))), "modify_qp: {r:?}");
    assert!(handled.is_ok(), "the DEVICE_FATAL handler never ran to its end");
}

/// A device whose async-event vector the test can stall (`Faults::stall_async_vector`).
fn stallable() -> (ib_core::Device, Arc<tests::intercept::Intercept<Faults>>) {
    let plat = Arc::new(Faults::new(Default::default()));
    let dev = hca::probe(plat.clone(), ibta()).unwrap();
    (dev, plat)
}

/// A destroy that takes other objects' async events from the ring (it must resolve them before
/// the handle goes) leaves them to the event thread: the consumer's handler never runs inside an
/// unrelated `drop(qp)`, so a teardown under a lock the handler takes does not deadlock (as Linux
/// and libibverbs never call a handler from `ibv_destroy_qp`).
#[test]
fn an_async_handler_never_runs_inside_another_objects_destroy() {
    let (dev, plat) = stallable();
    let app = Arc::new(Mutex::new(()));
    // (the thread the handler ran on, whether it could take the application's lock)
    let seen: Arc<Mutex<Vec<HandlerRun>>> = Arc::default();
    dev.set_async_event_handler({
        let (app, seen) = (app.clone(), seen.clone());
        move |e| {
            if e.event_type == AsyncEventType::PortActive {
                // Bounded stand-in for `app.lock()`: a plain lock would hang the test.
                let locked = try_lock_for(&app, Duration::from_millis(500));
                seen.lock().unwrap().push((std::thread::current().name().map(str::to_owned), locked));
            }
        }
    });
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let qp = rc_qp(&pd, &cq, &cq);
    plat.stall_async_vector(true);
    std::thread::sleep(Duration::from_millis(150)); // the async thread is now parked in its wait
    plat.sim.device().inject_async_event(EqeType::PortActive, 1);
    {
        let _guard = app.lock().unwrap();
        drop(qp); // teardown under the application's lock
    }
    plat.stall_async_vector(false);
    tests::events::wait_for(WAIT, "the port event", || !seen.lock().unwrap().is_empty());
    let me = std::thread::current().name().map(str::to_owned);
    let (thread, locked) = seen.lock().unwrap()[0].clone();
    assert!(
        thread != me && locked,
        "the async handler ran on {thread:?} (the test thread is {me:?}) inside drop(qp), and could take the app lock: {locked}"
    );
}

/// A bounded `lock()`.
fn try_lock_for(m: &Mutex<()>, d: Duration) -> bool {
    let end = Instant::now() + d;
    loop {
        if m.try_lock().is_ok() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Every context sees the device's async events in the device's order, even when a destroy took
/// some of them from the ring while the event thread was still delivering earlier ones: PORT_ERR
/// then PORT_ACTIVE never reads as "the port is down" (IBTA 11.6.3; Linux's `ib_dispatch_event`
/// runs from one queue per device).
#[test]
fn a_destroy_does_not_reorder_port_events_for_another_context() {
    let (dev, plat) = stallable();
    let ctx_b = dev.alloc_ucontext().unwrap();
    let in_err = Arc::new(AtomicBool::new(false));
    dev.set_async_event_handler({
        let in_err = in_err.clone();
        move |e| {
            if e.event_type == AsyncEventType::PortErr {
                in_err.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    });
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let qp = rc_qp(&pd, &cq, &cq);
    let d = plat.sim.device();
    d.inject_async_event(EqeType::PortErr, 1);
    tests::events::wait_for(WAIT, "PORT_ERR in A's handler", || in_err.load(Ordering::SeqCst));
    d.inject_async_event(EqeType::PortActive, 1);
    std::thread::sleep(Duration::from_millis(50));
    drop(qp);
    let first = ctx_b.get_async_event(WAIT).map(|e| e.event_type);
    let second = ctx_b.get_async_event(WAIT).map(|e| e.event_type);
    assert_eq!(
        (first, second),
        (Ok(AsyncEventType::PortErr), Ok(AsyncEventType::PortActive)),
        "context B got the device's port events out of order"
    );
}

/// The last Device handle goes while a user context (with objects) lives: the device stays
/// listed, opens again by name, its user objects keep working, and a fatal reaches the user
/// context and the reopened kernel context.
#[test]
fn device_dropped_while_a_user_context_lives() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let name = dev.name();
    let ctx = dev.alloc_ucontext().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(16, Some(&ch)).unwrap();
    drop(dev);
    assert!(ib_core::device_list().iter().any(|d| d.name == name));
    let again = ib_core::open_device(&name).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    assert!(sim.device().post_cqe(cq.handle(), &cqe(5), false));
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    cq.ack_events(1);
    assert_eq!(poll_n(&cq, 1)[0].wr_id, 5);
    sim.device().inject_fatal();
    assert_eq!(ctx.get_async_event(WAIT).map(|e| e.event_type), Ok(AsyncEventType::DeviceFatal));
    assert_eq!(again.get_async_event(WAIT).map(|e| e.event_type), Ok(AsyncEventType::DeviceFatal));
    drop((again, cq, ch));
    drop(ctx);
    // The fatal fan-out runs on its own thread and holds each context until it has told it: the
    // device leaves the list once that thread is done too (the consumer may already have the
    // event by then and have dropped everything).
    let t = std::time::Instant::now();
    while ib_core::device_list().iter().any(|d| d.name == name) && t.elapsed() < WAIT {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(!ib_core::device_list().iter().any(|d| d.name == name));
}
