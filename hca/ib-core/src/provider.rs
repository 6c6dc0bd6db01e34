//! The provider interface: what a device's driver implements to be loaded under the core, in the
//! shape of Linux's `ib_device_ops` and rdma-core's `verbs_context_ops`, and what the core
//! implements for the provider to report events up by object (Linux's `comp_handler` and
//! `event_handler` of each CQ and QP, and `ib_dispatch_event` for the device).
//!
//! The core never imports a provider and a provider never sees channels, notify requests or
//! upcalls: it creates objects, moves data, rings the hardware arm the core asks for, and tells
//! the core "CQ h fired", "CQ h overflowed", "QP q had this event", "the device is fatal".
//!
//! Objects are handed back as trait objects; where an operation takes another object of the same
//! provider (a PD to create a QP in, the CQs it completes into), the provider recovers its own
//! type with [`std::any::Any`] (`as_any`), as a Linux driver uses `container_of`.
//!
//! Every method is called from any thread. None may call back into the core's object API.

use crate::attr::{AhAttr, Gid, QpAttr, QpAttrMask, QpCap, QpType};
use crate::device_attr::{DeviceAttr, GidType, PortAttr};
use crate::error::Result;
use crate::events::arm::ArmKind;
use crate::events::async_event::AsyncEventType;
pub use crate::events::delivery::CqDelivery;
pub use crate::user_memory::UserMemory;
use crate::wr::{RecvWr, SendWr, Wc};
use std::any::Any;
use std::sync::Arc;

/// A PCI function's vendor and device ID, what a provider's match table lists (as libibverbs's
/// `VERBS_PCI_MATCH` and a Linux driver's `pci_device_id` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PciId {
    /// PCI vendor ID (e.g. 0x15ad, VMware).
    pub vendor: u16,
    /// PCI device ID (e.g. 0x0820, the paravirtual RDMA function).
    pub device: u16,
}

/// A device function as discovered (by a platform backend: the in-process model, VFIO, qtest):
/// what it is and an opaque handle its provider understands.
#[derive(Clone)]
pub struct PciFunction {
    /// What the function is: the core picks the provider by it.
    pub id: PciId,
    /// Where it is, for messages (`"sim"`, `"0000:00:05.0"`, `"qtest:…"`).
    pub location: String,
    /// The provider's handle to reach it (its platform, its probe options).
    pub handle: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for PciFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PciFunction({:04x}:{:04x} at {})", self.id.vendor, self.id.device, self.location)
    }
}

/// A provider: its name (devices are named `<name><N>`, as Linux's `ib_register_device` does
/// with `"vmw_pvrdma%d"`), the functions it drives, and its probe.
pub trait Driver: Send + Sync + 'static {
    /// The device name prefix, e.g. `"vmw_pvrdma"`.
    fn name(&self) -> &'static str;
    /// The functions this provider drives.
    fn match_table(&self) -> &'static [PciId];
    /// Probes `func` (one of the match table's). The core calls
    /// [`DeviceOps::set_event_handler`] on the result before any object is created.
    fn probe(&self, func: &PciFunction) -> Result<Arc<dyn DeviceOps>>;
}

/// What a QP is created with, in the provider's terms.
pub struct QpCreate<'a> {
    /// The CQ of send completions (this provider's).
    pub send_cq: &'a dyn CqOps,
    /// The CQ of receive completions (this provider's).
    pub recv_cq: &'a dyn CqOps,
    /// Requested sizes.
    pub cap: QpCap,
    /// Transport.
    pub qp_type: QpType,
    /// Every send produces a CQE.
    pub sq_sig_all: bool,
    /// The SRQ its receives come from (this provider's); the RQ sizes in `cap` are then 0.
    pub srq: Option<&'a dyn SrqOps>,
}

