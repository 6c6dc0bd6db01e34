//! Completion queues as consumers see them: polling through the provider, and the one arm state
//! machine per CQ (`events/arm.rs`) with its three clients — the completion channel
//! ([`Cq::req_notify`]), notify requests ([`Cq::notify`]) and the upcall dispatcher
//! (`cq/upcall.rs`); destroying a CQ is in `cq/destroy.rs`. The hardware arm goes one way: the machine rings the provider's arm
//! doorbell ([`CqOps::arm`]) when what the clients wait for grows.
//!
//! [`CqEvents`] is what the provider calls when the device fires the CQ's arm, loses a report or
//! errs; it spends the arm and delivers to the clients it reached: one event into the channel, the
//! requests completed, a wake-up for the dispatcher. Once the CQ is being destroyed it delivers
//! nothing (`retire`), so no consumer gets an event for a CQ it no longer has.

mod destroy;
mod upcall;

use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::events::arm::{ArmKind, ArmMachine, CqHw, Fired};
use crate::events::async_event::{AsyncElement, AsyncEvent, AsyncEventType};
use crate::events::channel::CompChannel;
use crate::events::delivery::{CqDelivery, DeliverFired, Deliveries, Delivering, FatalSink};
use crate::events::notify::{NotifyKind, NotifyRequest, NotifyStatus};
use crate::events::refs::CqRef;
use crate::events::upcall::{Dispatcher, Wake};
use crate::provider::{CqError, CqEventHandler, CqOps};
use crate::wr::{NotifyFlags, Wc};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The provider's CQ as the arm machine drives it.
pub(crate) struct HwArm(pub(crate) Arc<dyn CqOps>);

impl CqHw for HwArm {
    fn has_unpolled(&self) -> bool {
        self.0.has_unpolled()
    }

    fn ring_arm(&self, kind: ArmKind) {
        self.0.arm(kind);
    }

    fn fenced<R>(&self, change: impl FnOnce() -> R) -> R {
        let mut change = Some(change);
        let mut out = None;
        self.0.fenced(&mut || {
            if let Some(c) = change.take() {
                out = Some(c());
            }
        });
        match (out, change) {
            (Some(r), _) => r,
            // A provider that broke its contract and never ran the change: run it unfenced.
            (None, Some(c)) => c(),
            (None, None) => unreachable!("the change ran but left no result"),
        }
    }
}

/// The error an arm of a CQ in error returns: [`Error::DeviceFatal`] on a fatal device or an
/// unusable CQ, [`Error::CqOverrun`] once the CQ overflowed (an erred CQ raises no more events:
/// arming it would sleep for ever).
fn cq_error(status: NotifyStatus) -> Error {
    match status {
        NotifyStatus::Failure => Error::DeviceFatal,
        _ => Error::CqOverrun,
    }
}

/// The notify status of a CQ error.
fn status_of(error: CqError) -> NotifyStatus {
    match error {
        CqError::Overrun => NotifyStatus::Overrun,
        CqError::Failure => NotifyStatus::Failure,
    }
}

/// What the provider reports a CQ's events to.
pub(crate) struct CqEvents {
    pub(crate) cq: CqRef,
    pub(crate) machine: ArmMachine<HwArm>,
    pub(crate) channel: Option<CompChannel>,
    ctx: Arc<ContextInner>,
    events: AtomicU64,
    deliveries: Deliveries,
    upcall: Mutex<Option<Arc<Wake>>>,
}

