//! What the event paths know about a CQ: [`CqState`], shared by the CQ object and
//! [`crate::eq::EventHub`]'s handle table. It holds the CQ's arm state machine
//! ([`crate::arm::ArmMachine`]) over [`DevCqHw`] (the CQ's ring state and its kernel-page arm
//! doorbell), the completion channel it delivers into, the per-CQ event accounting that
//! destroying the CQ waits on, and the guard that keeps a CQ's interrupt or async-event handling
//! and its destruction apart.

use crate::arm::{ArmKind, ArmMachine, ArmOp, CqHw, Fired};
use crate::channel::CompChannel;
use crate::eq::EventHub;
use crate::platform::{Iova, Platform};
use crate::upcall::{in_callback, Wake};
use doorbell::CqArmDoorbell;
use parking_lot::{Condvar, Mutex, RwLock};
use pvrdma_abi::ring::{ring_count, RX_CONS_HEAD, RX_PROD_TAIL};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long tearing a CQ down waits for an interrupt or async-event handler that is using it
/// (a consumer's async handler can block; the wait is bounded and then logged).
pub const RETIRE_WAIT: Duration = Duration::from_secs(5);

/// Where a CQ's ring state is, so the event paths can tell whether it holds unpolled CQEs without
/// taking the CQ's ring lock.
pub(crate) struct RingProbe {
    pub(crate) platform: Arc<dyn Platform>,
    /// Device address of the ring-state page (the driver's `cons_head` is kept current there).
    pub(crate) state: Iova,
    pub(crate) elems: u32,
}

/// The device side of one CQ as its arm state machine sees it.
pub struct DevCqHw {
    probe: Option<RingProbe>,
    /// The CQ's arm doorbell on the kernel's UAR page, written straight to BAR2 (not through
    /// [`crate::uar::UarTap`]: the machine updates its own state).
    arm: Option<CqArmDoorbell>,
    /// The device's event hub, whose CQ-notification ring every arm drains first
    /// ([`CqHw::fenced`]). Weak: the hub's CQ table holds this CQ.
    hub: Option<Weak<EventHub>>,
}

impl DevCqHw {
    pub(crate) fn new(
        probe: Option<RingProbe>,
        arm: Option<CqArmDoorbell>,
        hub: Option<Weak<EventHub>>,
    ) -> Self {
        Self { probe, arm, hub }
    }
}

impl CqHw for DevCqHw {
    /// Reads the ring state (the device's `prod_tail`, the driver's `cons_head`). An index out of
    /// range counts as "yes": the consumer's next poll reports the fault. Unreachable ring memory
    /// counts as "no".
    fn has_unpolled(&self) -> bool {
        let Some(p) = &self.probe else { return false };
        let load = |off: u64| p.platform.dma_load_u32(p.state + off);
        match (load(RX_PROD_TAIL), load(RX_CONS_HEAD)) {
            (Ok(prod), Ok(cons)) => !matches!(ring_count(prod, cons, p.elems), Some(0)),
            _ => false,
        }
    }

    /// SOLICITED where the encoding has it; on QEMU 7.2 (which cannot express it) NEXT, which
    /// fires no later.
    fn ring_arm(&self, kind: ArmKind) {
        let Some(db) = &self.arm else { return };
        match kind {
            ArmKind::Next => db.arm_next(),
            ArmKind::Solicited => {
                if !db.arm_solicited() {
                    db.arm_next();
                }
            }
        }
    }

    /// Drains the device's CQ-notification ring and runs `change` under the ring's lock
    /// ([`EventHub::fenced`]).
    fn fenced<R>(&self, change: impl FnOnce() -> R) -> R {
        match self.hub.as_ref().and_then(Weak::upgrade) {
            Some(hub) => hub.fenced(change),
            None => change(),
        }
    }
}

#[derive(Default)]
struct Acks {
    /// Events taken from the channel by a consumer (`get_cq_event`).
    obtained: u64,
    /// Of those, acknowledged (`ack_events`).
    acked: u64,
}

#[derive(Default)]
struct Busy {
    /// Event-path handlers using the CQ right now.
    users: u32,
    /// The CQ left the handle table: no new handler may start.
    retired: bool,
}

static UIDS: AtomicU64 = AtomicU64::new(1);

