//! The C functions this library calls: libibverbs's verbs (in the library they resolve to our
//! libibverbs.so.1 at load; in tests to ibverbs-compat's rlib) and the GSI of a device that our
//! libibverbs exports under `HCA_PRIVATE_1` (`hca_gsi_*`, the contract of issue 23). Each has a
//! thin safe wrapper where the pointer rules are simple; the rest are called by the modules
//! above with their own SAFETY comments.

use crate::abi::*;

/// `struct ibv_device` (opaque).
#[repr(C)]
pub struct ibv_device {
    _opaque: [u8; 0],
}

/// `struct hca_gsi` (opaque): the GSI QP (QP1) of one port of a device.
#[repr(C)]
pub struct hca_gsi {
    _opaque: [u8; 0],
}

/// `struct hca_gsi_addr`: where a MAD goes (or came from), with its GRH fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hca_gsi_addr {
    pub gid: [u8; 16],
    pub qpn: u32,
    pub qkey: u32,
    pub flow_label: u32,
    pub pkey_index: u16,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: [u8; 3],
}

const _: () = assert!(std::mem::size_of::<hca_gsi_addr>() == 36);
const _: () = assert!(std::mem::offset_of!(hca_gsi_addr, pkey_index) == 28);

extern "C" {
    pub fn ibv_get_device_list(num: *mut i32) -> *mut *mut ibv_device;
    pub fn ibv_free_device_list(list: *mut *mut ibv_device);
    pub fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> i32;
    pub fn ibv_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> i32;
    pub fn _ibv_query_gid_ex(
        ctx: *mut ibv_context,
        port: u32,
        index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> i32;
    pub fn ibv_get_device_guid(dev: *mut ibv_device) -> u64;
    pub fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> i32;
    pub fn ibv_create_cq(
        ctx: *mut ibv_context,
        cqe: i32,
        cq_context: *mut libc::c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: i32,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> i32;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: i32) -> i32;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> i32;
    pub fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    pub fn ibv_destroy_srq(srq: *mut ibv_srq) -> i32;

    pub fn hca_gsi_open(ctx: *mut ibv_context, port_num: u8) -> *mut hca_gsi;
    pub fn hca_gsi_get_fd(gsi: *mut hca_gsi) -> i32;
    pub fn hca_device_fatal(ctx: *mut ibv_context) -> i32;
    pub fn hca_gsi_send(gsi: *mut hca_gsi, to: *const hca_gsi_addr, mad: *const libc::c_void, len: usize) -> i32;
    pub fn hca_gsi_sends_in_flight(gsi: *mut hca_gsi) -> i32;
    pub fn hca_gsi_recv(gsi: *mut hca_gsi, from: *mut hca_gsi_addr, buf: *mut libc::c_void, len: usize) -> isize;
}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e }
}

/// The `verbs_context` of `ctx`, when libibverbs made it extended (verbs.h's `verbs_get_ctx`).
///
/// # Safety
/// `ctx` is NULL or a live context of libibverbs.
unsafe fn verbs_ctx(ctx: *mut ibv_context) -> Option<&'static verbs_context> {
    // SAFETY: the caller's promise; an extended context lies at the end of its verbs_context.
    unsafe {
        let c = ctx.as_ref()?;
        if c.abi_compat != VERBS_ABI_IS_EXTENDED {
            return None;
        }
        ctx.byte_sub(std::mem::offset_of!(verbs_context, context)).cast::<verbs_context>().as_ref()
    }
}

/// verbs.h's `verbs_get_ctx_op`: the op at `offset` of `ctx`'s `verbs_context` (taken by
/// `get`) when the context is extended, its `sz` covers the op (the struct grows downwards, so
/// `sz` counts from an op to the end) and the op is set; else `EOPNOTSUPP` in `errno` and `None`,
/// as the header's inline wrappers answer.
///
/// # Safety
/// `ctx` is NULL or a live context of libibverbs.
unsafe fn ctx_op<F>(ctx: *mut ibv_context, offset: usize, get: impl FnOnce(&verbs_context) -> Option<F>) -> Option<F> {
    // SAFETY: the caller's promise.
    let vctx = unsafe { verbs_ctx(ctx) }.filter(|v| v.sz >= std::mem::size_of::<verbs_context>() - offset);
    let op = vctx.and_then(get);
    if op.is_none() {
        set_errno(libc::EOPNOTSUPP);
    }
    op
}

/// verbs.h's inline `ibv_create_qp_ex`: `ibv_create_qp` when the mask is only a PD, else the
/// context's `create_qp_ex`, `EOPNOTSUPP` without one. NULL with errno on failure.
///
/// # Safety
/// `ctx` a live context; `attr` the caller's attributes, its PD and CQs of `ctx` (or NULL).
pub unsafe fn ibv_create_qp_ex(ctx: *mut ibv_context, attr: &mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    if attr.comp_mask == IBV_QP_INIT_ATTR_PD {
        // SAFETY: `ibv_qp_init_attr_ex` begins with the fields of `ibv_qp_init_attr` (the
        // header casts it so too); the caller's promise covers the PD and CQs.
        return unsafe { ibv_create_qp(attr.pd, (attr as *mut ibv_qp_init_attr_ex).cast()) };
    }
    // SAFETY: the caller's promise.
    let op = unsafe { ctx_op(ctx, std::mem::offset_of!(verbs_context, create_qp_ex), |v| v.create_qp_ex) };
    let Some(op) = op else { return std::ptr::null_mut() };
    // SAFETY: libibverbs's own op for this context, with the caller's attributes.
    unsafe { op(ctx, attr) }
}

/// verbs.h's inline `ibv_create_srq_ex`: `ibv_create_srq` for a basic SRQ with only a PD, else
/// the context's `create_srq_ex`, `EOPNOTSUPP` without one. NULL with errno on failure.
///
/// # Safety
/// `ctx` a live context; `attr` the caller's attributes, its PD and CQ of `ctx` (or NULL).
pub unsafe fn ibv_create_srq_ex(ctx: *mut ibv_context, attr: &mut ibv_srq_init_attr_ex) -> *mut ibv_srq {
    let mask = attr.comp_mask;
    let basic = mask & !(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE) == 0
        && mask & IBV_SRQ_INIT_ATTR_PD != 0
        && (mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || attr.srq_type == IBV_SRQT_BASIC);
    if basic {
        // SAFETY: `ibv_srq_init_attr_ex` begins with the fields of `ibv_srq_init_attr`; the
        // caller's promise covers the PD.
        return unsafe { ibv_create_srq(attr.pd, (attr as *mut ibv_srq_init_attr_ex).cast()) };
    }
    // SAFETY: the caller's promise.
    let op = unsafe { ctx_op(ctx, std::mem::offset_of!(verbs_context, create_srq_ex), |v| v.create_srq_ex) };
    let Some(op) = op else { return std::ptr::null_mut() };
    // SAFETY: libibverbs's own op for this context, with the caller's attributes.
    unsafe { op(ctx, attr) }
}

/// What librdmacm's `ucma_get_xrcd` gets from verbs.h's inline `ibv_open_xrcd` here: the device
/// has no XRC (Linux's `vmw_pvrdma` neither; our libibverbs leaves `verbs_context::open_xrcd`
/// NULL), and the header answers `EOPNOTSUPP` for a context without the op.
pub const OPEN_XRCD_ERRNO: i32 = libc::EOPNOTSUPP;
