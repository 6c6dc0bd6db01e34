//! `rdma_create_event_channel`, `rdma_destroy_event_channel`, `rdma_get_cm_event`,
//! `rdma_ack_cm_event`, `rdma_event_str`, and the wait of a sync id for its own event
//! ([`complete`], librdmacm's `ucma_complete` in `librdmacm/cma.c`).

use crate::abi::*;
use crate::channel::{Channel, Event};
use crate::ffi::{err, guard};
use crate::sys::set_errno;
use crate::world::{cma, lock, World};
use std::ptr::null_mut;

/// `rdma_create_event_channel`: NULL + errno when out of descriptors.
#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    guard(null_mut(), || match Channel::create() {
        Ok(ch) => ch.cast(),
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::ENOMEM));
            null_mut()
        }
    })
}

/// `rdma_destroy_event_channel`: the program has destroyed the channel's ids first (librdmacm
/// requires it); a pointer that is not a channel of ours is ignored.
#[no_mangle]
pub extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard((), || {
        // Under the library's lock: the engine thread delivering an event finds it live or gone.
        let _w = lock();
        if crate::channel::retire(channel as usize) {
            // SAFETY: retired here, so it was a live channel and no one finds it now.
            unsafe { Channel::destroy(channel.cast()) };
        }
    })
}

/// Takes the next event of `channel` (blocking unless the program set `O_NONBLOCK` on its fd:
/// then `EAGAIN`), counted as delivered to its id.
pub(crate) fn get_event(channel: *mut rdma_event_channel) -> Result<*mut Event, i32> {
    let ch = channel as usize;
    if !crate::channel::is_live(ch) {
        return Err(libc::EINVAL);
    }
    // SAFETY: a live channel; the program does not destroy it while waiting on it (as with
    // librdmacm, where its fd would be closed under the read).
    let chan = unsafe { &*(ch as *const Channel) };
    loop {
        match chan.efd.read() {
            Ok(_) => {}
            // A signal handler without SA_RESTART ends the wait with EINTR, as it ends librdmacm's
            // write(2) to the kernel's rdma_cm fd (under SA_RESTART the read goes on by itself).
            Err(e) => return Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
        let mut w = lock();
        let Some(e) = chan.pop() else { continue };
        // SAFETY: a queued event box, now owned by the program until acknowledged.
        let id = unsafe { (*e).ev.id as usize };
        if let Some(s) = w.ids.get_mut(&id) {
            s.unacked += 1;
        }
        w.events.insert(e as usize);
        return Ok(e);
    }
}

/// `rdma_get_cm_event`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> i32 {
    guard(-1, || {
        if event.is_null() {
            return err(libc::EINVAL);
        }
        match get_event(channel) {
            Ok(e) => {
                // SAFETY: `event` is the program's out-pointer, checked non-NULL.
                unsafe { *event = e.cast() };
                0
            }
            Err(e) => err(e),
        }
    })
}

/// Acknowledges event `e`: freed, and its id's count of unacknowledged events goes down.
pub(crate) fn ack(e: *mut rdma_cm_event) -> Result<(), i32> {
    let mut w = lock();
    if !w.events.remove(&(e as usize)) {
        return Err(libc::EINVAL);
    }
    // SAFETY: a delivered event box, removed from the set: ours to free.
    let id = unsafe { (*e).id as usize };
    if let Some(s) = w.ids.get_mut(&id) {
        s.unacked = s.unacked.saturating_sub(1);
    }
    // SAFETY: as above.
    unsafe { Event::free(e.cast()) };
    crate::world::ACKED.notify_all();
    Ok(())
}

/// `rdma_ack_cm_event`.
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> i32 {
    guard(-1, || crate::ffi::ret(ack(event)))
}

/// A sync id's wait for the event its call raised (`ucma_complete`): the previous event is
/// acknowledged, the new one stored in `id->event`; a failed event gives -1 with its errno
/// (`ECONNREFUSED` for REJECTED). Ids with a channel of the program's return 0 at once.
pub(crate) fn complete(id: *mut rdma_cm_id) -> Result<(), i32> {
    let (sync, channel) = {
        let mut w = lock();
        let s = w.id(id)?;
        (s.sync, s.channel)
    };
    if !sync {
        return Ok(());
    }
    let c = cma(id as usize);
    // SAFETY: a live id of ours (checked above); the program uses a sync id from one thread.
    let prev = unsafe { std::mem::replace(&mut (*c).id.event, null_mut()) };
    if !prev.is_null() {
        let _ = ack(prev);
    }
    let e = get_event(channel as *mut rdma_event_channel)?;
    // SAFETY: as above; `e` is the delivered event.
    unsafe { (*c).id.event = e.cast() };
    // SAFETY: a live event box.
    let (kind, status) = unsafe { ((*e).ev.event, (*e).ev.status) };
    match status {
        0 => Ok(()),
        _ if kind == RDMA_CM_EVENT_REJECTED => Err(libc::ECONNREFUSED),
        s => Err(s.abs()),
    }
}

/// `RDMA_CM_EVENT_DEVICE_REMOVAL` (status 0) on every id of device `dev`, which went fatal:
/// those it is attached to (bound to its address, resolved through it, connected on it) and the
/// listeners listening on it, once each. As Linux's `cma_process_remove` (in
/// `drivers/infiniband/core/cma.c`) the ids stay the program's to destroy; their verbs on the
/// device fail from now on (`EIO`), and the device holds no address for new ones.
pub(crate) fn device_removal(w: &mut World, dev: usize) {
    let on = |s: &crate::world::IdState| s.dev == Some(dev) || s.listens.iter().any(|&(d, _)| d == dev);
    let ids: Vec<usize> = w.ids.iter().filter(|(_, s)| on(s)).map(|(&p, _)| p).collect();
    for p in ids {
        w.deliver(Event::new(p, RDMA_CM_EVENT_DEVICE_REMOVAL, 0));
    }
}

/// `rdma_event_str`: librdmacm's names.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: u32) -> *const libc::c_char {
    let s: &'static [u8] = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
        RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
        RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
        RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
        RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
        RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
        _ => b"UNKNOWN EVENT\0",
    };
    s.as_ptr().cast()
}