/// A probed device (`ib_device_ops`).
pub trait DeviceOps: Send + Sync + 'static {
    /// The provider's own type, for downcasts.
    fn as_any(&self) -> &dyn Any;
    /// Installs the core's sink for device and port events (called once, at registration).
    fn set_event_handler(&self, handler: Arc<dyn DeviceEventHandler>);
    /// Where the device is (`"sim"`, `"vfio:…"`).
    fn location(&self) -> String;
    /// Device attributes.
    fn query_device(&self) -> DeviceAttr;
    /// `fw_ver` as the provider formats it (rdma-core's providers each have their format).
    fn fw_ver_string(&self) -> String;
    /// Port attributes. Errors: `InvalidArgument` for an unknown port.
    fn query_port(&self, port: u8) -> Result<PortAttr>;
    /// The GID at `index` of `port`'s table (zero for an unused entry).
    fn query_gid(&self, port: u8, index: u32) -> Result<Gid>;
    /// What the GID at `index` of `port`'s table is for. Errors: `InvalidArgument` for an unused
    /// entry or one beyond the table.
    fn query_gid_type(&self, port: u8, index: u32) -> Result<GidType>;
    /// Binds `gid` of type `ty` at `index` of `port`'s table, replacing what was there (Linux's
    /// `ib_device_ops.add_gid`, which the core's GID cache calls for each address of the port's
    /// netdev). Errors: `InvalidArgument` for an unknown port or an index beyond the table (or
    /// one the provider keeps for itself); `Unsupported` for a type the device does not report;
    /// the device's refusal. The default refuses: a provider without a GID table to change.
    fn add_gid(&self, port: u8, index: u32, gid: Gid, ty: GidType) -> Result<()> {
        let _ = (port, index, gid, ty);
        Err(crate::Error::Unsupported("changing the GID table"))
    }
    /// Empties entry `index` of `port`'s table (`ib_device_ops.del_gid`). Errors: as
    /// [`DeviceOps::add_gid`]; the device's refusal of an entry that is already empty.
    fn del_gid(&self, port: u8, index: u32) -> Result<()> {
        let _ = (port, index);
        Err(crate::Error::Unsupported("changing the GID table"))
    }
    /// The board ID the device's driver reports (Linux: sysfs `board_id`), if it has one.
    fn board_id(&self) -> Option<String> {
        None
    }
    /// The P_Key at `index` of `port`'s table.
    fn query_pkey(&self, port: u8, index: u16) -> Result<u16>;
    /// Whether the device is in its catastrophic state.
    fn is_fatal(&self) -> bool;
    /// A user context of the device.
    fn alloc_ucontext(&self) -> Result<Box<dyn UcontextOps>>;
    /// A PD of the kernel (`uctx` None) or of a user context.
    fn alloc_pd(&self, uctx: Option<&dyn UcontextOps>) -> Result<Box<dyn PdOps>>;
    /// A CQ of at least `cqe` entries that reports to `events`; disarmed.
    fn create_cq(
        &self,
        uctx: Option<&dyn UcontextOps>,
        cqe: u32,
        events: Arc<dyn CqEventHandler>,
    ) -> Result<Arc<dyn CqOps>>;
    /// A QP in `pd` that reports its async events to `events`.
    fn create_qp(&self, pd: &dyn PdOps, init: &QpCreate<'_>, events: Arc<dyn QpEventHandler>)
        -> Result<Box<dyn QpOps>>;
    /// An SRQ in `pd` of `attr`'s sizes (`srq_limit` ignored) that reports its async events to
    /// `events`. The default refuses: a device without SRQs.
    fn create_srq(
        &self,
        pd: &dyn PdOps,
        attr: &crate::attr::SrqAttr,
        events: Arc<dyn SrqEventHandler>,
    ) -> Result<Box<dyn SrqOps>> {
        let _ = (pd, attr, events);
        Err(crate::Error::Unsupported("SRQs"))
    }
    /// An MR over `len` bytes of memory the provider allocates itself (its address space starts
    /// at [`MrOps::addr`]).
    fn alloc_mr(&self, pd: &dyn PdOps, len: usize, access: u32) -> Result<Box<dyn MrOps>>;
    /// An MR over the consumer's own memory, at its own address.
    /// Errors: `Unsupported` where the platform cannot map host memory for the device.
    fn reg_user_mr(&self, pd: &dyn PdOps, mem: UserMemory, access: u32) -> Result<Box<dyn MrOps>>;
    /// An address handle in `pd` for `attr` (port and GID index already checked by the core).
    /// The default refuses: a provider without UD.
    fn create_ah(&self, pd: &dyn PdOps, attr: &AhAttr) -> Result<Box<dyn AhOps>> {
        let _ = (pd, attr);
        Err(crate::Error::Unsupported("address handles"))
    }
}

