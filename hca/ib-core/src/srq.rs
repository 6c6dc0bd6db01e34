//! Shared receive queues (`ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_post_srq_recv`, `ibv_destroy_srq`; IBTA 10.2.9 and 11.2.3): receive work requests several
//! QPs take from, the SRQ limit and its async event.
//!
//! Lifetime: an SRQ holds its PD; a QP created with it ([`crate::QpInitAttr::srq`]) holds the SRQ,
//! so [`Srq::destroy`] refuses while one exists ([`Error::Busy`], libibverbs's EBUSY) and
//! dropping is always safe (the device's SRQ goes with the last QP). Its async events
//! (SRQ_LIMIT_REACHED, SRQ_ERR) name it by an [`SrqRef`] and reach the consumer only while it
//! lives (design decision 16).

pub use crate::attr::{SrqAttr, SrqAttrMask};
use crate::context::ContextInner;
use crate::cq::DROP_ACK_WAIT;
use crate::error::{Error, Result};
use crate::events::async_event::{AsyncElement, AsyncEvent, AsyncEventType};
use crate::events::delivery::Deliveries;
use crate::events::refs::SrqRef;
use crate::events::upcall::in_callback;
use crate::pd::{Pd, PdInner};
use crate::provider::{SrqEventHandler, SrqOps};
use crate::time::deadline_after;
use crate::wr::RecvWr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// SRQ creation attributes (`ibv_srq_init_attr`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SrqInitAttr {
    /// Sizes (`srq_limit` ignored).
    pub attr: SrqAttr,
    /// The consumer's value, carried by the SRQ's async events (`srq_context`).
    pub srq_context: u64,
}

/// What the provider reports an SRQ's async events to.
struct SrqEvents {
    srq: SrqRef,
    ctx: Arc<ContextInner>,
    deliveries: Deliveries,
}

impl SrqEventHandler for SrqEvents {
    fn event(&self, event: AsyncEventType) -> bool {
        let Some(_d) = self.deliveries.enter() else { return false };
        let element = AsyncElement::Srq(self.srq.clone());
        self.ctx.async_events.dispatch(AsyncEvent { event_type: event, element });
        true
    }
}

/// The handler the provider gets at create, forwarding once the SRQ's events exist.
struct LateSrq(OnceLock<Arc<SrqEvents>>);

impl SrqEventHandler for LateSrq {
    fn event(&self, event: AsyncEventType) -> bool {
        self.0.get().is_some_and(|e| e.event(event))
    }
}

/// The SRQ as its QPs share it. (Fields drop in order: the provider's SRQ, then the PD.)
pub(crate) struct SrqInner {
    ops: Box<dyn SrqOps>,
    events: Arc<SrqEvents>,
    /// QPs created with it.
    pub(crate) users: AtomicU32,
    pub(crate) pd: Arc<PdInner>,
    max_wr: u32,
}

impl SrqInner {
    pub(crate) fn ops(&self) -> &dyn SrqOps {
        &*self.ops
    }
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let uid = self.events.srq.uid();
        self.events.deliveries.quiesce(true, uid);
        self.pd.ctx.async_events.purge(uid);
        let fatal = || self.pd.ctx.live().is_err();
        let acks = &self.events.srq.0.async_;
        if !in_callback(uid) && acks.wait_acked(deadline_after(DROP_ACK_WAIT), fatal) > 0 {
            tracing::warn!(srq = self.events.srq.handle(), "SRQ destroyed with unacknowledged async events");
        }
        self.pd.release();
    }
}

/// A shared receive queue. Dropping it destroys it once no QP uses it.
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

impl Pd {
    /// Creates an SRQ in this PD (`ibv_create_srq`).
    ///
    /// Errors: [`Error::Unsupported`] on a device without SRQs (`max_srq` 0);
    /// [`Error::InvalidArgument`] for 0 work requests or SGEs, or more than the device's
    /// `max_srq_wr` / `max_srq_sge`; [`Error::DeviceFatal`]; provider errors.
    pub fn create_srq(&self, init: &SrqInitAttr) -> Result<Srq> {
        let pd = &self.inner;
        pd.ctx.live()?;
        let caps = pd.ctx.device.ops.query_device();
        if caps.max_srq == 0 {
            return Err(Error::Unsupported("SRQs on this device"));
        }
        let a = &init.attr;
        if !(1..=caps.max_srq_wr).contains(&a.max_wr) || !(1..=caps.max_srq_sge).contains(&a.max_sge) {
            return Err(Error::InvalidArgument("SRQ size beyond the device's caps"));
        }
        let late = Arc::new(LateSrq(OnceLock::new()));
        let ops = pd.ctx.device.ops.create_srq(&*pd.ops, a, late.clone())?;
        let events = Arc::new(SrqEvents {
            srq: SrqRef::new(ops.handle(), init.srq_context),
            ctx: pd.ctx.clone(),
            deliveries: Deliveries::default(),
        });
        let _ = late.0.set(events.clone());
        pd.hold();
        let max_wr = ops.max_wr();
        let inner = SrqInner { ops, events, users: AtomicU32::new(0), pd: pd.clone(), max_wr };
        Ok(Srq { inner: Arc::new(inner) })
    }
}

