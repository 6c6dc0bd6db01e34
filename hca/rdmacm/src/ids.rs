//! `rdma_create_id` (with a channel, or NULL: librdmacm's sync ids, which wait for each call's
//! event), `rdma_destroy_id` (which waits for the id's unacknowledged events, as librdmacm),
//! `rdma_migrate_id`, `rdma_set_option`, `rdma_get_devices`/`rdma_free_devices`.

use crate::abi::*;
use crate::channel::Channel;
use crate::devices;
use crate::events::ack;
use crate::ffi::{err, guard, ret};
use crate::world::{cma, lock, IdState, World};
use std::ptr::null_mut;
use std::time::Instant;

/// Makes an id; a NULL channel makes a sync id with a channel of its own.
pub fn create(
    channel: *mut rdma_event_channel,
    context: *mut libc::c_void,
    ps: u32,
    qp_type: u32,
) -> Result<*mut rdma_cm_id, i32> {
    if !matches!(ps, RDMA_PS_TCP | RDMA_PS_UDP | RDMA_PS_IB | RDMA_PS_IPOIB) {
        return Err(libc::EINVAL);
    }
    let _ = devices::all();
    crate::engine::prepare();
    let mut w = lock();
    let (ch, sync) = if channel.is_null() {
        let ch = Channel::create().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))? as usize;
        (ch, true)
    } else if crate::channel::is_live(channel as usize) {
        (channel as usize, false)
    } else {
        return Err(libc::EINVAL);
    };
    Ok(w.new_id(IdState::new(ch, sync), context, ps, qp_type).cast())
}

/// `rdma_create_id`: UD for `RDMA_PS_UDP`/`RDMA_PS_IPOIB`, RC otherwise.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut libc::c_void,
    ps: u32,
) -> i32 {
    guard(-1, || {
        if id.is_null() {
            return err(libc::EINVAL);
        }
        let qp_type = if matches!(ps, RDMA_PS_UDP | RDMA_PS_IPOIB) { IBV_QPT_UD } else { IBV_QPT_RC };
        match create(channel, context, ps, qp_type) {
            Ok(p) => {
                // SAFETY: the program's out-pointer, checked non-NULL.
                unsafe { *id = p };
                0
            }
            Err(e) => err(e),
        }
    })
}

/// Lets go of the CM IDs of id `p` (a connection gets its REJ/DREQ/DREP from the CM) and of
/// the events still queued for it.
fn release(w: &mut World, p: usize) {
    let Some(s) = w.ids.get_mut(&p) else { return };
    let cms: Vec<(usize, rdma_cm::CmId)> = s.cm.take().into_iter().chain(s.listens.drain(..)).collect();
    let channel = s.channel;
    for (dev, c) in cms {
        w.by_cm.remove(&(dev, c));
        if let Some(cm) = w.cm(dev) {
            let more = cm.destroy_id(c, Instant::now());
            crate::dispatch::events(w, dev, more);
        }
    }
    crate::engine::wake();
    if crate::channel::is_live(channel) {
        // SAFETY: a live channel box (its destroyers take the library's lock, held here).
        unsafe { (*(channel as *const Channel)).drop_events_of(p) };
    }
}

fn destroy(id: *mut rdma_cm_id) -> Result<(), i32> {
    let p = id as usize;
    let ev = {
        let mut w = lock();
        w.id(id)?;
        // SAFETY: a live id box.
        unsafe { std::mem::replace(&mut (*cma(p)).id.event, null_mut()) }
    };
    if !ev.is_null() {
        let _ = ack(ev);
    }
    let mut w = lock();
    release(&mut w, p);
    while w.ids.get(&p).is_some_and(|s| s.unacked > 0) {
        w = w.wait_acked();
    }
    let Some(s) = w.ids.remove(&p) else { return Err(libc::EINVAL) };
    if s.sync && crate::channel::retire(s.channel) {
        // SAFETY: the sync id's own channel, no longer findable.
        unsafe { Channel::destroy(s.channel as *mut Channel) };
    }
    // SAFETY: the id's box, removed from `ids`: no one finds it any more.
    drop(unsafe { Box::from_raw(cma(p)) });
    Ok(())
}

/// `rdma_destroy_id`.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> i32 {
    guard(-1, || ret(destroy(id)))
}

