//! Protection domains (`ibv_alloc_pd`, `ibv_dealloc_pd`).

use crate::abi::{ibv_context, ibv_pd};
use crate::context::context;
use crate::ffi::{destroy_boxed, fail, guard, null, why};

/// What an `ibv_pd` pointer is the start of.
#[repr(C)]
pub(crate) struct Pd {
    pub ibv: ibv_pd,
    pub core: ib_core::Pd,
}

/// The [`Pd`] behind `pd`; `None` for NULL.
///
/// # Safety
/// `pd` is NULL or a live PD of this library.
pub(crate) unsafe fn pd<'a>(pd: *const ibv_pd) -> Option<&'a Pd> {
    // SAFETY: the caller's promise.
    unsafe { crate::ffi::boxed(pd) }
}

/// `ibv_alloc_pd(context)`: a new PD, or NULL with errno (`EINVAL` for NULL, the core's errno:
/// `ENOMEM` past the device's `max_pd`, `EIO` once it is fatal).
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller passes an open context of this library (or NULL).
        let Some(c) = (unsafe { context(ctx) }) else { return null(libc::EINVAL) };
        match c.core.alloc_pd() {
            Ok(core) => {
                let ibv = ibv_pd { context: c.ibv(), handle: core.handle() };
                &mut Box::leak(Box::new(Pd { ibv, core })).ibv
            }
            Err(e) => null(why(&e)),
        }
    })
}

/// `ibv_dealloc_pd(pd)`: 0, or `EBUSY` while an MR or QP still uses it (the PD stays), `EINVAL`
/// for NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(p: *mut ibv_pd) -> i32 {
    guard(libc::EIO, || {
        if p.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live PD of this library, destroyed once by the program.
        unsafe { destroy_boxed(p.cast::<Pd>(), |b| std::ptr::addr_of_mut!((*b).core), ib_core::Pd::dealloc) }
    })
}
