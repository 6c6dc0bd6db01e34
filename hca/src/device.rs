//! The device: probe, DSR, activation, queries, and teardown (Linux `pvrdma_main.c`'s
//! `pvrdma_pci_probe`/`pvrdma_pci_remove`, mthca `mthca_main.c`).

use crate::channel::CompChannel;
use crate::cmd::{Commands, PlatformTransport};
use crate::cq::Cq;
use crate::dma::DmaBuf;
use crate::eq::{spawn_threads, EventHub};
use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::platform::sim::SimPlatform;
use crate::platform::Platform;
use crate::uar::{UarDirect, UarTap};
use crate::uctx::UserContext;
use crate::verbs::{AsyncEvent, DeviceAttr, DriverStats, PortAttr};
use doorbell::{ArmEncoding, Doorbells, UarTable};
use firmware_cmd::{WaitMode, DEFAULT_TIMEOUT};
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateBind, QueryPkey, QueryPort};
use pvrdma_abi::dsr::{DeviceCaps, Dsr, GosInfo, DEVICE_MODE_ROCE, GID_TYPE_FLAG_ROCE_V1};
use pvrdma_abi::regs::{DeviceCtl, REG_CTL, REG_DSRHIGH, REG_DSRLOW, REG_ERR, REG_MACH, REG_MACL};
use pvrdma_abi::regs::REG_VERSION;
use pvrdma_abi::verbs::mtu;
use pvrdma_abi::{PVRDMA_ROCEV1_VERSION, PVRDMA_ROCEV2_VERSION};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use zerocopy::{FromBytes, IntoBytes};

/// Options of [`Device::probe_with`].
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// The GID bound at index 0. `None`: link-local `fe80::/64` with the EUI-64 of the MAC in
    /// `REG_MACL`/`REG_MACH`. The real QEMU device needs an IPv4-mapped GID of its backend netdev.
    pub gid: Option<[u8; 16]>,
    /// How commands wait for their response (interrupt on vector 0, or polling the ack word).
    pub cmd_wait: WaitMode,
    /// Bound on one command.
    pub cmd_timeout: Duration,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self { gid: None, cmd_wait: WaitMode::Interrupt, cmd_timeout: DEFAULT_TIMEOUT }
    }
}

/// A probed pvrdma device. Cheap to clone; the device is reset and its memory freed when the last
/// handle and the last object created from it are gone.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

/// The device state every object holds on to.
pub struct DeviceInner {
    pub(crate) platform: Arc<dyn Platform>,
    pub(crate) hub: Arc<EventHub>,
    pub(crate) cmd: Commands,
    pub(crate) uar: UarTable,
    pub(crate) kernel_db: Doorbells,
    /// The kernel page's doorbells without the tap (the arm state machine's own arms).
    pub(crate) kernel_db_direct: Doorbells,
    pub(crate) encoding: ArmEncoding,
    pub(crate) attr: DeviceAttr,
    gid: [u8; 16],
    index: u32,
    _dsr: DmaBuf,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The first port (pvrdma has one).
const PORT: u8 = 1;

impl Device {
    /// Probes the device behind `platform` with default [`ProbeOptions`].
    pub fn probe(platform: Arc<dyn Platform>) -> Result<Device> {
        Self::probe_with(platform, ProbeOptions::default())
    }

    /// Probes the device (as `pvrdma_pci_probe`): checks `REG_VERSION`, builds the DSR (command
    /// and response slots, async and CQ-notification rings, kernel UAR pfn), loads it, checks the
    /// capabilities (RoCE, RoCE v1 GIDs), starts the vector threads, activates the device,
    /// queries port 1 and binds the GID at index 0.
    ///
    /// Errors: [`Error::UnsupportedVersion`], [`Error::UnsupportedDevice`],
    /// [`Error::ActivationFailed`], [`Error::DeviceFatal`] (registers read all-ones), command and
    /// DMA failures. On failure the device is reset and everything allocated is freed.
    pub fn probe_with(platform: Arc<dyn Platform>, opts: ProbeOptions) -> Result<Device> {
        check_version(platform.reg_read(REG_VERSION))?;
        let hub = EventHub::new(&platform)?;
        let transport = PlatformTransport::new(&platform, hub.clone())?;
        let dsr = DmaBuf::pages(&platform, 1)?;
        dsr.write(0, build_dsr(&platform, &hub, &transport).as_bytes())?;
        load_dsr(&*platform, dsr.iova());
        let caps = read_caps(&dsr).inspect_err(|_| reset(&*platform))?;
        let inner = Arc::new(DeviceInner::new(platform, hub, transport, dsr, &caps, &opts));
        inner.start()?;
        tracing::info!(name = %inner.name(), platform = %inner.platform.name(), "pvrdma device up");
        Ok(Device { inner })
    }

