//! The pvrdma provider (PCI 15ad:0820) under the verbs core (`ib-core`), built like Linux's
//! `vmw_pvrdma` and `mthca`: one module per hardware object over a platform interface (BAR1
//! registers, BAR2 UAR pages, DMA memory by device address, MSI-X vectors).
//!
//! - [`register`] loads the provider under the core; [`probe()`] (or [`open_sim`] for the built-in
//!   model) adds a device, named `vmw_pvrdma<N>`, and returns the core's [`ib_core::Device`].
//! - Probe (`probe.rs`) loads the DSR, starts the vector threads, activates the device, binds the
//!   GID and finds out by a self-test how the device arms CQs (`selftest.rs`).
//! - The objects (`uctx`, `pd`, `mr`, `cq`, `qp`) own their rings and doorbells; `eq` services the
//!   interrupt vectors and reports events up to the core by object; `ops` is the provider's side
//!   of the core's interface. The arm state, channels, notify requests and upcalls are the core's.
//! - Nothing the device writes is trusted: ring indices, handles and CQEs are validated.
//!
//! Features (both default): `model`, the in-process device model as a backend (`platform::sim`,
//! `open_sim`); `cli`, the `hca` tool's own dependencies (it needs `model` too). A VFIO-only
//! build is `--no-default-features`.
#![deny(unsafe_op_in_unsafe_fn)]
// `unsafe` only where memory is mapped for the device, MMIO, DMA or a system call: the
// `platform` module (the interface and its backends) alone allows it.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub(crate) mod cmd;
pub mod cq;
pub(crate) mod device;
pub mod dma;
mod driver;
pub mod eq;
mod error;
mod gid;
pub(crate) mod health;
pub(crate) mod mr;
mod ops;
pub(crate) mod pd;
pub(crate) mod pdir;
#[allow(unsafe_code)] // the mapping, DMA and MMIO layer: the backends
pub mod platform;
pub(crate) mod probe;
pub mod qp;
pub(crate) mod ring;
mod selftest;
pub mod srq;
pub(crate) mod uar;
pub(crate) mod uctx;
pub mod wc;

pub use device::{fw_ver_string, Pvrdma};
pub use driver::{function, probe, pvrdma, register, PvrdmaDriver, Target};
#[cfg(feature = "model")]
pub use driver::{open_sim, open_sim_with};
pub use error::device_status;
pub use firmware_cmd::WaitMode;
pub use health::DriverStats;
pub use platform::{Platform, PlatformError};
pub use probe::{ProbeError, ProbeOptions};
pub use selftest::ENTRY_WAIT;
pub use uctx::Ucontext;
