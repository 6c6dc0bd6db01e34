//! `libibverbs.so.1` for the pvrdma stack: the C library rdma-core's programs link against
//! (`ibv_devinfo`, `ibv_rc_pingpong`, perftest, pyverbs), built on the verbs core (`ib-core`) with
//! the pvrdma provider (`hca`) under it, so those programs run unmodified over the built-in
//! model, the model's RoCE v2 port, or real hardware through VFIO.
//!
//! - Structures are libibverbs's ([`abi`], checked against `<infiniband/verbs.h>`); every
//!   object a program holds (`ibv_context`, `ibv_pd`, `ibv_mr`, `ibv_cq`, `ibv_comp_channel`,
//!   `ibv_qp`/`ibv_qp_ex`) is the first field of a box that also holds the core's object.
//! - Which devices exist is read from `HCA_DEVICES` or the file `HCA_CONFIG` names
//!   ([`config`]); by default one model device, `vmw_pvrdma0`.
//! - Every exported function catches panics (none crosses into C) and answers as libibverbs
//!   does: its return conventions, its errno values, `EOPNOTSUPP`/`ENOSYS` for verbs pvrdma
//!   lacks.
//!
//! `build.sh` links the staticlib into `libibverbs.so.1` with `libibverbs.map`, giving each
//! symbol the version Debian's programs import (`IBVERBS_1.0` ... `IBVERBS_1.14`,
//! `IBVERBS_PRIVATE_34`).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// Every entry point takes C pointers; each documents what it needs of them as libibverbs's
// man page does, so clippy's per-function safety sections would only repeat that.
#![allow(clippy::missing_safety_doc)]

pub mod abi;
mod ah;
mod async_event;
mod chain;
mod channel;
pub mod config;
mod context;
mod cq;
mod devices;
mod ffi;
mod mr;
mod open;
mod pd;
mod qp;
mod query;
mod srq;
mod strings;
mod sysfs;
mod unsupported;

pub use ah::{ibv_create_ah, ibv_create_ah_from_wc, ibv_destroy_ah, ibv_init_ah_from_wc};
pub use async_event::*;
pub use channel::*;
pub use cq::*;
pub use devices::*;
pub use mr::*;
pub use open::*;
pub use pd::*;
pub use qp::*;
pub use query::*;
pub use srq::*;
pub use strings::*;
pub use sysfs::*;
pub use unsupported::*;
