//! The probed device's state every object holds on to (Linux's `struct pvrdma_dev`), its
//! teardown, and [`Pvrdma`], the provider's device as diagnostics and conformance tests reach it
//! through the verbs core (`Device::provider::<Pvrdma>()`): counters, raw commands, raw
//! doorbells, the arm encoding found at probe.

use crate::cmd::Commands;
use crate::dma::DmaBuf;
use crate::eq::EventRings;
use crate::gid::GidTable;
use crate::health::{DriverStats, Health};
use crate::platform::Platform;
use doorbell::{ArmEncoding, Doorbells, Owner, UarTable};
use ib_core::{device_cap, AtomicCap, DeviceAttr, Error, Gid, Result};
use parking_lot::{Mutex, MutexGuard};
use pvrdma_abi::cmd::CmdRequest;
use pvrdma_abi::dsr::{DeviceCaps, ATOMIC_OP_COMP_SWAP, ATOMIC_OP_FETCH_ADD};
use pvrdma_abi::dsr::{BMME_FLAG_FAST_REG_WR, BMME_FLAG_LOCAL_INV, BMME_FLAG_REMOTE_INV};
use pvrdma_abi::regs::{DeviceCtl, REG_CTL};
use pvrdma_abi::PVRDMA_ROCEV2_VERSION;
use rustc_hash::FxHashSet;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The device state.
pub(crate) struct DeviceInner {
    pub(crate) platform: Arc<dyn Platform>,
    /// [`Platform::shares_cpus`], read once.
    pub(crate) shares_cpus: bool,
    pub(crate) health: Arc<Health>,
    pub(crate) eq: Arc<EventRings>,
    pub(crate) cmd: Commands,
    pub(crate) uar: UarTable,
    /// The kernel page's doorbells (every CQ's arm, kernel QPs' send and receive).
    pub(crate) kernel_db: Doorbells,
    encoding: AtomicU8,
    /// The device carries RESIZE_CQ (found at probe).
    resize_cq: AtomicBool,
    pub(crate) attr: DeviceAttr,
    /// The port's GID table as the driver bound it (entry 0 by the probe).
    pub(crate) gids: GidTable,
    pub(crate) _dsr: DmaBuf,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    /// Handles and keys of the live PDs, MRs and user contexts.
    pub(crate) live_ids: LiveIds,
    /// Kernel address handles alive (at most `attr.max_ah`, as Linux's `pvrdma_create_ah`
    /// counts; a user context's AHs are not counted, as rdma-core's are not).
    pub(crate) ahs: std::sync::atomic::AtomicU32,
}

impl DeviceInner {
    /// Assembles the state of a device whose DSR is loaded.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        platform: Arc<dyn Platform>,
        health: Arc<Health>,
        eq: Arc<EventRings>,
        cmd: Commands,
        dsr: DmaBuf,
        attr: DeviceAttr,
        gids: GidTable,
    ) -> Self {
        let mmio = Arc::new(crate::uar::UarDirect(platform.clone()));
        let uar = UarTable::new(mmio, platform.uar_base_pfn(), uar_pages(platform.uar_pages(), attr.max_uar));
        let kernel_db = uar.kernel_doorbells();
        Self {
            shares_cpus: platform.shares_cpus(),
            platform,
            health,
            eq,
            cmd,
            kernel_db,
            uar,
            encoding: AtomicU8::new(0),
            resize_cq: AtomicBool::new(false),
            attr,
            gids,
            _dsr: dsr,
            threads: Mutex::new(Vec::new()),
            live_ids: LiveIds::default(),
            ahs: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The GID the probe binds at index 0 (the self-test's QPs connect through it).
    pub(crate) fn gid0(&self) -> Gid {
        self.gids.get(0).ok().flatten().map(|(g, _)| g).unwrap_or_default()
    }

    /// How the device wants CQ arms encoded (found at probe).
    pub(crate) fn encoding(&self) -> ArmEncoding {
        match self.encoding.load(Ordering::Relaxed) {
            0 => ArmEncoding::Ibta,
            _ => ArmEncoding::Qemu72,
        }
    }

    pub(crate) fn set_encoding(&self, e: ArmEncoding) {
        self.encoding.store(u8::from(e == ArmEncoding::Qemu72), Ordering::Relaxed);
    }

    /// Whether the device carries RESIZE_CQ (found at probe).
    pub(crate) fn resize_cq(&self) -> bool {
        self.resize_cq.load(Ordering::Relaxed)
    }

    pub(crate) fn set_resize_cq(&self, has: bool) {
        self.resize_cq.store(has, Ordering::Relaxed);
    }

    /// Errors: [`Error::DeviceFatal`] once the device is fatal.
    pub(crate) fn live(&self) -> Result<()> {
        if self.health.is_fatal() {
            Err(Error::DeviceFatal)
        } else {
            Ok(())
        }
    }

    /// Errors: [`Error::InvalidArgument`] for a port outside 1..=phys_port_cnt.
    pub(crate) fn check_port(&self, port: u8) -> Result<()> {
        if port >= 1 && port <= self.attr.phys_port_cnt {
            Ok(())
        } else {
            Err(Error::InvalidArgument("no such port"))
        }
    }
}

/// What a handle or key the device hands out names (CQs and QPs are in the event tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum IdKind {
    Pd,
    Ucontext,
    MrHandle,
    Lkey,
    Rkey,
}

/// The handles and keys the device gave to objects that are still live. A device that answers
/// one of them again for a new object has two objects under one name: a DESTROY, a WQE's lkey or
/// a peer's rkey would reach either. Creation (command and claim) and destruction (command and
/// release) each run under the one lock, so a value the device reuses after a DESTROY is
/// claimed only once it has been released.
#[derive(Default)]
pub(crate) struct LiveIds(Mutex<FxHashSet<(IdKind, u32)>>);

/// [`LiveIds`] locked for one creation or destruction.
pub(crate) struct LiveGuard<'a>(MutexGuard<'a, FxHashSet<(IdKind, u32)>>);

