//! The pvrdma provider as the verbs core loads it (libibverbs's `verbs_device_ops` and match
//! table, Linux's `pci_driver` for 15ad:0820): [`register`] it once, then hand the core a function
//! found by a platform backend ([`function`]); the core picks this provider by the function's PCI
//! ID and names the device `vmw_pvrdma<N>`.

use crate::device::Pvrdma;
#[cfg(feature = "model")]
use crate::platform::sim::SimPlatform;
use crate::platform::Platform;
use crate::probe::{probe as probe_device, ProbeOptions};
use ib_core::provider::{DeviceOps, Driver, PciFunction, PciId};
use ib_core::{Device, Error, Result};
use pvrdma_abi::{PCI_DEVICE_ID_VMWARE_PVRDMA, PCI_VENDOR_ID_VMWARE};
use std::sync::Arc;

/// The functions this provider drives.
static MATCH: [PciId; 1] = [PciId { vendor: PCI_VENDOR_ID_VMWARE, device: PCI_DEVICE_ID_VMWARE_PVRDMA }];

/// The provider.
pub struct PvrdmaDriver;

/// What the provider needs to probe a function: the platform that reaches it and the options.
pub struct Target {
    /// The backend (the model, qtest, VFIO).
    pub platform: Arc<dyn Platform>,
    /// How to probe.
    pub opts: ProbeOptions,
}

impl Driver for PvrdmaDriver {
    fn name(&self) -> &'static str {
        "vmw_pvrdma"
    }

    fn match_table(&self) -> &'static [PciId] {
        &MATCH
    }

    /// Probes the function's device (`probe.rs`). Errors: [`Error::InvalidArgument`] for a
    /// function this provider did not describe; the probe's errors.
    fn probe(&self, func: &PciFunction) -> Result<Arc<dyn DeviceOps>> {
        let t = func.handle.downcast_ref::<Target>().ok_or(Error::InvalidArgument("not a pvrdma function handle"))?;
        let inner = probe_device(t.platform.clone(), &t.opts)?;
        Ok(Arc::new(Pvrdma { inner }))
    }
}

/// Registers the provider with the verbs core (once; again does nothing).
pub fn register() {
    ib_core::register_driver(Arc::new(PvrdmaDriver));
}

/// The function behind `platform`, as the core sees it: its PCI ID from the platform, and what
/// this provider needs to probe it.
pub fn function(platform: Arc<dyn Platform>, opts: ProbeOptions) -> PciFunction {
    let (vendor, device) = platform.pci_id();
    PciFunction { id: PciId { vendor, device }, location: platform.name(), handle: Arc::new(Target { platform, opts }) }
}

/// Registers the provider and adds the device behind `platform` to the core's list.
///
/// Errors: [`Error::NoDevice`] if the function is not a pvrdma; the probe's errors.
pub fn probe(platform: Arc<dyn Platform>, opts: ProbeOptions) -> Result<Device> {
    register();
    ib_core::add_device(&function(platform, opts))
}

/// A new in-process model configured by `cfg`, probed and added to the core's list: what the
/// tools and tests open when no hardware is named. Returns the device and the model's platform
/// (whose [`SimPlatform::device`] lets tests inspect or poke the model).
///
/// With `cfg.roce`, each of its addresses becomes a RoCE v2 GID of port 1 at indexes 1, 2, ...
/// in order (an IPv4 address IPv4-mapped, [`ib_core::gid_from_ip`]), as Linux's RoCE GID
/// management binds a netdev's addresses, and index 0 is the first of them too, as RoCE v2
/// (so programs that default to GID 0 connect; `docs/roce.md`). The
/// probe binds them ([`ProbeOptions::roce_v2_gids`], replaced by these), so its arm self-test
/// sends from one.
///
/// Errors: the model's RoCE port cannot open ([`SimPlatform::try_new`]); the probe's;
/// [`Error::InvalidArgument`] for more addresses than the GID table has entries after index 0;
/// the device's refusal of a bind.
#[cfg(feature = "model")]
pub fn open_sim(cfg: pvrdma_sim::SimConfig) -> Result<(Device, SimPlatform)> {
    open_sim_with(cfg, ProbeOptions::default())
}

/// [`open_sim`] with probe options.
#[cfg(feature = "model")]
pub fn open_sim_with(cfg: pvrdma_sim::SimConfig, opts: ProbeOptions) -> Result<(Device, SimPlatform)> {
    let mut opts = opts;
    if let Some(roce) = &cfg.roce {
        opts.roce_v2_gids = roce.addrs.iter().map(|&ip| ib_core::gid_from_ip(ip)).collect();
    }
    let sim = SimPlatform::try_new(cfg)?;
    let dev = probe(Arc::new(sim.clone()), opts)?;
    Ok((dev, sim))
}

/// The pvrdma device behind a core device, if it is one.
pub fn pvrdma(dev: &Device) -> Option<&Pvrdma> {
    dev.provider::<Pvrdma>()
}
