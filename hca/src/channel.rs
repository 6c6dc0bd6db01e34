//! Completion channels (`ibv_comp_channel`): a queue of CQ events, one per fired arm, that one
//! or several CQs deliver into and a consumer waits on with a bound.
//!
//! Taking an event counts it as obtained for its CQ; the consumer acknowledges it with
//! [`crate::Cq::ack_events`], and destroying the CQ waits until every event obtained for it is
//! acknowledged (`ibv_destroy_cq` / `ibv_ack_cq_events`). Events still queued when their CQ is
//! destroyed are removed from the channel: no consumer ever gets an event for a CQ that is gone.

use crate::cq_state::CqState;
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A completion channel. Cloning gives another handle to the same queue.
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

/// The shared queue; the device keeps a weak reference to wake waiters when it goes fatal.
pub(crate) struct ChannelInner {
    state: Mutex<ChannelState>,
    cond: Condvar,
}

#[derive(Default)]
struct ChannelState {
    events: VecDeque<Arc<CqState>>,
    fatal: bool,
}

impl ChannelState {
    /// Takes the oldest event, counting it as obtained for its CQ.
    fn take(&mut self) -> Option<u32> {
        let cq = self.events.pop_front()?;
        cq.note_obtained();
        Some(cq.handle())
    }
}

impl CompChannel {
    pub(crate) fn new() -> Self {
        let inner = ChannelInner { state: Mutex::new(ChannelState::default()), cond: Condvar::new() };
        Self { inner: Arc::new(inner) }
    }

    pub(crate) fn downgrade(&self) -> Weak<ChannelInner> {
        Arc::downgrade(&self.inner)
    }

    /// Makes every present and future waiter return [`Error::DeviceFatal`].
    pub(crate) fn set_fatal(&self) {
        self.inner.set_fatal();
    }

    /// Queues one event for `cq` and wakes a waiter.
    pub(crate) fn push(&self, cq: &Arc<CqState>) {
        self.inner.state.lock().events.push_back(cq.clone());
        self.inner.cond.notify_one();
    }

    /// Removes the events of `cq` that no consumer has taken (the CQ is being destroyed); returns
    /// how many.
    pub(crate) fn purge(&self, cq: &CqState) -> usize {
        let mut s = self.inner.state.lock();
        let before = s.events.len();
        s.events.retain(|e| e.uid() != cq.uid());
        before - s.events.len()
    }

    /// Whether `self` and `other` are the same channel.
    pub fn same(&self, other: &CompChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Waits up to `timeout` for a completion event and returns the CQ handle it is for
    /// (`ibv_get_cq_event`). Acknowledge it with [`crate::Cq::ack_events`] on that CQ: the CQ
    /// cannot be destroyed until then.
    ///
    /// Errors: [`Error::Timeout`] if none arrived; [`Error::DeviceFatal`] once the device is fatal
    /// and no event is left.
    pub fn get_cq_event(&self, timeout: Duration) -> Result<u32> {
        // Saturating: `Duration::MAX` waits (practically) forever instead of panicking.
        let deadline = firmware_cmd::deadline_after(timeout);
        let mut s = self.inner.state.lock();
        loop {
            if let Some(h) = s.take() {
                return Ok(h);
            }
            if s.fatal {
                return Err(Error::DeviceFatal);
            }
            if self.inner.cond.wait_until(&mut s, deadline).timed_out() {
                return s.take().ok_or(Error::Timeout);
            }
        }
    }

    /// Takes a completion event if one is queued, without waiting; returns its CQ's handle
    /// (acknowledge it as for [`CompChannel::get_cq_event`]).
    pub fn try_get_cq_event(&self) -> Option<u32> {
        self.inner.state.lock().take()
    }

    /// Events queued and not yet taken.
    pub fn pending(&self) -> usize {
        self.inner.state.lock().events.len()
    }
}

impl ChannelInner {
    /// Makes every present and future waiter return [`Error::DeviceFatal`].
    pub(crate) fn set_fatal(&self) {
        self.state.lock().fatal = true;
        self.cond.notify_all();
    }
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompChannel({} pending)", self.pending())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cq_state::DevCqHw;

    fn cq(handle: u32) -> Arc<CqState> {
        Arc::new(CqState::new(handle, None, None, DevCqHw::new(None, None, None)))
    }

    #[test]
    fn fifo_timeout_and_fatal_wakeup() {
        let c = CompChannel::new();
        assert_eq!(c.get_cq_event(Duration::from_millis(5)), Err(Error::Timeout));
        c.push(&cq(3));
        c.push(&cq(4));
        assert_eq!(c.try_get_cq_event(), Some(3));
        assert_eq!(c.get_cq_event(Duration::ZERO), Ok(4));
        let waiter = {
            let c = c.clone();
            std::thread::spawn(move || c.get_cq_event(Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(20));
        c.downgrade().upgrade().unwrap().set_fatal();
        assert_eq!(waiter.join().unwrap(), Err(Error::DeviceFatal));
    }

    #[test]
    fn an_unrepresentable_timeout_does_not_panic() {
        let c = CompChannel::new();
        c.push(&cq(7));
        assert_eq!(c.get_cq_event(Duration::MAX), Ok(7));
        let waiter = {
            let c = c.clone();
            std::thread::spawn(move || c.get_cq_event(Duration::MAX))
        };
        std::thread::sleep(Duration::from_millis(20));
        c.push(&cq(8));
        assert_eq!(waiter.join().unwrap(), Ok(8));
    }

    #[test]
    fn taking_counts_obtained_and_purge_drops_only_that_cqs_events() {
        let c = CompChannel::new();
        let (a, b) = (cq(1), cq(2));
        for x in [&a, &b, &a] {
            c.push(x);
        }
        assert_eq!(c.try_get_cq_event(), Some(1));
        assert_eq!((a.unacked(), b.unacked()), (1, 0));
        assert_eq!(c.purge(&a), 1);
        assert_eq!(c.try_get_cq_event(), Some(2));
        assert_eq!(c.try_get_cq_event(), None);
        assert_eq!(b.unacked(), 1);
    }
}
