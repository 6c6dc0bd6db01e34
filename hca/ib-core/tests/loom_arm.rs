//! The loom model check of the per-CQ arm state machine (`ib_core::arm`, `ib_core::notify`),
//! compiled with loom's sync primitives in place of std's (`hca/ib-core/src/sync.rs`):
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test --release -p ib-core --test loom_arm --target-dir target/loom
//! ```
//!
//! The driver code under test is the real one: `ArmMachine::{request, fire, set_policy,
//! take_upcall}` and `NotifyRequest::wait`. The device is a fake built as the model builds it
//! (design decision 2): publishing a CQE and testing-and-clearing the arm happen under one lock
//! that the arm doorbell also takes. Loom explores every interleaving of the consumer (poll, arm,
//! re-poll, wait), the device (publish, test-and-clear arm, raise) and the interrupt path (fire)
//! up to a bounded number of preemptions (`LOOM_MAX_PREEMPTIONS`, default 3 here).
//!
//! A lost wake-up shows as a consumer blocked forever in `NotifyRequest::wait` with the device
//! done (loom reports a deadlock), or, in the checkable form, as a request still pending once the
//! device is done while a CQE sits unpolled. The `without_the_*` tests remove the re-poll after
//! arming (or the poll after enabling an upcall) and expect loom to find exactly that.
#![cfg(loom)]

use ib_core::arm::{ArmKind, ArmMachine, CqHw};
use ib_core::{NotifyKind, NotifyStatus, UpcallPolicy};
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The device side of one CQ: a ring of `prod - cons` unpolled CQEs and the device's one-shot arm.
struct FakeCq {
    prod: AtomicU32,
    cons: AtomicU32,
    arm: Mutex<Option<ArmKind>>,
}

impl FakeCq {
    fn new() -> Self {
        Self { prod: AtomicU32::new(0), cons: AtomicU32::new(0), arm: Mutex::new(None) }
    }

    /// Device: publishes one CQE, then (same lock) tests and clears the arm. Returns whether it
    /// raises the CQ's interrupt.
    fn publish(&self, solicited: bool) -> bool {
        let mut arm = self.arm.lock().unwrap();
        self.prod.fetch_add(1, Ordering::Release);
        let fire = match *arm {
            Some(ArmKind::Next) => true,
            Some(ArmKind::Solicited) => solicited,
            None => false,
        };
        if fire {
            *arm = None;
        }
        fire
    }

    /// Consumer: polls one CQE if there is one (several pollers may race).
    fn poll_one(&self) -> bool {
        loop {
            let cons = self.cons.load(Ordering::Acquire);
            if cons == self.prod.load(Ordering::Acquire) {
                return false;
            }
            let next = cons + 1;
            if self.cons.compare_exchange(cons, next, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return true;
            }
        }
    }
}

impl CqHw for FakeCq {
    fn has_unpolled(&self) -> bool {
        self.cons.load(Ordering::Acquire) != self.prod.load(Ordering::Acquire)
    }

