//! Device, port, GID and P_Key queries, converted field by field from the core's attributes
//! (which keep libibverbs's shapes and numbers) — so `ibv_devinfo` over this library prints what
//! `hca devinfo` prints.

use crate::abi::{
    ibv_context, ibv_device_attr, ibv_device_attr_ex, ibv_gid, ibv_gid_entry, ibv_port_attr, ibv_query_device_ex_input,
    COMPAT_PORT_ATTR_LEN, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2,
};
use crate::context::{context, Context};
use crate::devices::copy_str;
use crate::ffi::{errno_of, fail, guard, minus_one, why};
use ib_core::{DeviceAttr, Error, GidType, Mtu, PortAttr};
use memoffset::offset_of;
use std::mem::size_of;

fn clamp(v: u32) -> i32 {
    v.min(i32::MAX as u32) as i32
}

/// `ibv_device_attr` of the core's attributes (GUIDs big-endian, as the header has them).
pub(crate) fn device_attr(ctx: &Context) -> ibv_device_attr {
    let a: DeviceAttr = ctx.dev.core.query_device();
    let mut fw_ver = [0u8; 64];
    copy_str(&mut fw_ver, &ctx.dev.core.fw_ver());
    ibv_device_attr {
        fw_ver,
        node_guid: a.node_guid.to_be(),
        sys_image_guid: a.sys_image_guid.to_be(),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: clamp(a.max_qp),
        max_qp_wr: clamp(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        max_sge: clamp(a.max_sge),
        max_sge_rd: clamp(a.max_sge_rd),
        max_cq: clamp(a.max_cq),
        max_cqe: clamp(a.max_cqe),
        max_mr: clamp(a.max_mr),
        max_pd: clamp(a.max_pd),
        max_qp_rd_atom: clamp(a.max_qp_rd_atom),
        max_ee_rd_atom: clamp(a.max_ee_rd_atom),
        max_res_rd_atom: clamp(a.max_res_rd_atom),
        max_qp_init_rd_atom: clamp(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: clamp(a.max_ee_init_rd_atom),
        atomic_cap: a.atomic_cap as u32,
        max_ee: clamp(a.max_ee),
        max_rdd: clamp(a.max_rdd),
        max_mw: clamp(a.max_mw),
        max_raw_ipv6_qp: clamp(a.max_raw_ipv6_qp),
        max_raw_ethy_qp: clamp(a.max_raw_ethy_qp),
        max_mcast_grp: clamp(a.max_mcast_grp),
        max_mcast_qp_attach: clamp(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: clamp(a.max_total_mcast_qp_attach),
        max_ah: clamp(a.max_ah),
        max_fmr: clamp(a.max_fmr),
        max_map_per_fmr: clamp(a.max_map_per_fmr),
        max_srq: clamp(a.max_srq),
        max_srq_wr: clamp(a.max_srq_wr),
        max_srq_sge: clamp(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    }
}

/// `ibv_query_device(context, device_attr)`: 0, or `EINVAL` for NULL arguments.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the caller passes an open context of this library (or NULL).
        let Some(c) = (unsafe { context(ctx) }) else { return fail(libc::EINVAL) };
        if attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `attr` is the caller's writable `ibv_device_attr`.
        unsafe { attr.write(device_attr(c)) };
        0
    })
}

/// `verbs_context.query_device_ex` (the header's inline `ibv_query_device_ex`): zeroes the
/// caller's `attr_size` bytes and fills `orig_attr` and `phys_port_cnt_ex`; pvrdma has none of
/// the extended capabilities. `EINVAL` for a nonzero `input->comp_mask` or an `attr_size`
/// smaller than `ibv_device_attr`, as libibverbs's providers answer.
pub(crate) unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the header passes the context it was called with.
        let Some(c) = (unsafe { context(ctx) }) else { return fail(libc::EINVAL) };
        if attr.is_null()
            || attr_size < size_of::<ibv_device_attr>()
            // SAFETY: `input` is NULL or the caller's readable input.
            || unsafe { input.as_ref() }.is_some_and(|i| i.comp_mask != 0)
        {
            return fail(libc::EINVAL);
        }
        let mut ex: ibv_device_attr_ex = ibv_device_attr_ex {
            orig_attr: device_attr(c),
            comp_mask: 0,
            odp_caps: [0; 3],
            completion_timestamp_mask: 0,
            hca_core_clock: 0,
            device_cap_flags_ex: 0,
            caps: [0; 13],
            xrc_odp_caps: 0,
            phys_port_cnt_ex: 0,
        };
        ex.phys_port_cnt_ex = u32::from(ex.orig_attr.phys_port_cnt);
        ex.device_cap_flags_ex = u64::from(ex.orig_attr.device_cap_flags);
        let n = attr_size.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's buffer holds `attr_size` bytes; `n` is no more than that or ours.
        unsafe {
            std::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
            std::ptr::copy_nonoverlapping((&ex as *const ibv_device_attr_ex).cast::<u8>(), attr.cast::<u8>(), n);
        }
        0
    })
}

