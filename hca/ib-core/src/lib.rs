//! The verbs core: what every RDMA device shares, with no device in it — as Linux's `ib_core`
//! sits above `mthca` and `vmw_pvrdma`, and libibverbs above its providers.
//!
//! - **Devices**: providers register a [`Driver`] (a name and the PCI IDs they drive);
//!   [`add_device`] finds the provider for a discovered function and names the device
//!   (`vmw_pvrdma0`); [`device_list`] and [`open_device`] find it again.
//! - **Contexts and objects**: a [`Device`] is its kernel [`Context`]; [`Device::alloc_ucontext`]
//!   makes user contexts. PDs, MRs, CQs, QPs and completion channels belong to one context and
//!   cannot be mixed with another's; each destroy refuses while something still uses the object
//!   ([`Error::Busy`], libibverbs's EBUSY); dropping is always safe (children hold their parents).
//! - **Completion channels** ([`CompChannel`]) with a pollable fd, events naming their CQ and its
//!   `cq_context`, acknowledgements per CQ; **async events** per context ([`AsyncEvent`]), read and
//!   acknowledged, or handed to a handler.
//! - **One arm state machine per CQ** ([`arm::ArmMachine`], loom-checked) with its clients:
//!   [`Cq::req_notify`], notify requests ([`Cq::notify`]), DAT upcall policies
//!   ([`Cq::set_upcall`]).
//! - **QPs** with IBTA's transition table and posting rules, the full attribute interface
//!   ([`Qp::modify_qp`], [`Qp::query_qp`]).
//!
//! - **The GSI agent** ([`gsi::GsiAgent`]): a port's QP1 with its buffers, shared by every
//!   consumer of the process, sending and receiving MADs (the CM's) through a readiness fd.
//!
//! A provider implements [`provider::DeviceOps`] and the object traits beside it; it reports
//! events up through the handler objects the core gives it.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod ah;
mod attr;
mod context;
mod cq;
mod device;
mod device_attr;
mod error;
mod events;
pub mod gsi;
mod mr;
mod pd;
pub mod provider;
mod qp;
pub mod qp_state;
mod registry;
mod srq;
mod sync;
// The eventfd and poll(2) system calls of the event queues, and epoll for the GSI agent's fd.
#[allow(unsafe_code)]
mod sys;
pub mod time;
// The consumer memory an MR registers, reached through raw pointers.
#[allow(unsafe_code)]
mod user_memory;
mod wr;

/// The per-CQ arm state machine, public for its loom model check (`tests/loom_arm.rs`).
pub use events::arm;

pub use ah::{ah_attr_from_wc, Ah, GRH_LEN};
pub use attr::{access, gid_from_ip, AhAttr, Gid, GlobalRoute, Mtu};
pub use attr::{QpAttr, QpAttrMask, QpCap, QpState, QpType};
pub use context::Context;
pub use cq::{Cq, DROP_ACK_WAIT};
pub use device_attr::{device_cap, port_cap, AtomicCap, DeviceAttr, GidType, LinkLayer, PortAttr, PortState};
pub use error::{DeviceError, Error, Result};
pub use events::arm::ArmKind;
pub use events::async_event::{AsyncElement, AsyncEvent, AsyncEventType, AsyncHandler, EventScope};
pub use events::channel::CompChannel;
pub use events::notify::{NotifyKind, NotifyRequest, NotifyStatus};
pub use events::refs::{CqRef, QpRef, SrqRef};
pub use events::upcall::UpcallPolicy;
pub use mr::Mr;
pub use pd::Pd;
pub use provider::{Driver, PciFunction, PciId, UserMemory};
pub use qp::{Qp, QpInitAttr};
pub use registry::{add_device, device_list, open_device, register_driver, Device, DeviceInfo};
pub use srq::{Srq, SrqAttr, SrqAttrMask, SrqInitAttr};
pub use time::RETIRE_WAIT;
pub use user_memory::UserBuffer;
pub use wr::{NotifyFlags, RecvWr, SendWr, Sge, UdDest, Wc, WcOpcode, WcStatus, WrOpcode};