impl LiveIds {
    pub(crate) fn lock(&self) -> LiveGuard<'_> {
        LiveGuard(self.0.lock())
    }
}

impl LiveGuard<'_> {
    /// Claims every id of `ids` or none; a clash names the first id already live.
    pub(crate) fn claim(&mut self, ids: &[(IdKind, u32)]) -> std::result::Result<(), (IdKind, u32)> {
        if let Some(&clash) = ids.iter().find(|id| self.0.contains(id)) {
            tracing::error!(?clash, "device answered a handle or key that is live");
            return Err(clash);
        }
        self.0.extend(ids.iter().copied());
        Ok(())
    }

    /// Releases ids claimed by [`LiveGuard::claim`] (after the object's DESTROY).
    pub(crate) fn release(&mut self, ids: &[(IdKind, u32)]) {
        for id in ids {
            self.0.remove(id);
        }
    }
}

/// Makes the device fatal for an object handle it answered while that handle is live (as the
/// event tables do for CQ and QP handles): its object table is not to be believed, and the
/// DESTROY that would undo the new object would reach the live one.
pub(crate) fn duplicate_handle(dev: &DeviceInner, what: IdKind, handle: u32) -> Error {
    tracing::error!(?what, handle, "device returned an object handle that is in use");
    dev.health.set_fatal("device returned an object handle that is in use");
    Error::DeviceFatal
}

/// UAR pages to manage: BAR2's, bounded by the device's `max_uar` cap when it gives one.
fn uar_pages(bar_pages: u32, max_uar: u32) -> u32 {
    if max_uar == 0 {
        bar_pages
    } else {
        bar_pages.min(max_uar)
    }
}

/// Makes the typed doorbell handle of an object (CQ, QP) from the handle the device returned: it
/// must fit the doorbell's 24 bits, or a doorbell for it would ring another object.
///
/// Errors: [`Error::BadResponse`] naming `what` (the caller destroys the object).
pub(crate) fn doorbell_handle<H>(
    what: &'static str,
    handle: u32,
    owner: Owner,
    make: impl FnOnce(u32, Owner) -> std::result::Result<H, doorbell::DoorbellError>,
) -> Result<H> {
    make(handle, owner).map_err(|_| {
        tracing::error!(handle, what, "device returned a handle beyond 24 bits");
        Error::BadResponse(what)
    })
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        self.eq.stop();
        self.platform.reg_write(REG_CTL, DeviceCtl::Reset as u32);
        let me = std::thread::current().id();
        for t in self.threads.lock().drain(..) {
            // The last handle may go on a vector thread (an async handler owning the device).
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        tracing::info!(platform = %self.platform.name(), "pvrdma device reset and released");
    }
}

