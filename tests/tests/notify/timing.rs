//! The completion-notification layer under hostile timing and the QEMU 7.2 profile: arm state,
//! notify requests, upcalls, channels and destroy.
//!
//! (From the issue 10 breaker rounds: each test failed while the bug it names was present.) Every wait is
//! bounded; anything that could hang runs on a thread joined with a timeout.

use doorbell::{ArmEncoding, DoorbellOp};
use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use ib_core::{ArmKind, Cq, Error, NotifyKind, NotifyStatus, UpcallPolicy};
use pvrdma_sim::{ArmState, Profile, SimConfig};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tests::events::{cqe, drain, wait_for};
use tests::fixture::*;
use tests::intercept::{Hooks, Intercept};

/// Runs `f` on a thread and waits at most `limit` for it (a watchdog for anything that could
/// hang); panics with `what` on a hang.
fn bounded<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => panic!("hung: {what} did not finish within {limit:?}"),
    }
}

/// BUG: under the QEMU 7.2 profile, enabling an upcall with a CQE already queued raises an
/// upcall for that CQE. QEMU writes a CQ-notification entry for every CQE, armed or not; the
/// entry for a CQE that arrived while the dispatcher was disabled sits in the ring until the next
/// drain (up to one 50 ms service tick). `ArmMachine::set_policy` (via `Cq::set_upcall` /
/// `Cq::modify_upcall`) arms the CQ through `ArmMachine::ensure` **without draining the
/// notification ring first** — unlike `Cq::notify` and every arm doorbell the driver rings, which
/// call `EventRings::drain_notifications` before arming — so the stale entry then fires the new
/// arm. Violates IBTA 11.4.2.5 / docs/event-loop.md ("Enabling with CQEs queued gives no upcall") and
/// design decision 3 ("raises at most one event per arm" — here an event for a CQE from before
/// the arm). Same hole: the MANY_INSTANCE re-arm in `ArmMachine::take_upcall` and
/// `ArmMachine::rearm`. The IBTA-profile twin of this test passes (`upcall.rs`).
#[test]
fn qemu72_enabling_an_upcall_with_a_cqe_queued_gives_no_upcall() {
    let cfg = SimConfig { profile: Profile::Qemu72, ..SimConfig::default() };
    let (dev, sim) = hca::open_sim(cfg).unwrap();
    let d = sim.device();
    let mut got = Vec::new();
    let mut cqs = Vec::new();
    for round in 0..3u64 {
        let cq = dev.create_cq(16, None).unwrap();
        let (tx, rx) = mpsc::channel();
        cq.set_upcall(UpcallPolicy::Disable, move |cq: &Cq, st| drop(tx.send((st, drain(cq))))).unwrap();
        // A CQE while disabled (unarmed): QEMU still writes its notification entry.
        assert!(d.post_cqe(cq.handle(), &cqe(round), false));
        // Enable, then poll once more (the pattern of docs/event-loop.md).
        cq.modify_upcall(UpcallPolicy::ManyInstance).unwrap();
        let polled = drain(&cq);
        if let Ok(r) = rx.recv_timeout(SETTLE) {
            got.push((round, r, polled));
        }
        cqs.push((cq, rx));
    }
    assert!(
        got.is_empty(),
        "an upcall fired for a CQE queued before the upcall was enabled: {got:?} \
         ((round, (status, upcall drained), consumer drained))"
    );
    // And a CQE after enabling does raise one (the test is not vacuous).
    let (cq, rx) = &cqs[0];
    assert!(d.post_cqe(cq.handle(), &cqe(99), false));
    assert_eq!(rx.recv_timeout(WAIT).map(|r| r.0), Ok(NotifyStatus::Success));
}

