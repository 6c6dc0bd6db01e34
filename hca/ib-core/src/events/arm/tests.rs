//! The arm state machine's unit tests, against a fake CQ that records its doorbells and fences
//! (the loom model check of the same machine is `tests/loom_arm.rs`).

use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[derive(Default)]
struct Hw {
    queued: AtomicBool,
    rung: std::sync::Mutex<Vec<ArmKind>>,
    /// Inside `fenced` right now.
    fenced: AtomicBool,
    /// `fenced` calls so far.
    fences: AtomicUsize,
    /// Doorbells rung outside `fenced`.
    unfenced: AtomicUsize,
}

impl CqHw for Hw {
    fn has_unpolled(&self) -> bool {
        self.queued.load(Ordering::SeqCst)
    }
    fn ring_arm(&self, kind: ArmKind) {
        if !self.fenced.load(Ordering::SeqCst) {
            self.unfenced.fetch_add(1, Ordering::SeqCst);
        }
        self.rung.lock().unwrap().push(kind);
    }
    fn fenced<R>(&self, change: impl FnOnce() -> R) -> R {
        self.fences.fetch_add(1, Ordering::SeqCst);
        assert!(!self.fenced.swap(true, Ordering::SeqCst), "fenced re-entered");
        let r = change();
        self.fenced.store(false, Ordering::SeqCst);
        r
    }
}

fn rung(m: &ArmMachine<Hw>) -> Vec<ArmKind> {
    std::mem::take(&mut *m.hw().rung.lock().unwrap())
}

#[test]
fn a_new_cq_starts_disarmed_and_spurious_fires_reach_nobody() {
    let m = ArmMachine::new(Hw::default());
    assert_eq!(m.armed(), None);
    assert_eq!(m.fire(), None);
}

#[test]
fn channel_arms_join_and_fire_once() {
    let m = ArmMachine::new(Hw::default());
    m.arm_channel(ArmKind::Solicited);
    m.arm_channel(ArmKind::Next);
    m.arm_channel(ArmKind::Solicited);
    assert_eq!(m.armed(), Some(ArmKind::Next));
    assert_eq!(rung(&m), vec![ArmKind::Solicited, ArmKind::Next], "rung only when it grows");
    assert_eq!(m.fire(), Some(Fired { channel: true, ..Default::default() }));
    assert_eq!(m.fire(), None);
    m.arm_channel(ArmKind::Next);
    assert_eq!(rung(&m), vec![ArmKind::Next], "a fired arm is rung again");
}

#[test]
fn requests_union_their_kinds_and_all_complete_on_one_event() {
    let m = ArmMachine::new(Hw::default());
    let s = m.request(NotifyKind::Solicited, false);
    let s2 = m.request(NotifyKind::Solicited, false);
    let e = m.request(NotifyKind::ErrorOnly, false);
    assert_eq!(rung(&m), vec![ArmKind::Solicited], "a repeated arm rings nothing new");
    let n = m.request(NotifyKind::Next, false);
    assert_eq!(rung(&m), vec![ArmKind::Next], "NEXT upgrades");
    assert_eq!(m.outstanding(), 4);
    let f = m.fire().unwrap();
    assert_eq!((f.channel, f.requests, f.upcall), (false, 3, false));
    for r in [&s, &s2, &n] {
        assert_eq!(r.status(), Some(NotifyStatus::Success));
    }
    assert_eq!(e.status(), None, "ERROR_ONLY waits for an error");
    assert_eq!(m.armed(), None, "ERROR_ONLY does not re-arm");
    m.fail(NotifyStatus::Overrun);
    assert_eq!(e.status(), Some(NotifyStatus::Overrun));
    let late = m.request(NotifyKind::Next, true);
    assert_eq!(late.status(), Some(NotifyStatus::Overrun));
    m.fail(NotifyStatus::Failure);
    assert_eq!(m.error(), Some(NotifyStatus::Failure));
    assert_eq!(m.request(NotifyKind::ErrorOnly, false).status(), Some(NotifyStatus::Failure));
}