/// Moves id `id` to `channel` (NULL: a private one, the id becomes sync). As librdmacm's
/// `rdma_migrate_id` (rdma-core `librdmacm/cma.c`): a sync id cannot become sync again
/// (`EINVAL`), and a sync id's last event, which it keeps in `id->event` until its next call, is
/// acknowledged first; then the call waits for the program to acknowledge the id's other events.
fn migrate(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> Result<(), i32> {
    let p = id as usize;
    let sync = lock().ids.get(&p).ok_or(libc::EINVAL)?.sync;
    if sync && channel.is_null() {
        return Err(libc::EINVAL);
    }
    if sync {
        // SAFETY: a live id box (found above); its `event` is the sync id's last event or NULL.
        let last = unsafe { std::mem::replace(&mut (*cma(p)).id.event, null_mut()) };
        if !last.is_null() {
            ack(last)?;
        }
    }
    let new = if channel.is_null() {
        Channel::create().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))? as usize
    } else {
        channel as usize
    };
    let mut w = lock();
    if !crate::channel::is_live(new) {
        return Err(libc::EINVAL);
    }
    // Wait for the events of the id delivered on the old channel (as librdmacm).
    while w.ids.get(&p).is_some_and(|s| s.unacked > 0) {
        w = w.wait_acked();
    }
    let s = w.ids.get_mut(&p).ok_or(libc::EINVAL)?;
    let (old, was_sync) = (s.channel, s.sync);
    s.channel = new;
    s.sync = channel.is_null();
    if crate::channel::is_live(old) {
        // SAFETY: live channel boxes (under the library's lock, which their destroyers take);
        // the id's queued events move with it.
        let (o, n) = unsafe { (&*(old as *const Channel), &*(new as *const Channel)) };
        for e in o.take_events_of(p) {
            n.push(e);
        }
    }
    if was_sync && crate::channel::retire(old) {
        // SAFETY: the id's former private channel.
        unsafe { Channel::destroy(old as *mut Channel) };
    }
    // SAFETY: a live id box.
    unsafe { (*cma(p)).id.channel = new as *mut rdma_event_channel };
    Ok(())
}

/// `rdma_migrate_id`: the id's events go to `channel` from now on (NULL: a sync id).
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> i32 {
    guard(-1, || ret(migrate(id, channel)))
}

fn set_option(id: *mut rdma_cm_id, level: i32, name: i32, val: *const libc::c_void, len: usize) -> Result<(), i32> {
    let mut w = lock();
    let s = w.id(id)?;
    if val.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the program's buffer of `len` bytes; each option reads what its size allows.
    let byte = |n: usize| unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len.min(n)) };
    // SAFETY: as above, an int option read only with `len == 4`.
    let int = || (len == 4).then(|| unsafe { val.cast::<i32>().read_unaligned() });
    match (level, name) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if len == 1 => s.tos = Some(byte(1)[0]),
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => s.reuseaddr = int().ok_or(libc::EINVAL)? != 0,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => s.afonly = int().ok_or(libc::EINVAL)? != 0,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if len == 1 => s.ack_timeout = Some(byte(1)[0]),
        // A path from the program (`struct ibv_path_data[]`): taken as routed, the route is ours.
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => return Err(libc::ENOSYS),
        _ => return Err(libc::EINVAL),
    }
    Ok(())
}

/// `rdma_set_option`: `RDMA_OPTION_ID_TOS` (u8), `ID_REUSEADDR`, `ID_AFONLY` (int),
/// `ID_ACK_TIMEOUT` (u8); `EINVAL` for a wrong size or an unknown option, as the kernel's
/// `ucma_set_option_id`; `RDMA_OPTION_IB_PATH` `ENOSYS` (paths come from our own route).
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: i32,
    optname: i32,
    optval: *mut libc::c_void,
    optlen: usize,
) -> i32 {
    guard(-1, || ret(set_option(id, level, optname, optval, optlen)))
}

/// `rdma_get_devices`: a NULL-terminated array of every device's context (opened once).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut i32) -> *mut *mut ibv_context {
    guard(null_mut(), || {
        let devs = devices::all();
        let mut v: Vec<*mut ibv_context> = devs.iter().map(|d| d.ctx).collect();
        if !num_devices.is_null() {
            // SAFETY: the program's out-pointer, checked non-NULL.
            unsafe { *num_devices = v.len() as i32 };
        }
        v.push(null_mut());
        Box::into_raw(v.into_boxed_slice()).cast()
    })
}

/// `rdma_free_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    guard((), || {
        if list.is_null() {
            return;
        }
        let n = devices::all().len() + 1;
        // SAFETY: `list` came from rdma_get_devices: a boxed slice of `n` entries (the device
        // list never changes in a process).
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n)) });
    })
}