/// BUG: a SINGLE_INSTANCE upcall re-enabled while an upcall for an *earlier* event is still
/// pending is spent by that earlier event, so the next completion raises no upcall and stays
/// queued: a lost completion. `ArmMachine::fire` already marks SINGLE_INSTANCE spent
/// (`single_spent = true`) when it queues the upcall; `ArmMachine::take_upcall` marks it spent a
/// second time when the dispatcher takes that upcall. A `modify_upcall(SingleInstance)` between
/// the two (the consumer's "enable, then poll once more", from any thread) is undone by the second
/// mark, and the arm it made fires into a disabled dispatcher. Violates DAT SINGLE_INSTANCE ("one
/// upcall for the next completion event after enabling"), `docs/decisions.md`, decision 9 (a policy change never loses a
/// completion), and IBTA's rule that a CQE queued before an enable raises nothing (here that
/// old CQE's upcall consumes the new enable instead).
#[test]
fn single_instance_reenabled_while_an_old_upcall_is_pending_upcalls_for_the_next_completion() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (rep_tx, rep_rx) = mpsc::channel::<(NotifyStatus, Vec<u64>)>();
    let mut first = true;
    cq.set_upcall(UpcallPolicy::SingleInstance, move |cq: &Cq, st| {
        if std::mem::take(&mut first) {
            // The first upcall is slow: it holds the dispatcher (without polling).
            let _ = entered_tx.send(());
            let _ = gate_rx.recv_timeout(WAIT);
            return;
        }
        let _ = rep_tx.send((st, drain(cq)));
    })
    .unwrap();
    // Event 1: upcall #1 starts and blocks. SINGLE_INSTANCE is now spent.
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    entered_rx.recv_timeout(WAIT).expect("first upcall");
    // The consumer re-enables (arms) and a CQE fires it: an upcall for event 2 is now pending
    // behind the slow one, and SINGLE_INSTANCE is spent again.
    cq.modify_upcall(UpcallPolicy::SingleInstance).unwrap();
    assert!(d.post_cqe(cq.handle(), &cqe(2), false));
    wait_for(WAIT, "event 2 to spend SINGLE_INSTANCE", || cq.upcall_policy() == Some(UpcallPolicy::Disable));
    // The consumer re-enables again, then polls once more: it has everything so far.
    cq.modify_upcall(UpcallPolicy::SingleInstance).unwrap();
    assert_eq!(drain(&cq), vec![1, 2]);
    assert_eq!(cq.upcall_policy(), Some(UpcallPolicy::SingleInstance));
    // Let the dispatcher go on: it makes the pending upcall for event 2 (nothing left to poll).
    gate_tx.send(()).unwrap();
    std::thread::sleep(SETTLE);
    // A completion after the last enable must raise an upcall.
    assert!(d.post_cqe(cq.handle(), &cqe(3), false));
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match rep_rx.recv_timeout(Duration::from_millis(50)) {
            Ok(r) => {
                let has3 = r.1.contains(&3);
                seen.push(r);
                if has3 {
                    return;
                }
            }
            Err(_) => continue,
        }
    }
    panic!(
        "no upcall for the completion after re-enabling SINGLE_INSTANCE (lost); upcalls seen: \
         {seen:?}; policy now {:?}; still queued: {:?}",
        cq.upcall_policy(),
        drain(&cq)
    );
}

/// BUG: a completion channel created after the device went fatal never learns it: its
/// `get_cq_event` sleeps its whole timeout and returns `Timeout` instead of `DeviceFatal` at
/// once. Going fatal woke only the channels registered at that moment, and registering a
/// channel (`Device::create_comp_channel`) did not look at the fatal flag, so a channel
/// registered after (or while) the device went fatal was never marked. Violates
/// `CompChannel::get_cq_event`'s contract ("DeviceFatal once the device is fatal and no event is
/// left"), `create_comp_channel`'s ("woken with an error if the device goes fatal") and decision 7
/// ("fatal → every waiter wakes with an error").
#[test]
fn a_channel_created_after_the_device_went_fatal_reports_device_fatal() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    sim.device().inject_fatal();
    wait_for(WAIT, "the driver to see DEVICE_FATAL", || dev.is_fatal());
    let ch = dev.create_comp_channel().unwrap();
    let t = Instant::now();
    let got = bounded(Duration::from_secs(10), "get_cq_event", move || {
        ch.get_cq_event(Duration::from_secs(3)).map(|c| c.handle())
    });
    assert_eq!(
        (got, t.elapsed() < Duration::from_secs(1)),
        (Err(Error::DeviceFatal), true),
        "waited {:?}",
        t.elapsed()
    );
}

/// How long a gate of [`Gated`] holds at most (so a failing test cannot hang the device's
/// teardown).
const GATE_LIMIT: Duration = Duration::from_secs(20);

/// The model as a platform, with two gates for staging races deterministically:
/// - the CQ-notification vector's thread can be **parked** in `wait_vector`, so nothing drains the
///   CQ-notification ring behind the test's back (the driver still drains it on every arm);
/// - one chosen UAR write can be **held** in flight, after the driver updated its arm state and
///   before the device sees the write.
struct Gated {
    park: AtomicBool,
    parked: AtomicBool,
    hold_value: AtomicU32,
    held: AtomicBool,
    release: AtomicBool,
}

