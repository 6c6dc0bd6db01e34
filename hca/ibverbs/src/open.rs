//! `ibv_open_device` and `ibv_close_device`: a [`Context`] with the ops table and the extended
//! ops pointing at this library's entry points (the header's inline verbs call through them).

use crate::abi::{ibv_context, ibv_context_ops, ibv_device, verbs_context, VERBS_ABI_IS_EXTENDED};
use crate::context::{context, Context};
use crate::devices::{entry, DeviceEntry};
use crate::ffi::{fail, guard, null, why};
use parking_lot::Mutex;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

/// The file `ibv_context.cmd_fd` names: `/dev/null`, opened read-write and close-on-exec.
///
/// libibverbs's `cmd_fd` is the context's uverbs character device, and programs use it as a file
/// (`dup` it to hand a context to another process for `ibv_import_device`, `fstat` it,
/// `close` the copy); -1 breaks them. This library has no kernel command channel, so the
/// descriptor carries nothing; `/dev/null` rather than an eventfd because it is what the real
/// one is, a character device (`ibv_import_device` itself refuses anything else, `EINVAL`), and
/// nothing a program does with it can block or pile up (a read sees end of file at once, a write
/// is taken and dropped, `poll` says ready), where an eventfd's read blocks and its counter
/// fills. `ibv_import_device` recognises it by its device number (see
/// `unsupported/verbs.rs`).
///
/// Errors: the errno of `open` (`EMFILE`, `ENFILE`, ...), as libibverbs fails when it cannot
/// open the uverbs device.
pub(crate) fn open_cmd_fd() -> Result<OwnedFd, i32> {
    // SAFETY: a NUL-terminated path; `open` returns a new descriptor or -1.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn verbs_context_for(dev: &'static DeviceEntry, core: &ib_core::Context, cmd_fd: i32) -> verbs_context {
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
            cmd_fd,
            async_fd: core.async_fd(),
            num_comp_vectors: dev.core.query_device().num_comp_vectors.max(1) as i32,
            mutex: crate::abi::pthread_mutex_t([0; 5]),
            abi_compat: VERBS_ABI_IS_EXTENDED,
        },
    }
}

/// `ibv_open_device(device)`: a new context (a user context of the device) with an open
/// `cmd_fd` (see `open_cmd_fd`). NULL with errno on failure: `EINVAL` for a device not of
/// this library, `open`'s errno when no descriptor is left, the core's errno otherwise
/// (`ENOMEM` when the device has no UAR page left, `EIO` once it is fatal).
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let Some(dev) = entry(device) else { return null(libc::EINVAL) };
        let cmd_fd = match open_cmd_fd() {
            Ok(fd) => fd,
            Err(e) => return null(e),
        };
        let core = match dev.core.alloc_ucontext() {
            Ok(c) => c,
            Err(e) => return null(why(&e)),
        };
        let vctx = verbs_context_for(dev, &core, cmd_fd.as_raw_fd());
        let ctx = Box::leak(Box::new(Context { vctx, core, dev, async_taken: Mutex::new(Vec::new()), cmd_fd }));
        ctx.ibv()
    })
}

/// `ibv_close_device(context)`: frees the context and closes its `cmd_fd` and `async_fd`, as
/// libibverbs does. Objects still open on it are released with it (the device's resources go
/// back, as when a process's uverbs file closes); using them afterwards is the program's error,
/// as with libibverbs. Returns 0, or `EINVAL` for NULL.
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
