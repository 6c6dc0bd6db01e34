//! libibverbs's ABI: the structures of `<infiniband/verbs.h>` (rdma-core 44, package
//! `libibverbs-dev`) that programs see, `#[repr(C)]` with their C names and field names. Sizes and
//! the offsets programs and the header's inline functions use are asserted at compile time here,
//! and every field's offset is checked against the installed header by `tests/tests/verbs/ibverbs_abi.rs`.
//!
//! Anonymous C unions become named fields: a union whose members share one type is that type
//! under its first member's name (`ibv_wc::imm_data`, `ibv_send_wr::imm_data`); the others are
//! Rust unions named `<struct>_<member>`. Enums are `u32`/`i32` with their values as constants.
#![deny(unsafe_code)]
#![allow(non_camel_case_types, non_upper_case_globals, missing_docs)]

mod context;
mod cq;
mod device;
mod pd;
mod qp;
mod sa;
mod srq;
mod wr;

pub use context::*;
pub use cq::*;
pub use device::*;
pub use pd::*;
pub use qp::*;
pub use sa::*;
pub use srq::*;
pub use wr::*;

/// `union ibv_gid`: 16 bytes, network order (`raw`; the `global` view is two `__be64`, which
/// give the union its 8-byte alignment).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `pthread_mutex_t` on x86-64 glibc: opaque, never used by this library (the header's inline
/// functions do not touch it).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pthread_mutex_t(pub [u64; 5]);

/// `pthread_cond_t` on x86-64 glibc: opaque, as above.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pthread_cond_t(pub [u64; 6]);

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

const _: () = assert!(std::mem::size_of::<ibv_gid>() == 16 && std::mem::align_of::<ibv_gid>() == 8);
const _: () = assert!(std::mem::size_of::<pthread_mutex_t>() == 40);
const _: () = assert!(std::mem::size_of::<pthread_cond_t>() == 48);