impl Gated {
    fn new(cfg: SimConfig) -> Arc<Intercept<Self>> {
        let hooks = Self {
            park: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            hold_value: AtomicU32::new(0),
            held: AtomicBool::new(false),
            release: AtomicBool::new(false),
        };
        Arc::new(Intercept { sim: SimPlatform::new(cfg), hooks })
    }

    /// Parks the vector-2 thread at its next wait, and waits until it is parked.
    fn park_cq_vector(&self) {
        self.park.store(true, Ordering::SeqCst);
        wait_for(WAIT, "the CQ-notification thread to park", || self.parked.load(Ordering::SeqCst));
    }

    fn unpark_cq_vector(&self) {
        self.park.store(false, Ordering::SeqCst);
    }

    /// Holds the next UAR write of `value` until [`Gated::release`].
    fn hold_uar_write(&self, value: u32) {
        self.release.store(false, Ordering::SeqCst);
        self.hold_value.store(value, Ordering::SeqCst);
    }

    fn wait_held(&self) {
        wait_for(WAIT, "the held UAR write", || self.held.load(Ordering::SeqCst));
    }

    fn release(&self) {
        self.release.store(true, Ordering::SeqCst);
    }

    /// Sleeps while `cond` holds, at most [`GATE_LIMIT`].
    fn gate(cond: impl Fn() -> bool) {
        let deadline = Instant::now() + GATE_LIMIT;
        while cond() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        self.park.store(false, Ordering::SeqCst);
        self.release.store(true, Ordering::SeqCst);
    }
}

impl Hooks for Gated {
    fn uar_write(&self, sim: &SimPlatform, offset: u64, value: u32) {
        let hold = self.hold_value.compare_exchange(value, 0, Ordering::SeqCst, Ordering::SeqCst);
        if value != 0 && hold.is_ok() {
            self.held.store(true, Ordering::SeqCst);
            Self::gate(|| !self.release.load(Ordering::SeqCst));
        }
        sim.uar_write(offset, value)
    }
    fn wait_vector(&self, sim: &SimPlatform, vector: u16, timeout: Duration) -> u32 {
        if vector == pvrdma_abi::regs::IntrVector::Cq as u16 && self.park.load(Ordering::SeqCst) {
            self.parked.store(true, Ordering::SeqCst);
            Self::gate(|| self.park.load(Ordering::SeqCst));
            self.parked.store(false, Ordering::SeqCst);
        }
        sim.wait_vector(vector, timeout)
    }
}

/// BUG (suspected, item 4): after the CQ-notification ring was full, a CQ whose entry was
/// dropped and whose CQE the consumer already polled stays armed in the driver while the device
/// is not. The IBTA model fires (disarms) the CQ's arm and then drops the entry on the full ring;
/// the recovery pass (`EventRings::recover_dropped`) fired only armed CQs *holding unpolled CQEs*,
/// so this one kept the driver's arm: `ArmMachine::ensure` then believes it armed and never rings
/// the doorbell again, and every later notify request or upcall on the CQ hangs. Violates design
/// decision 3 ("a full ring never stalls events").
#[test]
fn after_a_full_notification_ring_a_cq_whose_entry_was_dropped_is_armed_again() {
    let g = Gated::new(SimConfig::default());
    let dev = hca::probe(g.clone(), Default::default()).unwrap();
    let d = g.sim.device().clone();
    let x = dev.create_cq(16, None).unwrap();
    let filler = dev.create_cq(16, None).unwrap();
    g.park_cq_vector();
    let req = x.notify(NotifyKind::Next, false).unwrap();
    let arms = (x.armed(), d.cq_status(x.handle()).unwrap().arm);
    assert_eq!(arms, (Some(ArmKind::Next), ArmState::Next));
    // Fill the CQ-notification ring behind the driver's back: arm the filler CQ on the device only
    // (raw kernel-page doorbell) and complete into it, once per ring entry.
    let ring = hca::eq::NOTIFY_RING_ELEMS;
    for i in 0..ring {
        let arm = DoorbellOp::CqArmNext.encode(filler.handle(), ArmEncoding::Ibta).unwrap();
        d.uar_write(u64::from(arm.offset), arm.value);
        assert!(d.post_cqe(filler.handle(), &cqe(u64::from(i)), false));
        assert_eq!(drain(&filler), vec![u64::from(i)]);
    }
    assert_eq!(d.stats().notifications_dropped, 0);
    // X's CQE: the device fires X's arm (and disarms it), but the full ring drops its entry.
    assert!(d.post_cqe(x.handle(), &cqe(100), false));
    assert_eq!(d.stats().notifications_dropped, 1);
    assert_eq!(d.cq_status(x.handle()).unwrap().arm, ArmState::Disarmed);
    // A busy consumer polls it before the driver gets to the ring.
    assert_eq!(drain(&x), vec![100]);
    // The driver drains the full ring (1024 spurious entries) and runs its recovery pass.
    g.unpark_cq_vector();
    wait_for(WAIT, "the driver to drain the full ring", || stats(&dev).spurious_cq_notifications >= u64::from(ring));
    // A barrier: every arm takes the notification ring's lock, so this returns only once that
    // drain (and its recovery pass) is over.
    drop(filler.notify(NotifyKind::ErrorOnly, false).unwrap());
    assert_eq!(x.armed(), Some(ArmKind::Next), "the driver still waits for X's next completion");
    let device_arm = d.cq_status(x.handle()).unwrap().arm;
    // The next completion raises the event the request waits for.
    assert!(d.post_cqe(x.handle(), &cqe(101), false));
    assert_eq!(
        req.wait(WAIT),
        Ok(NotifyStatus::Success),
        "the driver believes X armed, the device's arm was {device_arm:?}: the request hangs"
    );
    assert_eq!(drain(&x), vec![101]);
    // And later requests arm the device again.
    let req = x.notify(NotifyKind::Next, false).unwrap();
    assert!(d.post_cqe(x.handle(), &cqe(102), false));
    assert_eq!(req.wait(WAIT), Ok(NotifyStatus::Success));
}

