//! One arm state machine per CQ.
//!
//! IBTA 11.4.2.5 (Request Completion Notification): an arm is one-shot; CQEs queued before an arm
//! raise no event; NEXT_COMPLETION after SOLICITED upgrades the arm, SOLICITED after
//! NEXT_COMPLETION keeps NEXT. The device keeps an arm of its own; the driver keeps this one, so
//! that at most one event is raised per arm whatever the device writes to its CQ-notification
//! ring, and so that several clients can share one hardware arm:
//!
//! - the **completion channel** client: arms with `Cq::req_notify` ([`ArmMachine::arm_channel`]);
//!   one event into the channel per fired arm;
//! - **notify requests** (`super::notify`): every outstanding NEXT or SOLICITED request joins
//!   its kind into the arm; the event completes all of them; ERROR_ONLY requests never arm;
//! - the **upcall dispatcher** (`super::upcall`): SINGLE_INSTANCE or MANY_INSTANCE arms for the
//!   next completion; after the event the driver re-arms for MANY_INSTANCE before the upcall runs.
//!
//! The hardware arm is the union (NEXT dominates SOLICITED) of what the waiting clients need;
//! after an event the driver re-arms if a client still waits. The device cannot say which CQE
//! fired an arm (a pvrdma CQE has no solicited bit), so while the union is NEXT a SOLICITED client
//! is completed by whatever fires it: early, never late. When only SOLICITED clients wait, the
//! hardware arm is SOLICITED and the IBTA rule holds exactly.
//!
//! There is one route to the hardware: every client's arm joins the machine's state and the
//! machine rings the provider's arm doorbell ([`CqHw::ring_arm`]) only when the arm grows. Every
//! path that may set the driver's arm (the channel's arm, a notify request, an upcall policy, the
//! MANY_INSTANCE re-arm) first lets the provider consume what the device reported before it and
//! holds that off while it arms ([`CqHw::fenced`], wrapped once in `ArmMachine::arming`), so a
//! report the device wrote before the arm — QEMU 7.2 writes a CQ-notification entry per CQE,
//! armed or not — is spent on the state before the arm and never fires it.
//!
//! The machine is written against [`CqHw`] (the CQ ring's fill state and its arm doorbell) and
//! the sync primitives of `hca/ib-core/src/sync.rs`, so the same code runs in the driver and in the loom
//! model check (`hca/ib-core/tests/loom_arm.rs`). The **re-poll after arming** lives here:
//! [`ArmMachine::request`] with `report_missed` arms, then looks at the ring once more and
//! completes the request at once if CQEs are queued — a CQE published between the consumer's last
//! empty poll and its arm raises no event (it came before the arm), so only that second look finds
//! it. The model check shows that without it a consumer can sleep forever beside a queued CQE.

use super::notify::{NotifyKind, NotifyRequest, NotifyStatus, RequestSlot};
use super::upcall::UpcallPolicy;
use crate::sync::{lock, Arc, Mutex};

/// What an arm waits for. `Next` dominates `Solicited` (the derived order is the join).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArmKind {
    /// The next solicited completion (a solicited receive CQE, or any error CQE).
    Solicited = 1,
    /// The next completion of any kind.
    Next = 2,
}

/// What the arm state machine needs from a CQ's hardware: the CQ ring view and the arm doorbell.
pub trait CqHw: Send + Sync {
    /// Whether the CQ ring holds CQEs the consumer has not polled (the device's producer index
    /// against the driver's consumer index). Must err towards `true` when unsure.
    fn has_unpolled(&self) -> bool;
    /// Rings the CQ's arm doorbell for `kind` (the driver's own arms go through the kernel's UAR
    /// page, which may arm any CQ: also a user context's — the arm mthca could not make).
    fn ring_arm(&self, kind: ArmKind);
    /// Runs `change` — a change that may set the driver's arm — only once every CQ-notification
    /// entry the device has written so far has been consumed, and with no entry consumed while
    /// it runs: an entry written before an arm then never fires that arm (QEMU 7.2 writes an
    /// entry for every CQE, armed or not). The machine wraps every path that may set its arm in
    /// this, in one place ([`ArmMachine`]'s `arming`); nothing else drains for it. Never called
    /// from the consumption of entries itself ([`ArmMachine::fire`],
    /// [`ArmMachine::recover_dropped`]). The default, for hardware without a notification ring
    /// (the loom model's fake), just runs it.
    fn fenced<R>(&self, change: impl FnOnce() -> R) -> R {
        change()
    }
}

/// Which clients an event reached, for the caller to act on outside the machine's lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    /// The completion-channel client had armed: queue one event into the CQ's channel.
    pub channel: bool,
    /// Notify requests completed by this event.
    pub requests: usize,
    /// An upcall is now pending: wake the CQ's dispatcher.
    pub upcall: bool,
}

