//! libibverbs's private interface (`IBVERBS_PRIVATE_34`), which provider libraries import: the
//! kernel command wrappers (`ibv_cmd_*`, `execute_ioctl`) and the provider framework. Provider
//! libraries (libmlx5, libefa, ... loaded by pyverbs) must find them to load; their
//! constructors register with [`verbs_register_driver_34`], a no-op, so no device of theirs ever
//! exists here and none of the rest is reached by a working program. They fail as a kernel
//! without the command would: `EOPNOTSUPP`.

use libc::{c_char, c_int, c_void, EOPNOTSUPP};

/// Defines `ibv_cmd_*`-style entry points that take C arguments and answer `EOPNOTSUPP`.
macro_rules! no_command {
    ($($name:ident($($arg:ty),* $(,)?);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: `EOPNOTSUPP` (no kernel command behind this library).")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($(_: $arg),*) -> c_int {
            EOPNOTSUPP
        }
    )*};
}

type P = *mut c_void;

no_command! {
    execute_ioctl(P, P);
    ibv_cmd_advise_mr(P, u32, u32, P, u32);
    ibv_cmd_alloc_dm(P, P, P, P);
    ibv_cmd_alloc_mw(P, u32, P, P, usize, P, usize);
    ibv_cmd_alloc_pd(P, P, P, usize, P, usize);
    ibv_cmd_attach_mcast(P, P, u16);
    ibv_cmd_close_xrcd(P);
    ibv_cmd_create_ah(P, P, P, P, usize);
    ibv_cmd_create_counters(P, P, P, P);
    ibv_cmd_create_cq(P, c_int, P, c_int, P, P, usize, P, usize);
    ibv_cmd_create_cq_ex(P, P, P, P, usize, P, usize, u32);
    ibv_cmd_create_flow(P, P, P, P, usize);
    ibv_cmd_create_flow_action_esp(P, P, P, P);
    ibv_cmd_create_qp(P, P, P, P, usize, P, usize);
    ibv_cmd_create_qp_ex(P, P, P, P, usize, P, usize);
    ibv_cmd_create_qp_ex2(P, P, P, P, usize, P, usize);
    ibv_cmd_create_rwq_ind_table(P, P, P, P, usize);
    ibv_cmd_create_srq(P, P, P, P, usize, P, usize);
    ibv_cmd_create_srq_ex(P, P, P, P, usize, P, usize);
    ibv_cmd_create_wq(P, P, P, P, usize, P, usize);
    ibv_cmd_dealloc_mw(P);
    ibv_cmd_dealloc_pd(P);
    ibv_cmd_dereg_mr(P);
    ibv_cmd_destroy_ah(P);
    ibv_cmd_destroy_counters(P);
    ibv_cmd_destroy_cq(P);
    ibv_cmd_destroy_flow(P);
    ibv_cmd_destroy_flow_action(P);
    ibv_cmd_destroy_qp(P);
    ibv_cmd_destroy_rwq_ind_table(P);
    ibv_cmd_destroy_srq(P);
    ibv_cmd_destroy_wq(P);
    ibv_cmd_detach_mcast(P, P, u16);
    ibv_cmd_free_dm(P);
    ibv_cmd_get_context(P, P, usize, P, usize);
    ibv_cmd_modify_cq(P, P, P, usize);
    ibv_cmd_modify_flow_action_esp(P, P, P);
    ibv_cmd_modify_qp(P, P, c_int, P, usize);
    ibv_cmd_modify_qp_ex(P, P, c_int, P, usize, P, usize);
    ibv_cmd_modify_srq(P, P, c_int, P, usize);
    ibv_cmd_modify_wq(P, P, P, usize);
    ibv_cmd_open_qp(P, P, c_int, P, P, usize, P, usize);
    ibv_cmd_open_xrcd(P, P, c_int, P, P, usize, P, usize);
    ibv_cmd_post_recv(P, P, P);
    ibv_cmd_post_send(P, P, P);
    ibv_cmd_post_srq_recv(P, P, P);
    ibv_cmd_query_context(P, P);
    ibv_cmd_query_device_any(P, P, P, usize, P, P);
    ibv_cmd_query_mr(P, P, u32);
    ibv_cmd_query_port(P, u8, P, P, usize);
    ibv_cmd_query_qp(P, P, c_int, P, P, usize);
    ibv_cmd_query_srq(P, P, P, usize);
    ibv_cmd_read_counters(P, P, u32, u32, P);
    ibv_cmd_reg_dm_mr(P, P, u64, usize, u32, P, P);
    ibv_cmd_reg_dmabuf_mr(P, u64, usize, u64, c_int, c_int, P);
    ibv_cmd_reg_mr(P, P, usize, u64, c_int, P, P, usize, P, usize);
    ibv_cmd_req_notify_cq(P, c_int);
    ibv_cmd_rereg_mr(P, u32, P, usize, u64, c_int, P, P, usize, P, usize);
    ibv_cmd_resize_cq(P, c_int, P, usize, P, usize);
}