/// Meets the other party at `m` (two parties), or gives up after [`WAIT`].
fn meet(m: &(Mutex<u32>, Condvar)) {
    let mut n = m.0.lock().unwrap();
    *n += 1;
    m.1.notify_all();
    let deadline = Instant::now() + WAIT;
    while *n < 2 && Instant::now() < deadline {
        n = m.1.wait_timeout(n, deadline - Instant::now()).unwrap().0;
    }
}

/// BUG (suspected, item 5): CQ A's upcall destroys CQ B while B's upcall destroys A. Each destroy
/// stops the other CQ's dispatcher and joins its thread (`Dispatcher::stop`), which is inside its
/// upcall destroying the first CQ: each waits for the other for ever. Destroying from inside an
/// upcall must never wait for another dispatcher thread.
#[test]
fn upcalls_destroying_each_others_cq_do_not_deadlock() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device().clone();
    let (a, b) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let (ha, hb) = (a.handle(), b.handle());
    let slot_a = Arc::new(Mutex::new(None::<Cq>));
    let slot_b = Arc::new(Mutex::new(None::<Cq>));
    let both_in = Arc::new((Mutex::new(0u32), Condvar::new()));
    let (done_tx, done_rx) = mpsc::channel::<(u32, Result<(), Error>)>();
    let destroyer = |me: u32, other: Arc<Mutex<Option<Cq>>>| {
        let (both_in, done_tx) = (both_in.clone(), done_tx.clone());
        move |_: &Cq, _: NotifyStatus| {
            let taken = other.lock().unwrap().take();
            if let Some(cq) = taken {
                meet(&both_in); // both upcalls run: each destroys the other's CQ
                let r = cq.destroy(Some(Duration::ZERO)).map_err(|(_, e)| e);
                let _ = done_tx.send((me, r));
            }
        }
    };
    a.set_upcall(UpcallPolicy::ManyInstance, destroyer(ha, slot_b.clone())).unwrap();
    b.set_upcall(UpcallPolicy::ManyInstance, destroyer(hb, slot_a.clone())).unwrap();
    *slot_a.lock().unwrap() = Some(a);
    *slot_b.lock().unwrap() = Some(b);
    assert!(d.post_cqe(ha, &cqe(1), false));
    assert!(d.post_cqe(hb, &cqe(2), false));
    let mut done = Vec::new();
    for _ in 0..2 {
        match done_rx.recv_timeout(WAIT) {
            Ok(r) => done.push(r),
            Err(_) => panic!("deadlock: upcalls destroying each other's CQ hung; done: {done:?}"),
        }
    }
    done.sort_by_key(|r| r.0);
    let mut want = vec![(ha, Ok(())), (hb, Ok(()))];
    want.sort_by_key(|r| r.0);
    assert_eq!(done, want);
    // Both CQs go from the device once their upcalls have returned.
    wait_for(WAIT, "both CQs to be destroyed on the device", || d.cq_status(ha).is_none() && d.cq_status(hb).is_none());
}