/// What the event paths know about a CQ (shared with [`crate::eq::EventHub`]'s handle table).
pub struct CqState {
    handle: u32,
    uid: u64,
    ctx: Option<u32>,
    machine: ArmMachine<DevCqHw>,
    channel: Option<CompChannel>,
    overrun: AtomicBool,
    qps: RwLock<HashSet<u32>>,
    events: AtomicU64,
    acks: Mutex<Acks>,
    acks_cv: Condvar,
    busy: Mutex<Busy>,
    busy_cv: Condvar,
    upcall: Mutex<Option<Arc<Wake>>>,
}

/// Keeps a CQ's state from being retired while an event path handles it.
pub struct BusyGuard<'a>(&'a CqState);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        let mut b = self.0.busy.lock();
        b.users -= 1;
        if b.users == 0 {
            self.0.busy_cv.notify_all();
        }
    }
}

impl CqState {
    pub(crate) fn new(
        handle: u32,
        ctx: Option<u32>,
        channel: Option<CompChannel>,
        hw: DevCqHw,
    ) -> Self {
        Self {
            handle,
            uid: UIDS.fetch_add(1, Ordering::Relaxed),
            ctx,
            machine: ArmMachine::new(hw),
            channel,
            overrun: AtomicBool::new(false),
            qps: RwLock::new(HashSet::new()),
            events: AtomicU64::new(0),
            acks: Mutex::new(Acks::default()),
            acks_cv: Condvar::new(),
            busy: Mutex::new(Busy::default()),
            busy_cv: Condvar::new(),
            upcall: Mutex::new(None),
        }
    }

    /// The device's CQ handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// A number no other CQ of this process has (handles are reused by the device).
    pub fn uid(&self) -> u64 {
        self.uid
    }

    /// The owning user context's handle, `None` for a kernel CQ.
    pub fn ctx(&self) -> Option<u32> {
        self.ctx
    }

    /// The CQ's arm state machine.
    pub fn machine(&self) -> &ArmMachine<DevCqHw> {
        &self.machine
    }

    /// The channel the CQ delivers into.
    pub(crate) fn channel(&self) -> Option<&CompChannel> {
        self.channel.as_ref()
    }

    /// Applies a CQ doorbell (the channel client's arm or QEMU 7.2's disarm) that `write` writes
    /// to the device, as one step of the arm state machine ([`ArmMachine::doorbell`]).
    pub fn apply_doorbell(&self, op: ArmOp, write: impl FnOnce()) {
        self.machine.doorbell(op, write);
    }

