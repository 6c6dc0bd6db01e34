//! CQs (`ibv_create_cq`, `ibv_destroy_cq`, `ibv_resize_cq`) and the ops the header's inline
//! `ibv_poll_cq` and `ibv_req_notify_cq` call.

use crate::abi::{ibv_cq, ibv_wc};

/// What an `ibv_cq` pointer is the start of.
#[repr(C)]
pub(crate) struct Cq {
    pub ibv: ibv_cq,
    pub core: ib_core::Cq,
}

/// The [`Cq`] behind `cq`; `None` for NULL.
///
/// # Safety
/// `cq` is NULL or a live CQ of this library.
pub(crate) unsafe fn cq<'a>(cq: *const ibv_cq) -> Option<&'a Cq> {
    // SAFETY: the caller's promise.
    unsafe { crate::ffi::boxed(cq) }
}

/// `ops.poll_cq`.
pub(crate) unsafe extern "C" fn poll_cq(_cq: *mut ibv_cq, _n: i32, _wc: *mut ibv_wc) -> i32 {
    -libc::ENOSYS
}

/// `ops.req_notify_cq`.
pub(crate) unsafe extern "C" fn req_notify_cq(_cq: *mut ibv_cq, _solicited_only: i32) -> i32 {
    libc::ENOSYS
}
