//! A register-level model of the pvrdma PCI function (15ad:0820) as QEMU 7.2 emulates it, with a
//! software loopback port (or, chosen by [`SimConfig::roce`], a RoCE v2 port on UDP) instead of
//! a host RDMA device. It shares only the device ABI
//! (`pvrdma-abi`) with the driver.
//!
//! Where QEMU 7.2 is wrong, this model follows IBTA (one-shot arming, solicited arming, CQ overflow
//! reported as CQ_ERR), enforces per-context ownership of UAR pages, and survives hostile input.
//! [`Profile::Qemu72`] reproduces QEMU's observable CQ-notification quirks instead.
//!
//! Module layout mirrors the driver's: `device` (registers, state, lock order), `dsr`, `cmd`
//! (command dispatch), one module per object (`uc`, `pd`, `mr`, `cq`, `qp`), `ring` (device-side
//! ring access), `pdir` (page directories), `uar` (doorbells and ownership), `port` (loopback
//! wire and GID table), `roce` (the RoCE v2 port: IBTA RC transport over UDP), `timers` (the RC transport timers
//! both ports keep), `event` (async and CQ-notification rings), `budget` (host memory the
//! objects cost).
#![deny(unsafe_code)]

mod budget;
mod cmd;
mod cq;
mod device;
mod dsr;
mod errno;
mod event;
pub mod intr;
pub mod mem;
mod mr;
mod pd;
mod pdir;
mod port;
mod qp;
mod ring;
pub mod roce;
mod srq;
mod table;
mod timers;
mod uar;
mod uc;

pub use cq::{ArmState, CqStatus};
pub use device::{DeviceState, Profile, SimConfig, SimDevice, SimStats, UAR_BASE_PFN};
pub use dsr::{limits, node_guid, DEFAULT_MAC};
pub use errno::Errno;
pub use table::LiveObjects;

#[cfg(test)]
mod tests;
