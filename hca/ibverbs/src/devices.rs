//! The device list (`ibv_get_device_list`, `ibv_free_device_list`, `ibv_get_device_name`,
//! `ibv_get_device_guid`, `ibv_get_device_index`): the devices [`crate::config`] names, probed
//! once per process on first use and kept until it exits (libibverbs too keeps its devices for
//! the process's life; a list only holds pointers to them).

use crate::abi::{ibv_device, IBV_NODE_CA, IBV_TRANSPORT_IB};
use crate::config::{self, DeviceSpec};
use crate::ffi::{guard, null, set_errno};
use hca::platform::vfio::VfioPlatform;
use std::any::Any;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Where `ibv_device::ibdev_path` points (`<IB_CLASS>/vmw_pvrdma0`; `ibv_read_sysfs_file`
/// answers for the files below it).
pub(crate) const IB_CLASS: &str = "/sys/class/infiniband";
/// Where `ibv_device::dev_path` points (`<VERBS_CLASS>/uverbs0`).
pub(crate) const VERBS_CLASS: &str = "/sys/class/infiniband_verbs";

/// One device of the process: the `ibv_device` programs hold (first, so its pointer is the
/// entry's), the core's device, and what keeps the device's backend alive.
#[repr(C)]
pub(crate) struct DeviceEntry {
    pub ibv: ibv_device,
    pub core: ib_core::Device,
    pub index: i32,
    _backend: Box<dyn Any + Send + Sync>,
}

/// The longest [`DeviceEntry::linger_roce`] waits.
const LINGER_MAX: Duration = Duration::from_secs(3);

impl DeviceEntry {
    /// On a model with a RoCE port: [`hca::platform::sim::SimPlatform::linger_roce`] for
    /// `quiet` (at most [`LINGER_MAX`]). Called before a connected RC QP is destroyed, so a
    /// peer whose last acknowledgement from it was lost is answered again. No-op on any other
    /// device.
    pub(crate) fn linger_roce(&self, quiet: Duration) {
        if let Some(sim) = self._backend.downcast_ref::<hca::platform::sim::SimPlatform>() {
            sim.linger_roce(quiet, LINGER_MAX);
        }
    }
}

// SAFETY: the raw pointers inside `ibv_device` are none (only arrays and NULL function slots);
// the rest is `Send + Sync`.
unsafe impl Send for DeviceEntry {}
// SAFETY: as above; `ibv` is never written after the entry is made.
unsafe impl Sync for DeviceEntry {}

static DEVICES: OnceLock<Vec<&'static DeviceEntry>> = OnceLock::new();

/// The process's devices, opened on first call. A device that cannot be opened is left out,
/// with one line on stderr saying why (as libibverbs warns of a provider it cannot load).
pub(crate) fn devices() -> &'static [&'static DeviceEntry] {
    DEVICES.get_or_init(open_all)
}

fn open_all() -> Vec<&'static DeviceEntry> {
    crate::ffi::watch_fork();
    let specs = match config::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("libibverbs: {e}");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (n, spec) in specs.iter().enumerate() {
        match open(spec) {
            Ok((core, backend)) => {
                let index = out.len() as i32;
                let e = DeviceEntry { ibv: describe(&core), core, index, _backend: backend };
                out.push(&*Box::leak(Box::new(e)));
            }
            Err(e) => eprintln!("libibverbs: cannot open device spec {} ({spec}): {e}", n + 1),
        }
    }
    out
}

fn open(spec: &DeviceSpec) -> Result<(ib_core::Device, Box<dyn Any + Send + Sync>), String> {
    match spec {
        DeviceSpec::Model(cfg) => {
            let (dev, sim) = hca::open_sim((**cfg).clone()).map_err(|e| e.to_string())?;
            Ok((dev, Box::new(sim)))
        }
        DeviceSpec::Vfio(bdf) => {
            let platform = Arc::new(VfioPlatform::open(bdf).map_err(|e| e.to_string())?);
            let dev = hca::probe(platform.clone(), hca::ProbeOptions::default()).map_err(|e| e.to_string())?;
            Ok((dev, Box::new(platform)))
        }
    }
}

