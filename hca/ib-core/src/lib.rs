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
//! A provider implements [`provider::DeviceOps`] and the object traits beside it; it reports
//! events up through the handler objects the core gives it.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod ah;
pub mod arm;
mod async_event;
pub mod attr;
mod channel;
mod context;
mod cq;
mod cq_destroy;
mod cq_upcall;
mod delivery;
mod device;
pub mod device_attr;
mod error;
mod event_queue;
mod event_ref;
mod mr;
pub mod notify;
mod pd;
pub mod provider;
mod qp;
pub mod qp_state;
mod registry;
mod srq;
mod sync;
mod sys;
pub mod time;
pub mod upcall;
mod user_buffer;
mod wr;

pub use ah::{ah_attr_from_wc, Ah, GRH_LEN};
pub use arm::ArmKind;
pub use async_event::{AsyncElement, AsyncEvent, AsyncEventType, AsyncHandler, EventScope};
pub use attr::{access, gid_from_ip, AhAttr, Gid, GlobalRoute, Mtu};
pub use attr::{QpAttr, QpAttrMask, QpCap, QpState, QpType};
pub use channel::CompChannel;
pub use context::Context;
pub use cq::{Cq, DROP_ACK_WAIT};
pub use device_attr::{device_cap, port_cap, AtomicCap, DeviceAttr, GidType, LinkLayer, PortAttr, PortState};
pub use error::{DeviceError, Error, Result};
pub use event_ref::{CqRef, QpRef, SrqRef};
pub use mr::Mr;
pub use notify::{NotifyKind, NotifyRequest, NotifyStatus};
pub use pd::Pd;
pub use provider::{Driver, PciFunction, PciId, UserMemory};
pub use qp::{Qp, QpInitAttr};
pub use registry::{add_device, device_list, open_device, register_driver, Device, DeviceInfo};
pub use srq::{Srq, SrqAttr, SrqAttrMask, SrqInitAttr};
pub use time::RETIRE_WAIT;
pub use upcall::UpcallPolicy;
pub use user_buffer::UserBuffer;
pub use wr::{NotifyFlags, RecvWr, SendWr, Sge, UdDest, Wc, WcOpcode, WcStatus, WrOpcode};
