//! Contexts: each is a user context of the core's device (on pvrdma, a UAR page of its own and
//! CREATE_UC), wrapped in a `verbs_context` whose `ibv_context` programs hold; `open.rs` makes
//! and frees them.

use crate::abi::{ibv_context, verbs_context};
use crate::devices::DeviceEntry;
use ib_core::AsyncEvent;
use memoffset::offset_of;
use parking_lot::Mutex;
use std::os::fd::OwnedFd;

/// What an `ibv_context` pointer is the end of: the `verbs_context` (first), the core's user
/// context, the device, the async events handed out and not yet acknowledged, and the file
/// `ibv_context.cmd_fd` names.
#[repr(C)]
pub(crate) struct Context {
    pub vctx: verbs_context,
    pub core: ib_core::Context,
    pub dev: &'static DeviceEntry,
    /// Events `ibv_get_async_event` returned, until `ibv_ack_async_event` acknowledges them.
    pub async_taken: Mutex<Vec<AsyncEvent>>,
    /// `ibv_context.cmd_fd`, closed with the context as libibverbs's `verbs_uninit_context`
    /// closes it (see `open.rs`).
    pub cmd_fd: OwnedFd,
}

/// Where the `ibv_context` sits inside a [`Context`].
const IBV_CONTEXT_AT: usize = offset_of!(Context, vctx) + offset_of!(verbs_context, context);

/// The [`Context`] whose `ibv_context` is `ctx`; `None` for NULL.
///
/// # Safety
/// `ctx` is NULL or an `ibv_context` of this library that is still open.
pub(crate) unsafe fn context<'a>(ctx: *const ibv_context) -> Option<&'a Context> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: the caller's promise: `ctx` is the `ibv_context` field of a live `Context`, which
    // sits `IBV_CONTEXT_AT` bytes into it.
    unsafe { ctx.cast::<u8>().sub(IBV_CONTEXT_AT).cast::<Context>().as_ref() }
}

impl Context {
    /// The `ibv_context` programs hold.
    pub fn ibv(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }
}
