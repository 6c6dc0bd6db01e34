//! A queue of events with a file descriptor, the shape of both `ibv_comp_channel` (completion
//! events) and a context's async-event queue (`ibv_context.async_fd`).
//!
//! The fd is an eventfd whose count equals the number of queued events (plus one once the queue
//! is fatal), kept so under the queue's lock: it is readable in `poll`/`epoll` exactly while an
//! event is pending. Events are taken with [`EventQueue::take`] or [`EventQueue::wait`] — the
//! "read" of the fd — one per call; with `O_NONBLOCK` set on the fd (by
//! [`EventQueue::set_nonblocking`] or the consumer's own `fcntl`) a wait with nothing pending
//! fails with [`Error::WouldBlock`] (libibverbs: `EAGAIN`). Reading the fd directly consumes
//! counts behind the queue's back: the fd is for `poll`/`epoll`, the queue is read through it.
//!
//! A waiter in [`EventQueue::wait`] sleeps on a condvar of the queue's lock, not in `poll(2)` on
//! the fd: a push made under the lock then wakes it only once the lock is free, so the woken
//! thread never runs into the lock its waker still holds (one context switch per event, as a
//! condvar ping-pong, instead of three when both share a CPU).
//!
//! A waiter in [`EventQueue::wait_interruptible`] (the C library's `ibv_get_cq_event` and
//! `ibv_get_async_event`, which have no timeout) sleeps in `read(2)` on an eventfd of its own
//! thread instead, registered with the queue, so a signal ends its wait exactly as it ends a
//! read of the kernel's fd: `EINTR` when the handler lacks `SA_RESTART`, nothing otherwise.
//! Programs count on it: qperf stops a test with `SIGALRM` (no `SA_RESTART`) while a side may
//! still block for an event its peer, already stopped, will never cause.

use crate::error::{Error, Result};
use crate::sys::{thread_waker, EventFd};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A FIFO of `T` with a pollable fd and a fatal state.
#[derive(Debug)]
pub(crate) struct EventQueue<T> {
    state: Mutex<State<T>>,
    /// Waiters in [`EventQueue::wait`]; notified under `state`.
    cv: Condvar,
    fd: EventFd,
}

#[derive(Debug)]
struct State<T> {
    items: VecDeque<T>,
    fatal: bool,
    /// The wake-up fds of the threads in [`EventQueue::wait_interruptible`]; a push takes one
    /// off and wakes it, a fatal queue all.
    sleepers: Vec<Arc<osdep::EventFd>>,
}

impl<T> EventQueue<T> {
    /// An empty queue. Errors: [`Error::NoResources`] without a free fd.
    pub(crate) fn new() -> Result<Self> {
        let state = Mutex::new(State { items: VecDeque::new(), fatal: false, sleepers: Vec::new() });
        Ok(Self { state, cv: Condvar::new(), fd: EventFd::new()? })
    }

    /// Queues `item`, makes the fd readable and wakes one waiter.
    pub(crate) fn push(&self, item: T) {
        self.push_unless(item, || false);
    }

    /// [`EventQueue::push`] unless `skip` says no, asked under the queue's lock: a purge made
    /// after whatever `skip` reads has changed finds the item queued. Returns whether it queued.
    pub(crate) fn push_unless(&self, item: T, skip: impl FnOnce() -> bool) -> bool {
        let sleeper = {
            let mut s = self.state.lock();
            if skip() {
                return false;
            }
            s.items.push_back(item);
            self.fd.signal();
            self.cv.notify_one();
            s.sleepers.pop()
        };
        wake(sleeper);
        true
    }

    /// Takes the oldest event without waiting; `on_take` runs under the queue's lock (so a purge
    /// either removes the event or sees it taken).
    pub(crate) fn take(&self, on_take: impl FnOnce(&T)) -> Option<T> {
        self.take_locked(&mut self.state.lock(), on_take)
    }

    fn take_locked(&self, s: &mut MutexGuard<'_, State<T>>, on_take: impl FnOnce(&T)) -> Option<T> {
        let item = s.items.pop_front()?;
        if !self.fd.consume() {
            tracing::warn!("event queue fd lost a count: read directly by the consumer?");
        }
        on_take(&item);
        Some(item)
    }

    /// What a waiter gets without sleeping: the oldest event, or [`Error::DeviceFatal`] once
    /// fatal and empty, or [`Error::WouldBlock`] under `O_NONBLOCK`; `None` when it must sleep.
    fn take_or_refuse(&self, s: &mut MutexGuard<'_, State<T>>, on_take: impl FnOnce(&T)) -> Option<Result<T>> {
        if let Some(item) = self.take_locked(s, on_take) {
            return Some(Ok(item));
        }
        if s.fatal {
            return Some(Err(Error::DeviceFatal));
        }
        self.fd.is_nonblocking().then_some(Err(Error::WouldBlock))
    }