/// An address handle (`ib_ah`). Dropping it destroys it.
pub trait AhOps: Send + Sync + 'static {
    /// The provider's own type.
    fn as_any(&self) -> &dyn Any;
}

/// A user context: the device resources of one consumer (a UAR page, a device context).
pub trait UcontextOps: Send + Sync + 'static {
    /// The provider's own type.
    fn as_any(&self) -> &dyn Any;
    /// The device's handle of the context.
    fn handle(&self) -> u32;
}

/// A protection domain.
pub trait PdOps: Send + Sync + 'static {
    /// The provider's own type.
    fn as_any(&self) -> &dyn Any;
    /// The device's PD handle.
    fn handle(&self) -> u32;
}

/// A memory region.
pub trait MrOps: Send + Sync + 'static {
    /// The device's MR handle.
    fn handle(&self) -> u32;
    /// Local key.
    fn lkey(&self) -> u32;
    /// Remote key.
    fn rkey(&self) -> u32;
    /// Start of the MR's address space.
    fn addr(&self) -> u64;
    /// Bytes.
    fn len(&self) -> usize;
    /// Whether the MR has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies the MR's bytes at `offset` into `buf` (bounds already checked by the core).
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()>;
    /// Copies `data` into the MR at `offset` (bounds already checked by the core).
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;
}

/// A completion queue: its ring and its hardware arm.
pub trait CqOps: Send + Sync + 'static {
    /// The provider's own type.
    fn as_any(&self) -> &dyn Any;
    /// The device's CQ handle.
    fn handle(&self) -> u32;
    /// Capacity in CQEs.
    fn cqe(&self) -> u32;
    /// Polls up to `wc.len()` completions (IBTA 11.4.2.1). Errors: `CqOverrun` once an
    /// overflowed CQ's queued CQEs are consumed; `DeviceFatal`.
    fn poll(&self, wc: &mut [Wc]) -> Result<usize>;
    /// Rings the CQ's hardware arm for `kind`. Where the device cannot arm for solicited only,
    /// arms for next (fires no later).
    fn arm(&self, kind: ArmKind);
    /// Whether the device can arm for solicited completions only.
    fn can_arm_solicited(&self) -> bool;
    /// Whether the ring holds CQEs not yet polled (err towards `true` when unsure).
    fn has_unpolled(&self) -> bool;
    /// Whether the CQ can still raise events: `Err` as soon as the provider knows it cannot,
    /// whichever thread found out — [`crate::Error::DeviceFatal`] for a fatal device or a CQ
    /// whose ring the device broke, [`crate::Error::CqOverrun`] once it overflowed. The core asks
    /// before each verb that arms or waits on the CQ, so a fault the provider found is seen by
    /// the next verb, not only once its report ([`CqEventHandler::error`], made on a thread of
    /// the provider's own) reaches the core. Default: usable.
    fn usable(&self) -> Result<()> {
        Ok(())
    }
    /// Runs `change` once the device's completion reports written so far have been consumed
    /// (passed to [`CqEventHandler::completion`]) and with none consumed while it runs; calls
    /// `change` exactly once. The deliveries the consumed reports returned are dropped after
    /// the fence. A provider whose device reports nothing ahead of an arm just calls it.
    fn fenced(&self, change: &mut dyn FnMut());
    /// Destroys the CQ on the device; after this returns the provider calls no handler of it.
    /// Memory is freed when the last reference goes.
    fn destroy(&self);
    /// Resizes the CQ to at least `cqe` entries (checked against `max_cqe` by the core) keeping
    /// its queued CQEs in order, and returns the new capacity. Default: [`crate::Error::Unsupported`]
    /// (a device without a resize command).
    fn resize(&self, cqe: u32) -> Result<u32> {
        let _ = cqe;
        Err(crate::Error::Unsupported("CQ resize"))
    }
}

