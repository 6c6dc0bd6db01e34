//! Probing the device (Linux `pvrdma_main.c`'s `pvrdma_pci_probe`, mthca `mthca_main.c`): check
//! `REG_VERSION`, build and load the DSR (command and response slots, async and CQ-notification
//! rings, the kernel UAR pfn), check the capabilities, start the vector threads, activate, query
//! port 1, bind the GID at index 0 (and the port's RoCE v2 GIDs after it, when given), and find
//! out how the device arms CQs (`selftest.rs`).

use crate::cmd::{Commands, PlatformTransport};
use crate::device::DeviceInner;
use crate::dma::DmaBuf;
use crate::eq::{spawn_threads, EventRings};
use crate::gid::GidTable;
use crate::health::Health;
use crate::platform::Platform;
use doorbell::ArmEncoding;
use firmware_cmd::{WaitMode, DEFAULT_TIMEOUT};
use ib_core::GidType;
use ib_core::{DeviceError, Error, Gid, Result};
use pvrdma_abi::cmd::QueryPort;
use pvrdma_abi::dsr::{DeviceCaps, Dsr, GosInfo, DEVICE_MODE_ROCE};
use pvrdma_abi::regs::REG_VERSION;
use pvrdma_abi::regs::{DeviceCtl, REG_CTL, REG_DSRHIGH, REG_DSRLOW, REG_ERR, REG_MACH, REG_MACL};
use pvrdma_abi::{PVRDMA_ROCEV1_VERSION, PVRDMA_ROCEV2_VERSION};
use std::sync::Arc;
use std::time::Duration;
use zerocopy::{FromBytes, IntoBytes};

/// Options of a probe.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// The GID bound at index 0. `None`: link-local `fe80::/64` with the EUI-64 of the MAC in
    /// `REG_MACL`/`REG_MACH`. The real QEMU device needs an IPv4-mapped GID of its backend netdev.
    pub gid: Option<Gid>,
    /// How commands wait for their response (interrupt on vector 0, or polling the ack word).
    pub cmd_wait: WaitMode,
    /// Bound on one command.
    pub cmd_timeout: Duration,
    /// How the device encodes a CQ arm. `None` (the default): found at probe by a self-test on
    /// private objects (`selftest.rs`); `Some` overrides it without testing.
    pub arm_encoding: Option<ArmEncoding>,
    /// Whether the device carries RESIZE_CQ. `None` (the default): found at probe by a RESIZE_CQ
    /// that changes nothing (`cq/resize.rs`), with interrupt waits only — QEMU 7.2 answers RESIZE_CQ with
    /// nothing, which a polling wait cannot tell from a dead device, so polling probes take
    /// `false`; `Some` overrides it without testing.
    pub resize_cq: Option<bool>,
    /// RoCE v2 GIDs (the port's IP addresses, as Linux's RoCE GID management adds a netdev's)
    /// bound at indexes 1, 2, ... in order right after index 0 and before the arm self-test,
    /// whose QPs then connect through the first of them: a RoCE v2 port sends only from a
    /// RoCE v2 GID. Unless [`ProbeOptions::gid`] names index 0's GID, the first of them is
    /// bound at index 0 too, as RoCE v2 (so index 0, most programs' default, can speak on the
    /// port, as index 0 of a soft-RoCE device's table does; see `docs/roce.md`). Empty (the
    /// default): index 0 only, the link-local RoCE v1 GID. [`crate::open_sim`] fills it from
    /// the model's RoCE addresses.
    pub roce_v2_gids: Vec<Gid>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            gid: None,
            cmd_wait: WaitMode::Interrupt,
            cmd_timeout: DEFAULT_TIMEOUT,
            arm_encoding: None,
            resize_cq: None,
            roce_v2_gids: Vec::new(),
        }
    }
}

/// Why a probe refused the device (inside [`Error::Device`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// `REG_VERSION` holds a device API version this driver does not speak (17 and 18 are
    /// accepted, as Linux's `pvrdma_pci_probe` does).
    #[error("unsupported device API version {0} (17 or 18 expected)")]
    UnsupportedVersion(u32),
    /// The device's capabilities rule it out (not RoCE, no RoCE v1 GIDs, no port, absurd caps).
    #[error("unsupported device: {0}")]
    UnsupportedDevice(&'static str),
    /// `REG_ERR` was not 0 after `CTL_ACTIVATE` (Linux: "failed to activate device").
    #[error("device activation failed: REG_ERR = {0:#x}")]
    ActivationFailed(u32),
}

fn probe_error(e: ProbeError) -> Error {
    let errno = if matches!(e, ProbeError::ActivationFailed(_)) { libc::EIO } else { libc::ENODEV };
    Error::Device(DeviceError::new(errno, e))
}

fn unsupported(what: &'static str) -> Error {
    probe_error(ProbeError::UnsupportedDevice(what))
}

/// The type of the GID the probe binds at index 0 when it is the link-local one (version-17
/// devices, QEMU 7.2's, know RoCE v1).
pub(crate) const BOUND_GID_TYPE: GidType = GidType::RoceV1;