/// `ibv_port_attr` of the core's attributes (MTUs as `enum ibv_mtu`).
fn port_attr(p: &PortAttr) -> ibv_port_attr {
    let mtu = |b: u32| Mtu::from_bytes(b).map_or(0, |m| m.0);
    ibv_port_attr {
        state: p.state.raw(),
        max_mtu: mtu(p.max_mtu),
        active_mtu: mtu(p.active_mtu),
        gid_tbl_len: clamp(p.gid_tbl_len),
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: p.init_type_reply,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: p.link_layer as u8,
        flags: 0,
        port_cap_flags2: 0,
    }
}

/// Writes the first `len` bytes of port `port`'s attributes at `out`.
///
/// # Safety
/// `out` is writable for `len` bytes.
unsafe fn write_port(ctx: *mut ibv_context, port: u8, out: *mut u8, len: usize) -> i32 {
    // SAFETY: the caller passes an open context of this library (or NULL).
    let Some(c) = (unsafe { context(ctx) }) else { return fail(libc::EINVAL) };
    if out.is_null() {
        return fail(libc::EINVAL);
    }
    let p = match c.dev.core.query_port(port) {
        Ok(p) => port_attr(&p),
        Err(e) => return errno_of(&e),
    };
    // SAFETY: `out` holds `len` bytes (the caller's promise); we copy at most our struct's size.
    unsafe {
        std::ptr::write_bytes(out, 0, len);
        std::ptr::copy_nonoverlapping(
            (&p as *const ibv_port_attr).cast::<u8>(),
            out,
            len.min(size_of::<ibv_port_attr>()),
        );
    }
    0
}

/// `ibv_query_port(context, port_num, port_attr)`, the exported (compat) entry point: fills the
/// `struct _compat_ibv_port_attr` part (up to `link_layer`). 0, or `EINVAL` for a port outside
/// 1..=phys_port_cnt or NULL arguments. (The header's inline `ibv_query_port` reaches
/// `verbs_context.query_port` instead.)
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> i32 {
    // SAFETY: `attr` is the caller's compat port attribute struct.
    guard(libc::EIO, || unsafe { write_port(ctx, port, attr.cast(), COMPAT_PORT_ATTR_LEN) })
}

/// `verbs_context.query_port`: fills `port_attr_len` bytes of an `ibv_port_attr` (the caller's
/// size: older programs pass a shorter struct). 0 or errno as [`ibv_query_port`].
pub(crate) unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> i32 {
    // SAFETY: the header passes its caller's struct and its size.
    guard(libc::EIO, || unsafe { write_port(ctx, port, attr.cast(), len) })
}

/// The GID entry at `index` of `port`, as Linux's `rdma_get_gid_attr` finds it: `Err(ENODATA)`
/// for an empty entry ([`Error::NoData`]), `Err(EINVAL)` for a port the device lacks or an index
/// beyond the table.
fn gid_entry(c: &Context, port: u8, index: u32) -> Result<ibv_gid_entry, i32> {
    let gid = c.dev.core.query_gid(port, index).map_err(|e| why(&e))?;
    if gid == [0; 16] {
        return Err(Error::NoData("empty GID entry").errno());
    }
    let gid_type = match c.dev.core.query_gid_type(port, index).map_err(|e| why(&e))? {
        GidType::RoceV1 => IBV_GID_TYPE_ROCE_V1,
        GidType::RoceV2 => IBV_GID_TYPE_ROCE_V2,
    };
    Ok(ibv_gid_entry {
        gid: ibv_gid { raw: gid },
        gid_index: index,
        port_num: u32::from(port),
        gid_type,
        ndev_ifindex: 0,
    })
}