    /// Probes a new in-process model configured by `cfg`; returns the device and the platform
    /// (whose [`SimPlatform::device`] lets tests inspect or poke the model).
    pub fn open_sim(cfg: pvrdma_sim::SimConfig) -> Result<(Device, SimPlatform)> {
        Self::open_sim_with(cfg, ProbeOptions::default())
    }

    /// [`Device::open_sim`] with probe options.
    pub fn open_sim_with(
        cfg: pvrdma_sim::SimConfig,
        opts: ProbeOptions,
    ) -> Result<(Device, SimPlatform)> {
        let sim = SimPlatform::new(cfg);
        let dev = Self::probe_with(Arc::new(sim.clone()), opts)?;
        Ok((dev, sim))
    }

    /// The device's name, `vmw_pvrdma<N>` as Linux names it (N: the lowest index no other live device has).
    pub fn name(&self) -> String {
        self.inner.name()
    }

    /// The platform's name (`"sim"`, `"vfio:…"`).
    pub fn platform_name(&self) -> String {
        self.inner.platform.name()
    }

    /// Device attributes, from the capabilities the device wrote into the DSR.
    pub fn query_device(&self) -> DeviceAttr {
        self.inner.attr.clone()
    }

    /// Port attributes from QUERY_PORT.
    ///
    /// Errors: [`Error::InvalidArgument`] for a port other than 1..=phys_port_cnt; command errors.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.inner.check_port(port)?;
        let resp = self.inner.cmd.post(QueryPort { port_num: port, ..Default::default() })?;
        Ok(PortAttr::from(&resp.attrs))
    }

    /// The GID at `index` of `port`'s table: the bound GID at 0, zero for unused entries.
    ///
    /// Errors: [`Error::InvalidArgument`] for an unknown port or an index beyond `gid_tbl_len`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<[u8; 16]> {
        self.inner.check_port(port)?;
        match index {
            0 => Ok(self.inner.gid),
            i if i < self.inner.attr.gid_tbl_len => Ok([0; 16]),
            _ => Err(Error::InvalidArgument("GID index beyond the table")),
        }
    }

    /// The GID bound at index 0 of port 1 (what a peer puts in its RTR `dgid`).
    pub fn gid(&self) -> [u8; 16] {
        self.inner.gid
    }

    /// The P_Key at `index` of `port` (QUERY_PKEY; QEMU answers 0xffff).
    ///
    /// Errors: [`Error::InvalidArgument`] for an unknown port or index > 255; command errors.
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        self.inner.check_port(port)?;
        let index = u8::try_from(index).map_err(|_| Error::InvalidArgument("P_Key index"))?;
        let resp = self.inner.cmd.post(QueryPkey { port_num: port, index, ..Default::default() })?;
        Ok(resp.pkey.get())
    }

    /// Allocates a kernel protection domain (CREATE_PD with context 0).
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::create(&self.inner, None)
    }

    /// Allocates a user context: a UAR page of its own and CREATE_UC.
    pub fn alloc_ucontext(&self) -> Result<UserContext> {
        UserContext::create(&self.inner)
    }

    /// A new completion channel for this device (woken with an error if the device goes fatal).
    pub fn create_comp_channel(&self) -> CompChannel {
        let ch = CompChannel::new();
        self.inner.hub.register_channel(&ch);
        ch
    }

    /// Creates a kernel CQ of at least `cqe` entries delivering events to `channel`.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        Cq::create(&self.inner, None, cqe, channel)
    }

    /// The driver's counters.
    pub fn stats(&self) -> DriverStats {
        self.inner.hub.stats()
    }

    /// Installs the callback for async events; it runs on the async-event thread and must not
    /// block for long. The device keeps the callback until it is torn down, so a callback that
    /// owns a [`Device`] clone keeps the device alive: capture what it needs instead.
    pub fn set_async_event_handler(&self, f: impl Fn(AsyncEvent) + Send + Sync + 'static) {
        self.inner.hub.set_handler(Arc::new(f));
    }

    /// Whether the device is in the catastrophic state.
    pub fn is_fatal(&self) -> bool {
        self.inner.hub.is_fatal()
    }

    /// The arm encoding this device uses.
    pub fn arm_encoding(&self) -> ArmEncoding {
        self.inner.encoding
    }

    /// Posts one raw command and returns its response: the command channel as diagnostics and
    /// conformance tests use it (as mthca exposes its firmware commands). Whatever the command
    /// creates on the device is the caller's to destroy; the driver does not track it.
    ///
    /// Errors: [`Error::Command`] when the device refuses it or the transport faults;
    /// [`Error::DeviceFatal`] once the device is in the catastrophic state.
    pub fn post_command<C: pvrdma_abi::cmd::CmdRequest>(&self, req: C) -> Result<C::Response> {
        self.inner.cmd.post(req)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({} on {})", self.name(), self.platform_name())
    }
}

