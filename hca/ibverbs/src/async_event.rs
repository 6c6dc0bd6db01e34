//! Async events (`ibv_get_async_event`, `ibv_ack_async_event`): the context's queue of CQ, QP,
//! port and device events.

use crate::abi::{ibv_async_event, ibv_async_event_element, ibv_context, ibv_cq, ibv_qp};
use crate::context::{context, Context};
use crate::ffi::{guard, minus_one, why};
use ib_core::{AsyncElement, AsyncEvent};

/// The element of `ev` as libibverbs gives it: the `ibv_cq*`/`ibv_qp*`/`ibv_srq*` (every core
/// CQ, QP and SRQ of this library carries its box's address), or the port number (0 for the device).
fn element(ev: &AsyncEvent) -> ibv_async_event_element {
    match &ev.element {
        AsyncElement::Cq(c) => ibv_async_event_element { cq: c.cq_context() as *mut ibv_cq },
        AsyncElement::Qp(q) => ibv_async_event_element { qp: q.qp_context() as *mut ibv_qp },
        AsyncElement::Srq(s) => ibv_async_event_element { srq: s.srq_context() as *mut libc::c_void },
        AsyncElement::Port(p) => ibv_async_event_element { port_num: i32::from(*p) },
        AsyncElement::Device => ibv_async_event_element { port_num: 0 },
    }
}

/// `ibv_get_async_event(context, event)`: waits for the context's next async event and returns
/// 0 with it in `*event`; acknowledge it with `ibv_ack_async_event` (destroying its CQ or QP
/// waits for that). Blocks without bound unless `context->async_fd` has `O_NONBLOCK` (set by
/// the program with `fcntl`): then -1 with `EAGAIN` when nothing waits. -1 with `EIO` once the
/// device is fatal and its `IBV_EVENT_DEVICE_FATAL` was taken, `EINVAL` for NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(ctx: *mut ibv_context, event: *mut ibv_async_event) -> i32 {
    guard(-1, || {
        // SAFETY: the caller passes NULL or an open context of this library.
        let Some(c) = (unsafe { context(ctx) }) else { return minus_one(libc::EINVAL) };
        if event.is_null() {
            return minus_one(libc::EINVAL);
        }
        let ev = match c.core.wait_async_event() {
            Ok(ev) => ev,
            Err(e) => return minus_one(why(&e)),
        };
        let out = ibv_async_event { element: element(&ev), event_type: ev.event_type.raw() };
        // Port and device events need no acknowledgement (nothing waits for them).
        if ev.cq().is_some() || ev.qp().is_some() || ev.srq().is_some() {
            c.async_taken.lock().push(ev);
        }
        // SAFETY: `event` is writable (the caller's).
        unsafe { event.write(out) };
        0
    })
}

/// The context an acknowledged event's CQ or QP belongs to.
///
/// # Safety
/// `ev`'s element is a live CQ or QP of this library for a CQ or QP event.
unsafe fn owner<'a>(ev: &ibv_async_event) -> Option<&'a Context> {
    let ty = ib_core::AsyncEventType::from_raw(ev.event_type)?;
    // SAFETY: the caller's promise: the union holds the pointer the event type names, and it
    // points at a live object whose first field is its `ibv_context*`.
    let ctx = unsafe {
        match ty.scope() {
            ib_core::EventScope::Cq => ev.element.cq.as_ref()?.context,
            ib_core::EventScope::Qp => ev.element.qp.as_ref()?.context,
            ib_core::EventScope::Srq => ev.element.srq.cast::<crate::abi::ibv_srq>().as_ref()?.context,
            _ => return None,
        }
    };
    // SAFETY: an object's context is open while the object lives.
    unsafe { context(ctx) }
}

/// Whether the core event `taken` is the one `ev` describes.
fn matches(taken: &AsyncEvent, ev: &ibv_async_event) -> bool {
    if taken.event_type.raw() != ev.event_type {
        return false;
    }
    // The event types are equal, so `ev`'s union holds the member `taken`'s element names, as
    // `ibv_get_async_event` wrote it (a port event's `port_num` is never read as a pointer).
    match &taken.element {
        // SAFETY: a CQ event: the union holds `cq` (above).
        AsyncElement::Cq(c) => c.cq_context() == unsafe { ev.element.cq } as u64,
        // SAFETY: a QP event: the union holds `qp` (above).
        AsyncElement::Qp(q) => q.qp_context() == unsafe { ev.element.qp } as u64,
        // SAFETY: an SRQ event: the union holds `srq` (above).
        AsyncElement::Srq(s) => s.srq_context() == unsafe { ev.element.srq } as u64,
        _ => false,
    }
}

/// `ibv_ack_async_event(event)`: acknowledges an event `ibv_get_async_event` returned. An event
/// of a port or the device needs none (no-op), as in libibverbs; so does NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    guard((), || {
        // SAFETY: the caller passes NULL or an event `ibv_get_async_event` filled.
        let Some(ev) = (unsafe { event.as_ref() }) else { return };
        // SAFETY: that event's CQ or QP cannot be destroyed before this acknowledgement.
        let Some(c) = (unsafe { owner(ev) }) else { return };
        let taken = {
            let mut list = c.async_taken.lock();
            let at = list.iter().position(|t| matches(t, ev));
            at.map(|i| list.remove(i))
        };
        if let Some(t) = taken {
            t.ack();
        }
    })
}