impl CqEvents {
    fn enter(&self) -> Option<Delivering<'_>> {
        self.deliveries.enter()
    }

    /// Waits for the deliveries in flight (see `events/delivery.rs`); with `retire`, none starts after.
    pub(crate) fn quiesce(&self, retire: bool) {
        self.deliveries.quiesce(retire, self.cq.uid());
    }

    /// Acts on what a fired (or erred) arm reached.
    pub(crate) fn deliver(&self, fired: Fired) {
        if fired.channel {
            // A destroy from inside this CQ's own callback cannot wait for this delivery: the
            // push looks, under the channel's lock, whether the destroy began.
            let queued =
                self.channel.as_ref().is_some_and(|ch| ch.push_unless(&self.cq, || self.deliveries.is_retired()));
            if queued {
                self.events.fetch_add(1, Ordering::Relaxed);
            }
        }
        if fired.upcall {
            self.wake_upcall();
        }
    }

    /// Wakes the dispatcher if an upcall waits for it (after a policy change or a new
    /// dispatcher: idle dispatchers sleep until woken).
    pub(crate) fn wake_if_upcall_pending(&self) {
        if self.machine.upcall_pending() {
            self.wake_upcall();
        }
    }

    fn wake_upcall(&self) {
        if let Some(w) = self.upcall.lock().as_ref() {
            w.wake();
        }
    }

    pub(crate) fn set_upcall_wake(&self, w: Option<Arc<Wake>>) {
        *self.upcall.lock() = w;
    }
}

impl CqEvents {
    /// Spends the arm with `spend` (the provider calls this inside its fence) and returns the
    /// delivery of what it reached, for the provider to drop once the fence is released.
    fn spend(self: &Arc<Self>, spend: impl FnOnce(&ArmMachine<HwArm>) -> Option<Fired>) -> Option<CqDelivery> {
        if !self.deliveries.begin() {
            return None;
        }
        let fired = spend(&self.machine);
        let _end_if_none = fired.is_none().then(|| self.deliveries.adopt());
        Some(CqDelivery::begun(self.clone(), fired?))
    }

    fn completion(self: &Arc<Self>) -> Option<CqDelivery> {
        self.spend(ArmMachine::fire)
    }

    fn recover_dropped(self: &Arc<Self>) -> Option<CqDelivery> {
        self.spend(ArmMachine::recover_dropped)
    }

    /// Fails the arm machine with `status` and delivers what that reached (notify requests
    /// complete, a consumer asleep on the channel wakes, the dispatcher is woken): no consumer
    /// code runs here, so any thread may call it, the one that found the fault included.
    fn fail_now(&self, status: NotifyStatus) -> bool {
        let Some(_d) = self.enter() else { return false };
        self.deliver(self.machine.fail(status));
        true
    }

    fn error(&self, error: CqError) -> bool {
        let Some(_d) = self.enter() else { return false };
        // Notify requests complete; a consumer asleep on the channel wakes, polls and sees the
        // error; the dispatcher gets it; the context's async queue gets CQ_ERR.
        self.deliver(self.machine.fail(status_of(error)));
        let element = AsyncElement::Cq(self.cq.clone());
        self.ctx.async_events.dispatch(AsyncEvent { event_type: AsyncEventType::CqErr, element });
        true
    }
}

impl DeliverFired for CqEvents {
    fn deliver_begun(&self, fired: Fired) {
        let _end = self.deliveries.adopt();
        self.deliver(fired);
    }
}

impl FatalSink for CqEvents {
    fn fatal(&self) {
        let Some(_d) = self.enter() else { return };
        // Channel waiters wake with DeviceFatal already: no event for them.
        let fired = self.machine.fail(NotifyStatus::Failure);
        self.deliver(Fired { channel: false, ..fired });
    }
}

/// A completion queue. Dropping it destroys it ([`Cq::destroy`] with a wait of
/// [`DROP_ACK_WAIT`], then logged); a CQ still used by QPs is destroyed when the last of them is.
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
    /// `false` for the view an upcall gets: dropping it destroys nothing.
    pub(crate) owner: bool,
}

/// How long dropping a [`Cq`] or a [`crate::Qp`] waits for its taken events to be acknowledged
/// before it destroys the object anyway (logged). `destroy` lets the caller choose.
pub const DROP_ACK_WAIT: Duration = Duration::from_secs(2);