#[test]
fn report_missed_completes_at_once_when_cqes_are_queued() {
    let m = ArmMachine::new(Hw::default());
    assert_eq!(m.request(NotifyKind::Next, true).status(), None);
    m.hw().queued.store(true, Ordering::SeqCst);
    assert_eq!(m.request(NotifyKind::Next, true).status(), Some(NotifyStatus::Success));
    assert_eq!(m.request(NotifyKind::Next, false).status(), None);
    assert_eq!(m.request(NotifyKind::ErrorOnly, true).status(), None);
}

#[test]
fn cancelled_requests_leave_the_union_and_close_cancels_the_rest() {
    let m = ArmMachine::new(Hw::default());
    let a = m.request(NotifyKind::Next, false);
    let b = m.request(NotifyKind::ErrorOnly, false);
    assert_eq!(a.cancel(), NotifyStatus::Cancelled);
    assert_eq!(m.outstanding(), 1);
    m.close();
    assert_eq!(b.status(), Some(NotifyStatus::Cancelled));
    assert_eq!(m.request(NotifyKind::Next, false).status(), Some(NotifyStatus::Cancelled));
    assert!(!m.set_policy(Some(UpcallPolicy::ManyInstance)));
}

#[test]
fn upcall_policies() {
    let m = ArmMachine::new(Hw::default());
    assert!(m.set_policy(Some(UpcallPolicy::SingleInstance)));
    assert_eq!(rung(&m), vec![ArmKind::Next]);
    assert!(m.fire().unwrap().upcall);
    assert_eq!(m.policy(), Some(UpcallPolicy::Disable), "SINGLE_INSTANCE is spent");
    assert_eq!(m.take_upcall(), Some(NotifyStatus::Success));
    assert_eq!(m.take_upcall(), None);
    assert!(rung(&m).is_empty(), "a spent SINGLE_INSTANCE is not re-armed");
    m.arm_channel(ArmKind::Next);
    rung(&m);
    assert!(!m.fire().unwrap().upcall);
    m.set_policy(Some(UpcallPolicy::ManyInstance));
    assert_eq!(rung(&m), vec![ArmKind::Next]);
    assert!(m.fire().unwrap().upcall);
    assert!(m.fire().is_none());
    assert_eq!(m.take_upcall(), Some(NotifyStatus::Success));
    assert_eq!(rung(&m), vec![ArmKind::Next], "MANY_INSTANCE re-arms before the upcall");
    assert!(m.fire().unwrap().upcall);
    m.set_policy(Some(UpcallPolicy::Disable));
    assert_eq!(m.take_upcall(), None, "DISABLE drops a pending upcall");
    m.set_policy(Some(UpcallPolicy::ManyInstance));
    assert!(m.fail(NotifyStatus::Overrun).upcall);
    assert_eq!(m.take_upcall(), Some(NotifyStatus::Overrun));
}

/// Issue 7, kind 3: a spent SINGLE_INSTANCE (it reads DISABLE) or a DISABLE dispatcher gets
/// no error upcall; the error waits for the re-enable, which it spends.
#[test]
fn a_disabled_or_spent_dispatcher_gets_no_error_until_enabled_again() {
    for spend in [true, false] {
        let m = ArmMachine::new(Hw::default());
        if spend {
            m.set_policy(Some(UpcallPolicy::SingleInstance));
            assert!(m.fire().unwrap().upcall);
            assert_eq!(m.take_upcall(), Some(NotifyStatus::Success));
        } else {
            m.set_policy(Some(UpcallPolicy::Disable));
        }
        assert_eq!(m.policy(), Some(UpcallPolicy::Disable));
        assert!(!m.fail(NotifyStatus::Overrun).upcall, "spend {spend}");
        assert!(!m.upcall_pending());
        assert_eq!(m.take_upcall(), None, "spend {spend}: delivered while disabled");
        m.set_policy(Some(UpcallPolicy::SingleInstance));
        assert!(m.upcall_pending());
        assert_eq!(m.take_upcall(), Some(NotifyStatus::Overrun));
        assert_eq!(m.policy(), Some(UpcallPolicy::Disable), "the error spent it");
        assert_eq!(m.take_upcall(), None);
    }
}

