//! Destroying a CQ (`ibv_destroy_cq` after `ibv_ack_cq_events`; winverbs' cancel of outstanding
//! notifies): [`Cq::destroy`] and the [`Cq`]'s drop.
//!
//! In order:
//! 1. refuse from inside the CQ's own upcall or async-event handler (it would wait for itself);
//! 2. refuse while a QP still completes into the CQ (libibverbs's EBUSY) — explicit destroy only;
//!    a dropped CQ is destroyed when its last QP goes;
//! 3. wait (bounded) until every event a consumer took for this CQ — completion events from its
//!    channel, async events from its context — has been acknowledged *on this CQ*, or fail at
//!    once, changing nothing, if asked not to wait;
//! 4. close the arm state machine: outstanding notify requests complete
//!    `NotifyStatus::Cancelled`, nothing arms any more;
//! 5. stop the upcall dispatcher and wait for a running upcall to return — except from inside an
//!    upcall (of any CQ): a dispatcher never waits for another one (A's upcall destroying B while
//!    B's upcall destroys A would wait for each other for ever). The stopped dispatcher then ends
//!    by itself when its running upcall returns; that upcall's view keeps the CQ object (ring,
//!    handle) alive until then, and it is destroyed on the device when the view goes (step 7);
//! 6. retire the CQ's deliveries (a provider thread delivering for it finishes first; none
//!    starts after), remove its untaken events from its channel and its context's async queue,
//!    and wait (bounded) for those taken in the race with step 3;
//! 7. drop the CQ object: the provider destroys the CQ (after which reports for its handle find
//!    nothing and are dropped).

use super::{Cq, CqInner, DROP_ACK_WAIT};
use crate::error::Error;
use crate::events::refs::CqShared;
use crate::events::upcall::in_callback;
use crate::time::deadline_after;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Cq {
    /// Destroys the CQ (`ibv_destroy_cq`). `wait`: how long to wait for the events taken for it
    /// to be acknowledged (`None`: do not wait).
    ///
    /// Errors (the CQ is handed back unchanged):
    /// - [`Error::Busy`] while a QP completes into it;
    /// - [`Error::EventsNotAcked`] if events taken for this CQ (from its channel or its context's
    ///   async queue) are still unacknowledged (at once with `wait` `None`, else after `wait`);
    ///   acknowledging another CQ's events does not count;
    /// - [`Error::WouldDeadlock`] when called from inside this CQ's own upcall or async-event
    ///   handler.
    ///
    /// From inside another CQ's upcall it does not wait for this CQ's running upcall (it may be
    /// destroying the caller's CQ in turn): that upcall finishes on its own thread, the CQ staying
    /// alive on the device until it returns.
    ///
    /// On a fatal device nothing is waited for: no event will come, and the consumer may never ack.
    pub fn destroy(self, wait: Option<Duration>) -> Result<(), (Cq, Error)> {
        if !self.owner {
            return Err((self, Error::InvalidState));
        }
        let uid = self.inner.events.cq.uid();
        if in_callback(uid) {
            return Err((self, Error::WouldDeadlock("destroying a CQ from inside its own upcall")));
        }
        // Closing first, then the count: a QP created meanwhile sees one or the other (SeqCst).
        self.inner.closing.store(true, Ordering::SeqCst);
        if self.inner.users.load(Ordering::SeqCst) > 0 {
            self.inner.closing.store(false, Ordering::SeqCst);
            return Err((self, Error::Busy("a QP still completes into the CQ")));
        }
        let deadline = deadline_after(wait.unwrap_or(Duration::ZERO));
        let unacked = wait_acked(&self.inner, deadline);
        if unacked > 0 {
            self.inner.closing.store(false, Ordering::SeqCst);
            return Err((self, Error::EventsNotAcked(unacked)));
        }
        self.teardown(deadline);
        Ok(())
    }

    /// Steps 4-7 (the CQ is committed to go). Events taken in the race with step 3 are waited
    /// for until `deadline`, then logged.
    fn teardown(mut self, deadline: Instant) {
        self.owner = false;
        self.inner.closing.store(true, Ordering::SeqCst);
        let events = self.inner.events.clone();
        events.machine.close();
        // Nothing more is delivered (a delivery in flight finishes first), then what was queued
        // and not taken leaves the channel and the async queue: no consumer gets an event for
        // the CQ from here on.
        events.quiesce(true);
        events.set_upcall_wake(None);
        let dispatcher = self.inner.dispatcher.lock().take();
        if let Some(d) = dispatcher {
            d.stop();
        }
        if let Some(ch) = &events.channel {
            ch.purge(&events.cq);
        }
        self.inner.ctx.async_events.purge(events.cq.uid());
        let left = if in_callback(events.cq.uid()) { 0 } else { wait_acked(&self.inner, deadline) };
        if left > 0 {
            tracing::warn!(cq = events.cq.handle(), unacked = left, "CQ destroyed with unacknowledged events");
        }
        // Dropping `self` (no longer the owner) drops this handle on the CQ object.
    }
}

/// Waits for both kinds of events taken for the CQ; returns how many are still unacknowledged.
/// A fatal device ends the wait (no event will come, and the consumer may never ack).
fn wait_acked(cq: &CqInner, deadline: Instant) -> u64 {
    let fatal = || cq.ctx.live().is_err();
    let shared: &CqShared = &cq.events.cq.0;
    shared.comp.wait_acked(deadline, fatal) + shared.async_.wait_acked(deadline, fatal)
}

impl Drop for Cq {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        let cq = Cq { inner: self.inner.clone(), owner: true };
        self.owner = false;
        let skip = in_callback(cq.inner.events.cq.uid()) || cq.inner.ctx.live().is_err();
        let deadline = deadline_after(if skip { Duration::ZERO } else { DROP_ACK_WAIT });
        cq.teardown(deadline);
    }
}
