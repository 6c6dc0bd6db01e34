//! `struct ibv_pd` and `struct ibv_mr`.

use super::ibv_context;
use memoffset::offset_of;
use std::mem::size_of;

/// `struct ibv_pd`: the library writes it; programs read `context` and `handle`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`: the library writes it; programs read `lkey`, `rkey`, `addr`, `length`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut libc::c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

const _: () = assert!(size_of::<ibv_pd>() == 16);
const _: () = assert!(size_of::<ibv_mr>() == 48);
const _: () = assert!(offset_of!(ibv_mr, lkey) == 36 && offset_of!(ibv_mr, rkey) == 40);

/// `enum ibv_access_flags` (the access of `ibv_reg_mr` and `ibv_qp_attr::qp_access_flags`).
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
pub const IBV_ACCESS_MW_BIND: u32 = 1 << 4;
