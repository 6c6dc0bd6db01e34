//! What the std crates of the stack take from Linux through system calls: the eventfd (the
//! counter an MSI-X vector signals through VFIO, and the fd a verbs consumer polls as
//! `ibv_comp_channel.fd`/`ibv_context.async_fd`) and the one bounded `poll(2)` wait. The only
//! `unsafe` code of the crate.
#![allow(unsafe_code)]

use core::time::Duration;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;
use std::vec::Vec;

/// How an [`EventFd`] is opened (`eventfd(2)` flags; close-on-exec always).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventFdOptions {
    /// `EFD_SEMAPHORE`: each read takes one count and returns 1, instead of taking the whole
    /// counter.
    pub semaphore: bool,
    /// `EFD_NONBLOCK`: a read with a zero counter fails with `EAGAIN` instead of blocking.
    pub nonblocking: bool,
}

/// An eventfd (`eventfd(2)`): a 64-bit counter the kernel or a thread adds to, readable (for
/// `poll`) exactly while the counter is above 0.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with counter 0.
    ///
    /// Errors: what `eventfd(2)` returns (`EMFILE`/`ENFILE` when out of file descriptors).
    pub fn new(opts: EventFdOptions) -> io::Result<Self> {
        let mut flags = libc::EFD_CLOEXEC;
        if opts.semaphore {
            flags |= libc::EFD_SEMAPHORE;
        }
        if opts.nonblocking {
            flags |= libc::EFD_NONBLOCK;
        }
        // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1, checked first.
        let fd = unsafe { libc::eventfd(0, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is open, and nothing else owns it.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor (for a consumer's `poll`/`epoll`, or VFIO's `VFIO_IRQ_SET_DATA_EVENTFD`).
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Adds `n` to the counter (what the kernel does per interrupt); wakes `poll`ers.
    pub fn add(&self, n: u64) -> io::Result<()> {
        let buf = n.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to a descriptor this value owns.
        let r = unsafe { libc::write(self.raw(), buf.as_ptr().cast(), buf.len()) };
        match r {
            8 => Ok(()),
            r if r < 0 => Err(io::Error::last_os_error()),
            _ => Err(io::Error::new(io::ErrorKind::WriteZero, "short eventfd write")),
        }
    }

    /// One `read(2)`: the counter (reset to 0), or 1 in semaphore mode (the counter less 1). With
    /// a zero counter it blocks, or fails with [`io::ErrorKind::WouldBlock`] under `O_NONBLOCK`.
    pub fn read(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer from a descriptor this value owns.
        let r = unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) };
        match r {
            8 => Ok(u64::from_ne_bytes(buf)),
            r if r < 0 => Err(io::Error::last_os_error()),
            _ => Err(io::Error::new(io::ErrorKind::InvalidData, "short eventfd read")),
        }
    }

    /// Waits up to `timeout` for the counter to be above 0 and reads it ([`EventFd::read`]);
    /// `Ok(0)` on timeout. It reads only after `poll` said readable, so it blocks past `timeout`
    /// only on a blocking fd whose count another reader took in between; on a non-blocking one
    /// that reader's win just means waiting on until the deadline.
    pub fn read_within(&self, timeout: Duration) -> io::Result<u64> {
        let deadline = deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.readable_within(left) {
                match self.read() {
                    Ok(n) => return Ok(n),
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    Err(e) => return Err(e),
                }
            }
            if Instant::now() >= deadline {
                return Ok(0);
            }
        }
    }

    /// Takes a count if the fd is readable now; never blocks on a count another reader took in
    /// between if the fd is non-blocking. Returns whether a count was taken.
    pub fn consume(&self) -> bool {
        self.readable_within(Duration::ZERO) && self.read().is_ok()
    }

    /// Whether the fd becomes readable within `timeout` ([`poll_readable`]).
    pub fn readable_within(&self, timeout: Duration) -> bool {
        let mut ready = [false];
        poll_readable(&[self.0.as_fd()], timeout, &mut ready).is_ok() && ready[0]
    }

    /// Whether `O_NONBLOCK` is set on the fd (by [`EventFd::set_nonblocking`], the options, or a
    /// consumer's own `fcntl`).
    pub fn is_nonblocking(&self) -> bool {
        // SAFETY: F_GETFL takes no pointer argument.
        let flags = unsafe { libc::fcntl(self.raw(), libc::F_GETFL) };
        flags >= 0 && flags & libc::O_NONBLOCK != 0
    }

    /// Sets or clears `O_NONBLOCK`, as a consumer's `fcntl(fd, F_SETFL, ...)` would.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        // SAFETY: F_GETFL takes no pointer argument.
        let flags = unsafe { libc::fcntl(self.raw(), libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
        // SAFETY: F_SETFL takes an integer flag word, no pointer.
        if unsafe { libc::fcntl(self.raw(), libc::F_SETFL, flags) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.raw()
    }
}

/// `now + timeout`, saturating far in the future.
fn deadline_after(timeout: Duration) -> Instant {
    crate::clock::deadline_after(timeout)
}

/// Pollfds kept on the stack; more are allocated.
const STACK_FDS: usize = 8;

/// Waits up to `timeout` (`poll(2)`, rounded up to whole milliseconds so a short wait does not
/// spin) until one of `fds` is readable, restarting on `EINTR` until the deadline; then
/// `ready[i]` tells whether `fds[i]` is readable or has an error or hang-up pending. Returns how
/// many are; 0 on timeout. `ready` must be at least as long as `fds`.
///
/// Errors: what `poll(2)` returns other than `EINTR`.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Duration, ready: &mut [bool]) -> io::Result<usize> {
    assert!(ready.len() >= fds.len(), "poll_readable: `ready` shorter than `fds`");
    let blank = libc::pollfd { fd: -1, events: 0, revents: 0 };
    let mut on_stack = [blank; STACK_FDS];
    let mut on_heap = Vec::new();
    let pfds: &mut [libc::pollfd] = if fds.len() <= STACK_FDS {
        &mut on_stack[..fds.len()]
    } else {
        on_heap.resize(fds.len(), blank);
        &mut on_heap
    };
    for (p, fd) in pfds.iter_mut().zip(fds) {
        *p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    }
    let deadline = deadline_after(timeout);
    let n = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `pfds` is a live, exclusively borrowed array of `pfds.len()` pollfd entries whose
        // descriptors stay open for the borrow of `fds`; poll(2) writes only their `revents`.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        if Instant::now() >= deadline {
            break 0;
        }
    };
    for (r, p) in ready.iter_mut().zip(pfds.iter()) {
        *r = n > 0 && p.revents != 0;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    fn opts(semaphore: bool, nonblocking: bool) -> EventFdOptions {
        EventFdOptions { semaphore, nonblocking }
    }

    #[test]
    fn counter_mode_reads_the_whole_count() {
        let fd = EventFd::new(opts(false, true)).unwrap();
        assert_eq!(fd.read_within(Duration::from_millis(1)).unwrap(), 0);
        fd.add(3).unwrap();
        assert!(fd.readable_within(Duration::ZERO));
        assert_eq!(fd.read_within(Duration::from_secs(5)).unwrap(), 3);
        assert!(!fd.readable_within(Duration::ZERO));
        assert_eq!(fd.read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn semaphore_mode_takes_one_count_per_read() {
        let fd = EventFd::new(opts(true, false)).unwrap();
        assert!(!fd.is_nonblocking());
        fd.add(2).unwrap();
        assert!(fd.consume());
        assert!(fd.consume());
        assert!(!fd.consume());
        fd.set_nonblocking(true).unwrap();
        assert!(fd.is_nonblocking());
        assert_eq!(fd.read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn a_wait_is_bounded_and_sees_a_count_from_another_thread() {
        let fd = std::sync::Arc::new(EventFd::new(opts(false, true)).unwrap());
        let start = Instant::now();
        assert_eq!(fd.read_within(Duration::from_millis(20)).unwrap(), 0);
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(20) && waited < Duration::from_secs(5), "{waited:?}");
        let signaller = std::sync::Arc::clone(&fd);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            signaller.add(1).unwrap();
        });
        assert_eq!(fd.read_within(Duration::from_secs(10)).unwrap(), 1);
        t.join().unwrap();
    }

    #[test]
    fn poll_readable_tells_which_fd() {
        let fds: Vec<EventFd> = (0..STACK_FDS + 2).map(|_| EventFd::new(opts(false, true)).unwrap()).collect();
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
        let mut ready = vec![true; fds.len()];
        assert_eq!(poll_readable(&borrowed, Duration::from_millis(1), &mut ready).unwrap(), 0);
        assert!(ready.iter().all(|r| !r));
        fds[STACK_FDS + 1].add(1).unwrap();
        assert_eq!(poll_readable(&borrowed, Duration::from_secs(5), &mut ready).unwrap(), 1);
        assert_eq!(ready.iter().position(|&r| r), Some(STACK_FDS + 1));
        assert_eq!(poll_readable(&borrowed[..1], Duration::ZERO, &mut ready).unwrap(), 0);
    }
}
