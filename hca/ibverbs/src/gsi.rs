//! The GSI of a device for this stack's librdmacm (`hca_gsi_*`, version node `HCA_PRIVATE_1`):
//! the verbs core's GSI agent ([`ib_core::gsi::GsiAgent`]) of a port, shared by every opener in
//! the process. libibverbs has no such verbs (a program reaches QP1 through the kernel's MAD
//! layer, `ib_umad`); these stand in for that path for a device of this library.
//!
//! A `struct hca_gsi *` is checked against the handles this library gave out before it is
//! used: NULL, a foreign pointer or one already closed fails with `EINVAL` (`hca_gsi_close`
//! ignores it), never reaching memory.

use crate::abi::ibv_context;
use crate::context::context;
use crate::devices::entry;
use crate::ffi::{guard, set_errno, why};
use ib_core::gsi::{GsiAddr, GsiAgent, MAD_SIZE};
use ib_core::GidType;
use memoffset::offset_of;
use parking_lot::Mutex;
use std::mem::size_of;

/// `struct hca_gsi_addr`: where a MAD goes to or came from (36 bytes, no padding).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hca_gsi_addr {
    /// The remote GID (send) or the source GID from the GRH (receive).
    pub gid: [u8; 16],
    /// The remote QP (1) or the source QP from the DETH.
    pub qpn: u32,
    /// The Q_Key to send with (0x80010000) or the one received.
    pub qkey: u32,
    /// The GRH's flow label.
    pub flow_label: u32,
    /// The P_Key index (0).
    pub pkey_index: u16,
    /// The local GID to send from, or the local GID the MAD arrived at.
    pub sgid_index: u8,
    /// The GRH's hop limit (IP TTL).
    pub hop_limit: u8,
    /// The GRH's traffic class.
    pub traffic_class: u8,
    /// Zero.
    pub reserved: [u8; 3],
}

const _: () = assert!(size_of::<hca_gsi_addr>() == 36 && offset_of!(hca_gsi_addr, qpn) == 16);
const _: () = assert!(offset_of!(hca_gsi_addr, qkey) == 20 && offset_of!(hca_gsi_addr, flow_label) == 24);
const _: () = assert!(offset_of!(hca_gsi_addr, pkey_index) == 28 && offset_of!(hca_gsi_addr, sgid_index) == 30);
const _: () = assert!(offset_of!(hca_gsi_addr, hop_limit) == 31 && offset_of!(hca_gsi_addr, traffic_class) == 32);
const _: () = assert!(offset_of!(hca_gsi_addr, reserved) == 33);

impl From<&hca_gsi_addr> for GsiAddr {
    fn from(a: &hca_gsi_addr) -> Self {
        GsiAddr {
            gid: a.gid,
            qpn: a.qpn,
            qkey: a.qkey,
            flow_label: a.flow_label,
            pkey_index: a.pkey_index,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        }
    }
}

impl From<&GsiAddr> for hca_gsi_addr {
    fn from(a: &GsiAddr) -> Self {
        hca_gsi_addr {
            gid: a.gid,
            qpn: a.qpn,
            qkey: a.qkey,
            flow_label: a.flow_label,
            pkey_index: a.pkey_index,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
            reserved: [0; 3],
        }
    }
}

/// `struct hca_gsi`: one opener's handle to a port's agent (opaque to C).
#[allow(non_camel_case_types)]
pub struct hca_gsi {
    agent: GsiAgent,
}

/// The handles given out and not closed, by address.
static HANDLES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Runs `f` on the agent behind `gsi` if it is a handle of this library still open; `EINVAL`
/// (and `failed`) otherwise. The table's lock is held across `f`, so a concurrent close waits.
fn with_handle<R>(gsi: *mut hca_gsi, failed: R, f: impl FnOnce(&GsiAgent) -> R) -> R {
    let handles = HANDLES.lock();
    if gsi.is_null() || !handles.contains(&(gsi as usize)) {
        set_errno(libc::EINVAL);
        return failed;
    }
    // SAFETY: `gsi` is in the table: a live box `hca_gsi_open` leaked, freed only by
    // `hca_gsi_close` under this lock.
    let agent = unsafe { &(*gsi).agent };
    f(agent)
}

