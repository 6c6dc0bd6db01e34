//! What every entry point shares: catching panics at the C boundary, libibverbs's two ways of
//! failing (an `int` errno, or NULL/-1 with `errno` set), and reaching the box behind a C
//! pointer.

use ib_core::Error;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`; a panic inside it is caught (it must not unwind into C), sets `errno` to `EIO`
/// and returns `on_panic`.
pub(crate) fn guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e }
}

/// An `int` verb's answer as libibverbs gives it: 0, or the positive errno of the failure
/// (`ibv_modify_qp`, `ibv_destroy_cq`, `ibv_dealloc_pd`, `ibv_req_notify_cq`, ...). `errno` is
/// set too, as several libibverbs verbs leave it set.
pub(crate) fn status(r: ib_core::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// The errno of `e` (the core's one table), also stored in `errno`.
pub(crate) fn errno_of(e: &Error) -> i32 {
    let n = e.errno();
    set_errno(n);
    n
}

/// A pointer verb's failure: NULL with `errno` set (`ibv_create_cq`, `ibv_reg_mr`, ...).
pub(crate) fn null<T>(errno: i32) -> *mut T {
    set_errno(errno);
    std::ptr::null_mut()
}

/// A `-1`-style failure (`ibv_get_cq_event`, `ibv_get_async_event`, `ibv_query_gid`): -1 with
/// `errno` set.
pub(crate) fn minus_one(errno: i32) -> i32 {
    set_errno(errno);
    -1
}

/// The box of type `B` whose first field the C pointer `p` points at (every object this
/// library hands out is `#[repr(C)]` with the libibverbs struct first); `None` for NULL.
///
/// # Safety
/// `p` is NULL or was handed out by this library as the first field of a live `B`.
pub(crate) unsafe fn boxed<'a, B, T>(p: *const T) -> Option<&'a B> {
    // SAFETY: the caller's promise: `p` is the address of a live `B` (its first field).
    unsafe { p.cast::<B>().as_ref() }
}
