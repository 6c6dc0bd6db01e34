//! Whether a device is in its catastrophic state, for this stack's librdmacm
//! (`hca_device_fatal`, version node `HCA_PRIVATE_1`, decision 32). librdmacm raises
//! `RDMA_CM_EVENT_DEVICE_REMOVAL` on every id of a device that went away (rdma-core
//! `librdmacm/cma.c`, Linux `drivers/infiniband/core/cma.c` `cma_process_remove`); on Linux the
//! kernel's CM tells it, here it asks the verbs core, because the `IBV_EVENT_DEVICE_FATAL` of a
//! context is its program's to take (`ibv_get_async_event`), not librdmacm's.

use crate::abi::ibv_context;
use crate::context::context;
use crate::devices::entry;
use crate::ffi::{guard, set_errno};

/// `hca_device_fatal(ctx)`: 1 once ctx's device is in its catastrophic state (IBTA 11.6.2's
/// "catastrophic error": every verb fails, `IBV_EVENT_DEVICE_FATAL` was raised), 0 while it is
/// not. -1 with `errno` `EINVAL` for a NULL context, `ENOSYS` for a context of another
/// library's device. It takes no event and changes nothing.
#[no_mangle]
pub unsafe extern "C" fn hca_device_fatal(ctx: *mut ibv_context) -> i32 {
    guard(-1, || {
        if ctx.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller passes an open `ibv_context` (of this library or another): its first
        // field is the device it was opened on.
        let dev = unsafe { (*ctx).device };
        if entry(dev).is_none() {
            set_errno(libc::ENOSYS);
            return -1;
        }
        // SAFETY: its device is one of this library's, so the context is one of ours.
        match unsafe { context(ctx) } {
            Some(c) => i32::from(c.core.is_fatal()),
            None => {
                set_errno(libc::EINVAL);
                -1
            }
        }
    })
}
