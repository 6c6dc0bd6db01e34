//! Contexts: `struct ibv_context` with its `ops` table, `struct verbs_context` (the extended
//! verbs, laid out before the `ibv_context` it ends with), and `struct ibv_async_event`.

use super::{
    ibv_cq, ibv_device, ibv_device_attr_ex, ibv_port_attr, ibv_qp, ibv_qp_init_attr_ex, ibv_query_device_ex_input,
    ibv_recv_wr, ibv_send_wr, ibv_wc, pthread_mutex_t,
};
use memoffset::offset_of;
use std::mem::size_of;

type Slot = Option<unsafe extern "C" fn()>;

/// `struct ibv_context_ops`: the header's inline `ibv_poll_cq`, `ibv_req_notify_cq`,
/// `ibv_post_send`, `ibv_post_recv` and `ibv_post_srq_recv` call through it; the `_compat_`
/// slots are unused by libibverbs 44's programs and stay NULL.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Slot,
    pub _compat_query_port: Slot,
    pub _compat_alloc_pd: Slot,
    pub _compat_dealloc_pd: Slot,
    pub _compat_reg_mr: Slot,
    pub _compat_rereg_mr: Slot,
    pub _compat_dereg_mr: Slot,
    pub alloc_mw: Slot,
    pub bind_mw: Slot,
    pub dealloc_mw: Slot,
    pub _compat_create_cq: Slot,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, i32, *mut ibv_wc) -> i32>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, i32) -> i32>,
    pub _compat_cq_event: Slot,
    /// `void *(*_compat_resize_cq)(void)` in the header: libibverbs 44 stores the provider's
    /// `resize_cq` op here (`SET_PRIV_OP`), and `ibv_resize_cq` calls that op.
    pub _compat_resize_cq: Option<unsafe extern "C" fn(*mut ibv_cq, i32) -> i32>,
    pub _compat_destroy_cq: Slot,
    pub _compat_create_srq: Slot,
    pub _compat_modify_srq: Slot,
    pub _compat_query_srq: Slot,
    pub _compat_destroy_srq: Slot,
    pub post_srq_recv: Option<unsafe extern "C" fn(*mut libc::c_void, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32>,
    pub _compat_create_qp: Slot,
    pub _compat_query_qp: Slot,
    pub _compat_modify_qp: Slot,
    pub _compat_destroy_qp: Slot,
    pub post_send: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> i32>,
    pub post_recv: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32>,
    pub _compat_create_ah: Slot,
    pub _compat_destroy_ah: Slot,
    pub _compat_attach_mcast: Slot,
    pub _compat_detach_mcast: Slot,
    pub _compat_async_event: Slot,
}

/// `struct ibv_context`. `async_fd` is the context's real async-event fd; `cmd_fd` is -1 (no
/// kernel uverbs device: the provider reaches the device through its platform);
/// `abi_compat` is [`VERBS_ABI_IS_EXTENDED`], so the header finds the [`verbs_context`]
/// before it.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: i32,
    pub async_fd: i32,
    pub num_comp_vectors: i32,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut libc::c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context::abi_compat` of a context with a `verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: *mut libc::c_void = usize::MAX as *mut libc::c_void;

/// `struct verbs_context`: the extended verbs, growing downwards from the `ibv_context` at its
/// end. `sz` is the struct's size; the header's `verbs_get_ctx_op` uses an op only if `sz`
/// covers it and it is not NULL. Ops this library does not carry are NULL (the inline wrappers
/// then answer `EOPNOTSUPP`, as for a provider without them); their slots are opaque here.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> i32>,
    /// `advise_mr` ... `create_cq_ex`: 25 slots pvrdma has none of.
    pub unused_ops: [Slot; 25],
    pub priv_: *mut libc::c_void,
    pub query_device_ex: Option<
        unsafe extern "C" fn(*mut ibv_context, *const ibv_query_device_ex_input, *mut ibv_device_attr_ex, usize) -> i32,
    >,
    pub ibv_destroy_flow: Slot,
    pub abi_placeholder2: Slot,
    pub ibv_create_flow: Slot,
    pub abi_placeholder1: Slot,
    pub open_qp: Slot,
    pub create_qp_ex: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    pub get_srq_num: Slot,
    pub create_srq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut super::ibv_srq_init_attr_ex) -> *mut super::ibv_srq>,
    pub open_xrcd: Slot,
    pub close_xrcd: Slot,
    pub abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

/// The element of `struct ibv_async_event` (a union: the CQ, QP, SRQ, WQ or port the event
/// names).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut libc::c_void,
    pub wq: *mut libc::c_void,
    pub port_num: i32,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: u32,
}

const _: () = assert!(size_of::<ibv_context_ops>() == 256 && offset_of!(ibv_context_ops, poll_cq) == 88);
const _: () = assert!(offset_of!(ibv_context_ops, post_send) == 200);
const _: () = assert!(size_of::<ibv_context>() == 328 && offset_of!(ibv_context, cmd_fd) == 264);
const _: () = assert!(offset_of!(ibv_context, abi_compat) == 320);
const _: () = assert!(size_of::<verbs_context>() == 648 && offset_of!(verbs_context, sz) == 312);
const _: () = assert!(offset_of!(verbs_context, query_device_ex) == 216);
const _: () = assert!(offset_of!(verbs_context, create_qp_ex) == 264);
const _: () = assert!(size_of::<ibv_async_event>() == 16);

/// `enum ibv_event_type` (`ibv_async_event::event_type`).
pub const IBV_EVENT_CQ_ERR: u32 = 0;
pub const IBV_EVENT_QP_FATAL: u32 = 1;
pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
pub const IBV_EVENT_COMM_EST: u32 = 4;
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
pub const IBV_EVENT_PATH_MIG: u32 = 6;
pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
pub const IBV_EVENT_PORT_ERR: u32 = 10;
pub const IBV_EVENT_LID_CHANGE: u32 = 11;
pub const IBV_EVENT_PKEY_CHANGE: u32 = 12;
pub const IBV_EVENT_SM_CHANGE: u32 = 13;
pub const IBV_EVENT_SRQ_ERR: u32 = 14;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
pub const IBV_EVENT_CLIENT_REREGISTER: u32 = 17;
pub const IBV_EVENT_GID_CHANGE: u32 = 18;
pub const IBV_EVENT_WQ_FATAL: u32 = 19;
