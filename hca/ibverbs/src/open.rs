//! `ibv_open_device` and `ibv_close_device`: a [`Context`] with the ops table and the extended
//! ops pointing at this library's entry points (the header's inline verbs call through them).

use crate::abi::{ibv_context, ibv_context_ops, ibv_device, verbs_context, VERBS_ABI_IS_EXTENDED};
use crate::context::{context, Context};
use crate::devices::{entry, DeviceEntry};
use crate::ffi::{fail, guard, null};
use parking_lot::Mutex;
use std::mem::size_of;

fn ops() -> ibv_context_ops {
    ibv_context_ops {
        _compat_query_device: None,
        _compat_query_port: None,
        _compat_alloc_pd: None,
        _compat_dealloc_pd: None,
        _compat_reg_mr: None,
        _compat_rereg_mr: None,
        _compat_dereg_mr: None,
        alloc_mw: None,
        bind_mw: None,
        dealloc_mw: None,
        _compat_create_cq: None,
        poll_cq: Some(crate::cq::poll_cq),
        req_notify_cq: Some(crate::cq::req_notify_cq),
        _compat_cq_event: None,
        _compat_resize_cq: Some(crate::cq::resize_cq),
        _compat_destroy_cq: None,
        _compat_create_srq: None,
        _compat_modify_srq: None,
        _compat_query_srq: None,
        _compat_destroy_srq: None,
        post_srq_recv: Some(crate::srq::post_srq_recv),
        _compat_create_qp: None,
        _compat_query_qp: None,
        _compat_modify_qp: None,
        _compat_destroy_qp: None,
        post_send: Some(crate::qp::post_send),
        post_recv: Some(crate::qp::post_recv),
        _compat_create_ah: None,
        _compat_destroy_ah: None,
        _compat_attach_mcast: None,
        _compat_detach_mcast: None,
        _compat_async_event: None,
    }
}

fn verbs_context_for(dev: &'static DeviceEntry, core: &ib_core::Context) -> verbs_context {
    verbs_context {
        query_port: Some(crate::query::query_port_ex),
        unused_ops: [None; 25],
        priv_: std::ptr::null_mut(),
        query_device_ex: Some(crate::query::query_device_ex),
        ibv_destroy_flow: None,
        abi_placeholder2: None,
        ibv_create_flow: None,
        abi_placeholder1: None,
        open_qp: None,
        create_qp_ex: Some(crate::qp::create_qp_ex),
        get_srq_num: None,
        create_srq_ex: Some(crate::srq::create_srq_ex),
        open_xrcd: None,
        close_xrcd: None,
        abi_placeholder3: 0,
        sz: size_of::<verbs_context>(),
        context: ibv_context {
            device: &dev.ibv as *const ibv_device as *mut ibv_device,
            ops: ops(),
            cmd_fd: -1,
            async_fd: core.async_fd(),
            num_comp_vectors: dev.core.query_device().num_comp_vectors.max(1) as i32,
            mutex: crate::abi::pthread_mutex_t([0; 5]),
            abi_compat: VERBS_ABI_IS_EXTENDED,
        },
    }
}

/// `ibv_open_device(device)`: a new context (a user context of the device). NULL with errno on
/// failure: `EINVAL` for a device not of this library, the core's errno otherwise (`ENOMEM`
/// when the device has no UAR page left, `EIO` once it is fatal).
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let Some(dev) = entry(device) else { return null(libc::EINVAL) };
        let core = match dev.core.alloc_ucontext() {
            Ok(c) => c,
            Err(e) => return null(e.errno()),
        };
        let vctx = verbs_context_for(dev, &core);
        let ctx = Box::leak(Box::new(Context { vctx, core, dev, async_taken: Mutex::new(Vec::new()) }));
        ctx.ibv()
    })
}

/// `ibv_close_device(context)`: frees the context. Objects still open on it are released with
/// it (the device's resources go back, as when a process's uverbs file closes); using them
/// afterwards is the program's error, as with libibverbs. Returns 0, or `EINVAL` for NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the caller passes a context this library opened and closes it once.
        let Some(c) = (unsafe { context(ctx) }) else { return fail(libc::EINVAL) };
        // SAFETY: `c` was leaked from a Box in `ibv_open_device`; this is its one release.
        drop(unsafe { Box::from_raw(c as *const Context as *mut Context) });
        0
    })
}
