//! A register-level model of the pvrdma PCI function (15ad:0820) as QEMU 7.2 emulates it, with a
//! software loopback port instead of a host RDMA device. It shares only the device ABI
//! (`pvrdma-abi`) with the driver.
//!
//! Where QEMU 7.2 is wrong, this model follows IBTA (one-shot arming, solicited arming, CQ overflow
//! reported as CQ_ERR), enforces per-context ownership of UAR pages, and survives hostile input.
#![deny(unsafe_code)]

mod device;
pub mod intr;
pub mod mem;

pub use device::{Profile, SimConfig, SimDevice, SimStats, UAR_BASE_PFN};
