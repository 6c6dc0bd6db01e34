//! Destroying a CQ: it waits for the events taken for it to be acknowledged (or fails at once if
//! asked not to wait), another CQ's acknowledgements do not count, untaken events vanish with it,
//! and its destruction never overlaps the handling of its interrupt or async event.

use ib_core::{AsyncEventType, Error, NotifyFlags, NotifyKind, NotifyStatus};
use pvrdma_abi::event::EqeType;
use pvrdma_sim::SimConfig;
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use tests::events::{cqe, wait_for};
use tests::fixture::*;

#[test]
fn destroy_waits_for_its_own_acks_only() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let ch = dev.create_comp_channel().unwrap();
    let a = dev.create_cq(16, Some(&ch)).unwrap();
    let b = dev.create_cq(16, Some(&ch)).unwrap();
    for (cq, id) in [(&a, 1), (&b, 2)] {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        assert!(d.post_cqe(cq.handle(), &cqe(id), false));
    }
    let mut got =
        [ch.get_cq_event(WAIT).map(|c| c.handle()).unwrap(), ch.get_cq_event(WAIT).map(|c| c.handle()).unwrap()];
    got.sort_unstable();
    assert_eq!(got, [a.handle().min(b.handle()), a.handle().max(b.handle())]);
    assert_eq!((a.unacked_events(), b.unacked_events()), (1, 1));
    // Acknowledging B's event (twice, even) does not release A.
    b.ack_events(2);
    let (a, e) = a.destroy(None).unwrap_err();
    assert_eq!(e, Error::EventsNotAcked(1));
    let t = Instant::now();
    let (a, e) = a.destroy(Some(Duration::from_millis(100))).unwrap_err();
    assert_eq!(e, Error::EventsNotAcked(1));
    assert!(t.elapsed() >= Duration::from_millis(90));
    // An acknowledgement from another thread while destroy waits releases it.
    let acker = a.acker();
    let h = a.handle();
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        acker.ack_events(1);
    });
    let t = Instant::now();
    a.destroy(Some(WAIT)).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(90), "destroy did not wait: {:?}", t.elapsed());
    late.join().unwrap();
    wait_for(WAIT, "DESTROY_CQ", || d.cq_status(h).is_none());
    b.destroy(None).unwrap();
}

#[test]
fn destroy_cancels_requests_and_removes_untaken_events() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let ch = dev.create_comp_channel().unwrap();
    let a = dev.create_cq(16, Some(&ch)).unwrap();
    let b = dev.create_cq(16, Some(&ch)).unwrap();
    let pending = a.notify(NotifyKind::ErrorOnly, false).unwrap();
    for (cq, id) in [(&a, 1), (&b, 2)] {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        assert!(d.post_cqe(cq.handle(), &cqe(id), false));
    }
    wait_for(WAIT, "both events queued", || ch.pending() == 2);
    a.destroy(None).unwrap(); // its event was never taken: nothing to wait for
    assert_eq!(pending.status(), Some(NotifyStatus::Cancelled));
    assert_eq!(ch.try_get_cq_event().map(|c| c.handle()), Some(b.handle()), "A's event left with A");
    assert_eq!(ch.try_get_cq_event().map(|c| c.handle()), None);
    b.ack_events(1);
}

#[test]
fn destroy_waits_while_its_async_event_is_handled() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let h = cq.handle();
    let (entered, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let done = Arc::new(Mutex::new(Vec::new()));
    {
        let (entered, release, done) = (entered.clone(), release.clone(), done.clone());
        dev.set_async_event_handler(move |e| {
            if ev(e) == (AsyncEventType::CqErr, Some(h)) {
                entered.wait();
                release.wait();
                done.lock().unwrap().push("handler returned");
            }
        });
    }
    d.inject_async_event(EqeType::CqErr, h);
    entered.wait();
    let destroyer = {
        let done = done.clone();
        std::thread::spawn(move || {
            drop(cq);
            done.lock().unwrap().push("destroyed");
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(done.lock().unwrap().is_empty(), "destroy went ahead while its CQ_ERR was handled");
    release.wait();
    destroyer.join().unwrap();
    assert_eq!(done.lock().unwrap().as_slice(), &["handler returned", "destroyed"]);
    assert_eq!(d.cq_status(h), None);
}

#[test]
fn destroying_a_cq_from_inside_its_async_handler_is_an_error() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let h = cq.handle();
    let slot = Arc::new(Mutex::new(Some(cq)));
    let (tx, rx) = mpsc::channel();
    {
        let slot = slot.clone();
        dev.set_async_event_handler(move |e| {
            if ev(e) == (AsyncEventType::CqErr, Some(h)) {
                let cq = slot.lock().unwrap().take().unwrap();
                match cq.destroy(None) {
                    Ok(()) => drop(tx.send(None)),
                    Err((cq, e)) => {
                        *slot.lock().unwrap() = Some(cq);
                        drop(tx.send(Some(e)));
                    }
                }
            }
        });
    }
    d.inject_async_event(EqeType::CqErr, h);
    let got = rx.recv_timeout(WAIT).expect("the async handler deadlocked");
    assert!(matches!(got, Some(Error::WouldDeadlock(_))), "{got:?}");
    slot.lock().unwrap().take().unwrap().destroy(None).unwrap();
    assert_eq!(d.cq_status(h), None);
}

/// CQs with a channel, notify requests and an upcall are destroyed while the interrupt thread
/// delivers their events, on two threads at once: no panic, no deadlock, no event for a CQ after
/// it is gone, every request ends.
#[test]
fn destroy_while_events_are_delivered() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (dev, sim) = (&dev, &sim);
            s.spawn(move || {
                let ch = dev.create_comp_channel().unwrap();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let cq = dev.create_cq(4, Some(&ch)).unwrap();
                    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
                    let r = cq.notify(NotifyKind::Next, false).unwrap();
                    if (n + t) & 1 == 0 {
                        cq.set_upcall(ib_core::UpcallPolicy::ManyInstance, |cq, _| {
                            let _ = cq.poll(&mut [ib_core::Wc::default(); 4]);
                        })
                        .unwrap();
                    }
                    assert!(sim.device().post_cqe(cq.handle(), &cqe(n), false));
                    let h = cq.handle();
                    drop(cq);
                    assert!(r.wait(WAIT).is_ok(), "a request never ended");
                    while let Some(got) = ch.try_get_cq_event().map(|c| c.handle()) {
                        assert_ne!(got, h, "an event for a destroyed CQ");
                    }
                    n += 1;
                }
                assert!(n > 10);
            });
        }
    });
    assert!(!dev.is_fatal());
}