impl DeviceInner {
    fn new(
        platform: Arc<dyn Platform>,
        hub: Arc<EventHub>,
        transport: PlatformTransport,
        dsr: DmaBuf,
        caps: &DeviceCaps,
        opts: &ProbeOptions,
    ) -> Self {
        let encoding = platform.arm_encoding();
        let uar = UarTable::new(platform.uar_base_pfn(), platform.uar_pages());
        let tap = UarTap::new(platform.clone(), hub.clone(), encoding, None);
        let kernel_db = Doorbells::new(Arc::new(tap), uar.kernel_page());
        let kernel_db_direct = Doorbells::new(Arc::new(UarDirect(platform.clone())), uar.kernel_page());
        let gid = opts.gid.unwrap_or_else(|| default_gid(read_mac(&*platform)));
        Self {
            cmd: Commands::new(transport, opts.cmd_wait, opts.cmd_timeout),
            platform,
            hub,
            uar,
            kernel_db,
            kernel_db_direct,
            encoding,
            attr: DeviceAttr::from(caps),
            gid,
            index: alloc_index(),
            _dsr: dsr,
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Threads, ACTIVATE, QUERY_PORT, CREATE_BIND. On error, dropping `self` tears down.
    fn start(&self) -> Result<()> {
        *self.threads.lock() = spawn_threads(&self.hub, &self.name())?;
        self.platform.reg_write(REG_CTL, DeviceCtl::Activate as u32);
        match self.platform.reg_read(REG_ERR) {
            0 => {}
            u32::MAX => return Err(Error::DeviceFatal),
            err => return Err(Error::ActivationFailed(err)),
        }
        let port = self.cmd.post(QueryPort { port_num: PORT, ..Default::default() })?;
        tracing::debug!(state = port.attrs.state.get(), "port 1 queried");
        self.cmd.post(CreateBind {
            mtu: mtu::bytes(mtu::MTU_1024).unwrap_or(1024).into(),
            vlan: 0xfff.into(),
            index: 0.into(),
            new_gid: self.gid,
            gid_type: GID_TYPE_FLAG_ROCE_V1,
            ..Default::default()
        })?;
        Ok(())
    }

    pub(crate) fn name(&self) -> String {
        format!("vmw_pvrdma{}", self.index)
    }

    pub(crate) fn check_port(&self, port: u8) -> Result<()> {
        if port >= 1 && port <= self.attr.phys_port_cnt.max(1) {
            Ok(())
        } else {
            Err(Error::InvalidArgument("no such port"))
        }
    }

    pub(crate) fn live(&self) -> Result<()> {
        if self.hub.is_fatal() {
            Err(Error::DeviceFatal)
        } else {
            Ok(())
        }
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        self.hub.stop();
        reset(&*self.platform);
        let me = std::thread::current().id();
        for t in self.threads.lock().drain(..) {
            // The last handle may be dropped by the async handler on its own thread.
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        free_index(self.index);
        tracing::info!(name = %self.name(), "pvrdma device reset and released");
    }
}

fn check_version(v: u32) -> Result<()> {
    match v {
        PVRDMA_ROCEV1_VERSION | PVRDMA_ROCEV2_VERSION => Ok(()),
        u32::MAX => Err(Error::DeviceFatal),
        other => Err(Error::UnsupportedVersion(other)),
    }
}

fn build_dsr(platform: &Arc<dyn Platform>, hub: &EventHub, t: &PlatformTransport) -> Dsr {
    let mut dsr = Dsr {
        driver_version: PVRDMA_ROCEV1_VERSION.into(),
        gos_info: GosInfo::linux_64(),
        cmd_slot_dma: t.cmd_slot_dma().into(),
        resp_slot_dma: t.resp_slot_dma().into(),
        uar_pfn: platform.uar_base_pfn().into(),
        ..Default::default()
    };
    let (pages, dir) = hub.async_ring_info();
    dsr.async_ring_pages.num_pages.set(pages);
    dsr.async_ring_pages.pdir_dma.set(dir);
    let (pages, dir) = hub.notify_ring_info();
    dsr.cq_ring_pages.num_pages.set(pages);
    dsr.cq_ring_pages.pdir_dma.set(dir);
    dsr
}

/// Hands the DSR to the device: low half first, the high write makes it load the DSR.
fn load_dsr(platform: &dyn Platform, iova: u64) {
    platform.reg_write(REG_DSRLOW, iova as u32);
    platform.reg_write(REG_DSRHIGH, (iova >> 32) as u32);
}

fn read_caps(dsr: &DmaBuf) -> Result<DeviceCaps> {
    let mut b = vec![0u8; std::mem::size_of::<Dsr>()];
    dsr.read(0, &mut b)?;
    let caps = Dsr::read_from_bytes(&b).map_err(|_| Error::DeviceFatal)?.caps;
    if caps.mode != DEVICE_MODE_ROCE {
        return Err(Error::UnsupportedDevice("device mode is not RoCE"));
    }
    if caps.gid_types & GID_TYPE_FLAG_ROCE_V1 == 0 {
        return Err(Error::UnsupportedDevice("no RoCE v1 GID support"));
    }
    if caps.phys_port_cnt == 0 {
        return Err(Error::UnsupportedDevice("no port"));
    }
    check_cap_limits(&caps)?;
    Ok(caps)
}

/// Upper bounds on the capabilities the driver accepts (nothing the device writes is trusted).
/// Far above any real pvrdma (QEMU 7.2 clamps its backend's limits to its own; rxe itself
/// reports 32 SGEs, 16384 WRs, 32767 CQEs), and low enough that nothing the driver derives from a
/// cap — WQE strides, power-of-two queue and CQ sizes, ring page counts — can overflow.
pub mod cap_limits {
    /// Most SGEs per work request (a send WQE of 80 + 256 * 16 bytes, an 8 KiB slot).
    pub const MAX_SGE: u32 = 256;
    /// Most work requests per queue.
    pub const MAX_QP_WR: u32 = 1 << 20;
    /// Most entries per CQ (a 64 MiB ring).
    pub const MAX_CQE: u32 = 1 << 20;
}

/// Refuses capabilities outside `1 ..= cap_limits::*` with [`Error::UnsupportedDevice`].
fn check_cap_limits(caps: &DeviceCaps) -> Result<()> {
    let within = |v: u32, max: u32| (1..=max).contains(&v);
    if !within(caps.max_sge.get(), cap_limits::MAX_SGE) {
        tracing::error!(max_sge = caps.max_sge.get(), "device reports an absurd max_sge");
        return Err(Error::UnsupportedDevice("max_sge out of range"));
    }
    if !within(caps.max_qp_wr.get(), cap_limits::MAX_QP_WR) {
        tracing::error!(max_qp_wr = caps.max_qp_wr.get(), "device reports an absurd max_qp_wr");
        return Err(Error::UnsupportedDevice("max_qp_wr out of range"));
    }
    if !within(caps.max_cqe.get(), cap_limits::MAX_CQE) {
        tracing::error!(max_cqe = caps.max_cqe.get(), "device reports an absurd max_cqe");
        return Err(Error::UnsupportedDevice("max_cqe out of range"));
    }
    Ok(())
}

fn reset(platform: &dyn Platform) {
    platform.reg_write(REG_CTL, DeviceCtl::Reset as u32);
}

/// The MAC in `REG_MACL` (bytes 0..4, little-endian) and `REG_MACH` (bytes 4..6).
fn read_mac(platform: &dyn Platform) -> [u8; 6] {
    let lo = platform.reg_read(REG_MACL).to_le_bytes();
    let hi = platform.reg_read(REG_MACH).to_le_bytes();
    [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1]]
}

/// Link-local GID `fe80::/64` with the modified EUI-64 of `mac` (RFC 4291 appendix A).
pub fn default_gid(mac: [u8; 6]) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[8..16].copy_from_slice(&[mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]);
    gid
}

static INDICES: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

fn alloc_index() -> u32 {
    let mut used = INDICES.lock();
    let i = (0..).find(|i| !used.contains(i)).unwrap_or(0);
    used.insert(i);
    i
}

fn free_index(i: u32) {
    INDICES.lock().remove(&i);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eui64_gid_from_mac() {
        let g = default_gid([0x00, 0x0c, 0x29, 0x12, 0x34, 0x56]);
        assert_eq!(
            g,
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x0c, 0x29, 0xff, 0xfe, 0x12, 0x34, 0x56]
        );
    }

