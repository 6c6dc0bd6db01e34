//! The core's eventfd: one per event queue (the fd a consumer puts in `poll`/`epoll`, as
//! `ibv_comp_channel.fd` and `ibv_context.async_fd`), in semaphore mode, so a count stands for
//! one queued event. The eventfd and its `poll(2)` wait are the host's ([`osdep::EventFd`]);
//! this adds the core's error for it and its logging, and the epoll instance that gathers several
//! such fds into one.

use crate::error::{Error, Result};
use std::ops::Deref;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

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

thread_local! {
    /// This thread's wake-up fd ([`thread_waker`]), made on first use.
    static WAKER: std::cell::OnceCell<Arc<osdep::EventFd>> = const { std::cell::OnceCell::new() };
}

/// The calling thread's own eventfd (counting, blocking), on which it sleeps in `read(2)` when
/// a wait must end as a read of the kernel's fd does when a signal handler runs (`EINTR`
/// unless the handler has `SA_RESTART`, under which the read goes on by itself).
///
/// Errors: [`Error::NoResources`] when the process is out of file descriptors.
pub(crate) fn thread_waker() -> Result<Arc<osdep::EventFd>> {
    WAKER.with(|w| {
        if let Some(fd) = w.get() {
            return Ok(fd.clone());
        }
        let opts = osdep::EventFdOptions { semaphore: false, nonblocking: false };
        let fd = Arc::new(osdep::EventFd::new(opts).map_err(|_| Error::NoResources("cannot create an eventfd"))?);
        let _ = w.set(fd.clone());
        Ok(fd)
    })
}

impl Deref for EventFd {
    type Target = osdep::EventFd;

    fn deref(&self) -> &osdep::EventFd {
        &self.0
    }
}

/// An epoll instance watching fds for `POLLIN` (level-triggered): its own fd polls readable
/// while any of them does, so one fd stands for several readiness sources (the GSI agent's
/// completion channel and its backlog).
#[derive(Debug)]
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    /// An epoll instance watching `fds` (open descriptors that outlive it, or that close before
    /// it: a closed fd leaves the set by itself).
    ///
    /// Errors: [`Error::NoResources`] when the process is out of file descriptors.
    pub(crate) fn new(fds: &[RawFd]) -> Result<Self> {
        // SAFETY: epoll_create1 takes only flags and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(Error::NoResources("cannot create an epoll instance"));
        }
        // SAFETY: `fd` is the new descriptor epoll_create1 returned, owned by nothing else.
        let ep = Self(unsafe { OwnedFd::from_raw_fd(fd) });
        for &f in fds {
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: f as u64 };
            // SAFETY: `ep` and `f` are open descriptors; `ev` is valid for the call.
            if unsafe { libc::epoll_ctl(ep.0.as_raw_fd(), libc::EPOLL_CTL_ADD, f, &mut ev) } < 0 {
                return Err(Error::NoResources("epoll_ctl(EPOLL_CTL_ADD) failed"));
            }
        }
        Ok(ep)
    }

    /// The instance's fd, for `poll`/`epoll`.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