/// The most bytes one ioctl attribute carries (`struct ib_uverbs_attr`'s 16-bit `len`): a larger
/// output buffer is refused by libibverbs 44 before the kernel sees it (`fill_attr_out` marks a
/// buffer error, `execute_ioctl` answers `EINVAL`).
const IOCTL_ATTR_MAX: usize = u16::MAX as usize;

/// Writes `e` as an entry of `size` bytes at `at`: its first `min(size, 32)` bytes, zeros after,
/// as Linux's `copy_gid_entries_to_user` and `uverbs_copy_to_struct_or_zero` write an entry of
/// another size.
///
/// # Safety
/// `at` is writable for `size` bytes.
unsafe fn write_entry(at: *mut u8, size: usize, e: &ibv_gid_entry) {
    let n = size.min(size_of::<ibv_gid_entry>());
    // SAFETY: the caller's promise; `n` is no more than either side.
    unsafe {
        std::ptr::write_bytes(at, 0, size);
        std::ptr::copy_nonoverlapping((e as *const ibv_gid_entry).cast::<u8>(), at, n);
    }
}

/// `ibv_query_gid(context, port_num, index, gid)`: 0 with the GID (all zeros for an empty entry,
/// as libibverbs keeps), -1 with errno otherwise (`EINVAL`: bad port, index or NULL).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(ctx: *mut ibv_context, port: u8, index: i32, gid: *mut ibv_gid) -> i32 {
    guard(-1, || {
        // SAFETY: the caller passes an open context of this library (or NULL).
        let Some(c) = (unsafe { context(ctx) }) else { return minus_one(libc::EINVAL) };
        if gid.is_null() || index < 0 {
            return minus_one(libc::EINVAL);
        }
        let raw = match gid_entry(c, port, index as u32) {
            Ok(e) => e.gid,
            Err(libc::ENODATA) => ibv_gid::default(),
            Err(e) => return minus_one(e),
        };
        // SAFETY: `gid` is the caller's writable GID.
        unsafe { gid.write(raw) };
        0
    })
}

/// `ibv_query_gid_type(context, port_num, index, type)` (`IBVERBS_PRIVATE_34`): writes
/// `enum ibv_gid_type_sysfs` (0: IB/RoCE v1, also for an empty entry, as libibverbs; 1: RoCE v2).
/// 0, or -1 with errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(ctx: *mut ibv_context, port: u8, index: u32, ty: *mut u32) -> i32 {
    guard(-1, || {
        // SAFETY: the caller passes an open context of this library (or NULL).
        let Some(c) = (unsafe { context(ctx) }) else { return minus_one(libc::EINVAL) };
        if ty.is_null() {
            return minus_one(libc::EINVAL);
        }
        let v = match gid_entry(c, port, index) {
            Ok(e) => u32::from(e.gid_type == IBV_GID_TYPE_ROCE_V2),
            Err(libc::ENODATA) => 0,
            Err(e) => return minus_one(e),
        };
        // SAFETY: `ty` is the caller's writable enum.
        unsafe { ty.write(v) };
        0
    })
}

/// `_ibv_query_gid_ex(context, port_num, gid_index, entry, flags, entry_size)` (the header's
/// `ibv_query_gid_ex`): 0 and the entry, as libibverbs 44 answers through Linux's
/// `UVERBS_METHOD_QUERY_GID_ENTRY`: `EINVAL` for nonzero `flags`, an `entry_size` below
/// `struct ibv_gid_entry` (or beyond an ioctl attribute), a bad port or an index beyond the
/// table; `ENODATA` for an empty entry. A larger `entry_size` gets the entry and zeros after it.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the caller passes an open context of this library (or NULL).
        let Some(c) = (unsafe { context(ctx) }) else { return fail(libc::EINVAL) };
        let size_ok = (size_of::<ibv_gid_entry>()..=IOCTL_ATTR_MAX).contains(&entry_size);
        if entry.is_null() || flags != 0 || !size_ok || port > u32::from(u8::MAX) {
            return fail(libc::EINVAL);
        }
        match gid_entry(c, port as u8, index) {
            Ok(e) => {
                // SAFETY: `entry` is the caller's writable buffer of `entry_size` bytes.
                unsafe { write_entry(entry.cast(), entry_size, &e) };
                0
            }
            Err(e) => fail(e),
        }
    })
}