    /// Starts handling an interrupt or async event for this CQ; `None` once the CQ is retired
    /// (being destroyed): the event is then for a CQ that is gone.
    pub fn enter(&self) -> Option<BusyGuard<'_>> {
        let mut b = self.busy.lock();
        if b.retired {
            return None;
        }
        b.users += 1;
        Some(BusyGuard(self))
    }

    /// Retires the state after it left the handle table: waits until no event path uses it (at
    /// most [`RETIRE_WAIT`]; not at all from inside this CQ's own callback, which would wait for
    /// itself). After this, nothing the event paths do touches the CQ's ring.
    pub(crate) fn retire(&self) {
        self.quiesce(true);
    }

    /// Waits (as [`CqState::retire`]) until no event path uses the CQ; with `retire`, no new one
    /// may start. Without it, used after the arm state machine is closed: a handler that starts
    /// later reaches no client, and one that started before has delivered when this returns.
    pub(crate) fn quiesce(&self, retire: bool) {
        let mut b = self.busy.lock();
        b.retired |= retire;
        if in_callback(self.uid) {
            return;
        }
        let deadline = Instant::now() + RETIRE_WAIT;
        while b.users > 0 {
            if self.busy_cv.wait_until(&mut b, deadline).timed_out() && b.users > 0 {
                tracing::warn!(cq = self.handle, "CQ destroyed while a handler still uses it");
                return;
            }
        }
    }

    /// Acts on what a fired (or erred) arm reached: one event into the channel, a wake-up for
    /// the dispatcher.
    pub fn deliver(self: &Arc<Self>, fired: Fired) {
        if fired.channel {
            self.events.fetch_add(1, Ordering::Relaxed);
            if let Some(ch) = &self.channel {
                ch.push(self);
            }
        }
        if fired.upcall {
            self.wake_upcall();
        }
    }

    /// Wakes the dispatcher if an upcall waits for it. Idle dispatchers sleep until woken (no
    /// periodic wake), so after a policy change or a new dispatcher, an upcall still pending (a
    /// CQ error the old dispatcher never took, kept across a DISABLE) needs this wake.
    pub(crate) fn wake_if_upcall_pending(&self) {
        if self.machine.upcall_pending() {
            self.wake_upcall();
        }
    }

    /// Wakes the dispatcher, if the CQ has one.
    pub(crate) fn wake_upcall(&self) {
        if let Some(w) = self.upcall.lock().as_ref() {
            w.wake();
        }
    }

    /// Installs (or removes) the dispatcher's wake-up.
    pub(crate) fn set_upcall_wake(&self, w: Option<Arc<Wake>>) {
        *self.upcall.lock() = w;
    }

    /// A consumer took one of this CQ's events from its channel (called under the channel's lock).
    pub(crate) fn note_obtained(&self) {
        self.acks.lock().obtained += 1;
    }

    /// Acknowledges up to `n` obtained events; returns how many were acknowledged.
    pub(crate) fn ack(&self, n: u32) -> u32 {
        let mut a = self.acks.lock();
        let k = u64::from(n).min(a.obtained - a.acked);
        a.acked += k;
        self.acks_cv.notify_all();
        k as u32
    }

    /// Obtained events not yet acknowledged.
    pub(crate) fn unacked(&self) -> u64 {
        let a = self.acks.lock();
        a.obtained - a.acked
    }

    /// Waits until every obtained event is acknowledged, until `deadline`; returns the number
    /// still unacknowledged (0: done).
    pub(crate) fn wait_acked(&self, deadline: Instant) -> u64 {
        let mut a = self.acks.lock();
        while a.obtained > a.acked {
            if self.acks_cv.wait_until(&mut a, deadline).timed_out() {
                break;
            }
        }
        a.obtained - a.acked
    }

    /// Completion events delivered to the channel so far.
    pub(crate) fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Marks the CQ overrun (CQ_ERR).
    pub fn set_overrun(&self) {
        self.overrun.store(true, Ordering::Release);
    }

    /// Whether the CQ overflowed.
    pub(crate) fn overrun(&self) -> bool {
        self.overrun.load(Ordering::Acquire)
    }

    /// Records that QP `qp` completes into this CQ.
    pub fn attach_qp(&self, qp: u32) {
        self.qps.write().insert(qp);
    }

    /// Forgets QP `qp`.
    pub fn detach_qp(&self, qp: u32) {
        self.qps.write().remove(&qp);
    }

    /// The QP set, for a batch of lookups.
    pub(crate) fn qps(&self) -> parking_lot::RwLockReadGuard<'_, HashSet<u32>> {
        self.qps.read()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_arm_and_acks_are_per_cq() {
        let ch = CompChannel::new();
        let s = Arc::new(CqState::new(3, None, Some(ch.clone()), DevCqHw::new(None, None, None)));
        let other = Arc::new(CqState::new(4, None, Some(ch.clone()), DevCqHw::new(None, None, None)));
        for _ in 0..5 {
            if let Some(f) = s.machine().fire() {
                s.deliver(f);
            }
        }
        assert_eq!(ch.try_get_cq_event(), None);
        s.apply_doorbell(ArmOp::Arm(ArmKind::Next), || {});
        s.apply_doorbell(ArmOp::Arm(ArmKind::Solicited), || {});
        for _ in 0..5 {
            if let Some(f) = s.machine().fire() {
                s.deliver(f);
            }
        }
        assert_eq!((ch.try_get_cq_event(), ch.try_get_cq_event()), (Some(3), None));
        assert_eq!((s.events(), s.unacked()), (1, 1));
        assert_eq!(other.ack(1), 0, "another CQ's ack does not release this one");
        assert_eq!(s.unacked(), 1);
        assert_eq!(s.ack(5), 1);
        assert_eq!(s.wait_acked(Instant::now()), 0);
    }

    #[test]
    fn retire_waits_for_a_handler_and_refuses_new_ones() {
        let s = Arc::new(CqState::new(3, None, None, DevCqHw::new(None, None, None)));
        let g = s.enter().unwrap();
        let t = std::thread::spawn({
            let s = s.clone();
            move || {
                let t0 = Instant::now();
                s.retire();
                t0.elapsed()
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(g);
        assert!(t.join().unwrap() >= Duration::from_millis(40));
        assert!(s.enter().is_none());
    }
}
