//! Device, port, GID and P_Key queries.

use crate::abi::{ibv_context, ibv_device_attr_ex, ibv_port_attr, ibv_query_device_ex_input};

/// `verbs_context.query_port` (the header's inline `ibv_query_port`).
pub(crate) unsafe extern "C" fn query_port_ex(_ctx: *mut ibv_context, _port: u8, _attr: *mut ibv_port_attr, _len: usize) -> i32 {
    libc::ENOSYS
}

/// `verbs_context.query_device_ex` (the header's inline `ibv_query_device_ex`).
pub(crate) unsafe extern "C" fn query_device_ex(
    _ctx: *mut ibv_context,
    _input: *const ibv_query_device_ex_input,
    _attr: *mut ibv_device_attr_ex,
    _len: usize,
) -> i32 {
    libc::ENOSYS
}