/// `_ibv_query_gid_table(context, entries, max_entries, flags, entry_size)` (the header's
/// `ibv_query_gid_table`): the valid entries of every port in `entries` (each `entry_size`
/// bytes: the entry's first bytes for a smaller size, zeros after it for a larger one) and their
/// count, or a negative errno, as libibverbs 44 answers through Linux's
/// `UVERBS_METHOD_QUERY_GID_TABLE` (the path of every kernel since 5.12): `-EINVAL` for an array
/// larger than an ioctl attribute (`entry_size * max_entries` above 65535 bytes), nonzero
/// `flags`, an `entry_size` of 0, a `max_entries` of 0, or fewer entries than valid GIDs
/// (`rdma_query_gid_table`); `-EFAULT` for a NULL array (the kernel's `copy_to_user` fails).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EIO as isize), || {
        // SAFETY: the caller passes an open context of this library (or NULL).
        let Some(c) = (unsafe { context(ctx) }) else { return -(libc::EINVAL as isize) };
        let len = entry_size.saturating_mul(max_entries);
        if len > IOCTL_ATTR_MAX || flags != 0 || entry_size == 0 || max_entries == 0 {
            return -(libc::EINVAL as isize);
        }
        let valid = all_gids(c);
        if valid.len() > max_entries {
            return -(libc::EINVAL as isize);
        }
        if entries.is_null() {
            return -(libc::EFAULT as isize);
        }
        for (i, e) in valid.iter().enumerate() {
            // SAFETY: the caller's array holds `max_entries` entries of `entry_size` bytes.
            unsafe { write_entry(entries.cast::<u8>().add(i * entry_size), entry_size, e) };
        }
        valid.len() as isize
    })
}

fn all_gids(c: &Context) -> Vec<ibv_gid_entry> {
    let ports = c.dev.core.query_device().phys_port_cnt;
    let mut out = Vec::new();
    for port in 1..=ports {
        let len = c.dev.core.query_port(port).map_or(0, |p| p.gid_tbl_len);
        out.extend((0..len).filter_map(|i| gid_entry(c, port, i).ok()));
    }
    out
}

/// `ibv_query_pkey(context, port_num, index, pkey)`: 0 and the P_Key (big-endian, `__be16`), or
/// -1 with errno. libibverbs 44 reads the P_Key from sysfs (`ports/<port>/pkeys/<index>`), so a
/// port the device lacks or an index outside the table (a negative one included) names no file:
/// `ENOENT`, as `open` answers. `EINVAL` for NULL arguments.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(ctx: *mut ibv_context, port: u8, index: i32, pkey: *mut u16) -> i32 {
    guard(-1, || {
        // SAFETY: the caller passes an open context of this library (or NULL).
        let Some(c) = (unsafe { context(ctx) }) else { return minus_one(libc::EINVAL) };
        if pkey.is_null() {
            return minus_one(libc::EINVAL);
        }
        let Ok(len) = c.dev.core.query_port(port).map(|p| p.pkey_tbl_len) else { return minus_one(libc::ENOENT) };
        let Some(index) = u16::try_from(index).ok().filter(|&i| i < len) else { return minus_one(libc::ENOENT) };
        match c.dev.core.query_pkey(port, index) {
            // SAFETY: `pkey` is the caller's writable `__be16`.
            Ok(v) => unsafe { pkey.write(v.to_be()) },
            Err(e) => return minus_one(why(&e)),
        }
        0
    })
}

/// `ibv_get_pkey_index(context, port_num, pkey)` (`pkey` big-endian): the index holding that
/// P_Key, or -1 with errno `ENOENT` when no entry holds it or the port does not exist, as
/// libibverbs 44 answers: it reads the entries one by one until `ibv_query_pkey` fails.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> i32 {
    guard(-1, || {
        // SAFETY: the caller passes an open context of this library (or NULL).
        let Some(c) = (unsafe { context(ctx) }) else { return minus_one(libc::EINVAL) };
        let Ok(len) = c.dev.core.query_port(port).map(|p| p.pkey_tbl_len) else { return minus_one(libc::ENOENT) };
        let want = u16::from_be(pkey);
        match (0..len).find(|&i| c.dev.core.query_pkey(port, i).is_ok_and(|v| v == want)) {
            Some(i) => i32::from(i),
            None => minus_one(libc::ENOENT),
        }
    })
}

const _: () = assert!(offset_of!(ibv_device_attr_ex, orig_attr) == 0);