impl Srq {
    /// The provider's SRQ, if it is a `T`.
    pub fn provider_srq<T: 'static>(&self) -> Option<&T> {
        self.inner.ops.as_any().downcast_ref()
    }

    /// The device's SRQ handle.
    pub fn handle(&self) -> u32 {
        self.inner.ops.handle()
    }

    /// Receive work requests the SRQ holds (the provider's ring, `max_wr` rounded up as it
    /// granted it).
    pub fn max_wr(&self) -> u32 {
        self.inner.max_wr
    }

    /// What this SRQ's async events carry (its handle and `srq_context`).
    pub fn srq_ref(&self) -> &SrqRef {
        &self.inner.events.srq
    }

    /// Posts one receive work request (`ibv_post_srq_recv`).
    ///
    /// Errors: [`Error::InvalidArgument`] for more SGEs than the SRQ takes;
    /// [`Error::QueueFull`]; [`Error::DeviceFatal`].
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        self.post_recv_list(std::slice::from_ref(wr)).map_err(|(_, e)| e)
    }

    /// Posts receive work requests in order with one doorbell for all. Errors: `(index, error)`
    /// for the first request not posted (libibverbs's `bad_recv_wr`), as [`Srq::post_recv`].
    pub fn post_recv_list(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.inner.pd.ctx.live().map_err(|e| (0, e))?;
        self.inner.ops.post_recv(wrs)
    }

    /// Modifies the SRQ (`ibv_modify_srq`): with [`SrqAttrMask::LIMIT`], arms the limit (0
    /// disarms).
    ///
    /// Errors: [`Error::InvalidArgument`] for an empty or unknown mask, or a limit above
    /// `max_wr`; the provider's refusal of [`SrqAttrMask::MAX_WR`] (pvrdma: `EINVAL`, as Linux's
    /// vmw_pvrdma); [`Error::DeviceFatal`].
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.inner.pd.ctx.live()?;
        let known = SrqAttrMask::MAX_WR.0 | SrqAttrMask::LIMIT.0;
        if mask.0 == 0 || mask.0 & !known != 0 {
            return Err(Error::InvalidArgument("empty or unknown SRQ attribute mask"));
        }
        if mask.contains(SrqAttrMask::LIMIT) && attr.srq_limit > self.inner.max_wr {
            return Err(Error::InvalidArgument("SRQ limit above max_wr"));
        }
        self.inner.ops.modify(attr, mask)
    }

    /// The SRQ's attributes as the device has them (`ibv_query_srq`): `srq_limit` 0 once the
    /// limit fired. Errors: [`Error::DeviceFatal`]; provider errors.
    pub fn query(&self) -> Result<SrqAttr> {
        self.inner.pd.ctx.live()?;
        self.inner.ops.query()
    }

    /// Destroys the SRQ (`ibv_destroy_srq`), waiting up to `wait` for the async events taken for
    /// it to be acknowledged.
    ///
    /// Errors (the SRQ is handed back): [`Error::Busy`] while a QP uses it;
    /// [`Error::EventsNotAcked`]; [`Error::WouldDeadlock`] from inside its own async handler.
    pub fn destroy(self, wait: Option<Duration>) -> std::result::Result<(), (Srq, Error)> {
        if self.inner.users.load(Ordering::Acquire) > 0 {
            return Err((self, Error::Busy("QPs still use the SRQ")));
        }
        let uid = self.inner.events.srq.uid();
        if in_callback(uid) {
            return Err((self, Error::WouldDeadlock("destroying an SRQ from inside its own async handler")));
        }
        let fatal = || self.inner.pd.ctx.live().is_err();
        let deadline = deadline_after(wait.unwrap_or(Duration::ZERO));
        let left = self.inner.events.srq.0.async_.wait_acked(deadline, fatal);
        if left > 0 {
            return Err((self, Error::EventsNotAcked(left)));
        }
        Ok(())
    }

    /// Whether `ctx` is this SRQ's context.
    pub(crate) fn of_context(&self, ctx: &Arc<ContextInner>) -> bool {
        Arc::ptr_eq(&self.inner.pd.ctx, ctx)
    }
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Srq({})", self.handle())
    }
}
