//! Destroying a CQ (`ibv_destroy_cq` after `ibv_ack_cq_events`; winverbs' cancel of outstanding
//! notifies): [`Cq::destroy`] and the [`Cq`]'s drop.
//!
//! In order:
//! 1. refuse from inside the CQ's own upcall or async-event handler (it would wait for itself);
//! 2. wait (bounded) until every event a consumer took from the channel for this CQ has been
//!    acknowledged *on this CQ* — or fail at once, changing nothing, if asked not to wait;
//! 3. close the arm state machine: outstanding notify requests complete
//!    [`NotifyStatus::Cancelled`](crate::NotifyStatus::Cancelled), nothing arms any more;
//! 4. stop the upcall dispatcher and wait for a running upcall to return — except from inside an
//!    upcall (of any CQ): a dispatcher never waits for another one (A's upcall destroying B while
//!    B's upcall destroys A would wait for each other for ever). The stopped dispatcher then ends
//!    by itself when its running upcall returns; that upcall's view keeps the CQ object (ring,
//!    handle) alive until then, and it is destroyed on the device when the view goes (step 6);
//! 5. wait for an interrupt or async-event handler that is delivering for the CQ, then remove the
//!    CQ's untaken events from its channel;
//! 6. drop the CQ object: out of the handle table, wait for any interrupt or async-event handler
//!    still using the CQ ([`crate::cq_state::CqState::enter`]), DESTROY_CQ, free the ring. A CQ
//!    its QPs still hold is destroyed on the device when the last of them is gone.

use crate::cq::{Cq, DROP_ACK_WAIT};
use crate::error::Error;
use crate::upcall::in_callback;
use std::time::{Duration, Instant};

impl Cq {
    /// Destroys the CQ. `wait`: how long to wait for the events taken from its channel to be
    /// acknowledged (`None`: do not wait).
    ///
    /// Errors (the CQ is handed back unchanged):
    /// - [`Error::EventsNotAcked`] if events taken for this CQ are still unacknowledged (at
    ///   once with `wait` `None`, else after `wait`); acknowledging another CQ's events does not
    ///   count;
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
        let state = &self.inner.state;
        if in_callback(state.uid()) {
            return Err((self, Error::WouldDeadlock("destroying a CQ from inside its own upcall")));
        }
        let fatal = self.inner.dev.hub.is_fatal();
        let deadline = firmware_cmd::deadline_after(wait.unwrap_or(Duration::ZERO));
        let unacked = if fatal { 0 } else { state.wait_acked(deadline) };
        if unacked > 0 {
            return Err((self, Error::EventsNotAcked(unacked)));
        }
        self.teardown(deadline);
        Ok(())
    }

    /// Steps 3–6 (the CQ is committed to go). Events taken in the race with step 2 are waited
    /// for until `deadline`, then logged.
    fn teardown(mut self, deadline: Instant) {
        self.owner = false;
        let state = self.inner.state.clone();
        state.machine().close();
        // An interrupt or async event handled right now may still be delivering into the
        // channel: let it finish before the channel is purged.
        state.quiesce(false);
        state.set_upcall_wake(None);
        let dispatcher = self.inner.dispatcher.lock().take();
        if let Some(d) = dispatcher {
            d.stop();
        }
        if let Some(ch) = state.channel() {
            ch.purge(&state);
        }
        let left = if self.inner.dev.hub.is_fatal() || in_callback(state.uid()) {
            0
        } else {
            state.wait_acked(deadline)
        };
        if left > 0 {
            tracing::warn!(cq = state.handle(), unacked = left, "CQ destroyed with unacknowledged events");
        }
        // Dropping `self` (no longer the owner) drops this handle on the CQ object.
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        let cq = Cq { inner: self.inner.clone(), owner: true };
        self.owner = false;
        let state = &cq.inner.state;
        let wait = if in_callback(state.uid()) || cq.inner.dev.hub.is_fatal() {
            Duration::ZERO
        } else {
            DROP_ACK_WAIT
        };
        let deadline = firmware_cmd::deadline_after(wait);
        cq.teardown(deadline);
    }
}