/// A queue pair. Dropping it destroys it on the device.
pub trait QpOps: Send + Sync + 'static {
    /// The provider's own type behind the trait (`Qp::provider_qp`).
    fn as_any(&self) -> &dyn Any;
    /// The QP number.
    fn qp_num(&self) -> u32;
    /// Posts send work requests in order, ringing the device once for all of them (state rules
    /// already checked by the core). On failure: the index of the first request not posted and
    /// why; those before it are posted (libibverbs's `bad_wr`).
    fn post_send(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), (usize, crate::Error)>;
    /// Posts receive work requests, as [`QpOps::post_send`].
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, crate::Error)>;
    /// Modifies the QP (transition and mask already checked by the core).
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;
    /// Asks the device for the QP's attributes (`mask`: those wanted; the device may return more).
    fn query(&self, mask: QpAttrMask) -> Result<QpAttr>;
}

/// A shared receive queue. Dropping it destroys it on the device.
pub trait SrqOps: Send + Sync + 'static {
    /// The provider's own type.
    fn as_any(&self) -> &dyn Any;
    /// The device's SRQ handle.
    fn handle(&self) -> u32;
    /// Receive work requests it holds (what it was created with, rounded up by the device).
    fn max_wr(&self) -> u32;
    /// Posts receive work requests, as [`QpOps::post_recv`].
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, crate::Error)>;
    /// Modifies the SRQ (mask and limit already checked by the core).
    fn modify(&self, attr: &crate::attr::SrqAttr, mask: crate::attr::SrqAttrMask) -> Result<()>;
    /// Asks the device for the SRQ's attributes.
    fn query(&self) -> Result<crate::attr::SrqAttr>;
}
/// What the core does with an SRQ's async events (given to [`DeviceOps::create_srq`]).
pub trait SrqEventHandler: Send + Sync {
    /// An async event of SRQ scope. Returns `false` if the core no longer has the SRQ.
    fn event(&self, event: AsyncEventType) -> bool;
}
/// How a CQ erred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqError {
    /// The CQ overflowed (IBTA Overrun).
    Overrun,
    /// The CQ is unusable (a ring index out of range).
    Failure,
}

/// What the core does with a CQ's events (given to [`DeviceOps::create_cq`]).
pub trait CqEventHandler: Send + Sync {
    /// The device fired the CQ's arm: the core spends its arm now (call it inside the fence of
    /// [`CqOps::fenced`]) and returns the event's delivery, which reaches the consumers when it is
    /// dropped — after the fence is released. `None` if the core had not armed the CQ or no
    /// longer has it (the provider counts the report as spurious).
    fn completion(&self) -> Option<CqDelivery>;
    /// Reports that the device may have lost this CQ's completion report (its report ring was
    /// full): the core re-arms what it believes armed and fires if CQEs are queued. Returns the
    /// event's delivery if one fired (as [`CqEventHandler::completion`]).
    fn recover_dropped(&self) -> Option<CqDelivery>;
    /// The CQ erred. Returns `false` if the core no longer has the CQ.
    fn error(&self, error: CqError) -> bool;
}

/// What the core does with a QP's async events (given to [`DeviceOps::create_qp`]).
pub trait QpEventHandler: Send + Sync {
    /// An async event of QP scope. Returns `false` if the core no longer has the QP.
    fn event(&self, event: AsyncEventType) -> bool;
}

/// What the core does with device and port events.
pub trait DeviceEventHandler: Send + Sync {
    /// A port event (`PortActive`, `PortErr`, `GidChange`, ...).
    fn port_event(&self, port: u8, event: AsyncEventType);
    /// The device entered its catastrophic state (once).
    fn fatal(&self);
}