/// Item 7 (the tap's disarm race), now closed by construction: on QEMU 7.2 `ARM` alone clears the
/// device's arm, and the old tap wrote a consumer's disarm outside the arm lock, racing another
/// client's arm. There is one arm route now and no verb writes a disarm; the only disarm left is a
/// raw doorbell, which bypasses the driver. Even that, racing a notify request (the raw write held
/// in flight here), cannot lose the request: the driver still believes the CQ armed, and QEMU's
/// per-CQE notification entry, found by the next drain, fires it.
#[test]
fn qemu72_a_raw_disarm_racing_a_notify_request_does_not_lose_it() {
    let g = Gated::new(SimConfig { profile: Profile::Qemu72, ..SimConfig::default() });
    let dev = hca::probe(g.clone(), Default::default()).unwrap();
    let d = g.sim.device().clone();
    let ctx = dev.alloc_ucontext().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let h = cq.handle();
    let hc = cq_handle(&cq);
    g.hold_uar_write(DoorbellOp::CqArmNext.encode(h, ArmEncoding::Ibta).unwrap().value);
    let disarmer = std::thread::spawn(move || {
        doorbells(&ctx).cq_arm_next(&hc, ArmEncoding::Ibta).unwrap();
        ctx
    });
    g.wait_held();
    // The disarm is in flight; another client (a notify request) arms the CQ meanwhile.
    let armer = std::thread::spawn(move || {
        let req = cq.notify(NotifyKind::Next, false).unwrap();
        (cq, req)
    });
    std::thread::sleep(SETTLE);
    g.release();
    let _ctx = disarmer.join().unwrap();
    let (cq, req) = armer.join().unwrap();
    assert_eq!(cq.armed(), Some(ArmKind::Next), "the raw write never reaches the driver's state");
    assert_eq!(d.cq_status(h).unwrap().arm, ArmState::Disarmed, "the raw ARM cleared QEMU's arm");
    assert!(d.post_cqe(h, &cqe(1), false));
    assert_eq!(req.wait(WAIT), Ok(NotifyStatus::Success));
}

/// Guard for item 6 (idle dispatchers sleep until woken, with no periodic wake): an upcall still
/// pending when the dispatcher is replaced — here a CQ error raised while the old upcall was busy —
/// reaches exactly one upcall, the old one (if it took it before it was stopped) or the new one.
/// Without a periodic wake the new dispatcher must be woken for it when it is installed.
#[test]
fn a_cq_error_pending_when_the_upcall_is_replaced_is_not_lost() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device().clone();
    let cq = dev.create_cq(16, None).unwrap();
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (rep_tx, rep_rx) = mpsc::channel::<(&str, NotifyStatus)>();
    let old_rep = rep_tx.clone();
    let mut first = true;
    cq.set_upcall(UpcallPolicy::ManyInstance, move |_: &Cq, st| {
        if std::mem::take(&mut first) {
            let _ = entered_tx.send(());
            let _ = gate_rx.recv_timeout(WAIT);
            return;
        }
        let _ = old_rep.send(("old", st));
    })
    .unwrap();
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    entered_rx.recv_timeout(WAIT).expect("first upcall");
    // The CQ overflows (CQ_ERR) while the old upcall is busy: an Overrun upcall is pending.
    d.inject_async_event(pvrdma_abi::event::EqeType::CqErr, cq.handle());
    wait_for(WAIT, "the driver to take the CQ_ERR", || {
        cq.notify(NotifyKind::ErrorOnly, false).unwrap().status() == Some(NotifyStatus::Overrun)
    });
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let _ = gate_tx.send(());
    });
    cq.set_upcall(UpcallPolicy::ManyInstance, move |_: &Cq, st| {
        let _ = rep_tx.send(("new", st));
    })
    .unwrap();
    releaser.join().unwrap();
    let got = rep_rx.recv_timeout(WAIT).expect("the pending Overrun reached no upcall (lost)");
    assert_eq!(got.1, NotifyStatus::Overrun, "{got:?}");
    assert!(rep_rx.recv_timeout(SETTLE).is_err(), "the Overrun was delivered twice");
}