/// The CQ object; QPs hold it, so a CQ outlives its QPs. (Its drop destroys the CQ on the
/// device before the fields, the context last, go.)
pub(crate) struct CqInner {
    pub(crate) ops: Arc<dyn CqOps>,
    pub(crate) events: Arc<CqEvents>,
    pub(crate) dispatcher: Mutex<Option<Dispatcher>>,
    /// QPs completing into the CQ.
    pub(crate) users: AtomicU32,
    /// Being destroyed: no QP may start completing into it.
    pub(crate) closing: AtomicBool,
    pub(crate) ctx: Arc<ContextInner>,
}

impl Context {
    /// Creates a CQ of at least `cqe` entries delivering its events to `channel`
    /// (`ibv_create_cq` with `cq_context` 0). The new CQ is disarmed.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        self.create_cq_with(cqe, channel, 0)
    }

    /// Creates a CQ whose events carry `cq_context` (`ibv_create_cq`).
    ///
    /// Errors: [`Error::InvalidArgument`] for a channel of another context, 0 entries or more than
    /// the device allows; [`Error::DeviceFatal`]; provider errors.
    pub fn create_cq_with(&self, cqe: u32, channel: Option<&CompChannel>, cq_context: u64) -> Result<Cq> {
        let ctx = &self.inner;
        ctx.live()?;
        if let Some(ch) = channel {
            ch.attach(ctx.uid)?;
        }
        let created = Cq::create(ctx, cqe, channel, cq_context);
        if created.is_err() {
            channel.inspect(|c| c.detach());
        }
        created
    }
}

impl Cq {
    fn create(ctx: &Arc<ContextInner>, cqe: u32, channel: Option<&CompChannel>, cq_context: u64) -> Result<Cq> {
        let max = ctx.device.ops.query_device().max_cqe;
        if cqe == 0 || cqe > max {
            return Err(Error::InvalidArgument("cqe out of range"));
        }
        // The provider reports to the CQ's events object from the moment the CQ exists, so it is
        // made first and completed (its handle, its hardware) once the provider answers.
        let late = Arc::new(LateEvents(OnceLock::new()));
        let ops = ctx.device.ops.create_cq(ctx.uctx(), cqe, late.clone())?;
        let events = Arc::new(CqEvents {
            cq: CqRef::new(ops.handle(), cq_context),
            machine: ArmMachine::new(HwArm(ops.clone())),
            channel: channel.cloned(),
            ctx: ctx.clone(),
            events: AtomicU64::new(0),
            deliveries: Deliveries::default(),
            upcall: Mutex::new(None),
        });
        let _ = late.0.set(events.clone());
        ctx.add_fatal_sink(events.clone());
        let inner = CqInner {
            ops,
            events,
            dispatcher: Mutex::new(None),
            users: AtomicU32::new(0),
            closing: AtomicBool::new(false),
            ctx: ctx.clone(),
        };
        Ok(Cq { inner: Arc::new(inner), owner: true })
    }

    /// The device's CQ handle.
    pub fn handle(&self) -> u32 {
        self.inner.ops.handle()
    }

    /// What this CQ's events carry: its handle, its `cq_context`, and its acknowledgements.
    pub fn cq_ref(&self) -> &CqRef {
        &self.inner.events.cq
    }

    /// The consumer's value given at create.
    pub fn cq_context(&self) -> u64 {
        self.inner.events.cq.cq_context()
    }

    /// Capacity in CQEs (the provider may round the requested size up).
    pub fn cqe(&self) -> u32 {
        self.inner.ops.cqe()
    }

