//! Providers and the device list (libibverbs's `ibv_get_device_list` / `ibv_open_device`, Linux's
//! `ib_register_device`): a provider registers its [`Driver`]; a discovered function is added with
//! [`add_device`], which finds the provider by what the function is (its PCI ID), probes it and
//! names it `<provider><N>`; [`open_device`] finds a live device by name.

use crate::attr::Gid;
use crate::context::{Context, ContextInner};
use crate::device::DeviceInner;
use crate::device_attr::{DeviceAttr, GidType, PortAttr};
use crate::error::{Error, Result};
use crate::events::async_event::AsyncEventType;
use crate::provider::DeviceEventHandler;
use crate::provider::{Driver, PciFunction};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

static DRIVERS: Mutex<Vec<Arc<dyn Driver>>> = Mutex::new(Vec::new());
/// Each live device, and its kernel context while one exists. A device stays listed while any of
/// its contexts lives (a user context keeps it); its kernel context is made again when needed.
static DEVICES: Mutex<Vec<(Weak<DeviceInner>, Weak<ContextInner>)>> = Mutex::new(Vec::new());

/// Registers a provider (once per name; registering the same name again does nothing).
pub fn register_driver(driver: Arc<dyn Driver>) {
    let mut d = DRIVERS.lock();
    if !d.iter().any(|x| x.name() == driver.name()) {
        d.push(driver);
    }
}

/// Finds the provider for `func` by its PCI ID, probes it and adds the device to the list.
///
/// Errors: [`Error::NoDevice`] when no registered provider drives the function; the provider's
/// probe errors.
pub fn add_device(func: &PciFunction) -> Result<Device> {
    let driver = DRIVERS
        .lock()
        .iter()
        .find(|d| d.match_table().contains(&func.id))
        .cloned()
        .ok_or_else(|| Error::NoDevice(format!("no provider for {func:?}")))?;
    let ops = driver.probe(func)?;
    let device = Arc::new(DeviceInner::new(ops, driver.name()));
    let kernel = Context::new(device.clone(), None)?;
    let mut list = DEVICES.lock();
    list.retain(|(d, _)| d.strong_count() > 0);
    list.push((Arc::downgrade(&device), Arc::downgrade(&kernel.inner)));
    tracing::info!(name = %kernel.inner.device.name(), location = %func.location, "device added");
    Ok(Device { kernel })
}

/// One entry of [`device_list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's name (`vmw_pvrdma0`).
    pub name: String,
    /// Its node GUID.
    pub node_guid: u64,
    /// Where it is.
    pub location: String,
}

/// The live devices, by name (`ibv_get_device_list`).
pub fn device_list() -> Vec<DeviceInfo> {
    let devices: Vec<Arc<DeviceInner>> = DEVICES.lock().iter().filter_map(|(d, _)| d.upgrade()).collect();
    let mut out: Vec<DeviceInfo> = devices.iter().map(|d| info(d)).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn info(d: &DeviceInner) -> DeviceInfo {
    DeviceInfo { name: d.name(), node_guid: d.ops.query_device().node_guid, location: d.ops.location() }
}

/// Opens the live device named `name` (`ibv_open_device` of the entry with that name).
///
/// Errors: [`Error::NoDevice`].
pub fn open_device(name: &str) -> Result<Device> {
    let mut list = DEVICES.lock();
    for (device, kernel) in list.iter_mut() {
        let Some(device) = device.upgrade().filter(|d| d.name() == name) else { continue };
        if let Some(inner) = kernel.upgrade() {
            return Ok(Device { kernel: Context { inner } });
        }
        // Only user contexts keep the device: it gets a kernel context of its own again.
        let ctx = Context::new(device, None)?;
        *kernel = Arc::downgrade(&ctx.inner);
        return Ok(Device { kernel: ctx });
    }
    Err(Error::NoDevice(name.to_owned()))
}

/// A device. It is also its kernel context (as an `ib_device` is for kernel consumers):
/// `dev.alloc_pd()`, `dev.create_cq(..)` make kernel objects. Cheap to clone; the device is torn
/// down when the last handle and the last object of any of its contexts are gone.
#[derive(Clone)]
pub struct Device {
    kernel: Context,
}

impl std::ops::Deref for Device {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.kernel
    }
}

