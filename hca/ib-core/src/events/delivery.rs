//! Keeping an object's event deliveries and its destruction apart: a provider thread delivering
//! an event for a CQ or QP (into a channel, a notify request, a dispatcher, the consumer's async
//! handler) holds a [`Delivering`] guard; destroying the object retires it (nothing new is
//! delivered) and waits, with a bound, until the deliveries in flight are over — except from
//! inside the object's own callback, which would wait for itself.
//!
//! A CQ's fired arm reaches its consumers through a [`CqDelivery`] the provider holds until its
//! fence is released; a fatal device reaches every channel and CQ of a context through its
//! [`FatalSink`].

use super::arm::Fired;
use super::upcall::in_callback;
use crate::time::RETIRE_WAIT;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::Instant;

/// What must hear of a fatal device: every channel (its waiters wake) and every CQ (its notify
/// requests and dispatcher fail) of the context.
pub(crate) trait FatalSink: Send + Sync {
    fn fatal(&self);
}

/// What a [`CqDelivery`] delivers to: the CQ's events (`cq.rs`), which began the delivery when
/// they spent the arm.
pub(crate) trait DeliverFired: Send + Sync {
    /// Ends the delivery begun with [`Deliveries::begin`] by delivering `fired`.
    fn deliver_begun(&self, fired: Fired);
}

/// A CQ's fired arm on its way to the consumers ([`crate::provider::CqEventHandler::completion`]):
/// the arm is spent; dropping this delivers the event (channel, notify requests, dispatcher). A
/// provider holds it until its fence over the CQ-notification ring is released, so the consumer it
/// wakes never finds that fence still held when it re-arms. A destroy of the CQ waits for it (as
/// for any delivery in flight, with a bound), so drop it promptly.
#[must_use = "dropping it delivers the event: drop it once the provider's fence is released"]
pub struct CqDelivery(Option<(Arc<dyn DeliverFired>, Fired)>);

impl CqDelivery {
    /// A delivery that reaches no consumer: what a provider's own handler (a self-test's) returns
    /// for a report it took.
    pub fn none() -> Self {
        Self(None)
    }

    /// The delivery of `fired` to `to`, whose delivery in flight it ends when dropped.
    pub(crate) fn begun(to: Arc<dyn DeliverFired>, fired: Fired) -> Self {
        Self(Some((to, fired)))
    }
}

impl Drop for CqDelivery {
    fn drop(&mut self) {
        if let Some((to, fired)) = self.0.take() {
            to.deliver_begun(fired);
        }
    }
}

/// The deliveries in flight for one object.
#[derive(Default)]
pub(crate) struct Deliveries {
    state: Mutex<(u32, bool)>,
    cv: Condvar,
}

/// One delivery in flight; dropping it ends it.
pub(crate) struct Delivering<'a>(&'a Deliveries);

impl Drop for Delivering<'_> {
    fn drop(&mut self) {
        let mut s = self.0.state.lock();
        s.0 -= 1;
        if s.0 == 0 {
            self.0.cv.notify_all();
        }
    }
}

impl Deliveries {
    /// Starts a delivery; `None` once the object is retired (the event is for an object being
    /// destroyed: it reaches nobody).
    pub(crate) fn enter(&self) -> Option<Delivering<'_>> {
        self.begin().then(|| Delivering(self))
    }

    /// Starts a delivery that outlives this borrow (a [`CqDelivery`] held
    /// until the provider's fence is released); `false` once retired. End it by dropping
    /// [`Deliveries::adopt`].
    pub(crate) fn begin(&self) -> bool {
        let mut s = self.state.lock();
        if s.1 {
            return false;
        }
        s.0 += 1;
        true
    }

    /// The guard of a delivery started with [`Deliveries::begin`]: dropping it ends it.
    pub(crate) fn adopt(&self) -> Delivering<'_> {
        Delivering(self)
    }

    /// Whether the object was retired (its destroy began).
    pub(crate) fn is_retired(&self) -> bool {
        self.state.lock().1
    }

    /// Waits until no delivery is in flight (at most [`RETIRE_WAIT`]; not at all from inside the
    /// callback of object `uid`); with `retire`, none may start afterwards.
    pub(crate) fn quiesce(&self, retire: bool, uid: u64) {
        let mut s = self.state.lock();
        s.1 |= retire;
        if in_callback(uid) {
            return;
        }
        let deadline = Instant::now() + RETIRE_WAIT;
        while s.0 > 0 {
            if self.cv.wait_until(&mut s, deadline).timed_out() && s.0 > 0 {
                tracing::warn!(uid, "object destroyed while an event delivery still runs");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn retire_waits_for_a_delivery_and_refuses_new_ones() {
        let d = Arc::new(Deliveries::default());
        let g = d.enter().unwrap();
        let t = std::thread::spawn({
            let d = d.clone();
            move || {
                let t0 = Instant::now();
                d.quiesce(true, 0);
                t0.elapsed()
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(g);
        assert!(t.join().unwrap() >= Duration::from_millis(40));
        assert!(d.enter().is_none());
    }
}
