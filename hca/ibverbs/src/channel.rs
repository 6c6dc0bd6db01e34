//! Completion channels (`ibv_create_comp_channel`, `ibv_destroy_comp_channel`) and their events
//! (`ibv_get_cq_event`).

use crate::abi::{ibv_comp_channel, ibv_context, ibv_cq};
use crate::context::context;
use crate::ffi::{errno_of, fail, guard, minus_one, null, why};

/// What an `ibv_comp_channel` pointer is the start of.
#[repr(C)]
pub(crate) struct Channel {
    pub ibv: ibv_comp_channel,
    pub core: ib_core::CompChannel,
}

/// The [`Channel`] behind `ch`; `None` for NULL.
///
/// # Safety
/// `ch` is NULL or a live channel of this library.
pub(crate) unsafe fn channel<'a>(ch: *const ibv_comp_channel) -> Option<&'a Channel> {
    // SAFETY: the caller's promise.
    unsafe { crate::ffi::boxed(ch) }
}

/// `ibv_create_comp_channel(context)`: a new completion channel; its `fd` is readable (in
/// `poll`/`epoll`) while an event waits. NULL with errno: `EINVAL` for NULL, `EMFILE`/`ENOMEM`
/// without a free file descriptor.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller passes NULL or an open context of this library.
        let Some(c) = (unsafe { context(ctx) }) else { return null(libc::EINVAL) };
        match c.core.create_comp_channel() {
            Ok(core) => {
                // `refcnt` stays 0: the core counts the CQs using the channel (its destroy refuses).
                let ibv = ibv_comp_channel { context: ctx, fd: core.fd(), refcnt: 0 };
                let b = Box::leak(Box::new(Channel { ibv, core }));
                &mut b.ibv
            }
            Err(e) => null(why(&e)),
        }
    })
}

/// `ibv_destroy_comp_channel(channel)`: 0, or `EBUSY` while a CQ uses the channel (as
/// libibverbs), `EINVAL` for NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the caller passes NULL or a live channel of this library.
        let Some(c) = (unsafe { channel(ch) }) else { return fail(libc::EINVAL) };
        if let Err((_, e)) = c.core.clone().destroy() {
            return errno_of(&e);
        }
        // SAFETY: leaked by `ibv_create_comp_channel`; no CQ uses it; this is its one release.
        drop(unsafe { Box::from_raw(ch.cast::<Channel>()) });
        0
    })
}

/// `ibv_get_cq_event(channel, cq, cq_context)`: waits for the channel's next completion event
/// and returns 0 with the CQ in `*cq` and its `cq_context` in `*cq_context`; acknowledge it with
/// `ibv_ack_cq_events` (the CQ's destroy waits for that). Blocks without bound unless the fd has
/// `O_NONBLOCK` (set by the program with `fcntl`): then -1 with `EAGAIN` when nothing waits, as
/// libibverbs's `read` of the fd gives. -1 with `EIO` once the device is fatal, `EINVAL` for
/// NULL arguments.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut libc::c_void,
) -> i32 {
    guard(-1, || {
        // SAFETY: the caller passes NULL or a live channel of this library.
        let Some(c) = (unsafe { channel(ch) }) else { return minus_one(libc::EINVAL) };
        if cq.is_null() || cq_context.is_null() {
            return minus_one(libc::EINVAL);
        }
        let ev = match c.core.wait_cq_event() {
            Ok(ev) => ev,
            Err(e) => return minus_one(why(&e)),
        };
        let p = ev.cq_context() as *mut ibv_cq;
        // SAFETY: every core CQ of this library carries the address of its live box (its
        // destroy waits for this event's acknowledgement); `cq` and `cq_context` are writable.
        unsafe {
            *cq = p;
            *cq_context = (*p).cq_context;
        }
        0
    })
}