    /// Resizes the CQ to at least `cqe` entries and returns its new capacity (IBTA's Resize CQ
    /// verb, `ibv_resize_cq`). The CQEs queued stay, in order; the arm (and any notify
    /// request waiting on it) stays as it was.
    ///
    /// Errors: [`Error::InvalidArgument`] for 0, more than the device's `max_cqe`, or fewer
    /// entries than CQEs queued; [`Error::Unsupported`] on a device without a resize (pvrdma on
    /// QEMU 7.2); [`Error::DeviceFatal`]; provider errors.
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        self.inner.ctx.live()?;
        self.usable()?;
        let max = self.inner.ctx.device.ops.query_device().max_cqe;
        if cqe == 0 || cqe > max {
            return Err(Error::InvalidArgument("cqe out of range"));
        }
        self.inner.ops.resize(cqe)
    }

    /// Whether this CQ belongs to a user context.
    pub fn is_user(&self) -> bool {
        self.inner.ctx.uctx.is_some()
    }

    /// Polls up to `wc.len()` completions into `wc` and returns how many (IBTA 11.4.2.1).
    ///
    /// Errors: [`Error::CqOverrun`] once the CQEs queued before an overflow are consumed;
    /// [`Error::DeviceFatal`] if the device is fatal or wrote a bad ring index (the CQ then stays
    /// unusable, its notify requests complete with [`NotifyStatus::Failure`]).
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        self.inner.ctx.live()?;
        self.inner.ops.poll(wc).inspect_err(|e| self.failed(e))
    }

    /// Asks the provider whether the CQ can still raise events and, if it cannot, fails the arm
    /// machine at once on this thread (`failed`): the next arm or notify request sees the fault
    /// whichever thread found it, not once the provider's report reaches the core.
    ///
    /// Errors: the provider's ([`CqOps::usable`]).
    fn usable(&self) -> Result<()> {
        self.inner.ops.usable().inspect_err(|e| self.failed(e))
    }

    /// A verb on the CQ answered `e`: a fault of the CQ itself ([`Error::DeviceFatal`],
    /// [`Error::CqOverrun`]) fails its arm machine now (notify requests complete with it, later
    /// arms refuse, a channel waiter wakes).
    fn failed(&self, e: &Error) {
        let status = match e {
            Error::DeviceFatal => NotifyStatus::Failure,
            Error::CqOverrun => NotifyStatus::Overrun,
            _ => return,
        };
        // A fatal device reaches every CQ through its own path (`FatalSink`), channel waiters
        // waking with DeviceFatal rather than an event.
        if self.inner.ctx.live().is_ok() {
            self.inner.events.fail_now(status);
        }
    }

    /// Requests a completion event on the CQ's channel (IBTA 11.4.2.5, `ibv_req_notify_cq`): arms
    /// the CQ for its next completion (`NEXT_COMPLETION`) or next solicited completion
    /// (`SOLICITED`); one-shot; NEXT after SOLICITED upgrades, SOLICITED after NEXT keeps NEXT.
    /// CQEs queued before the arm raise no event: with `REPORT_MISSED_EVENTS`, returns `true` if
    /// CQEs are queued after arming (Linux's `IB_CQ_REPORT_MISSED_EVENTS`: poll again).
    ///
    /// Errors: [`Error::InvalidArgument`] without NEXT_COMPLETION or SOLICITED;
    /// [`Error::Unsupported`] for SOLICITED on a device that cannot arm for it (QEMU 7.2);
    /// [`Error::CqOverrun`] once the CQ overflowed; [`Error::DeviceFatal`] on a fatal device or
    /// an unusable CQ.
    pub fn req_notify(&self, flags: NotifyFlags) -> Result<bool> {
        self.inner.ctx.live()?;
        // A fault the provider knows of fails the machine first; `arm_channel` then answers it.
        let _ = self.usable();
        let kind = if flags.contains(NotifyFlags::NEXT_COMPLETION) {
            ArmKind::Next
        } else if flags.contains(NotifyFlags::SOLICITED) {
            self.check_solicited()?;
            ArmKind::Solicited
        } else {
            return Err(Error::InvalidArgument("notify flags need NEXT_COMPLETION or SOLICITED"));
        };
        if let Some(error) = self.inner.events.machine.arm_channel(kind) {
            return Err(cq_error(error));
        }
        Ok(flags.contains(NotifyFlags::REPORT_MISSED_EVENTS) && self.inner.ops.has_unpolled())
    }

    /// Makes a notify request (winverbs `CQ::Notify`; see `events/notify.rs`): completes with
    /// [`NotifyStatus::Success`] on the CQ's next completion event of `kind` (every outstanding
    /// request of the CQ completes on the same event), [`NotifyStatus::Overrun`] if the CQ
    /// overflows, [`NotifyStatus::Failure`] on a catastrophic error, [`NotifyStatus::Cancelled`]
    /// when withdrawn or when the CQ is destroyed. [`NotifyKind::ErrorOnly`] does not arm the CQ.
    /// With `report_missed` the request completes at once (Success) if CQEs are queued after it
    /// armed — they raise no event (IBTA): poll them.
    ///
    /// Errors: [`Error::Unsupported`] for [`NotifyKind::Solicited`] where the device cannot arm
    /// for it; [`Error::DeviceFatal`].
    pub fn notify(&self, kind: NotifyKind, report_missed: bool) -> Result<NotifyRequest> {
        self.inner.ctx.live()?;
        // A fault the provider knows of fails the machine first: the request completes with it.
        let _ = self.usable();
        if kind == NotifyKind::Solicited {
            self.check_solicited()?;
        }
        Ok(self.inner.events.machine.request(kind, report_missed))
    }

    fn check_solicited(&self) -> Result<()> {
        if self.inner.ops.can_arm_solicited() {
            Ok(())
        } else {
            Err(Error::Unsupported("solicited-only arming on this device"))
        }
    }

    /// Acknowledges `n` completion events taken from the channel for this CQ
    /// (`ibv_ack_cq_events`); more than were taken and not yet acknowledged counts as that many.
    pub fn ack_events(&self, n: u32) {
        self.inner.events.cq.ack_events(n);
    }

    /// A handle that acknowledges this CQ's events from another thread (e.g. while
    /// [`Cq::destroy`] waits for them) without borrowing the CQ.
    pub fn acker(&self) -> CqRef {
        self.inner.events.cq.clone()
    }

    /// Completion events delivered to this CQ's channel so far.
    pub fn events(&self) -> u64 {
        self.inner.events.events.load(Ordering::Relaxed)
    }

    /// Events taken for this CQ (from its channel and its context's async queue) and not yet
    /// acknowledged.
    pub fn unacked_events(&self) -> u64 {
        let s = &self.inner.events.cq.0;
        s.comp.unacked() + s.async_.unacked()
    }

    /// The driver's current arm of this CQ (for diagnostics and tests).
    pub fn armed(&self) -> Option<ArmKind> {
        self.inner.events.machine.armed()
    }

    /// Notify requests of this CQ not yet completed.
    pub fn outstanding_notifies(&self) -> usize {
        self.inner.events.machine.outstanding()
    }

    /// The provider's CQ, if it is a `T`.
    pub fn provider_cq<T: 'static>(&self) -> Option<&T> {
        self.inner.ops.as_any().downcast_ref()
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cq({})", self.handle())
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // Nothing more is delivered, then the provider lets go of the CQ: later reports for its
        // handle find no CQ (dropped and counted there).
        self.events.quiesce(true);
        self.ops.destroy();
        self.ctx.async_events.purge(self.events.cq.uid());
        if let Some(ch) = &self.events.channel {
            ch.detach();
        }
    }
}

/// The handler the provider gets at create: it forwards to the CQ's [`CqEvents`] once they exist
/// (a report in between finds no CQ yet and is dropped, as one for an unknown handle).
struct LateEvents(OnceLock<Arc<CqEvents>>);

impl LateEvents {
    fn get(&self) -> Option<&Arc<CqEvents>> {
        self.0.get()
    }
}

impl CqEventHandler for LateEvents {
    fn completion(&self) -> Option<CqDelivery> {
        self.get().and_then(|e| e.completion())
    }

    fn recover_dropped(&self) -> Option<CqDelivery> {
        self.get().and_then(|e| e.recover_dropped())
    }

    fn error(&self, error: CqError) -> bool {
        self.get().is_some_and(|e| e.error(error))
    }
}