/// `ibv_cmd_poll_cq(cq, ne, wc)`: -1 with `errno` `EOPNOTSUPP` (a poll fails negative).
#[no_mangle]
pub unsafe extern "C" fn ibv_cmd_poll_cq(_cq: P, _ne: c_int, _wc: P) -> c_int {
    crate::ffi::guard(-1, || crate::ffi::minus_one(EOPNOTSUPP))
}

/// `verbs_register_driver_34(ops)`: a provider library's constructor registers its driver;
/// this library drives its devices itself, so the registration is ignored.
#[no_mangle]
pub unsafe extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}

/// `_verbs_init_and_alloc_context(device, cmd_fd, size, context, driver_id)`: NULL, `errno`
/// `EOPNOTSUPP` (no provider device exists here to make a context for).
#[no_mangle]
pub unsafe extern "C" fn _verbs_init_and_alloc_context(
    _dev: P,
    _cmd_fd: c_int,
    _size: usize,
    _ctx: P,
    _driver_id: u32,
) -> P {
    crate::ffi::guard(std::ptr::null_mut(), || crate::ffi::null(EOPNOTSUPP))
}

/// `verbs_open_device(device, private_data)`: NULL, `errno` `EOPNOTSUPP`, as above.
#[no_mangle]
pub unsafe extern "C" fn verbs_open_device(_dev: P, _private: P) -> P {
    crate::ffi::guard(std::ptr::null_mut(), || crate::ffi::null(EOPNOTSUPP))
}

/// `verbs_uninit_context(context)`: nothing to undo (no provider context is ever made).
#[no_mangle]
pub unsafe extern "C" fn verbs_uninit_context(_ctx: P) {}

/// `verbs_set_ops(context, ops)`: ignored, as above.
#[no_mangle]
pub unsafe extern "C" fn verbs_set_ops(_ctx: P, _ops: *const c_void) {}

/// `verbs_init_cq(cq, context, channel, cq_context)`: ignored, as above.
#[no_mangle]
pub unsafe extern "C" fn verbs_init_cq(_cq: P, _ctx: P, _channel: P, _cq_context: P) {}

/// `__verbs_log(context, level, fmt, ...)`: provider debug logging, dropped. C declares it
/// variadic; taking only the fixed arguments is ABI-safe on x86-64 for a callee that never
/// reads the rest.
#[no_mangle]
pub unsafe extern "C" fn __verbs_log(_ctx: P, _level: u32, _fmt: *const c_char) {}

/// `verbs_allow_disassociate_destroy`: libibverbs's flag (from `RDMAV_ALLOW_DISASSOC_DESTROY`)
/// that lets providers treat `EIO` from a destroy as success once the device is gone; a C
/// `bool`, false here, as no provider object exists.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: bool = false;