    /// The arm doorbell: joins under the device's CQ lock (IBTA: NEXT dominates).
    fn ring_arm(&self, kind: ArmKind) {
        let mut arm = self.arm.lock().unwrap();
        *arm = (*arm).max(Some(kind));
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// The consumer's event loop on notify requests: poll until empty; when short of `n`, make a NEXT
/// request (`report_missed`: the re-poll after arming) and sleep on it.
fn consume(m: &ArmMachine<FakeCq>, n: u32, report_missed: bool) {
    let mut got = 0;
    loop {
        while m.hw().poll_one() {
            got += 1;
        }
        if got == n {
            return;
        }
        let req = m.request(NotifyKind::Next, report_missed);
        assert_eq!(req.wait(Duration::MAX), Ok(NotifyStatus::Success));
    }
}

/// Device thread that publishes `n` CQEs and runs the interrupt path inline after each one.
fn device_inline(m: Arc<ArmMachine<FakeCq>>, n: u32) -> loom::thread::JoinHandle<()> {
    loom::thread::spawn(move || {
        for _ in 0..n {
            if m.hw().publish(false) {
                m.fire();
            }
        }
    })
}

#[test]
fn arm_then_repoll_never_misses_a_completion() {
    model(|| {
        let m = Arc::new(ArmMachine::new(FakeCq::new()));
        let dev = device_inline(m.clone(), 2);
        consume(&m, 2, true);
        dev.join().unwrap();
    });
}

/// The same loop with the sleep made checkable: instead of blocking, the consumer lets the device
/// finish everything it will ever do, then looks. A request still pending while CQEs sit unpolled
/// is a lost wake-up: a consumer asleep on it would sleep forever. (Loom would also report the
/// blocking version as a deadlock, but it cannot unwind cleanly from one, so a `should_panic`
/// test needs this form.)
fn consume_then_check(report_missed: bool) {
    model(move || {
        let m = Arc::new(ArmMachine::new(FakeCq::new()));
        let mut dev = Some(device_inline(m.clone(), 2));
        let mut got = 0;
        loop {
            while m.hw().poll_one() {
                got += 1;
            }
            if got == 2 {
                break;
            }
            let req = m.request(NotifyKind::Next, report_missed);
            if req.status().is_none() {
                if let Some(d) = dev.take() {
                    d.join().unwrap();
                }
                assert!(
                    req.status().is_some() || !m.hw().has_unpolled(),
                    "lost wake-up: the request is pending, the device is done, a CQE is queued"
                );
            }
        }
        if let Some(d) = dev.take() {
            d.join().unwrap();
        }
    });
}

#[test]
fn arm_then_repoll_leaves_no_sleeper_beside_a_queued_cqe() {
    consume_then_check(true);
}

/// Without the re-poll after arming, a CQE published between the consumer's last empty poll and
/// its arm raises no event (it came before the arm), and the consumer sleeps beside it.
#[test]
#[should_panic(expected = "lost wake-up")]
fn without_the_repoll_after_arming_loom_finds_the_lost_wakeup() {
    consume_then_check(false);
}

/// The interrupt path on a thread of its own: the device raises a counter (an eventfd), the
/// vector thread takes it and fires the driver's arm. A SOLICITED request from a second consumer
/// shares the hardware arm with the NEXT requests of the first: both always end.
#[test]
fn separate_interrupt_thread_and_two_clients_sharing_one_arm() {
    model(|| {
        let m = Arc::new(ArmMachine::new(FakeCq::new()));
        let irq = Arc::new((Mutex::new((0u32, false)), Condvar::new()));
        let dev = {
            let (m, irq) = (m.clone(), irq.clone());
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    if m.hw().publish(false) {
                        irq.0.lock().unwrap().0 += 1;
                        irq.1.notify_one();
                    }
                }
                irq.0.lock().unwrap().1 = true;
                irq.1.notify_one();
            })
        };
        let vector = {
            let (m, irq) = (m.clone(), irq.clone());
            loom::thread::spawn(move || loop {
                let mut g = irq.0.lock().unwrap();
                while g.0 == 0 && !g.1 {
                    g = irq.1.wait(g).unwrap();
                }
                let (n, done) = (std::mem::take(&mut g.0), g.1);
                drop(g);
                if n > 0 {
                    m.fire();
                }
                if done && n == 0 {
                    return;
                }
            })
        };
        // The other client: a SOLICITED request, withdrawn if nothing satisfied it.
        let other = m.request(NotifyKind::Solicited, false);
        consume(&m, 2, true);
        dev.join().unwrap();
        vector.join().unwrap();
        assert!(matches!(other.cancel(), NotifyStatus::Success | NotifyStatus::Cancelled));
    });
}