/// Device attributes from the capabilities the device wrote into the DSR, as Linux's
/// `pvrdma_query_device` derives them: the fields it fills come from the caps (`max_sge_rd` only
/// from a version-18 device; version 17, QEMU's, gives `max_sge`), atomics are `ATOMIC_HCA` if
/// the device does compare-and-swap or fetch-and-add, `MEM_MGT_EXTENSIONS` needs all three
/// fast-registration flags, and every device reports PORT_ACTIVE and generates RNR NAKs. The EE,
/// RDD, raw, multicast and FMR limits stay 0, as Linux leaves them. One completion vector.
pub(crate) fn device_attr(c: &DeviceCaps, version: u32) -> DeviceAttr {
    let bmme_all = BMME_FLAG_LOCAL_INV | BMME_FLAG_REMOTE_INV | BMME_FLAG_FAST_REG_WR;
    let mut flags = c.device_cap_flags.get() | device_cap::PORT_ACTIVE_EVENT | device_cap::RC_RNR_NAK_GEN;
    if c.bmme_flags & bmme_all == bmme_all {
        flags |= device_cap::MEM_MGT_EXTENSIONS;
    }
    let atomics = c.atomic_ops & (ATOMIC_OP_COMP_SWAP | ATOMIC_OP_FETCH_ADD) != 0;
    DeviceAttr {
        fw_ver: c.fw_ver.get(),
        node_guid: c.node_guid.get(),
        sys_image_guid: c.sys_image_guid.get(),
        vendor_id: c.vendor_id.get(),
        vendor_part_id: c.vendor_part_id.get(),
        hw_ver: c.hw_ver.get(),
        phys_port_cnt: c.phys_port_cnt,
        max_qp: c.max_qp.get(),
        max_qp_wr: c.max_qp_wr.get(),
        max_sge: c.max_sge.get(),
        max_cq: c.max_cq.get(),
        max_cqe: c.max_cqe.get(),
        max_mr: c.max_mr.get(),
        max_pd: c.max_pd.get(),
        max_mr_size: c.max_mr_size.get(),
        page_size_cap: c.page_size_cap.get(),
        gid_tbl_len: c.gid_tbl_len.get(),
        max_pkeys: c.max_pkeys.get(),
        max_uar: c.max_uar.get(),
        device_cap_flags: flags,
        max_sge_rd: if version >= PVRDMA_ROCEV2_VERSION { c.max_sge_rd.get() } else { c.max_sge.get() },
        max_qp_rd_atom: c.max_qp_rd_atom.get(),
        max_qp_init_rd_atom: c.max_qp_init_rd_atom.get(),
        atomic_cap: if atomics { AtomicCap::Hca } else { AtomicCap::None },
        max_ah: c.max_ah.get(),
        max_srq: c.max_srq.get(),
        max_srq_wr: c.max_srq_wr.get(),
        max_srq_sge: c.max_srq_sge.get(),
        local_ca_ack_delay: c.local_ca_ack_delay,
        num_comp_vectors: 1,
        ..Default::default()
    }
}

/// `fw_ver` as rdma-core's pvrdma provider formats it: `%d.%d.%03d` of bits 32-47, 16-31 and
/// 0-15 of the 64-bit value.
pub fn fw_ver_string(v: u64) -> String {
    format!("{}.{}.{:03}", (v >> 32) & 0xffff, (v >> 16) & 0xffff, v & 0xffff)
}

/// The pvrdma device behind a verbs-core device (`dev.provider::<Pvrdma>()`): what only this
/// provider has.
pub struct Pvrdma {
    pub(crate) inner: Arc<DeviceInner>,
}

impl Pvrdma {
    /// The driver's counters (interrupts per vector, events, dropped entries, full rings), counted
    /// from when the probe handed the device out (its self-test is not counted).
    pub fn stats(&self) -> DriverStats {
        self.inner.health.stats()
    }

    /// How CQ arms are encoded on this device: found at probe (or given as an override).
    pub fn arm_encoding(&self) -> ArmEncoding {
        self.inner.encoding()
    }

    /// Whether the driver resizes CQs on this device with RESIZE_CQ: found at probe (or given as
    /// an override); `false` on QEMU 7.2, which has no RESIZE_CQ.
    pub fn has_resize_cq(&self) -> bool {
        self.inner.resize_cq()
    }

    /// The platform's name (`"sim"`, `"vfio:…"`, `"qtest:…"`).
    pub fn platform_name(&self) -> String {
        self.inner.platform.name()
    }

    /// Posts one raw command and returns its response: the command channel as diagnostics and
    /// conformance tests use it (as mthca exposes its firmware commands). Whatever it creates is
    /// the caller's to destroy; the driver does not track it.
    ///
    /// Errors: [`Error::Device`] holding the [`firmware_cmd::CmdError`] when the device refuses it
    /// or the transport faults; [`Error::DeviceFatal`] once the device is fatal.
    pub fn post_command<C: CmdRequest>(&self, req: C) -> Result<C::Response> {
        self.inner.cmd.post(req)
    }

    /// The typed doorbells of the kernel's UAR page (they ring any object). An arm rung here is
    /// the device's, not the driver's, so it raises an interrupt but no completion event (arm
    /// through the verbs core: `Cq::req_notify`).
    pub fn kernel_doorbells(&self) -> &Doorbells {
        &self.inner.kernel_db
    }

    /// The UAR page table (page 0 the kernel's, one per user context).
    pub fn uar_table(&self) -> &UarTable {
        &self.inner.uar
    }

    /// Writes `value` at byte `offset` of BAR2 with no check at all: for conformance tests of
    /// what the device does with a doorbell the driver would never ring (another context's
    /// object, a bit combination of another encoding).
    pub fn raw_uar_write(&self, offset: u64, value: u32) {
        self.inner.platform.uar_write(offset, value);
    }
}
