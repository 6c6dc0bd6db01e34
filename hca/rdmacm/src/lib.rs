//! `librdmacm.so.1` for the pvrdma stack: the RDMA connection manager's C library, so Debian's
//! rdma-core programs (`rping`, `ucmatose`, `udaddy`, perftest's `-R`, qperf's `-cm1`, ...) run
//! unmodified over our libibverbs.so.1 and the model's RoCE v2 port, connecting through the IB
//! CM ([`rdma_cm`]) on each device's GSI QP instead of a kernel's `/dev/infiniband/rdma_cm`.
//!
//! - [`abi`]: librdmacm's structures (`<rdma/rdma_cma.h>`), sizes and offsets asserted.
//! - Ids, channels and events live in one locked table (`world`); a pointer from a program
//!   is looked up there first, so a stale or garbage one gives `EINVAL`.
//! - Addressing (`addr`, `route`): the device and source address that reach a destination,
//!   ports per process.
//! - Connections (`conn`, `dispatch`, `engine`): one engine thread per process polls every
//!   device's GSI and runs the CMs' timers; the CMs' events become RDMA CM events in the
//!   kernel's order.
//! - rsockets answer `ENOSYS` (`unsupported`).
//! - [`diag`]: each device's CM counters, for Rust tests.
//!
//! `build.sh` links the staticlib into `librdmacm.so.1` with `librdmacm.map` (the versions
//! `RDMACM_1.0` ... `RDMACM_1.3` Debian's programs import), against our libibverbs.so.1.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
// Every entry point takes C pointers; each documents what it needs of them as librdmacm's man
// pages do.
#![allow(clippy::missing_safety_doc)]

pub mod abi;
pub mod diag;
mod route;
// The rest dereference C pointers or export C entry points (`#[no_mangle] extern "C"`): each
// allows `unsafe` as a whole, every block with its SAFETY comment; `abi`, `diag` and `route`
// need none.
#[allow(unsafe_code)]
mod addr;
#[allow(unsafe_code)]
mod channel;
#[allow(unsafe_code)]
mod conn;
#[allow(unsafe_code)]
mod devices;
#[allow(unsafe_code)]
mod dispatch;
#[allow(unsafe_code)]
mod engine;
#[allow(unsafe_code)]
mod ep;
#[allow(unsafe_code)]
mod events;
#[allow(unsafe_code)]
mod exit;
#[allow(unsafe_code)]
mod ffi;
#[allow(unsafe_code)]
mod getaddrinfo;
#[allow(unsafe_code)]
mod ids;
#[allow(unsafe_code)]
mod qp;
#[allow(unsafe_code)]
mod qpattr;
#[allow(unsafe_code)]
mod sys;
#[allow(unsafe_code)]
mod unsupported;
#[allow(unsafe_code)]
mod world;

pub use addr::*;
pub use conn::*;
pub use ep::*;
pub use events::*;
pub use getaddrinfo::*;
pub use ids::*;
pub use qp::*;
pub use sys::hca_gsi_addr;
pub use unsupported::*;
