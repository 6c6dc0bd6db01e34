//! QPs (`ibv_create_qp`, `ibv_create_qp_ex`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`,
//! `ibv_qp_to_qp_ex`).

use crate::abi::{ibv_context, ibv_qp, ibv_qp_ex, ibv_qp_init_attr_ex};

/// What an `ibv_qp` (and its `ibv_qp_ex`) pointer is the start of.
#[repr(C)]
pub(crate) struct Qp {
    pub ibv: ibv_qp_ex,
    pub core: ib_core::Qp,
}

/// The [`Qp`] behind `qp`; `None` for NULL.
///
/// # Safety
/// `qp` is NULL or a live QP of this library.
pub(crate) unsafe fn qp<'a>(qp: *const ibv_qp) -> Option<&'a Qp> {
    // SAFETY: the caller's promise.
    unsafe { crate::ffi::boxed(qp) }
}

/// `verbs_context.create_qp_ex`.
pub(crate) unsafe extern "C" fn create_qp_ex(_ctx: *mut ibv_context, _attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    crate::ffi::null(libc::ENOSYS)
}
