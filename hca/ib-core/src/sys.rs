//! The core's eventfd: one per event queue (the fd a consumer puts in `poll`/`epoll`, as
//! `ibv_comp_channel.fd` and `ibv_context.async_fd`), in semaphore mode, so a count stands for
//! one queued event. The eventfd and its `poll(2)` wait are the host's ([`osdep::EventFd`]);
//! this adds the core's error for it and its logging.

use crate::error::{Error, Result};
use std::ops::Deref;

/// An [`osdep::EventFd`] in semaphore mode: each read takes one count; a read with no count
/// blocks, or fails with `EAGAIN` under `O_NONBLOCK`; `poll` reports it readable exactly while
/// the count is above 0. `raw`, `readable_within`, `consume` and `is_nonblocking` are the host
/// eventfd's.
#[derive(Debug)]
pub(crate) struct EventFd(osdep::EventFd);

impl EventFd {
    /// A new eventfd with count 0, close-on-exec, blocking.
    ///
    /// Errors: [`Error::NoResources`] when the process is out of file descriptors.
    pub(crate) fn new() -> Result<Self> {
        let opts = osdep::EventFdOptions { semaphore: true, nonblocking: false };
        osdep::EventFd::new(opts).map(Self).map_err(|_| Error::NoResources("cannot create an eventfd"))
    }

    /// Adds one to the count (wakes `poll`ers).
    pub(crate) fn signal(&self) {
        if let Err(e) = self.0.add(1) {
            tracing::error!(%e, "eventfd write failed");
        }
    }

    /// Sets or clears `O_NONBLOCK`, as a consumer's `fcntl(fd, F_SETFL, ...)` would.
    pub(crate) fn set_nonblocking(&self, on: bool) -> Result<()> {
        self.0.set_nonblocking(on).map_err(|_| Error::NoResources("fcntl(F_SETFL) failed"))
    }
}

impl Deref for EventFd {
    type Target = osdep::EventFd;

    fn deref(&self) -> &osdep::EventFd {
        &self.0
    }
}
