//! Interrupt handling and the two device-written event rings of the DSR (Linux
//! `pvrdma_intr1_handler` / `pvrdma_intrx_handler`, mthca `mthca_eq.c`).
//!
//! [`EventHub`] is the state the vector threads share with the objects: the async-event ring
//! (vector 1), the CQ-notification ring (vector 2), the table of CQs by handle with their arm
//! state, the completion channels to wake on a fatal error, the async-event handler and the
//! counters. Each vector is serviced on its own thread that waits with a bound
//! ([`SERVICE_INTERVAL`]) and drains its ring on every wake-up, interrupt or not, so a ring the
//! device filled without raising (QEMU drops the interrupt when its ring is full) never stalls.
//! No thread ever posts a command (design decision 2).

use crate::arm::{ArmOp, Fired};
use crate::channel::{ChannelInner, CompChannel};
use crate::cq_state::CqState;
use crate::notify::NotifyStatus;
use crate::upcall::CallbackScope;
use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::ring::DevRing;
use crate::verbs::{AsyncEvent, DriverStats};
use parking_lot::{Mutex, RwLock};
use pvrdma_abi::event::{Cqne, Eqe};
use pvrdma_abi::regs::{IntrVector, REG_VERSION};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use zerocopy::FromBytes;

/// How long a vector thread sleeps before draining its ring anyway (and, for the async thread,
/// checking the device is still there).
pub const SERVICE_INTERVAL: Duration = Duration::from_millis(50);

/// Pages of each DSR ring, the ring-state page included (page 1 holds the entries).
pub const DSR_RING_PAGES: u32 = 2;
/// Async-event ring entries: one page of 8-byte [`Eqe`]s.
pub const ASYNC_RING_ELEMS: u32 = 4096 / 8;
/// CQ-notification ring entries: one page of 4-byte [`Cqe`](pvrdma_abi::event::Cqne)s.
pub const NOTIFY_RING_ELEMS: u32 = 4096 / 4;

/// A callback for async events, run on the async thread.
pub type AsyncHandler = Arc<dyn Fn(AsyncEvent) + Send + Sync>;

#[derive(Default)]
struct Counters {
    interrupts: [AtomicU64; 3],
    cq_events: AtomicU64,
    async_events: AtomicU64,
    spurious: AtomicU64,
}

/// Event state shared by the vector threads and the verbs objects of one device.
pub struct EventHub {
    platform: Arc<dyn Platform>,
    counters: Counters,
    fatal: AtomicBool,
    stop: AtomicBool,
    cqs: RwLock<HashMap<u32, Arc<CqState>>>,
    /// Handles of the live QPs (the device must never hand out one of them again).
    qps: Mutex<HashSet<u32>>,
    channels: Mutex<Vec<Weak<ChannelInner>>>,
    handler: Mutex<Option<AsyncHandler>>,
    async_ring: Mutex<DevRing>,
    notify_ring: Mutex<DevRing>,
}

impl EventHub {
    /// Allocates both DSR rings.
    pub fn new(platform: &Arc<dyn Platform>) -> Result<Arc<Self>> {
        let async_ring = DevRing::new(platform, ASYNC_RING_ELEMS, 8)?;
        let notify_ring = DevRing::new(platform, NOTIFY_RING_ELEMS, 4)?;
        debug_assert_eq!(async_ring.buf().num_pages() as u32, DSR_RING_PAGES);
        debug_assert_eq!(notify_ring.buf().num_pages() as u32, DSR_RING_PAGES);
        Ok(Arc::new(Self {
            platform: platform.clone(),
            counters: Counters::default(),
            fatal: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            cqs: RwLock::new(HashMap::new()),
            qps: Mutex::new(HashSet::new()),
            channels: Mutex::new(Vec::new()),
            handler: Mutex::new(None),
            async_ring: Mutex::new(async_ring),
            notify_ring: Mutex::new(notify_ring),
        }))
    }

    /// (pages, page-directory address) of the async-event ring, for the DSR.
    pub fn async_ring_info(&self) -> (u32, u64) {
        let r = self.async_ring.lock();
        (r.buf().num_pages() as u32, r.buf().dir().dma())
    }

    /// (pages, page-directory address) of the CQ-notification ring, for the DSR.
    pub fn notify_ring_info(&self) -> (u32, u64) {
        let r = self.notify_ring.lock();
        (r.buf().num_pages() as u32, r.buf().dir().dma())
    }

