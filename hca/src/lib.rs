//! pvrdma HCA driver and verbs provider for the paravirtual RDMA function (PCI 15ad:0820), built
//! like Linux's `vmw_pvrdma` and `mthca`: one module per hardware object over a platform
//! interface (BAR1 registers, BAR2 UAR pages, DMA memory by device address, MSI-X vectors).
//!
//! - [`Device`] probes the device (DSR, rings, interrupt threads, activation, GID) and creates
//!   [`UserContext`]s, [`Pd`]s, [`Cq`]s and [`CompChannel`]s.
//! - [`Pd`] registers [`Mr`]s and creates [`Qp`]s; QPs post work requests, CQs are polled and armed.
//! - Objects hold `Arc`s to what they depend on, so any drop order is safe; dropping an object
//!   sends its DESTROY command.
//! - Nothing the device writes is trusted: ring indices, handles and CQEs are validated.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod arm;
pub mod channel;
pub mod cmd;
pub mod cq;
pub mod cq_state;
mod destroy;
pub mod device;
pub mod dma;
pub mod eq;
pub mod error;
pub mod mr;
pub mod notify;
pub mod pd;
pub mod pdir;
pub mod platform;
pub mod qp;
pub mod ring;
mod sync;
pub mod uar;
pub mod uctx;
pub mod upcall;
pub mod verbs;
pub mod wc;

pub use channel::CompChannel;
pub use cq::{ArmKind, Cq, CqAcker};
pub use device::{Device, ProbeOptions};
pub use error::{Error, Result};
pub use firmware_cmd::WaitMode;
pub use mr::Mr;
pub use notify::{NotifyKind, NotifyRequest, NotifyStatus};
pub use pd::Pd;
pub use platform::{Platform, PlatformError};
pub use qp::Qp;
pub use uctx::UserContext;
pub use upcall::UpcallPolicy;
pub use verbs::{
    AsyncEvent, DeviceAttr, DriverStats, NotifyFlags, PortAttr, PortState, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, SendWr, Sge, WrOpcode,
};
pub use wc::{Wc, WcOpcode, WcStatus};