#[derive(Default)]
struct State {
    /// The driver's one-shot arm: what the device was last told and has not yet fired.
    hw: Option<ArmKind>,
    /// The completion channel's one-shot arm.
    channel: Option<ArmKind>,
    /// Outstanding NEXT / SOLICITED / ERROR_ONLY requests (completed ones are pruned lazily).
    requests: Vec<Arc<RequestSlot>>,
    /// The dispatcher's policy; `None` when the CQ has no dispatcher.
    policy: Option<UpcallPolicy>,
    /// SINGLE_INSTANCE has made its one upcall since it was last enabled.
    single_spent: bool,
    /// An event for the dispatcher that it has not taken yet (coalesced).
    upcall_event: bool,
    /// An error for the dispatcher that it has not taken yet.
    upcall_error: Option<NotifyStatus>,
    /// The CQ's error, once it had one (Failure overrides Overrun).
    error: Option<NotifyStatus>,
    /// The CQ is being destroyed: new requests complete Cancelled, nothing arms.
    closed: bool,
}

impl State {
    /// What the waiting clients need armed.
    fn wanted(&mut self) -> Option<ArmKind> {
        self.requests.retain(|r| r.status().is_none());
        let requests = self.requests.iter().filter_map(|r| match r.kind() {
            NotifyKind::Next => Some(ArmKind::Next),
            NotifyKind::Solicited => Some(ArmKind::Solicited),
            NotifyKind::ErrorOnly => None,
        });
        let upcall = match self.policy {
            Some(UpcallPolicy::ManyInstance) => Some(ArmKind::Next),
            Some(UpcallPolicy::SingleInstance) if !self.single_spent => Some(ArmKind::Next),
            _ => None,
        };
        requests.chain(self.channel).chain(upcall).max()
    }

    fn upcall_enabled(&self) -> bool {
        match self.policy {
            Some(UpcallPolicy::ManyInstance) => true,
            Some(UpcallPolicy::SingleInstance) => !self.single_spent,
            _ => false,
        }
    }

    /// Completes every outstanding request whose kind `satisfied` accepts; returns how many.
    fn complete(&mut self, status: NotifyStatus, satisfied: impl Fn(NotifyKind) -> bool) -> usize {
        let mut n = 0;
        self.requests.retain(|r| {
            if !satisfied(r.kind()) {
                return r.status().is_none();
            }
            n += usize::from(r.complete(status));
            false
        });
        n
    }
}

/// The arm state machine of one CQ over its hardware `H`.
pub struct ArmMachine<H> {
    hw: H,
    st: Mutex<State>,
}

impl<H: CqHw> ArmMachine<H> {
    /// A machine for a new CQ: disarmed, no clients.
    pub fn new(hw: H) -> Self {
        Self { hw, st: Mutex::new(State::default()) }
    }

    /// The hardware the machine drives.
    pub fn hw(&self) -> &H {
        &self.hw
    }

    /// The driver's current arm (what the device was told and has not fired yet).
    pub fn armed(&self) -> Option<ArmKind> {
        lock(&self.st).hw
    }

    /// The CQ's error, once it had one.
    pub fn error(&self) -> Option<NotifyStatus> {
        lock(&self.st).error
    }

    /// Runs `change` on the state under the machine's lock, inside [`CqHw::fenced`]: the one
    /// place every path that may set the driver's arm goes through (`set_policy`, `request`,
    /// `rearm`, the MANY_INSTANCE re-arm in `take_upcall`, a CQ doorbell), so a notification
    /// entry written before the arm is consumed (spent on the old state) before the arm exists.
    fn arming<R>(&self, change: impl FnOnce(&mut State) -> R) -> R {
        self.hw.fenced(|| change(&mut lock(&self.st)))
    }

    /// Joins `want` into the hardware arm, ringing the doorbell only if the arm grows (repeated
    /// arms with no event in between are harmless and ring nothing new). Called with the lock
    /// held (from inside [`ArmMachine::arming`]), so arm state and doorbell stay in one order.
    fn ensure(&self, st: &mut State, want: Option<ArmKind>) {
        let Some(want) = want else { return };
        if st.hw.is_some_and(|hw| hw >= want) {
            return;
        }
        st.hw = Some(want);
        self.hw.ring_arm(want);
    }

