//! `libibverbs.so.1` for the pvrdma stack: the C library rdma-core's programs link against
//! (`ibv_devinfo`, `ibv_rc_pingpong`, perftest, pyverbs), built on the verbs core (`ib-core`) with
//! the pvrdma provider (`hca`) under it, so those programs run unmodified over the built-in
//! model, the model's RoCE v2 port, or real hardware through VFIO.
//!
//! - Structures are libibverbs's ([`abi`], checked against `<infiniband/verbs.h>`); every
//!   object a program holds (`ibv_context`, `ibv_pd`, `ibv_mr`, `ibv_cq`, `ibv_comp_channel`,
//!   `ibv_qp`/`ibv_qp_ex`) is the first field of a box that also holds the core's object.
//! - Which devices exist is read from `HCA_DEVICES` or the file `HCA_CONFIG` names
//!   (`config.rs`); by default one model device, `vmw_pvrdma0`.
//! - Every exported function catches panics (none crosses into C) and answers as libibverbs
//!   does: its return conventions, its errno values, `EOPNOTSUPP`/`ENOSYS` for verbs pvrdma
//!   lacks.
//!
//! `build.sh` links the staticlib into `libibverbs.so.1` with `libibverbs.map`, giving each
//! symbol the version Debian's programs import (`IBVERBS_1.0` ... `IBVERBS_1.14`,
//! `IBVERBS_PRIVATE_34`), and this stack's own `hca_gsi_*` (a port's GSI QP for this stack's
//! librdmacm) `HCA_PRIVATE_1`.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// Every entry point takes C pointers; each documents what it needs of them as libibverbs's
// man page does, so clippy's per-function safety sections would only repeat that.
#![allow(clippy::missing_safety_doc)]

pub use ibverbs_abi as abi;
mod config;
// The rest are the C entry points (`#[no_mangle] extern "C"`) and the helpers that turn their
// C pointers back into Rust objects: each dereferences or exports raw pointers, so each allows
// `unsafe` (each block with its SAFETY comment); `abi` and `config` need none.
#[allow(unsafe_code)]
mod ah;
#[allow(unsafe_code)]
mod async_event;
#[allow(unsafe_code)]
mod chain;
#[allow(unsafe_code)]
mod channel;
#[allow(unsafe_code)]
mod context;
#[allow(unsafe_code)]
mod cq;
#[allow(unsafe_code)]
mod devices;
#[allow(unsafe_code)]
mod ffi;
#[allow(unsafe_code)]
mod gsi;
#[allow(unsafe_code)]
mod health;
#[allow(unsafe_code)]
mod mr;
#[allow(unsafe_code)]
mod open;
#[allow(unsafe_code)]
mod pd;
#[allow(unsafe_code)]
mod qp;
#[allow(unsafe_code)]
mod query;
#[allow(unsafe_code)]
mod srq;
#[allow(unsafe_code)]
mod strings;
#[allow(unsafe_code)]
mod sysfs;
#[allow(unsafe_code)]
mod unsupported;

pub use ah::{ibv_create_ah, ibv_create_ah_from_wc, ibv_destroy_ah, ibv_init_ah_from_wc};
pub use async_event::*;
pub use channel::*;
pub use cq::*;
pub use devices::*;
pub use gsi::*;
pub use health::*;
pub use mr::*;
pub use open::*;
pub use pd::*;
pub use qp::*;
pub use query::*;
pub use srq::*;
pub use strings::*;
pub use sysfs::*;
pub use unsupported::*;