/// The `ibv_device` of `dev`: its name, a CA on an IB transport (pvrdma, as Linux reports it),
/// and sysfs-shaped paths that [`crate::ibv_read_sysfs_file`] answers for.
fn describe(dev: &ib_core::Device) -> ibv_device {
    let name = dev.name();
    let mut d = ibv_device {
        _ops: crate::abi::_ibv_device_ops { _dummy1: None, _dummy2: None },
        node_type: IBV_NODE_CA,
        transport_type: IBV_TRANSPORT_IB,
        name: [0; 64],
        dev_name: [0; 64],
        dev_path: [0; 256],
        ibdev_path: [0; 256],
    };
    copy_str(&mut d.name, &name);
    copy_str(&mut d.dev_name, &format!("uverbs{}", name.trim_start_matches(|c: char| !c.is_ascii_digit())));
    copy_str(&mut d.dev_path, &format!("{}/{}", VERBS_CLASS, cstr(&d.dev_name)));
    copy_str(&mut d.ibdev_path, &format!("{}/{name}", IB_CLASS));
    d
}

/// Copies `s` into `dst` NUL-terminated (truncating).
pub(crate) fn copy_str(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len() - 1);
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
    dst[n] = 0;
}

/// The text of a NUL-terminated array.
pub(crate) fn cstr(a: &[u8]) -> &str {
    let n = a.iter().position(|&b| b == 0).unwrap_or(a.len());
    std::str::from_utf8(&a[..n]).unwrap_or("")
}

/// The entry behind an `ibv_device` this library handed out; `None` for NULL or a foreign one.
pub(crate) fn entry(dev: *const ibv_device) -> Option<&'static DeviceEntry> {
    devices().iter().copied().find(|e| std::ptr::eq(&e.ibv, dev))
}

/// `ibv_get_device_list(num_devices)`: a NULL-terminated array of the devices (free it with
/// `ibv_free_device_list`), and their count in `*num_devices` if not NULL. With no device the
/// list is empty and the count 0, as libibverbs answers.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut i32) -> *mut *mut ibv_device {
    guard(std::ptr::null_mut(), || {
        let devs = devices();
        let mut list: Vec<*mut ibv_device> = devs.iter().map(|e| &e.ibv as *const ibv_device as *mut _).collect();
        list.push(std::ptr::null_mut());
        if !num_devices.is_null() {
            // SAFETY: the caller passes NULL or a writable int.
            unsafe { *num_devices = devs.len() as i32 };
        }
        Box::into_raw(list.into_boxed_slice()).cast::<*mut ibv_device>()
    })
}

/// `ibv_free_device_list(list)`: frees a list `ibv_get_device_list` returned (not the devices).
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard((), || {
        if list.is_null() {
            return;
        }
        let mut n = 0;
        // SAFETY: `list` came from `ibv_get_device_list`: NULL-terminated, boxed slice of n+1.
        while !unsafe { *list.add(n) }.is_null() {
            n += 1;
        }
        // SAFETY: as above; the slice is rebuilt with its original length and freed once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
    })
}

/// `ibv_get_device_name(device)`: its name, or NULL with `EINVAL` for a device not of this
/// library.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const libc::c_char {
    guard(std::ptr::null(), || match entry(device) {
        Some(e) => e.ibv.name.as_ptr().cast(),
        None => null::<libc::c_char>(libc::EINVAL),
    })
}

/// `ibv_get_device_guid(device)`: the node GUID, big-endian (`__be64`); 0 for a device not of
/// this library.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    guard(0, || match entry(device) {
        Some(e) => e.core.query_device().node_guid.to_be(),
        None => {
            set_errno(libc::EINVAL);
            0
        }
    })
}

/// `ibv_get_device_index(device)`: the device's index (its order in the list), -1 for a device
/// not of this library.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> i32 {
    guard(-1, || entry(device).map_or(-1, |e| e.index))
}

/// Test hook: the model behind `device` (to forge CQEs and events through it), `None` for a
/// device that is not a model or not of this library.
#[doc(hidden)]
pub fn test_model(device: *const ibv_device) -> Option<hca::platform::sim::SimPlatform> {
    entry(device).and_then(|e| e._backend.downcast_ref::<hca::platform::sim::SimPlatform>()).cloned()
}

/// Test hook: the verbs core's device behind `device` (to change its GID table as the kernel's
/// GID cache would), `None` for a device not of this library.
#[doc(hidden)]
pub fn test_device(device: *const ibv_device) -> Option<&'static ib_core::Device> {
    entry(device).map(|e| &e.core)
}