/// The first port (pvrdma has one).
const PORT: u8 = 1;

/// Probes the device behind `platform`.
///
/// Errors: [`ProbeError`]s (in [`Error::Device`]); [`Error::DeviceFatal`] (registers read
/// all-ones); command and DMA failures. On failure the device is reset and everything allocated
/// is freed.
pub(crate) fn probe(platform: Arc<dyn Platform>, opts: &ProbeOptions) -> Result<Arc<DeviceInner>> {
    let version = platform.reg_read(REG_VERSION);
    check_version(version)?;
    let health = Arc::new(Health::default());
    let eq = EventRings::new(&platform, health.clone())?;
    let transport = PlatformTransport::new(&platform, health.clone())?;
    let dsr = DmaBuf::pages(&platform, 1)?;
    dsr.write(0, build_dsr(&platform, &eq, &transport).as_bytes())?;
    load_dsr(&*platform, dsr.iova());
    let caps = read_caps(&dsr).inspect_err(|_| reset(&*platform))?;
    let (gid, gid_type) = match (opts.gid, opts.roce_v2_gids.first()) {
        (None, Some(&first)) => (first, GidType::RoceV2),
        (gid, _) => (gid.unwrap_or_else(|| default_gid(read_mac(&*platform))), BOUND_GID_TYPE),
    };
    let cmd = Commands::new(transport, opts.cmd_wait, opts.cmd_timeout);
    let attr = crate::device::device_attr(&caps, version);
    let gids = GidTable::new(attr.gid_tbl_len, caps.gid_types, gid, gid_type);
    let dev = Arc::new(DeviceInner::new(platform, health, eq, cmd, dsr, attr, gids));
    start(&dev, gid_type)?;
    for (index, gid) in (1u32..).zip(&opts.roce_v2_gids) {
        crate::gid::add(&dev.gids, &dev.cmd, index, *gid, GidType::RoceV2)?;
    }
    let encoding = opts.arm_encoding.unwrap_or_else(|| crate::selftest::arm_encoding(&dev));
    dev.set_encoding(encoding);
    let resize =
        opts.resize_cq.unwrap_or_else(|| opts.cmd_wait == WaitMode::Interrupt && crate::cq::probe_resize(&dev));
    dev.set_resize_cq(resize);
    // The self-test's commands may have found the device dead (a timeout makes it fatal).
    dev.live()?;
    dev.health.reset_counts();
    tracing::info!(platform = %dev.platform.name(), ?encoding, resize, "pvrdma device up");
    Ok(dev)
}

/// Threads, ACTIVATE, QUERY_PORT, CREATE_BIND of index 0 (of type `gid_type`). On error,
/// dropping the device tears down.
fn start(dev: &DeviceInner, gid_type: GidType) -> Result<()> {
    *dev.threads.lock() = spawn_threads(&dev.eq, "pvrdma")?;
    dev.platform.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    match dev.platform.reg_read(REG_ERR) {
        0 => {}
        u32::MAX => return Err(Error::DeviceFatal),
        err => return Err(probe_error(ProbeError::ActivationFailed(err))),
    }
    let port = dev.cmd.post(QueryPort { port_num: PORT, ..Default::default() })?;
    tracing::debug!(state = port.attrs.state.get(), "port 1 queried");
    crate::gid::create_bind(&dev.cmd, 0, dev.gid0(), crate::gid::type_flag(gid_type))
}

fn check_version(v: u32) -> Result<()> {
    match v {
        PVRDMA_ROCEV1_VERSION | PVRDMA_ROCEV2_VERSION => Ok(()),
        u32::MAX => Err(Error::DeviceFatal),
        other => Err(probe_error(ProbeError::UnsupportedVersion(other))),
    }
}

fn build_dsr(platform: &Arc<dyn Platform>, eq: &EventRings, t: &PlatformTransport) -> Dsr {
    let mut dsr = Dsr {
        driver_version: PVRDMA_ROCEV1_VERSION.into(),
        gos_info: GosInfo::linux_64(),
        cmd_slot_dma: t.cmd_slot_dma().into(),
        resp_slot_dma: t.resp_slot_dma().into(),
        uar_pfn: platform.uar_base_pfn().into(),
        ..Default::default()
    };
    let (pages, dir) = eq.async_ring_info();
    dsr.async_ring_pages.num_pages.set(pages);
    dsr.async_ring_pages.pdir_dma.set(dir);
    let (pages, dir) = eq.notify_ring_info();
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
        return Err(unsupported("device mode is not RoCE"));
    }
    if caps.gid_types & crate::gid::type_flag(BOUND_GID_TYPE) == 0 {
        return Err(unsupported("no RoCE v1 GID support"));
    }
    if caps.phys_port_cnt == 0 {
        return Err(unsupported("no port"));
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
    /// Most GID table entries a port can usefully have: a QP's `sgid_index` is 8 bits (QEMU 7.2
    /// reports 255).
    pub const GID_TBL_LEN: u32 = 256;
}