    /// Waits up to `timeout` for an event and takes it (see [`EventQueue::take`]).
    ///
    /// Errors: [`Error::WouldBlock`] with nothing queued and `O_NONBLOCK` set on the fd;
    /// [`Error::DeviceFatal`] once fatal and empty; [`Error::Timeout`].
    pub(crate) fn wait(&self, timeout: Duration, on_take: impl Fn(&T)) -> Result<T> {
        let deadline = crate::time::deadline_after(timeout);
        let mut s = self.state.lock();
        loop {
            if let Some(r) = self.take_or_refuse(&mut s, &on_take) {
                return r;
            }
            if Instant::now() >= deadline || self.cv.wait_until(&mut s, deadline).timed_out() {
                return self.take_locked(&mut s, &on_take).ok_or(Error::Timeout);
            }
        }
    }

    /// Waits without bound for an event and takes it (see [`EventQueue::take`]), sleeping in
    /// `read(2)` so that a signal handler ends the wait as it ends a read of the kernel's fd.
    ///
    /// Errors: [`Error::Interrupted`] when a signal handler without `SA_RESTART` ran and no
    /// event came; [`Error::WouldBlock`], [`Error::DeviceFatal`] as [`EventQueue::wait`];
    /// [`Error::NoResources`] without a free fd for the thread's wake-up eventfd.
    pub(crate) fn wait_interruptible(&self, on_take: impl Fn(&T)) -> Result<T> {
        let me = thread_waker()?;
        loop {
            {
                let mut s = self.state.lock();
                if let Some(r) = self.take_or_refuse(&mut s, &on_take) {
                    return r;
                }
                s.sleepers.push(me.clone());
            }
            // A wake-up written before this read is there already: none is lost.
            let r = me.read();
            let mut s = self.state.lock();
            let before = s.sleepers.len();
            s.sleepers.retain(|w| !Arc::ptr_eq(w, &me));
            let chosen = s.sleepers.len() == before;
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    // A push that chose this thread leaves its event to it, not to another
                    // sleeper: take it rather than leave it unannounced.
                    return match chosen.then(|| self.take_locked(&mut s, &on_take)).flatten() {
                        Some(item) => Ok(item),
                        None => Err(Error::Interrupted),
                    };
                }
                Err(_) => return Err(Error::NoResources("read of the wake-up eventfd failed")),
                // Woken (or a wake-up left over from an earlier wait): look again.
                Ok(_) => {}
            }
        }
    }

    /// Removes every queued event `doomed` selects (their object is being destroyed); returns how
    /// many.
    pub(crate) fn purge(&self, doomed: impl Fn(&T) -> bool) -> usize {
        let mut s = self.state.lock();
        let before = s.items.len();
        s.items.retain(|e| !doomed(e));
        let removed = before - s.items.len();
        for _ in 0..removed {
            self.fd.consume();
        }
        removed
    }

    /// Makes every present and future waiter on an empty queue fail with [`Error::DeviceFatal`];
    /// the fd stays readable.
    pub(crate) fn set_fatal(&self) {
        let mut s = self.state.lock();
        if !s.fatal {
            s.fatal = true;
            self.fd.signal();
            self.cv.notify_all();
            for w in s.sleepers.drain(..) {
                wake(Some(w));
            }
        }
    }

    /// Events queued and not yet taken.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().items.len()
    }

    /// The fd for `poll`/`epoll`.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.raw()
    }

    /// Sets or clears `O_NONBLOCK` on the fd. Errors: [`Error::NoResources`] if `fcntl` fails.
    pub(crate) fn set_nonblocking(&self, on: bool) -> Result<()> {
        self.fd.set_nonblocking(on)
    }
}

/// Wakes a thread asleep in [`EventQueue::wait_interruptible`] (its fd outlives the thread: the
/// queue's reference keeps it open).
fn wake(sleeper: Option<Arc<osdep::EventFd>>) {
    if let Some(w) = sleeper {
        if let Err(e) = w.add(1) {
            tracing::error!(%e, "wake-up eventfd write failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(q: &EventQueue<u32>) -> bool {
        q.fd.readable_within(Duration::ZERO)
    }

    #[test]
    fn the_fd_is_readable_exactly_while_events_are_pending() {
        let q = EventQueue::new().unwrap();
        assert!(!readable(&q));
        q.push(1);
        q.push(2);
        assert!(readable(&q));
        assert_eq!(q.take(|_| {}), Some(1));
        assert!(readable(&q));
        assert_eq!(q.purge(|&e| e == 2), 1);
        assert!(!readable(&q));
        assert_eq!(q.wait(Duration::from_millis(5), |_| {}), Err(Error::Timeout));
        q.set_nonblocking(true).unwrap();
        assert_eq!(q.wait(Duration::from_secs(5), |_| {}), Err(Error::WouldBlock));
        q.set_fatal();
        assert!(readable(&q));
        assert_eq!(q.wait(Duration::from_secs(5), |_| {}), Err(Error::DeviceFatal));
    }

    #[test]
    fn a_blocked_waiter_wakes_on_push() {
        let q = std::sync::Arc::new(EventQueue::new().unwrap());
        let t = std::thread::spawn({
            let q = q.clone();
            move || q.wait(Duration::from_secs(10), |_| {})
        });
        std::thread::sleep(Duration::from_millis(30));
        q.push(7u32);
        assert_eq!(t.join().unwrap(), Ok(7));
        assert_eq!(q.len(), 0);
    }
}
