//! Completion channels (`ibv_comp_channel`): a queue of completion events, one per fired arm,
//! that the CQs of one context deliver into, with a file descriptor a consumer puts in
//! `poll`/`epoll` (readable exactly while an event is pending; see `queue.rs`).
//!
//! [`CompChannel::get_cq_event`] returns the CQ the event is for as a [`CqRef`], which carries the
//! consumer's own `cq_context`; taking an event counts it for that CQ, and destroying the CQ waits
//! until it is acknowledged ([`CqRef::ack_events`] or [`crate::Cq::ack_events`]). Events still
//! queued when their CQ is destroyed are removed: no consumer gets an event for a CQ it no longer
//! has. A channel belongs to one context: a CQ of another context cannot use it.

use super::delivery::FatalSink;
use super::queue::EventQueue;
use super::refs::CqRef;
use crate::error::{Error, Result};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A completion channel. Cloning gives another handle to the same channel.
#[derive(Clone)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

pub(crate) struct ChannelInner {
    pub(crate) ctx_uid: u64,
    queue: EventQueue<CqRef>,
    /// CQs delivering into the channel.
    users: AtomicU32,
}

impl FatalSink for ChannelInner {
    fn fatal(&self) {
        self.queue.set_fatal();
    }
}

impl CompChannel {
    /// A new channel of the context `ctx_uid` (`Context::create_comp_channel`).
    ///
    /// Errors: [`Error::NoResources`] without a free file descriptor.
    pub(crate) fn new(ctx_uid: u64) -> Result<Self> {
        Ok(Self { inner: Arc::new(ChannelInner { ctx_uid, queue: EventQueue::new()?, users: AtomicU32::new(0) }) })
    }

    /// What the context tells when the device goes fatal (the channel's waiters wake).
    pub(crate) fn fatal_sink(&self) -> Arc<dyn FatalSink> {
        self.inner.clone()
    }

    /// Queues one event for `cq` (the fired arm's) unless `retired` says its destroy began,
    /// asked under the queue's lock: a destroy retires the CQ, then purges the channel, so the
    /// event is either never queued or purged before any consumer can have it after the
    /// destroy. Returns whether it was queued.
    pub(crate) fn push_unless(&self, cq: &CqRef, retired: impl FnOnce() -> bool) -> bool {
        self.inner.queue.push_unless(cq.clone(), retired)
    }

    /// Removes the untaken events of `cq` (being destroyed); returns how many.
    pub(crate) fn purge(&self, cq: &CqRef) -> usize {
        self.inner.queue.purge(|e| e == cq)
    }

    /// Records a CQ that delivers into the channel; refuses one of another context.
    pub(crate) fn attach(&self, ctx_uid: u64) -> Result<()> {
        if self.inner.ctx_uid != ctx_uid {
            return Err(Error::InvalidArgument("completion channel of another context"));
        }
        self.inner.users.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    pub(crate) fn detach(&self) {
        self.inner.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// Waits up to `timeout` for a completion event and returns its CQ (`ibv_get_cq_event`).
    /// Acknowledge it ([`CqRef::ack_events`]): the CQ cannot be destroyed until then.
    ///
    /// Errors: [`Error::Timeout`]; [`Error::WouldBlock`] with nothing pending while the fd has
    /// `O_NONBLOCK` ([`CompChannel::set_nonblocking`]); [`Error::DeviceFatal`] once the device
    /// is fatal and no event is left.
    pub fn get_cq_event(&self, timeout: Duration) -> Result<CqRef> {
        self.inner.queue.wait(timeout, |cq| cq.0.comp.taken())
    }

    /// Waits without bound for a completion event, as `ibv_get_cq_event`'s `read(2)` of the
    /// kernel's fd does: a signal handler without `SA_RESTART` ends the wait (one with it does
    /// not). Acknowledge the event as for [`CompChannel::get_cq_event`].
    ///
    /// Errors: [`Error::Interrupted`]; [`Error::WouldBlock`] and [`Error::DeviceFatal`] as
    /// [`CompChannel::get_cq_event`]; [`Error::NoResources`] without a free fd.
    pub fn wait_cq_event(&self) -> Result<CqRef> {
        self.inner.queue.wait_interruptible(|cq| cq.0.comp.taken())
    }

    /// Takes a completion event if one is queued, without waiting (acknowledge it as for
    /// [`CompChannel::get_cq_event`]).
    pub fn try_get_cq_event(&self) -> Option<CqRef> {
        self.inner.queue.take(|cq| cq.0.comp.taken())
    }

    /// Events queued and not yet taken.
    pub fn pending(&self) -> usize {
        self.inner.queue.len()
    }

    /// The channel's file descriptor (`ibv_comp_channel.fd`), for `poll`/`epoll`: readable
    /// exactly while an event is pending (or once the device is fatal). Take events with
    /// [`CompChannel::get_cq_event`], not by reading the fd.
    pub fn fd(&self) -> RawFd {
        self.inner.queue.fd()
    }

    /// Sets or clears `O_NONBLOCK` on the fd (as `fcntl(channel->fd, F_SETFL, O_NONBLOCK)`): with
    /// it, [`CompChannel::get_cq_event`] fails at once with [`Error::WouldBlock`] when nothing is
    /// pending.
    pub fn set_nonblocking(&self, on: bool) -> Result<()> {
        self.inner.queue.set_nonblocking(on)
    }

    /// Whether `self` and `other` are the same channel.
    pub fn same(&self, other: &CompChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Destroys the channel (`ibv_destroy_comp_channel`).
    ///
    /// Errors: [`Error::Busy`] while a CQ still delivers into it; the channel is handed back.
    pub fn destroy(self) -> std::result::Result<(), (CompChannel, Error)> {
        if self.inner.users.load(Ordering::Acquire) > 0 {
            return Err((self, Error::Busy("a CQ still uses the completion channel")));
        }
        Ok(())
    }
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompChannel(fd {}, {} pending)", self.fd(), self.pending())
    }
}