    /// The completion-channel client arms for `kind` (`Cq::req_notify`, IBTA 11.4.2.5): joins it
    /// into the channel's want and the hardware arm, ringing the doorbell only if the arm grows
    /// (NEXT after SOLICITED upgrades; a repeated arm rings nothing). Nothing is armed once the CQ
    /// is closed or in error; returns the error, if any (read under the same lock as the arm).
    pub fn arm_channel(&self, kind: ArmKind) -> Option<NotifyStatus> {
        {
            // Already armed for at least this (the consumer that arms before every poll): nothing
            // would change, so nothing needs the fence. An event spending the arm meanwhile is an
            // event after this arm.
            let st = lock(&self.st);
            if st.error.is_some() || st.closed || (st.channel >= Some(kind) && st.hw >= st.channel) {
                return st.error;
            }
        }
        self.arming(|st| {
            if st.closed || st.error.is_some() {
                return st.error;
            }
            st.channel = st.channel.max(Some(kind));
            let want = st.wanted();
            self.ensure(st, want);
            None
        })
    }

    /// Re-arms the hardware for what the waiting clients need, if anything.
    pub fn rearm(&self) {
        self.arming(|st| {
            if st.closed || st.error.is_some() {
                return;
            }
            let want = st.wanted();
            self.ensure(st, want);
        })
    }

    /// A notify request of `kind` (see `super::notify`). NEXT and SOLICITED join the hardware
    /// arm; ERROR_ONLY does not arm. A CQ already in error completes the request at once with
    /// its error; a closed CQ with [`NotifyStatus::Cancelled`].
    ///
    /// With `report_missed`, after arming the ring is looked at once more: if CQEs are queued
    /// (they raise no event: they came before the arm) the request completes at once with
    /// [`NotifyStatus::Success`], and the caller polls them.
    pub fn request(&self, kind: NotifyKind, report_missed: bool) -> NotifyRequest {
        let slot = RequestSlot::new(kind);
        let done = self.arming(|st| {
            if st.closed {
                return Some(NotifyStatus::Cancelled);
            }
            if let Some(e) = st.error {
                return Some(e);
            }
            st.requests.push(slot.clone());
            let want = match kind {
                NotifyKind::Next => Some(ArmKind::Next),
                NotifyKind::Solicited => Some(ArmKind::Solicited),
                NotifyKind::ErrorOnly => None,
            };
            self.ensure(st, want);
            None
        });
        if let Some(status) = done {
            slot.complete(status);
            return NotifyRequest::new(slot);
        }
        // The re-poll after arming: outside the lock (it reads device memory).
        if report_missed && kind != NotifyKind::ErrorOnly && self.hw.has_unpolled() {
            slot.complete(NotifyStatus::Success);
        }
        NotifyRequest::new(slot)
    }

    /// The interrupt path: the device fired this CQ's arm (a CQ-notification entry for it).
    /// Spends the driver's arm and returns the clients it reached; `None` if the driver had not
    /// armed the CQ (the entry is spurious: QEMU 7.2 writes one per CQE).
    pub fn fire(&self) -> Option<Fired> {
        Self::fire_locked(&mut lock(&self.st))
    }

    fn fire_locked(st: &mut State) -> Option<Fired> {
        st.hw.take()?;
        let mut fired = Fired { channel: st.channel.take().is_some(), ..Fired::default() };
        fired.requests = st.complete(NotifyStatus::Success, |k| k != NotifyKind::ErrorOnly);
        if st.upcall_enabled() {
            st.upcall_event = true;
            fired.upcall = true;
            if st.policy == Some(UpcallPolicy::SingleInstance) {
                st.single_spent = true;
            }
        }
        Some(fired)
    }

    /// The recovery after a full CQ-notification ring (`eq.rs`), for a CQ the driver believes
    /// armed (else nothing). Its entry may have been dropped, and with it the device's arm may be
    /// spent (the IBTA model disarms before it writes the entry) while the driver's is not: every
    /// later `ensure` would then ring nothing and every later request or upcall would wait for
    /// ever. So the arm doorbell is rung again for the driver's arm (re-arming an armed CQ is
    /// harmless: IBTA's repeated arms), and *then* the ring is looked at: if it holds unpolled
    /// CQEs the arm fires now (they may be the dropped entry's; an early event is harmless, a lost
    /// one is not). A CQE published after the re-arm fires the device; one before it is seen by
    /// the look — the same arm-then-look-once-more as [`ArmMachine::request`]. Runs inside the
    /// consumption of entries (not fenced).
    pub fn recover_dropped(&self) -> Option<Fired> {
        let mut st = lock(&self.st);
        let kind = st.hw?;
        self.hw.ring_arm(kind);
        if !self.hw.has_unpolled() {
            return None;
        }
        Self::fire_locked(&mut st)
    }