    #[test]
    fn versions() {
        assert!(check_version(17).is_ok());
        assert!(check_version(18).is_ok());
        assert_eq!(check_version(16), Err(Error::UnsupportedVersion(16)));
        assert_eq!(check_version(u32::MAX), Err(Error::DeviceFatal));
    }

    #[test]
    fn probe_fails_cleanly_or_succeeds() {
        // Against the stub model REG_VERSION reads 0: probe must fail, not hang or panic.
        let sim = SimPlatform::new(pvrdma_sim::SimConfig::default());
        let version = sim.device().reg_read(REG_VERSION);
        let probed = Device::probe(Arc::new(sim));
        if version == 0 {
            assert!(matches!(probed, Err(Error::UnsupportedVersion(0))));
        } else {
            assert!(probed.is_ok(), "{probed:?}");
        }
    }

    #[test]
    fn absurd_caps_are_refused() {
        let mut caps = DeviceCaps::default();
        caps.max_sge.set(4);
        caps.max_qp_wr.set(1024);
        caps.max_cqe.set(4096);
        assert!(check_cap_limits(&caps).is_ok());
        for (sge, wr, cqe) in [
            (u32::MAX, 1024, 4096),
            (0, 1024, 4096),
            (1 << 28, 1024, 4096),
            (4, u32::MAX, 4096),
            ((1 << 31) + 1, 1024, 4096),
            (4, 0, 4096),
            (4, 1024, u32::MAX),
            (4, 1024, 0),
        ] {
            let mut c = caps;
            c.max_sge.set(sge);
            c.max_qp_wr.set(wr);
            c.max_cqe.set(cqe);
            assert!(
                matches!(check_cap_limits(&c), Err(Error::UnsupportedDevice(_))),
                "{sge} {wr} {cqe}"
            );
        }
    }

    #[test]
    fn names_reuse_the_lowest_free_index() {
        let a = alloc_index();
        let b = alloc_index();
        assert_ne!(a, b);
        free_index(a);
        let c = alloc_index();
        assert!(c <= b);
        free_index(b);
        free_index(c);
    }
}
