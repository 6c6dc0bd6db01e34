//! The devices, opened once per process through libibverbs as librdmacm's `ucma_init` does
//! (`ibv_get_device_list`, `ibv_open_device` of each, port 1), and what addressing needs of
//! each: its RoCE v2 addresses (GIDs 1.. of port 1, `ibv_query_gid_ex` type `ROCE_V2`), the port's
//! active MTU and the device's RDMA read limits. A device found in its catastrophic state
//! ([`newly_fatal`]) is removed: it holds no address any more, as a device Linux's CM has seen
//! go (`cma_process_remove` in `drivers/infiniband/core/cma.c`).

use crate::abi::*;
use crate::sys::*;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The port every device is used through (pvrdma devices have one).
pub const PORT: u8 = 1;

/// One opened device.
pub struct Device {
    pub ctx: *mut ibv_context,
    /// (GID index, address) of each RoCE v2 GID, in table order.
    pub addrs: Vec<(u8, IpAddr)>,
    /// `enum ibv_mtu` of the port.
    pub active_mtu: u32,
    /// `max_qp_rd_atom`, `max_qp_init_rd_atom` (librdmacm's `max_responder_resources`,
    /// `max_initiator_depth`).
    pub max_responder_resources: u8,
    pub max_initiator_depth: u8,
    pub guid: u64,
    /// Found fatal ([`newly_fatal`]): its ids had DEVICE_REMOVAL, and it holds no address.
    removed: AtomicBool,
}

impl Device {
    /// Whether the device was found fatal and removed.
    pub fn removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }
}

// SAFETY: the context is libibverbs's, usable from any thread; this library never frees it.
unsafe impl Send for Device {}
// SAFETY: as above: shared reads of the pointer only.
unsafe impl Sync for Device {}

/// Every device of the process, opened on first use; empty when libibverbs has none.
pub fn all() -> &'static [Device] {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    DEVICES.get_or_init(open_all)
}

fn open_all() -> Vec<Device> {
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer; the list is NULL or NULL-terminated with `n` entries.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `i < n`, an entry of the list.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is a device of the list, alive until the list is freed.
        let ctx = unsafe { ibv_open_device(dev) };
        if ctx.is_null() {
            continue;
        }
        // SAFETY: as above.
        let guid = unsafe { ibv_get_device_guid(dev) };
        out.push(describe(ctx, guid));
    }
    // SAFETY: the list from ibv_get_device_list; the contexts stay open.
    unsafe { ibv_free_device_list(list) };
    out
}

fn describe(ctx: *mut ibv_context, guid: u64) -> Device {
    let mut port = ibv_port_attr::default();
    // SAFETY: `ctx` is open; `port` is a whole ibv_port_attr.
    let port_ok = unsafe { ibv_query_port(ctx, PORT, &mut port) } == 0;
    // SAFETY: ibv_device_attr is integers and arrays of them: all zeroes is one of its values.
    let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: as above for the device attributes.
    let dev_ok = unsafe { ibv_query_device(ctx, &mut attr) } == 0;
    let clamp = |v: i32| v.clamp(0, 255) as u8;
    let gids = if port_ok { port.gid_tbl_len.clamp(0, 256) } else { 0 };
    let addrs = (0..gids).filter_map(|i| roce_v2_addr(ctx, i as u32)).collect();
    Device {
        ctx,
        addrs,
        active_mtu: if port_ok { port.active_mtu } else { 3 },
        max_responder_resources: if dev_ok { clamp(attr.max_qp_rd_atom) } else { 0 },
        max_initiator_depth: if dev_ok { clamp(attr.max_qp_init_rd_atom) } else { 0 },
        guid,
        removed: AtomicBool::new(false),
    }
}

/// GID `index` of port 1 as an IP address, when it is a RoCE v2 GID.
fn roce_v2_addr(ctx: *mut ibv_context, index: u32) -> Option<(u8, IpAddr)> {
    let mut entry = ibv_gid_entry::default();
    let size = std::mem::size_of::<ibv_gid_entry>();
    // SAFETY: `ctx` is open; `entry` is a whole ibv_gid_entry of the size passed.
    let r = unsafe { _ibv_query_gid_ex(ctx, u32::from(PORT), index, &mut entry, 0, size) };
    if r != 0 || entry.gid_type != IBV_GID_TYPE_ROCE_V2 || entry.gid.raw == [0; 16] {
        return None;
    }
    let v6 = Ipv6Addr::from(entry.gid.raw);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    Some((u8::try_from(index).ok()?, ip))
}

/// The device and GID index holding address `ip` (a removed device holds none).
pub fn holding(ip: IpAddr) -> Option<(usize, u8)> {
    let mut live = all().iter().enumerate().filter(|(_, dev)| !dev.removed());
    live.find_map(|(d, dev)| dev.addrs.iter().find(|(_, a)| *a == ip).map(|(g, _)| (d, *g)))
}

/// Whether `ip` is a `roce=` address of any device, a removed one's included.
pub fn named(ip: IpAddr) -> bool {
    all().iter().any(|dev| dev.addrs.iter().any(|(_, a)| *a == ip))
}

/// The devices that went fatal since the last call (our libibverbs's `hca_device_fatal`, which
/// takes none of the program's async events), each marked removed and named once.
pub fn newly_fatal() -> Vec<usize> {
    let mut out = Vec::new();
    for (d, dev) in all().iter().enumerate().filter(|(_, dev)| !dev.removed()) {
        // SAFETY: an open context of ours; the call only reads the device's state.
        if unsafe { hca_device_fatal(dev.ctx) } == 1 && !dev.removed.swap(true, Ordering::AcqRel) {
            out.push(d);
        }
    }
    out
}

/// The device's PD that ids get when they reach it (librdmacm's `ucma_get_device` allocates one
/// per device on first use and gives it to every id there), NULL if it cannot be allocated.
pub fn pd(dev: usize) -> *mut ibv_pd {
    static PDS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    let Some(d) = all().get(dev) else { return std::ptr::null_mut() };
    let mut pds = PDS.lock().unwrap_or_else(|p| p.into_inner());
    if pds.len() < all().len() {
        pds.resize(all().len(), 0);
    }
    if pds[dev] == 0 {
        // SAFETY: an open context of ours; the PD lives as long as the process.
        pds[dev] = unsafe { ibv_alloc_pd(d.ctx) } as usize;
    }
    pds[dev] as *mut ibv_pd
}