/// Bug 1: `take_upcall` marked SINGLE_INSTANCE spent a second time, undoing a re-enable made
/// while the upcall of an earlier event was pending.
#[test]
fn single_instance_reenabled_while_its_upcall_is_pending_stays_enabled() {
    let m = ArmMachine::new(Hw::default());
    m.set_policy(Some(UpcallPolicy::SingleInstance));
    assert!(m.fire().unwrap().upcall, "event 1: the upcall is pending, SINGLE is spent");
    m.set_policy(Some(UpcallPolicy::SingleInstance));
    assert_eq!(m.take_upcall(), Some(NotifyStatus::Success), "event 1's upcall");
    assert_eq!(m.policy(), Some(UpcallPolicy::SingleInstance), "the re-enable stands");
    assert!(m.fire().unwrap().upcall, "event 2 after the re-enable raises its upcall");
    assert_eq!(m.take_upcall(), Some(NotifyStatus::Success));
    assert_eq!(m.policy(), Some(UpcallPolicy::Disable));
    assert!(m.fire().is_none(), "spent: not re-armed");
}

/// Bug 2: every path that may set the driver's arm runs inside `CqHw::fenced` (the drain of
/// the notification ring) and rings the doorbell only there.
#[test]
fn every_arming_path_is_fenced() {
    let m = ArmMachine::new(Hw::default());
    let fences = |m: &ArmMachine<Hw>| m.hw().fences.swap(0, Ordering::SeqCst);
    m.set_policy(Some(UpcallPolicy::ManyInstance));
    assert_eq!(fences(&m), 1, "set_policy");
    m.fire();
    m.take_upcall();
    assert_eq!(fences(&m), 1, "the MANY_INSTANCE re-arm in take_upcall");
    m.fire();
    m.rearm();
    assert_eq!(fences(&m), 1, "rearm");
    m.fire();
    let _r = m.request(NotifyKind::Next, false);
    assert_eq!(fences(&m), 1, "request");
    m.fire();
    m.arm_channel(ArmKind::Next);
    assert_eq!(fences(&m), 1, "the channel's arm");
    assert_eq!(rung(&m).len(), 5);
    assert_eq!(m.hw().unfenced.load(Ordering::SeqCst), 0, "a doorbell rung outside the fence");
}

/// Item 4: after a full notification ring, a CQ the driver believes armed is armed again on
/// the device (its entry, and with it the device's arm, may be gone), then fired only if it
/// holds unpolled CQEs.
#[test]
fn recovery_rings_the_arm_again_and_fires_only_with_cqes_queued() {
    let m = ArmMachine::new(Hw::default());
    assert_eq!(m.recover_dropped(), None);
    assert!(rung(&m).is_empty(), "a disarmed CQ is left alone");
    let r = m.request(NotifyKind::Solicited, false);
    rung(&m);
    assert_eq!(m.recover_dropped(), None, "nothing queued: no event");
    assert_eq!(rung(&m), vec![ArmKind::Solicited], "but the device is armed again");
    assert_eq!(m.armed(), Some(ArmKind::Solicited));
    m.hw().queued.store(true, Ordering::SeqCst);
    assert_eq!(m.recover_dropped().map(|f| f.requests), Some(1));
    assert_eq!(rung(&m), vec![ArmKind::Solicited], "armed again before the look");
    assert_eq!((m.armed(), r.status()), (None, Some(NotifyStatus::Success)));
}

#[test]
fn a_stopped_dispatcher_takes_nothing() {
    let m = ArmMachine::new(Hw::default());
    m.set_policy(Some(UpcallPolicy::ManyInstance));
    m.fire();
    assert_eq!(m.take_upcall_if(|| false), None);
    assert_eq!(m.take_upcall(), Some(NotifyStatus::Success), "left for the live dispatcher");
}
