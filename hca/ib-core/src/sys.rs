//! The system calls of the core: an eventfd per event queue (the fd a consumer puts in
//! `poll`/`epoll`, as `ibv_comp_channel.fd` and `ibv_context.async_fd`), waited on with `poll(2)`.
//! Every `unsafe` block of the crate is here.

use crate::error::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// An eventfd in semaphore mode: each 8-byte read takes one count and returns 1; a read with no
/// count blocks, or fails with `EAGAIN` under `O_NONBLOCK`; `poll` reports it readable exactly
/// while the count is above 0.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with count 0, close-on-exec, blocking.
    ///
    /// Errors: [`Error::NoResources`] when the process is out of file descriptors.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative return is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(Error::NoResources("cannot create an eventfd"));
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Adds one to the count (wakes `poll`ers).
    pub(crate) fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to an fd this object owns.
        let n = unsafe { libc::write(self.raw(), one.as_ptr().cast(), one.len()) };
        if n != 8 {
            tracing::error!(n, "eventfd write failed");
        }
    }

    /// Takes one count if the fd is readable now; never blocks (a zero-timeout `poll` first).
    pub(crate) fn consume(&self) -> bool {
        if !self.readable_within(Duration::ZERO) {
            return false;
        }
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer from an fd this object owns.
        let n = unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) };
        n == 8
    }

    /// Waits up to `timeout` for the fd to become readable (`poll(2)`, restarted on `EINTR`).
    pub(crate) fn readable_within(&self, timeout: Duration) -> bool {
        let deadline = crate::time::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // Round up, so a wait never ends early for want of a millisecond.
            let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd { fd: self.raw(), events: libc::POLLIN, revents: 0 };
            // SAFETY: `pfd` is one live pollfd and the count passed is 1.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n > 0 {
                return pfd.revents & libc::POLLIN != 0;
            }
            let interrupted = n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
            if !interrupted || Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Whether `O_NONBLOCK` is set on the fd (by [`EventFd::set_nonblocking`] or by the consumer's
    /// own `fcntl`).
    pub(crate) fn is_nonblocking(&self) -> bool {
        // SAFETY: F_GETFL takes no pointer argument.
        let flags = unsafe { libc::fcntl(self.raw(), libc::F_GETFL) };
        flags >= 0 && flags & libc::O_NONBLOCK != 0
    }

    /// Sets or clears `O_NONBLOCK`, as a consumer's `fcntl(fd, F_SETFL, ...)` would.
    pub(crate) fn set_nonblocking(&self, on: bool) -> Result<()> {
        // SAFETY: F_GETFL takes no pointer argument.
        let flags = unsafe { libc::fcntl(self.raw(), libc::F_GETFL) };
        if flags < 0 {
            return Err(Error::NoResources("fcntl(F_GETFL) failed"));
        }
        let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
        // SAFETY: F_SETFL takes an integer flag word, no pointer.
        if unsafe { libc::fcntl(self.raw(), libc::F_SETFL, flags) } < 0 {
            return Err(Error::NoResources("fcntl(F_SETFL) failed"));
        }
        Ok(())
    }
}