/// Upcall policy changed while completions arrive: the consumer enables MANY_INSTANCE, then polls
/// once more (the documented pattern); the dispatcher takes upcalls (the driver re-arms before
/// each) and its upcall polls until empty. Every CQE is consumed by one or the other.
fn enable_while_completions_arrive(poll_once_more: bool) {
    model(move || {
        let m = Arc::new(ArmMachine::new(FakeCq::new()));
        let consumed = Arc::new(AtomicU32::new(0));
        let wake = Arc::new((Mutex::new((false, false)), Condvar::new()));
        let dev = {
            let (m, wake) = (m.clone(), wake.clone());
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    if m.hw().publish(false) && m.fire().is_some_and(|f| f.upcall) {
                        wake.0.lock().unwrap().0 = true;
                        wake.1.notify_one();
                    }
                }
                wake.0.lock().unwrap().1 = true;
                wake.1.notify_one();
            })
        };
        let dispatcher = {
            let (m, wake, consumed) = (m.clone(), wake.clone(), consumed.clone());
            loom::thread::spawn(move || loop {
                let mut g = wake.0.lock().unwrap();
                while !g.0 && !g.1 {
                    g = wake.1.wait(g).unwrap();
                }
                let done = g.1;
                g.0 = false;
                drop(g);
                while m.take_upcall().is_some() {
                    while m.hw().poll_one() {
                        consumed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if done {
                    return;
                }
            })
        };
        m.set_policy(Some(UpcallPolicy::ManyInstance));
        if poll_once_more {
            while m.hw().poll_one() {
                consumed.fetch_add(1, Ordering::Relaxed);
            }
        }
        dev.join().unwrap();
        dispatcher.join().unwrap();
        assert_eq!(consumed.load(Ordering::Relaxed), 2, "a completion was lost");
    });
}

#[test]
fn enable_upcall_then_poll_once_more_never_loses_a_completion() {
    enable_while_completions_arrive(true);
}

/// Without the poll after enabling, CQEs queued before the enable raise no upcall (IBTA), and
/// nobody consumes them: loom finds the interleaving.
#[test]
#[should_panic(expected = "a completion was lost")]
fn without_the_poll_after_enabling_loom_finds_the_lost_completion() {
    enable_while_completions_arrive(false);
}

/// SINGLE_INSTANCE re-enabled while the upcall of an earlier event is pending: whichever comes
/// first — the dispatcher taking that upcall or the consumer's re-enable — the next completion
/// raises an upcall (one enable, one upcall for an event after it; taking the old upcall must not
/// spend the new enable).
#[test]
fn single_instance_reenable_racing_the_pending_upcall_keeps_the_next_upcall() {
    model(|| {
        let m = Arc::new(ArmMachine::new(FakeCq::new()));
        m.set_policy(Some(UpcallPolicy::SingleInstance));
        assert!(m.hw().publish(false));
        assert!(m.fire().is_some_and(|f| f.upcall), "event 1: an upcall is pending");
        let dispatcher = {
            let m = m.clone();
            loom::thread::spawn(move || assert_eq!(m.take_upcall(), Some(NotifyStatus::Success)))
        };
        m.set_policy(Some(UpcallPolicy::SingleInstance));
        dispatcher.join().unwrap();
        assert!(m.hw().publish(false), "the re-enable armed the device");
        assert!(m.fire().is_some_and(|f| f.upcall), "the completion after the re-enable: no upcall");
        assert_eq!(m.take_upcall(), Some(NotifyStatus::Success));
    });
}

/// The completion-channel client (`Cq::req_notify`), which arms before every poll: the repeated
/// arm takes the fast path (nothing changes, no fence) unless an event spent the first one. Once
/// the device is done, a CQE left unpolled must have a channel event waiting for the consumer.
#[test]
fn repeated_channel_arms_then_repoll_leave_no_sleeper_beside_a_queued_cqe() {
    model(|| {
        let m = Arc::new(ArmMachine::new(FakeCq::new()));
        let events = Arc::new(AtomicU32::new(0));
        let dev = {
            let (m, events) = (m.clone(), events.clone());
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    if m.hw().publish(false) && m.fire().is_some_and(|f| f.channel) {
                        events.fetch_add(1, Ordering::AcqRel);
                    }
                }
            })
        };
        while m.hw().poll_one() {}
        m.arm_channel(ArmKind::Next);
        m.arm_channel(ArmKind::Next);
        while m.hw().poll_one() {}
        dev.join().unwrap();
        if m.hw().has_unpolled() {
            assert!(events.load(Ordering::Acquire) > 0, "lost wake-up: a CQE unpolled and no channel event");
        }
    });
}
