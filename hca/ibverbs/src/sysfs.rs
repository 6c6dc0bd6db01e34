//! `ibv_get_sysfs_path` and `ibv_read_sysfs_file`. Our devices have no sysfs directory, so a
//! read under a device's `ibdev_path` (`/sys/class/infiniband/vmw_pvrdma0/...`) is answered
//! from the device, in the text Linux's sysfs gives (`ibv_devinfo` reads `board_id` this way);
//! any other path reads the real file.

use crate::devices::{cstr, devices, DeviceEntry, IB_CLASS};
use crate::ffi::{guard_pure, minus_one, why};
use ib_core::{GidType, LinkLayer};
use libc::{c_char, c_int};
use std::ffi::{CStr, CString};
use std::io::Read;
use std::sync::OnceLock;

/// `ibv_get_sysfs_path()`: where sysfs is mounted: `$SYSFS_PATH` without trailing slashes (at
/// most 256 bytes, and only when the process is not set-uid), else "/sys"; read once, as
/// libibverbs does.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    guard_pure(c"/sys".as_ptr(), || PATH.get_or_init(sysfs_path).as_ptr())
}

fn sysfs_path() -> CString {
    // SAFETY: getuid/geteuid only read the process's credentials.
    let setuid = unsafe { libc::getuid() != libc::geteuid() };
    let env = if setuid { None } else { std::env::var_os("SYSFS_PATH") };
    let Some(env) = env else { return c"/sys".into() };
    let mut bytes = std::os::unix::ffi::OsStringExt::into_vec(env);
    bytes.truncate(crate::abi::IBV_SYSFS_PATH_MAX);
    while bytes.last() == Some(&b'/') {
        bytes.pop();
    }
    CString::new(bytes).unwrap_or_else(|_| c"/sys".into())
}

/// `ibv_read_sysfs_file(dir, file, buf, size)`: reads `dir/file` into `buf` (at most `size`
/// bytes) and returns the length read, with a trailing newline replaced by NUL and not counted.
/// -1 with `errno` on failure: the open's or read's errno, `EINVAL` for NULL arguments, and -1
/// when the text fills `buf` with no room for its NUL (as libibverbs: it refuses to truncate).
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard_pure(-1, || {
        if dir.is_null() || file.is_null() || (buf.is_null() && size > 0) {
            return minus_one(libc::EINVAL);
        }
        // SAFETY: the caller passes NUL-terminated strings.
        let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = format!("{}/{}", dir.to_string_lossy(), file.to_string_lossy());
        let text = match read(&path, size) {
            Ok(t) => t,
            Err(e) => return minus_one(e),
        };
        if size == 0 {
            // `buf` may be NULL here, which no slice may be built on.
            return finish(&text, &mut []);
        }
        // SAFETY: the caller's `buf` holds `size` writable bytes (not NULL: checked above).
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        finish(&text, out)
    })
}

/// Up to `size` bytes of `path`: our devices' answer under their `ibdev_path`, else the file's.
fn read(path: &str, size: usize) -> Result<Vec<u8>, i32> {
    let mut text = match device_file(path) {
        Some(answer) => answer?.into_bytes(),
        None => {
            let mut v = Vec::new();
            let f = std::fs::File::open(path).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            f.take(size as u64).read_to_end(&mut v).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            v
        }
    };
    text.truncate(size);
    Ok(text)
}

/// Copies `text` (what `read(2)` would have returned) into `out` as libibverbs leaves it.
fn finish(text: &[u8], out: &mut [u8]) -> c_int {
    let mut len = text.len();
    out[..len].copy_from_slice(text);
    if len > 0 {
        if text[len - 1] == b'\n' {
            len -= 1;
            out[len] = 0;
        } else if len < out.len() {
            out[len] = 0;
        } else {
            return -1;
        }
    }
    len as c_int
}

/// `None` if `path` is not under one of our devices' `ibdev_path`; else the text Linux's file
/// would hold (with its newline), or the errno reading it would give (`ENOENT` for a file we do
/// not model).
fn device_file(path: &str) -> Option<Result<String, i32>> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    let class: Vec<&str> = IB_CLASS.split('/').filter(|p| !p.is_empty()).collect();
    if !parts.starts_with(&class) || parts.len() < class.len() + 2 {
        return None;
    }
    let name = parts[class.len()];
    let dev = devices().iter().find(|e| cstr(&e.ibv.name) == name)?;
    Some(answer(dev, &parts[class.len() + 1..]).map(|s| s + "\n"))
}

fn answer(dev: &DeviceEntry, file: &[&str]) -> Result<String, i32> {
    let attr = dev.core.query_device();
    match file {
        ["board_id"] => dev.core.board_id().ok_or(libc::ENOENT),
        ["fw_ver"] => Ok(dev.core.fw_ver()),
        ["node_type"] => Ok("1: CA".into()),
        ["node_guid"] => Ok(guid(attr.node_guid)),
        ["sys_image_guid"] => Ok(guid(attr.sys_image_guid)),
        ["node_desc"] => Ok(String::new()),
        ["ports", port, rest @ ..] => {
            let port: u8 = port.parse().map_err(|_| libc::ENOENT)?;
            if port == 0 || port > attr.phys_port_cnt {
                return Err(libc::ENOENT);
            }
            port_file(dev, port, rest)
        }
        _ => Err(libc::ENOENT),
    }
}

fn port_file(dev: &DeviceEntry, port: u8, file: &[&str]) -> Result<String, i32> {
    let attr = dev.core.query_port(port).map_err(|e| why(&e))?;
    let index = |i: &str| i.parse::<u32>().ok().filter(|&i| i < attr.gid_tbl_len).ok_or(libc::ENOENT);
    match file {
        ["link_layer"] => Ok(match attr.link_layer {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Unspecified => "Unknown",
        }
        .into()),
        ["state"] => Ok(format!("{}: {}", attr.state.raw(), state_name(attr.state.raw()))),
        ["lid"] => Ok(format!("0x{:x}", attr.lid)),
        // An entry not in use reads as the zero GID.
        ["gids", i] => Ok(gid_text(&dev.core.query_gid(port, index(i)?).unwrap_or([0; 16]))),
        // Linux fails EINVAL for an entry not in use.
        ["gid_attrs", "types", i] => match dev.core.query_gid_type(port, index(i)?) {
            Ok(GidType::RoceV1) => Ok("IB/RoCE v1".into()),
            Ok(GidType::RoceV2) => Ok("RoCE v2".into()),
            Err(_) => Err(libc::EINVAL),
        },
        // Our ports' GIDs belong to no netdev of this host (as an IB port's): ENODEV.
        ["gid_attrs", "ndevs", i] => index(i).and(Err(libc::ENODEV)),
        _ => Err(libc::ENOENT),
    }
}

/// sysfs's port state names (`ib_port_state` as `show_port_state` prints it).
fn state_name(state: u32) -> &'static str {
    ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"].get(state as usize).copied().unwrap_or("UNKNOWN")
}

/// A GUID as sysfs prints it: four groups of four hex digits.
fn guid(g: u64) -> String {
    let w: Vec<String> = (0..4).rev().map(|i| format!("{:04x}", (g >> (16 * i)) & 0xffff)).collect();
    w.join(":")
}

/// A GID as sysfs prints it: eight groups of four hex digits.
fn gid_text(g: &[u8; 16]) -> String {
    let w: Vec<String> = g.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect();
    w.join(":")
}