impl Device {
    fn dev(&self) -> &DeviceInner {
        &self.kernel.inner.device
    }

    /// The device's name (`vmw_pvrdma0`).
    pub fn name(&self) -> String {
        self.dev().name()
    }

    /// Where the device is (`"sim"`, `"vfio:…"`).
    pub fn location(&self) -> String {
        self.dev().ops.location()
    }

    /// This device's entry of [`device_list`].
    pub fn info(&self) -> DeviceInfo {
        info(self.dev())
    }

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> DeviceAttr {
        self.dev().ops.query_device()
    }

    /// `fw_ver` as the device's provider formats it (rdma-core: `ibv_device_attr.fw_ver`).
    pub fn fw_ver(&self) -> String {
        self.dev().ops.fw_ver_string()
    }

    /// Port attributes (`ibv_query_port`). Errors: [`Error::InvalidArgument`] for a port outside
    /// 1..=phys_port_cnt; provider errors.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.dev().live()?;
        self.dev().ops.query_port(port)
    }

    /// The GID at `index` of `port`'s table (`ibv_query_gid`).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        self.dev().ops.query_gid(port, index)
    }

    /// What the GID at `index` of `port`'s table is for (`ibv_query_gid_type`). Errors:
    /// [`Error::InvalidArgument`] for an unused entry or one beyond the table.
    pub fn query_gid_type(&self, port: u8, index: u32) -> Result<GidType> {
        self.dev().ops.query_gid_type(port, index)
    }

    /// Binds `gid` of type `ty` at `index` of `port`'s GID table, as Linux's GID cache does for
    /// each address of a RoCE port's netdev (`ib_cache_gid_add`, from `roce_gid_mgmt`); then every
    /// context of the device gets a `GidChange` event for the port, as `ib_cache` dispatches.
    /// [`Device::query_gid`] and [`Device::query_gid_type`] answer what was bound.
    ///
    /// Errors: [`Error::InvalidArgument`] for an unknown port or an index beyond the table (or
    /// one the provider keeps, e.g. pvrdma's index 0); [`Error::Unsupported`] for a type the
    /// device does not report; [`Error::DeviceFatal`]; the device's refusal.
    pub fn add_gid(&self, port: u8, index: u32, gid: Gid, ty: GidType) -> Result<()> {
        self.dev().live()?;
        self.dev().ops.add_gid(port, index, gid, ty)?;
        self.dev().events.port_event(port, AsyncEventType::GidChange);
        Ok(())
    }

    /// Empties entry `index` of `port`'s GID table (`ib_cache_gid_del`); then a `GidChange`
    /// event, as [`Device::add_gid`]. Errors: as [`Device::add_gid`]; deleting an entry that is
    /// already empty fails (pvrdma: the device's ENOENT, in [`Error::Device`]).
    pub fn del_gid(&self, port: u8, index: u32) -> Result<()> {
        self.dev().live()?;
        self.dev().ops.del_gid(port, index)?;
        self.dev().events.port_event(port, AsyncEventType::GidChange);
        Ok(())
    }

    /// The board ID the device's driver reports (Linux: sysfs `board_id`, which `ibv_devinfo`
    /// prints), if it has one.
    pub fn board_id(&self) -> Option<String> {
        self.dev().ops.board_id()
    }

    /// The P_Key at `index` of `port`'s table (`ibv_query_pkey`).
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        self.dev().live()?;
        self.dev().ops.query_pkey(port, index)
    }

    /// A user context of the device (`ibv_open_device` from user space: on pvrdma a UAR page of
    /// its own and CREATE_UC).
    pub fn alloc_ucontext(&self) -> Result<Context> {
        self.dev().live()?;
        let uctx = self.dev().ops.alloc_ucontext()?;
        Context::new(self.kernel.inner.device.clone(), Some(uctx))
    }

    /// The provider's device, if it is a `T` (its own counters and diagnostics).
    pub fn provider<T: 'static>(&self) -> Option<&T> {
        self.dev().ops.as_any().downcast_ref()
    }

    /// The kernel context.
    pub fn context(&self) -> &Context {
        &self.kernel
    }

    /// What tells this device from the others while a handle to it lives (the address of its
    /// shared state).
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.kernel.inner.device) as usize
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({} at {})", self.name(), self.location())
    }
}
