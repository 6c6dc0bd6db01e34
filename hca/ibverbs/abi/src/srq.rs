//! SRQs: `struct ibv_srq_attr`, `ibv_srq_init_attr`, `ibv_srq_init_attr_ex` and their enums
//! (`struct ibv_srq` itself is beside `ibv_qp`, which names it).

use super::{ibv_cq, ibv_pd};
use memoffset::offset_of;
use std::mem::size_of;

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`: read by `ibv_create_srq`, `attr.max_wr`/`max_sge` written back.
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut libc::c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_srq_init_attr_ex` (the header's `ibv_create_srq_ex` reads it as an
/// `ibv_srq_init_attr` when only `PD`/`TYPE` basic are asked).
#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut libc::c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut libc::c_void,
    pub cq: *mut ibv_cq,
    /// `struct ibv_tm_cap`: `max_num_tags`, `max_ops`.
    pub tm_cap: [u32; 2],
}

/// `IBV_SRQ_INIT_ATTR_TYPE`.
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
/// `IBV_SRQ_INIT_ATTR_PD`.
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
/// `IBV_SRQ_INIT_ATTR_XRCD`.
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
/// `IBV_SRQ_INIT_ATTR_CQ` (meaningful for XRC and tag-matching SRQs only).
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
/// `IBV_SRQT_BASIC`.
pub const IBV_SRQT_BASIC: u32 = 0;
/// `IBV_SRQT_XRC`.
pub const IBV_SRQT_XRC: u32 = 1;

const _: () = assert!(size_of::<ibv_srq_attr>() == 12 && size_of::<ibv_srq_init_attr>() == 24);
const _: () = assert!(size_of::<ibv_srq_init_attr_ex>() == 64);
const _: () = assert!(offset_of!(ibv_srq_init_attr, attr) == 8);
const _: () =
    assert!(offset_of!(ibv_srq_init_attr_ex, comp_mask) == 20 && offset_of!(ibv_srq_init_attr_ex, srq_type) == 24);
const _: () = assert!(offset_of!(ibv_srq_init_attr_ex, pd) == 32 && offset_of!(ibv_srq_init_attr_ex, cq) == 48);
const _: () = assert!(offset_of!(ibv_srq_init_attr_ex, tm_cap) == 56);
