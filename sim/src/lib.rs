//! A register-level model of the pvrdma PCI function (15ad:0820) as QEMU 7.2 emulates it, with a
//! software loopback port (or, chosen by [`SimConfig::roce`], a RoCE v2 port on UDP) instead of
//! a host RDMA device. It shares only the device ABI
//! (`pvrdma-abi`) with the driver.
//!
//! Where QEMU 7.2 is wrong, this model follows IBTA (one-shot arming, solicited arming, CQ overflow
//! reported as CQ_ERR), enforces per-context ownership of UAR pages, and survives hostile input.
//! [`Profile::Qemu72`] reproduces QEMU's observable CQ-notification quirks instead.
//!
//! # Layers
//! Each module uses only the ones below it (as QEMU's `hw/rdma/` splits `pvrdma_main.c`,
//! `pvrdma_cmd.c`, `rdma_rm.c` and `rdma_backend.c`):
//! 1. leaves: `mem` (guest memory), `errno`, `limits`, `config`, `stats`, `budget` (host memory
//!    the objects cost), `timers` (the RC transport timers both ports keep), `ring` (device-side
//!    ring access), `pdir` (page directories), `eq` (event rings and MSI-X vectors), `wqe` (the SGEs of a WQE), `packet`
//!    (a message on the wire);
//! 2. `ctx`: what every object sees of the device (configuration, memory, counters, event sink);
//! 3. the objects, named as the provider's: `uctx`, `pd`, `mr`, `cq`, `srq`, `qp`;
//! 4. `table`: the resource tables and the GID table; `wire`: the loopback wire and the wire budget;
//! 5. `backend`: the data path (SQ drain, receive, completions, flush, MR accesses);
//! 6. the ports: `port` (the loopback's delivery) and `roce` (the RoCE v2 port: IBTA RC and UD
//!    transport over UDP);
//! 7. `cmd`: command dispatch, one module per object;
//! 8. `dsr`, `uar` (doorbells and UAR ownership) and `device` (registers, state, lock order) at
//!    the top.
#![deny(unsafe_code)]

mod backend;
mod budget;
mod cmd;
mod config;
mod cq;
mod ctx;
mod device;
mod dsr;
mod eq;
mod errno;
mod limits;
#[allow(unsafe_code)] // guest memory: the device's DMA into it and the program's pages mapped for it
pub mod mem;
mod mr;
mod packet;
mod pd;
mod pdir;
mod port;
mod qp;
mod ring;
pub mod roce;
mod srq;
mod stats;
mod table;
mod timers;
mod uar;
mod uctx;
mod wire;
mod wqe;

pub use config::{Profile, SimConfig};
pub use cq::{ArmState, CqStatus};
pub use device::{DeviceState, SimDevice, UAR_BASE_PFN};
pub use dsr::{node_guid, DEFAULT_MAC};
pub use eq::{MsixVectors, VectorHandler};
pub use errno::Errno;
pub use stats::SimStats;
pub use table::LiveObjects;

#[cfg(any(test, feature = "test-utils"))]
pub mod testutil;

#[cfg(test)]
mod tests;
