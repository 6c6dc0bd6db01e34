//! A CqDelivery spent before its CQ was destroyed from inside the CQ's own upcall, and
//! delivered (dropped) after the destroy, must not hand the event to a consumer blocked on the
//! channel (design decision 16).

use crate::scripted::{open, scq};
use ib_core::{NotifyFlags, UpcallPolicy};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

/// One round; returns whether a blocked channel waiter received the destroyed CQ's event.
fn round(dev: &ib_core::Device) -> bool {
    let ch = Arc::new(dev.create_comp_channel().unwrap());
    let x = dev.create_cq(8, Some(&ch)).unwrap();
    let s = scq(&x).0.clone();
    let slot = Arc::new(Mutex::new(None::<ib_core::Cq>));
    let (started_tx, started_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let go_rx = Mutex::new(go_rx);
    {
        let slot = slot.clone();
        x.set_upcall(UpcallPolicy::ManyInstance, move |_view, _st| {
            let _ = started_tx.send(());
            let _ = go_rx.lock().unwrap().recv_timeout(WAIT);
            // Destroy the CQ from inside its own upcall (drop: the documented way in here).
            drop(slot.lock().unwrap().take());
            let _ = done_tx.send(());
        })
        .unwrap();
    }
    *slot.lock().unwrap() = Some(x);
    // First completion: the upcall starts (MANY_INSTANCE re-arms before running it) and waits.
    assert!(s.publish(false));
    started_rx.recv_timeout(WAIT).expect("upcall started");
    // The consumer arms the channel too.
    slot.lock().unwrap().as_ref().unwrap().req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    // A provider spends the arm inside its fence: the delivery is in flight.
    let delivery = s.events.completion().expect("armed: the arm fires");
    // The upcall destroys the CQ meanwhile (it cannot wait for the delivery: its own callback).
    go_tx.send(()).unwrap();
    done_rx.recv_timeout(WAIT).expect("upcall destroyed the CQ");
    // A consumer sleeps on the channel.
    let waiter = {
        let ch = ch.clone();
        std::thread::spawn(move || ch.get_cq_event(Duration::from_millis(300)))
    };
    std::thread::sleep(Duration::from_millis(20));
    // The provider releases its fence: the delivery reaches the consumers now.
    drop(delivery);
    let got = waiter.join().unwrap();
    let stale = got.is_ok();
    if let Ok(ev) = got {
        ev.ack_events(1);
    }
    // Nothing may be left queued either.
    assert!(ch.try_get_cq_event().is_none(), "event left queued for a destroyed CQ");
    stale
}

#[test]
fn a_delivery_released_after_destroy_in_own_upcall_never_reaches_a_blocked_waiter() {
    let dev = open();
    let mut stale = 0;
    let rounds = 8;
    for _ in 0..rounds {
        if round(&dev) {
            stale += 1;
        }
    }
    assert_eq!(
        stale, 0,
        "{stale}/{rounds} rounds handed a blocked waiter an event for a CQ destroyed before it was pushed"
    );
}