    /// The CQ erred: `Overrun` (CQ_ERR: the CQ overflowed) or `Failure` (catastrophic device or
    /// CQ error). Every outstanding request completes with it (ERROR_ONLY ones included), the
    /// arm is spent (an erred CQ raises no completion event), later requests complete with it at
    /// once, and the dispatcher gets it. The channel client, if armed, gets its event so a
    /// consumer asleep on the channel wakes and polls (and finds the error).
    pub fn fail(&self, status: NotifyStatus) -> Fired {
        let mut st = lock(&self.st);
        // Told twice (the thread that found the fault, then the provider's report): once.
        if st.closed || st.error == Some(status) || st.error == Some(NotifyStatus::Failure) {
            return Fired::default();
        }
        st.error = Some(status);
        st.hw = None;
        let mut fired = Fired { channel: st.channel.take().is_some(), ..Fired::default() };
        fired.requests = st.complete(status, |_| true);
        // A disabled or spent dispatcher gets nothing now; the error waits for its re-enable.
        if st.policy.is_some() {
            st.upcall_error = Some(status);
            fired.upcall = st.upcall_enabled();
        }
        fired
    }

    /// The CQ is being destroyed: every outstanding request completes
    /// [`NotifyStatus::Cancelled`], the dispatcher is dropped, and later fires reach no client.
    pub fn close(&self) {
        let mut st = lock(&self.st);
        st.closed = true;
        st.complete(NotifyStatus::Cancelled, |_| true);
        st.channel = None;
        st.hw = None;
        st.policy = None;
        st.upcall_event = false;
        st.upcall_error = None;
    }

    /// Outstanding (not yet completed) requests.
    pub fn outstanding(&self) -> usize {
        let mut st = lock(&self.st);
        st.requests.retain(|r| r.status().is_none());
        st.requests.len()
    }

    /// Sets the dispatcher's policy (`None`: the CQ has no dispatcher). Enabling
    /// (SINGLE_INSTANCE, MANY_INSTANCE) arms the CQ for its next completion and re-enables a
    /// spent SINGLE_INSTANCE; DISABLE drops an upcall that is pending and not started. CQEs
    /// already queued raise no upcall (IBTA): the consumer polls once more after enabling.
    /// Returns `false` (changing nothing) once the CQ is closed.
    pub fn set_policy(&self, policy: Option<UpcallPolicy>) -> bool {
        self.arming(|st| {
            if st.closed {
                return false;
            }
            st.policy = policy;
            st.single_spent = false;
            if !st.upcall_enabled() {
                st.upcall_event = false;
            }
            if st.upcall_enabled() && st.error.is_none() {
                self.ensure(st, Some(ArmKind::Next));
            }
            true
        })
    }

    /// Whether an upcall (an error or an event) waits for the dispatcher to take it.
    pub fn upcall_pending(&self) -> bool {
        let st = lock(&self.st);
        (st.upcall_error.is_some() && st.upcall_enabled()) || st.upcall_event
    }

    /// The dispatcher's policy, `None` without a dispatcher. A spent SINGLE_INSTANCE reads as
    /// [`UpcallPolicy::Disable`] ("disabled until re-enabled").
    pub fn policy(&self) -> Option<UpcallPolicy> {
        let st = lock(&self.st);
        match st.policy {
            Some(UpcallPolicy::SingleInstance) if st.single_spent => Some(UpcallPolicy::Disable),
            p => p,
        }
    }

    /// The dispatcher takes its next upcall: an error first, else a pending event. For a
    /// completion event under MANY_INSTANCE the CQ is re-armed *before* the upcall runs, so a CQE
    /// the upcall's polls miss raises the next event. A SINGLE_INSTANCE upcall was spent when its
    /// event fired ([`ArmMachine::fire`]); taking it spends nothing more, so a re-enable made
    /// while it was pending stays for the next completion (one enable, one upcall).
    pub fn take_upcall(&self) -> Option<NotifyStatus> {
        self.take_upcall_if(|| true)
    }

    /// [`ArmMachine::take_upcall`] for a dispatcher that may have been stopped: `live` is asked
    /// under the machine's lock, and a stopped dispatcher takes nothing (what is pending stays
    /// for the dispatcher that replaced it).
    pub fn take_upcall_if(&self, live: impl FnOnce() -> bool) -> Option<NotifyStatus> {
        self.arming(|st| {
            if !live() {
                return None;
            }
            if st.upcall_error.is_some() && st.upcall_enabled() {
                st.upcall_event = false;
                if st.policy == Some(UpcallPolicy::SingleInstance) {
                    st.single_spent = true;
                }
                return st.upcall_error.take();
            }
            if !std::mem::take(&mut st.upcall_event) {
                return None;
            }
            if st.policy == Some(UpcallPolicy::ManyInstance) && st.error.is_none() {
                self.ensure(st, Some(ArmKind::Next));
            }
            Some(NotifyStatus::Success)
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
