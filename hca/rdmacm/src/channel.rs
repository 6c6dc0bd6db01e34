//! Event channels and events. A channel is an [`rdma_event_channel`] whose `fd` is an eventfd in
//! semaphore mode holding one count per queued event, so it polls readable while events wait
//! (and, after an id is destroyed with events queued, until a read skips their counts), and
//! `rdma_get_cm_event` reads one count (blocking, or `EAGAIN` once the program set `O_NONBLOCK`
//! with `fcntl`), then takes the event. An event is an [`rdma_cm_event`] boxed
//! with the private data it points at, as librdmacm's `struct cma_event`.
//!
//! The live channels are a set of their own, under their own lock rather than the library's:
//! a thread on its way back into `rdma_get_cm_event` checks its channel there without queueing
//! behind the program's other calls (as librdmacm's thread goes straight into `read()`), so
//! a `main()` busy destroying ids cannot starve it until the channel is gone.

use crate::abi::*;
use osdep::{EventFd, EventFdOptions};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;

/// The addresses of the live channels.
static LIVE: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// Whether `ch` is the address of a live channel.
pub fn is_live(ch: usize) -> bool {
    LIVE.lock().is_ok_and(|l| l.contains(&ch))
}

/// Takes `ch` out of the live set: true if it was live (the caller then owns it and frees it
/// with [`Channel::destroy`]); false for anything else, so a channel is freed once.
pub fn retire(ch: usize) -> bool {
    LIVE.lock().is_ok_and(|mut l| l.remove(&ch))
}

/// Private data an event carries at most (a REP's 196 bytes, a SIDR_REQ's 216).
pub const MAX_PRIVATE_DATA: usize = 256;

/// A channel: the C struct first (programs hold its address).
#[repr(C)]
pub struct Channel {
    pub ch: rdma_event_channel,
    pub efd: EventFd,
    queue: Mutex<Queue>,
}

/// The fd holds one count per queued event plus one per event removed before it was read
/// (`stale`): the count of a removed event is left in the fd for the next reader to skip, as
/// taking it back could block behind a reader that had just read it.
#[derive(Default)]
struct Queue {
    /// Queued events (addresses of [`Event`] boxes), oldest first.
    events: VecDeque<usize>,
    stale: u64,
}

/// An event: the C struct first.
#[repr(C)]
pub struct Event {
    pub ev: rdma_cm_event,
    pub private_data: [u8; MAX_PRIVATE_DATA],
}

impl Channel {
    /// A new channel, leaked and live ([`is_live`]): its address is the program's handle until
    /// [`retire`] and [`Channel::destroy`].
    pub fn create() -> std::io::Result<*mut Channel> {
        let efd = EventFd::new(EventFdOptions { semaphore: true, nonblocking: false })?;
        let ch = rdma_event_channel { fd: efd.raw() };
        let p = Box::into_raw(Box::new(Channel { ch, efd, queue: Mutex::new(Queue::default()) }));
        LIVE.lock().map_err(|_| std::io::Error::from_raw_os_error(libc::ENOMEM))?.insert(p as usize);
        Ok(p)
    }

    /// Frees a channel [`Channel::create`] made, with the events still queued on it.
    ///
    /// # Safety
    /// `p` came from [`Channel::create`], was [`retire`]d, and is not used afterwards.
    pub unsafe fn destroy(p: *mut Channel) {
        // SAFETY: the caller's promise.
        let ch = unsafe { Box::from_raw(p) };
        let queued: Vec<usize> = ch.queue.lock().map(|mut q| q.events.drain(..).collect()).unwrap_or_default();
        for e in queued {
            // SAFETY: queued events are boxes of Event::new, owned by the queue.
            unsafe { Event::free(e as *mut Event) };
        }
    }

    /// Queues `e` and adds its count to the fd.
    pub fn push(&self, e: *mut Event) {
        if let Ok(mut q) = self.queue.lock() {
            q.events.push_back(e as usize);
            let _ = self.efd.add(1);
        }
    }

    /// Takes the oldest event after a count was read from the fd; `None` when the count was
    /// a removed event's (the reader reads again).
    pub fn pop(&self) -> Option<*mut Event> {
        let mut q = self.queue.lock().ok()?;
        let e = q.events.pop_front();
        if e.is_none() {
            q.stale = q.stale.saturating_sub(1);
        }
        e.map(|e| e as *mut Event)
    }

    /// Removes the queued events of id `id` and returns them, oldest first; their counts stay
    /// in the fd as stale ones.
    pub fn take_events_of(&self, id: usize) -> Vec<*mut Event> {
        let Ok(mut q) = self.queue.lock() else { return Vec::new() };
        let mut mine = Vec::new();
        q.events.retain(|&e| {
            // SAFETY: queued events are live boxes of Event::new.
            let hit = unsafe { (*(e as *const Event)).ev.id as usize == id };
            if hit {
                mine.push(e as *mut Event);
            }
            !hit
        });
        q.stale += mine.len() as u64;
        mine
    }

    /// Frees the queued events of id `id` (it is being destroyed: the kernel drops them too).
    pub fn drop_events_of(&self, id: usize) {
        for e in self.take_events_of(id) {
            // SAFETY: removed from the queue, so owned by nobody else.
            unsafe { Event::free(e) };
        }
    }
}

impl Event {
    /// A new event of type `kind` for `id`, status `status`, no parameters.
    pub fn new(id: usize, kind: u32, status: i32) -> *mut Event {
        // SAFETY: rdma_cm_event and the data bytes are plain C data; all-zero is valid (NULLs).
        let mut e: Box<Event> = Box::new(unsafe { std::mem::zeroed() });
        e.ev.id = id as *mut rdma_cm_id;
        e.ev.event = kind;
        e.ev.status = status;
        Box::into_raw(e)
    }

    /// Copies `data` (at most [`MAX_PRIVATE_DATA`] bytes) into the event and returns its
    /// address and length for the parameters.
    pub fn set_private_data(&mut self, data: &[u8]) -> (*const libc::c_void, u8) {
        let n = data.len().min(MAX_PRIVATE_DATA).min(255);
        self.private_data[..n].copy_from_slice(&data[..n]);
        if n == 0 {
            (std::ptr::null(), 0)
        } else {
            (self.private_data.as_ptr().cast(), n as u8)
        }
    }

    /// Frees an event box.
    ///
    /// # Safety
    /// `p` came from [`Event::new`] and is not used afterwards.
    pub unsafe fn free(p: *mut Event) {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(p) });
    }
}