    /// Adds `n` interrupts taken on `vector` to the driver's count.
    pub fn count_interrupts(&self, vector: IntrVector, n: u32) {
        if n > 0 {
            self.counters.interrupts[vector as usize].fetch_add(u64::from(n), Ordering::Relaxed);
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> DriverStats {
        let c = &self.counters;
        DriverStats {
            interrupts: std::array::from_fn(|i| c.interrupts[i].load(Ordering::Relaxed)),
            cq_events: c.cq_events.load(Ordering::Relaxed),
            async_events: c.async_events.load(Ordering::Relaxed),
            spurious_cq_notifications: c.spurious.load(Ordering::Relaxed),
        }
    }

    /// Whether the device is in the catastrophic state.
    pub fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }

    /// Puts the device in the catastrophic state (once): every verb fails with
    /// [`Error::DeviceFatal`] afterwards, channel waiters wake with it, every CQ's notify requests
    /// complete with [`NotifyStatus::Failure`] and its dispatcher gets the failure, and the async
    /// handler gets [`AsyncEvent::DeviceFatal`].
    pub fn set_fatal(&self, reason: &str) {
        if self.fatal.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!(reason, "pvrdma device is fatal");
        let channels: Vec<_> = self.channels.lock().iter().filter_map(Weak::upgrade).collect();
        for ch in channels {
            ch.set_fatal();
        }
        let cqs: Vec<_> = self.cqs.read().values().cloned().collect();
        for cq in cqs {
            // Channel waiters already wake with DeviceFatal: no event for them.
            let fired = cq.machine().fail(NotifyStatus::Failure);
            cq.deliver(Fired { channel: false, ..fired });
        }
        self.dispatch(AsyncEvent::DeviceFatal);
    }

    /// Registers a channel to wake when the device goes fatal. A channel registered once the
    /// device is fatal is marked fatal at once. The flag is read under the list's lock, which
    /// [`EventHub::set_fatal`] takes after setting it: either `set_fatal` finds the channel in the
    /// list, or this finds the flag set — no channel is missed.
    pub fn register_channel(&self, ch: &CompChannel) {
        let mut list = self.channels.lock();
        if self.is_fatal() {
            drop(list);
            ch.set_fatal();
            return;
        }
        list.retain(|w| w.strong_count() > 0);
        list.push(ch.downgrade());
    }

    /// Installs the async-event handler (replacing any previous one).
    pub fn set_handler(&self, f: AsyncHandler) {
        *self.handler.lock() = Some(f);
    }

    /// Adds a CQ to the handle table.
    ///
    /// Errors: [`Error::DeviceFatal`] if the device handed out a handle that is already live.
    pub fn register_cq(&self, cq: Arc<CqState>) -> Result<()> {
        let mut t = self.cqs.write();
        if t.contains_key(&cq.handle()) {
            drop(t);
            self.set_fatal("device returned a CQ handle that is in use");
            return Err(Error::DeviceFatal);
        }
        t.insert(cq.handle(), cq);
        Ok(())
    }

    /// Removes a CQ from the handle table; later notifications for it count as spurious.
    pub fn unregister_cq(&self, handle: u32) {
        self.cqs.write().remove(&handle);
    }

    /// Records a QP handle the device just returned.
    ///
    /// Errors: [`Error::DeviceFatal`] if the handle is already live (the device handed out a QP
    /// handle twice): logged, and the device is made fatal, as for a duplicate CQ handle.
    pub fn register_qp(&self, handle: u32) -> Result<()> {
        if self.qps.lock().insert(handle) {
            return Ok(());
        }
        tracing::error!(qpn = handle, "device returned a QP handle that is in use");
        self.set_fatal("device returned a QP handle that is in use");
        Err(Error::DeviceFatal)
    }

    /// Forgets a destroyed QP's handle.
    pub fn unregister_qp(&self, handle: u32) {
        self.qps.lock().remove(&handle);
    }

    fn cq(&self, handle: u32) -> Option<Arc<CqState>> {
        self.cqs.read().get(&handle).cloned()
    }

    /// A CQ doorbell written (by `write`) through a UAR page owned by `owner` (`None`: the
    /// kernel page, which may arm any CQ): applied to the CQ's arm state machine (the completion
    /// channel's arm, or QEMU 7.2's disarm) in the same step as the write
    /// ([`crate::arm::ArmMachine::doorbell`], which drains the notification ring first, so
    /// entries written before this arm fire nothing new). A doorbell the device would refuse (a
    /// CQ of another context) or for an unknown CQ is only written.
    pub fn cq_doorbell(&self, handle: u32, op: ArmOp, owner: Option<u32>, write: impl FnOnce()) {
        match self.cq(handle) {
            Some(cq) if owner.is_none() || cq.ctx() == owner => cq.apply_doorbell(op, write),
            _ => write(),
        }
    }

    /// Consumes every CQ-notification entry: an entry for a CQ the driver armed fires it (one
    /// event, and the arm is spent); any other entry is counted as spurious. Entries are fired
    /// under the ring's lock, so an arm made under that lock after a drain ([`EventHub::fenced`])
    /// is never fired by an entry written before it.
    ///
    /// A drain that finds the ring full runs `EventHub::recover_dropped` (still under the ring's
    /// lock). This covers every drain: the vector-2 interrupt, the periodic
    /// [`SERVICE_INTERVAL`] tick, and the drain every arm does first.
    pub fn drain_notifications(&self) {
        if self.is_fatal() {
            return;
        }
        let result = self.drain_notifications_locked(&mut self.notify_ring.lock());
        // The lock is released before going fatal: the fatal path runs the async handler.
        if let Err(reason) = result {
            self.set_fatal(reason);
        }
    }

    /// Runs `change` (a change of some CQ's arm state, and the doorbell it rings) after draining
    /// the CQ-notification ring, with the ring's lock still held: no entry is consumed while it
    /// runs, so every entry the device wrote before the arm is spent on the state before it, and
    /// none written before it fires it (design decision 3; QEMU 7.2 writes an entry per CQE).
    /// Lock order: the ring, then the CQ's arm state machine (as the interrupt path). `change`
    /// must not drain.
    pub(crate) fn fenced<R>(&self, change: impl FnOnce() -> R) -> R {
        if self.is_fatal() {
            return change();
        }
        let mut ring = self.notify_ring.lock();
        match self.drain_notifications_locked(&mut ring) {
            Ok(()) => change(),
            Err(reason) => {
                drop(ring);
                self.set_fatal(reason);
                change()
            }
        }
    }

    fn drain_notifications_locked(
        &self,
        ring: &mut DevRing,
    ) -> std::result::Result<(), &'static str> {
        const BAD_INDEX: &str = "CQ-notification ring index out of range";
        const UNREACHABLE: &str = "CQ-notification ring unreachable";
        let n = ring.pending().map_err(|_| BAD_INDEX)?;
        for k in 0..n {
            let mut b = [0u8; 4];
            ring.read(k, &mut b).map_err(|_| UNREACHABLE)?;
            let handle = Cqne::read_from_bytes(&b).map(|e| e.info.get()).unwrap_or(u32::MAX);
            self.notify_cq(handle);
        }
        ring.advance(n).map_err(|_| UNREACHABLE)?;
        if n >= ring.elems() {
            self.recover_dropped();
        }
        Ok(())
    }

