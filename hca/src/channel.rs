//! Completion channels (`ibv_comp_channel`): a queue of CQ handles, one per fired arm, that one
//! or several CQs deliver into and a consumer waits on with a bound.

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
    events: VecDeque<u32>,
    fatal: bool,
}

impl CompChannel {
    pub(crate) fn new() -> Self {
        let inner = ChannelInner { state: Mutex::new(ChannelState::default()), cond: Condvar::new() };
        Self { inner: Arc::new(inner) }
    }

    pub(crate) fn downgrade(&self) -> Weak<ChannelInner> {
        Arc::downgrade(&self.inner)
    }

    /// Queues one event for CQ `handle` and wakes a waiter.
    pub(crate) fn push(&self, handle: u32) {
        self.inner.push(handle);
    }

    /// Whether `self` and `other` are the same channel.
    pub fn same(&self, other: &CompChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Waits up to `timeout` for a completion event and returns the CQ handle it is for
    /// (`ibv_get_cq_event`). Acknowledge it with [`crate::Cq::ack_events`].
    ///
    /// Errors: [`Error::Timeout`] if none arrived; [`Error::DeviceFatal`] once the device is fatal
    /// and no event is left.
    pub fn get_cq_event(&self, timeout: Duration) -> Result<u32> {
        // Saturating: `Duration::MAX` waits (practically) forever instead of panicking.
        let deadline = firmware_cmd::deadline_after(timeout);
        let mut s = self.inner.state.lock();
        loop {
            if let Some(h) = s.events.pop_front() {
                return Ok(h);
            }
            if s.fatal {
                return Err(Error::DeviceFatal);
            }
            if self.inner.cond.wait_until(&mut s, deadline).timed_out() {
                return s.events.pop_front().ok_or(Error::Timeout);
            }
        }
    }

    /// Takes a completion event if one is queued, without waiting.
    pub fn try_get_cq_event(&self) -> Option<u32> {
        self.inner.state.lock().events.pop_front()
    }

    /// Events queued and not yet taken.
    pub fn pending(&self) -> usize {
        self.inner.state.lock().events.len()
    }
}

impl ChannelInner {
    fn push(&self, handle: u32) {
        self.state.lock().events.push_back(handle);
        self.cond.notify_one();
    }

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

    #[test]
    fn fifo_timeout_and_fatal_wakeup() {
        let c = CompChannel::new();
        assert_eq!(c.get_cq_event(Duration::from_millis(5)), Err(Error::Timeout));
        c.push(3);
        c.push(4);
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
        c.push(7);
        assert_eq!(c.get_cq_event(Duration::MAX), Ok(7));
        let waiter = {
            let c = c.clone();
            std::thread::spawn(move || c.get_cq_event(Duration::MAX))
        };
        std::thread::sleep(Duration::from_millis(20));
        c.push(8);
        assert_eq!(waiter.join().unwrap(), Ok(8));
    }
}