/// Refuses a capability outside `1 ..=` its bound with [`ProbeError::UnsupportedDevice`]: the
/// sizes above (`cap_limits`), object counts within 24-bit handles, the GID table within what a
/// QP's 8-bit `sgid_index` can name (QEMU 7.2 reports 255), and at least one P_Key. A zero is a
/// device that can hold nothing; the driver would size tables and rings from it.
fn check_cap_limits(caps: &DeviceCaps) -> Result<()> {
    const HANDLES: u32 = 1 << 24;
    let checks = [
        ("max_sge", caps.max_sge.get(), cap_limits::MAX_SGE),
        ("max_qp_wr", caps.max_qp_wr.get(), cap_limits::MAX_QP_WR),
        ("max_cqe", caps.max_cqe.get(), cap_limits::MAX_CQE),
        ("max_qp", caps.max_qp.get(), HANDLES),
        ("max_cq", caps.max_cq.get(), HANDLES),
        ("max_mr", caps.max_mr.get(), HANDLES),
        ("max_pd", caps.max_pd.get(), HANDLES),
        ("max_uar", caps.max_uar.get(), HANDLES),
        ("gid_tbl_len", caps.gid_tbl_len.get(), cap_limits::GID_TBL_LEN),
        ("max_pkeys", u32::from(caps.max_pkeys.get()), u32::from(u16::MAX)),
    ];
    // Capabilities a device may lack (0: none), bounded as above; a responder or initiator
    // depth is an 8-bit QP attribute (`max_rd_atomic`, `max_dest_rd_atomic`).
    let optional = [
        ("max_srq", caps.max_srq.get(), HANDLES),
        ("max_srq_wr", caps.max_srq_wr.get(), cap_limits::MAX_QP_WR),
        ("max_srq_sge", caps.max_srq_sge.get(), cap_limits::MAX_SGE),
        ("max_qp_rd_atom", caps.max_qp_rd_atom.get(), u32::from(u8::MAX)),
        ("max_qp_init_rd_atom", caps.max_qp_init_rd_atom.get(), u32::from(u8::MAX)),
    ];
    let required = checks.into_iter().map(|(n, v, max)| (n, v, 1, max));
    for (name, value, min, max) in required.chain(optional.into_iter().map(|(n, v, max)| (n, v, 0, max))) {
        if !(min..=max).contains(&value) {
            tracing::error!(cap = name, value, max, "device reports a capability out of range");
            return Err(unsupported("a capability out of range"));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eui64_gid_from_mac() {
        let g = default_gid([0x00, 0x0c, 0x29, 0x12, 0x34, 0x56]);
        assert_eq!(g, [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x0c, 0x29, 0xff, 0xfe, 0x12, 0x34, 0x56]);
    }

    #[test]
    fn versions() {
        assert!(check_version(17).is_ok());
        assert!(check_version(18).is_ok());
        let e = check_version(16).unwrap_err();
        assert_eq!(e.device_error::<ProbeError>(), Some(&ProbeError::UnsupportedVersion(16)));
        assert_eq!(e.errno(), libc::ENODEV);
        assert_eq!(check_version(u32::MAX), Err(Error::DeviceFatal));
    }

    #[test]
    fn absurd_caps_are_refused() {
        let mut caps = DeviceCaps::default();
        caps.max_sge.set(4);
        caps.max_qp_wr.set(1024);
        caps.max_cqe.set(4096);
        for c in [&mut caps.max_qp, &mut caps.max_cq, &mut caps.max_mr, &mut caps.max_pd, &mut caps.max_uar] {
            c.set(1024);
        }
        caps.gid_tbl_len.set(255);
        caps.max_pkeys.set(1);
        assert!(check_cap_limits(&caps).is_ok());
        type Edit = fn(&mut DeviceCaps);
        let zeros: [Edit; 13] = [
            |c| c.max_srq.set(1 << 24 | 1),
            |c| c.max_srq_wr.set(u32::MAX),
            |c| c.max_srq_sge.set(cap_limits::MAX_SGE + 1),
            |c| c.max_qp_rd_atom.set(256),
            |c| c.max_qp_init_rd_atom.set(u32::MAX),
            |c| c.max_qp.set(0),
            |c| c.max_cq.set(0),
            |c| c.max_mr.set(1 << 24 | 1),
            |c| c.max_pd.set(0),
            |c| c.max_uar.set(0),
            |c| c.gid_tbl_len.set(0),
            |c| c.gid_tbl_len.set(257),
            |c| c.max_pkeys.set(0),
        ];
        for (i, edit) in zeros.iter().enumerate() {
            let mut c = caps;
            edit(&mut c);
            assert!(check_cap_limits(&c).is_err(), "edit {i}");
        }
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
            let e = check_cap_limits(&c).unwrap_err();
            assert!(
                matches!(e.device_error::<ProbeError>(), Some(ProbeError::UnsupportedDevice(_))),
                "{sge} {wr} {cqe}"
            );
        }
    }
}