    /// The recovery pass after the CQ-notification ring was found full (design decision 3).
    ///
    /// A device writes entries only while the ring has room: QEMU 7.2 drops the entry *and* its
    /// interrupt when the ring is full and leaves the CQ armed on its side; the IBTA model drops
    /// the entry of an arm it already fired (its arm is spent, the driver's is not). A full ring
    /// is the only sign of that the driver can observe (pvrdma has no drop counter), and entries
    /// may have been lost since it filled. So for every CQ the driver believes armed
    /// ([`crate::arm::ArmMachine::recover_dropped`]):
    /// - the arm doorbell is rung again for the driver's arm (re-arming an armed CQ is harmless,
    ///   IBTA's repeated arms): else a CQ whose dropped entry's CQE the consumer already polled
    ///   would stay armed in the driver only, every later `ensure` would ring nothing, and every
    ///   later request or upcall on it would hang;
    /// - then, if its CQ ring holds unpolled CQEs, it fires now: one event, the arm spent, as if
    ///   its entry had arrived. The event may be early (a SOLICITED arm, or CQEs queued before the
    ///   arm): a consumer polls and finds what it finds, which is harmless; a lost event leaves it
    ///   asleep with a CQE queued, which is not.
    ///
    /// Outside a full ring the normal IBTA rule holds: CQEs queued before an arm raise no event.
    ///
    /// Runs under the notification ring's lock (so an arm whose doorbell drains first is never
    /// fired for what came before it) and holds the CQ table's read lock while reading each
    /// CQ's ring state, so a CQ being destroyed (it unregisters before its ring is freed) is
    /// either skipped or still has its ring.
    fn recover_dropped(&self) {
        let mut fired = 0;
        let mut rearmed = 0;
        for cq in self.cqs.read().values() {
            let Some(_busy) = cq.enter() else { continue };
            if cq.machine().armed().is_none() {
                continue;
            }
            rearmed += 1;
            if let Some(f) = cq.machine().recover_dropped() {
                self.delivered(cq, f);
                fired += 1;
            }
        }
        if rearmed > 0 {
            tracing::warn!(
                rearmed,
                fired,
                "CQ-notification ring was full: re-armed the armed CQs, fired those with CQEs queued"
            );
        }
    }

