//! Protection domains (`ibv_alloc_pd`, `ibv_dealloc_pd`).

use crate::abi::ibv_pd;

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