/// `hca_gsi_open(ctx, port_num)`: the GSI QP (QP1) of `port_num` of ctx's device, shared by every
/// opener in the process. NULL with `errno` on failure: `EINVAL` for a NULL context or a port
/// the device lacks, `ENOSYS` for a context of another library's device, `ENODEV` for a port
/// without a RoCE v2 GID (no RoCE port), the core's errno otherwise.
#[no_mangle]
pub unsafe extern "C" fn hca_gsi_open(ctx: *mut ibv_context, port_num: u8) -> *mut hca_gsi {
    guard(std::ptr::null_mut(), || {
        if ctx.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes an open `ibv_context` (of this library or another): its first
        // field is the device it was opened on.
        let dev = unsafe { (*ctx).device };
        if entry(dev).is_none() {
            set_errno(libc::ENOSYS);
            return std::ptr::null_mut();
        }
        // SAFETY: its device is one of this library's, so the context is one of ours.
        let Some(c) = (unsafe { context(ctx) }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let device = &c.dev.core;
        let Ok(port) = device.query_port(port_num) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let roce_v2 = |i| device.query_gid_type(port_num, i).is_ok_and(|t| t == GidType::RoceV2);
        if !(0..port.gid_tbl_len).any(roce_v2) {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        }
        match GsiAgent::open(device, port_num) {
            Ok(agent) => {
                let p = Box::into_raw(Box::new(hca_gsi { agent }));
                HANDLES.lock().push(p as usize);
                p
            }
            Err(e) => {
                set_errno(why(&e));
                std::ptr::null_mut()
            }
        }
    })
}

/// `hca_gsi_get_fd(gsi)`: a fd that polls readable (`POLLIN`) while received MADs wait for
/// `hca_gsi_recv` (poll it; never read or close it). -1 with `EINVAL` for a bad handle.
#[no_mangle]
pub unsafe extern "C" fn hca_gsi_get_fd(gsi: *mut hca_gsi) -> i32 {
    guard(-1, || with_handle(gsi, -1, |a| a.fd()))
}

/// `hca_gsi_send(gsi, to, mad, len)`: sends one MAD (1 to 256 bytes) as a UD datagram to
/// `to->qpn` at `to->gid` with `to->qkey`, from local GID `to->sgid_index`. 0, or -1 with
/// `errno`: `EINVAL` for a bad handle, NULL `to` or `mad`, a length out of range, a P_Key index
/// other than 0 or an `sgid_index` naming no GID; `ENOMEM` while 64 sends are in flight (try
/// again once they complete: it never blocks); the core's errno otherwise.
#[no_mangle]
pub unsafe extern "C" fn hca_gsi_send(
    gsi: *mut hca_gsi,
    to: *const hca_gsi_addr,
    mad: *const libc::c_void,
    len: usize,
) -> i32 {
    guard(-1, || {
        with_handle(gsi, -1, |a| {
            if to.is_null() || mad.is_null() || len == 0 || len > MAD_SIZE {
                set_errno(libc::EINVAL);
                return -1;
            }
            // SAFETY: the caller passes a readable `hca_gsi_addr` and `len` readable bytes at `mad`.
            let (to, bytes) = unsafe { (&*to, std::slice::from_raw_parts(mad.cast::<u8>(), len)) };
            match a.send(&GsiAddr::from(to), bytes) {
                Ok(()) => 0,
                Err(e) => {
                    set_errno(why(&e));
                    -1
                }
            }
        })
    })
}

/// `hca_gsi_sends_in_flight(gsi)`: the sends of this port's GSI QP not yet completed (a
/// process about to exit waits for 0, so its last MADs leave), or -1 with `errno` `EINVAL` for
/// a bad handle, the core's errno otherwise. Never blocks.
#[no_mangle]
pub unsafe extern "C" fn hca_gsi_sends_in_flight(gsi: *mut hca_gsi) -> i32 {
    guard(-1, || {
        with_handle(gsi, -1, |a| match a.sends_in_flight() {
            Ok(n) => i32::try_from(n).unwrap_or(i32::MAX),
            Err(e) => {
                set_errno(why(&e));
                -1
            }
        })
    })
}

/// `hca_gsi_recv(gsi, from, buf, len)`: takes one received MAD: its length (the payload after
/// the GRH; at most `len` bytes copied into `buf`), where it came from in `*from` (if not NULL).
/// -1 with `errno` `EAGAIN` when none waits (it never blocks), `EINVAL` for a bad handle or a
/// NULL `buf` with a nonzero `len`.
#[no_mangle]
pub unsafe extern "C" fn hca_gsi_recv(
    gsi: *mut hca_gsi,
    from: *mut hca_gsi_addr,
    buf: *mut libc::c_void,
    len: usize,
) -> isize {
    guard(-1, || {
        with_handle(gsi, -1, |a| {
            if buf.is_null() && len != 0 {
                set_errno(libc::EINVAL);
                return -1;
            }
            let mut mad = [0u8; MAD_SIZE];
            match a.recv(&mut mad) {
                Ok((addr, n)) => {
                    let copy = n.min(len);
                    // SAFETY: the caller passes `len` writable bytes at `buf` (checked non-NULL
                    // when `len` is not 0) and NULL or a writable `hca_gsi_addr` at `from`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(mad.as_ptr(), buf.cast::<u8>(), copy);
                        if !from.is_null() {
                            from.write(hca_gsi_addr::from(&addr));
                        }
                    }
                    n as isize
                }
                Err(e) => {
                    set_errno(why(&e));
                    -1
                }
            }
        })
    })
}

/// `hca_gsi_close(gsi)`: closes this opener's handle; the port's GSI QP goes with the last one.
/// NULL, a foreign or an already closed handle is ignored.
#[no_mangle]
pub unsafe extern "C" fn hca_gsi_close(gsi: *mut hca_gsi) {
    guard((), || {
        let mut handles = HANDLES.lock();
        let Some(at) = handles.iter().position(|&h| h == gsi as usize) else { return };
        handles.swap_remove(at);
        drop(handles);
        // SAFETY: it was in the table: a box `hca_gsi_open` leaked, removed from the table just
        // now, so freed once.
        drop(unsafe { Box::from_raw(gsi) });
    })
}