    /// One CQ-notification entry: fires the CQ's arm unless the CQ is unknown, being destroyed
    /// (the guard, held until the event is delivered, keeps its destruction waiting), or not
    /// armed by the driver.
    fn notify_cq(&self, handle: u32) {
        let delivered = self.cq(handle).is_some_and(|cq| {
            let Some(_busy) = cq.enter() else { return false };
            let Some(f) = cq.machine().fire() else { return false };
            self.delivered(&cq, f);
            true
        });
        if !delivered {
            self.counters.spurious.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn delivered(&self, cq: &Arc<CqState>, fired: Fired) {
        self.counters.cq_events.fetch_add(1, Ordering::Relaxed);
        cq.deliver(fired);
    }

    /// Consumes every async-event entry, applies it (CQ overrun, device fatal) and hands it to
    /// the handler.
    pub fn drain_async(&self) {
        if self.is_fatal() {
            return;
        }
        let events = match self.take_async() {
            Ok(ev) => ev,
            Err(_) => return self.set_fatal("async-event ring index out of range"),
        };
        for ev in events {
            self.counters.async_events.fetch_add(1, Ordering::Relaxed);
            self.apply_async(ev);
        }
    }

    fn take_async(&self) -> Result<Vec<AsyncEvent>> {
        let mut ring = self.async_ring.lock();
        let n = ring.pending()?;
        let mut out = Vec::with_capacity(n as usize);
        for k in 0..n {
            let mut b = [0u8; 8];
            ring.read(k, &mut b)?;
            let e = Eqe::read_from_bytes(&b).map_err(|_| Error::DeviceFatal)?;
            out.push(AsyncEvent::from_eqe(e.type_.get(), e.info.get()));
        }
        ring.advance(n)?;
        Ok(out)
    }

    fn apply_async(&self, ev: AsyncEvent) {
        tracing::debug!(?ev, "async event");
        match ev {
            AsyncEvent::CqErr { cq } => {
                let Some(state) = self.cq(cq) else {
                    tracing::warn!(cq, "CQ_ERR for an unknown CQ");
                    return self.dispatch(ev);
                };
                // The CQ cannot be torn down while its CQ_ERR is handled, the consumer's handler
                // included (destroying it from inside that handler is refused, not deadlocked).
                let Some(_busy) = state.enter() else { return self.dispatch(ev) };
                state.set_overrun();
                // Notify requests complete Overrun; a consumer asleep on the channel wakes,
                // polls and sees the overrun; the dispatcher gets it.
                let fired = state.machine().fail(NotifyStatus::Overrun);
                state.deliver(fired);
                let _scope = CallbackScope::enter(state.uid());
                return self.dispatch(ev);
            }
            AsyncEvent::DeviceFatal => {
                // set_fatal dispatches DeviceFatal itself.
                self.set_fatal("DEVICE_FATAL async event");
                return;
            }
            _ => {}
        }
        self.dispatch(ev);
    }

    /// Runs the consumer's handler. A panic in it is caught and logged, so the thread that
    /// called it (the vector-1 thread, or whoever made the device fatal) keeps servicing: async
    /// events, the health check and DEVICE_FATAL must survive a consumer bug.
    fn dispatch(&self, ev: AsyncEvent) {
        let handler = self.handler.lock().clone();
        if let Some(h) = handler {
            let run = std::panic::AssertUnwindSafe(|| h(ev));
            if let Err(panic) = std::panic::catch_unwind(run) {
                let msg = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("(non-string panic payload)");
                tracing::error!(?ev, panic = msg, "async-event handler panicked; event ignored");
            }
        }
    }

    /// The bounded health check: a register reading all-ones means the device is gone.
    pub fn health_check(&self) {
        if !self.is_fatal() && self.platform.reg_read(REG_VERSION) == u32::MAX {
            self.set_fatal("device registers read all-ones");
        }
    }

    /// Asks the vector threads to exit (they notice within [`SERVICE_INTERVAL`]).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// Starts the async (vector 1) and CQ-notification (vector 2) threads.
pub fn spawn_threads(hub: &Arc<EventHub>, name: &str) -> Result<Vec<JoinHandle<()>>> {
    [IntrVector::Async, IntrVector::Cq]
        .into_iter()
        .map(|v| {
            let hub = hub.clone();
            std::thread::Builder::new()
                .name(format!("{name}-irq{}", v as u16))
                .spawn(move || service(&hub, v))
                .map_err(|_| Error::Unsupported("cannot start interrupt threads"))
        })
        .collect()
}

fn service(hub: &EventHub, vector: IntrVector) {
    while !hub.stopped() {
        let n = hub.platform.wait_vector(vector as u16, SERVICE_INTERVAL);
        hub.count_interrupts(vector, n);
        match vector {
            IntrVector::Async => {
                hub.drain_async();
                if n == 0 {
                    hub.health_check();
                }
            }
            IntrVector::Cq => hub.drain_notifications(),
            IntrVector::Response => {}
        }
    }
}
