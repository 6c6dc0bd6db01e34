//! Event channels and events. A channel is an [`rdma_event_channel`] whose `fd` is an eventfd in
//! semaphore mode holding one count per queued event, so it polls readable exactly while events
//! wait, and `rdma_get_cm_event` reads one count (blocking, or `EAGAIN` once the program set
//! `O_NONBLOCK` with `fcntl`), then takes the event. An event is an [`rdma_cm_event`] boxed
//! with the private data it points at, as librdmacm's `struct cma_event`.

use crate::abi::*;
use osdep::{EventFd, EventFdOptions};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Private data an event carries at most (a REP's 196 bytes, a SIDR_REQ's 216).
pub const MAX_PRIVATE_DATA: usize = 256;

/// A channel: the C struct first (programs hold its address).
#[repr(C)]
pub struct Channel {
    pub ch: rdma_event_channel,
    pub efd: EventFd,
    /// Queued events (addresses of [`Event`] boxes), oldest first.
    pub queue: Mutex<VecDeque<usize>>,
}

/// An event: the C struct first.
#[repr(C)]
pub struct Event {
    pub ev: rdma_cm_event,
    pub private_data: [u8; MAX_PRIVATE_DATA],
}

impl Channel {
    /// A new channel, leaked: its address is the program's handle until
    /// [`Channel::destroy`].
    pub fn create() -> std::io::Result<*mut Channel> {
        let efd = EventFd::new(EventFdOptions { semaphore: true, nonblocking: false })?;
        let ch = rdma_event_channel { fd: efd.raw() };
        Ok(Box::into_raw(Box::new(Channel { ch, efd, queue: Mutex::new(VecDeque::new()) })))
    }

    /// Frees a channel [`Channel::create`] made, with the events still queued on it.
    ///
    /// # Safety
    /// `p` came from [`Channel::create`] and is not used afterwards.
    pub unsafe fn destroy(p: *mut Channel) {
        // SAFETY: the caller's promise.
        let ch = unsafe { Box::from_raw(p) };
        let queued: Vec<usize> = ch.queue.lock().map(|mut q| q.drain(..).collect()).unwrap_or_default();
        for e in queued {
            // SAFETY: queued events are boxes of Event::new, owned by the queue.
            unsafe { Event::free(e as *mut Event) };
        }
    }

    /// Queues `e` and adds its count to the fd.
    pub fn push(&self, e: *mut Event) {
        if let Ok(mut q) = self.queue.lock() {
            q.push_back(e as usize);
            let _ = self.efd.add(1);
        }
    }

    /// Takes the oldest event after its count was read from the fd.
    pub fn pop(&self) -> Option<*mut Event> {
        self.queue.lock().ok()?.pop_front().map(|e| e as *mut Event)
    }

    /// Removes the queued events of id `id` (it is being destroyed: the kernel drops them too),
    /// taking their counts from the fd.
    pub fn drop_events_of(&self, id: usize) {
        let Ok(mut q) = self.queue.lock() else { return };
        q.retain(|&e| {
            // SAFETY: queued events are live boxes of Event::new.
            let mine = unsafe { (*(e as *const Event)).ev.id as usize == id };
            if mine {
                self.efd.consume();
                // SAFETY: removed from the queue here, so owned by nobody else.
                unsafe { Event::free(e as *mut Event) };
            }
            !mine
        });
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
