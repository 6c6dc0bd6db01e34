//! What this library answers without doing: rsockets (`rsocket`, `rbind`, ... of
//! `<rdma/rsocket.h>`: exported with their versions so programs load, each failing with -1
//! `ENOSYS`), ECE (`EOPNOTSUPP`, as with a device without it), and multicast as on Linux with
//! `vmw_pvrdma`: the join is taken, but the device has no multicast attach, so an id with a QP
//! gets `MULTICAST_ERROR` (librdmacm's `ucma_process_join` fails on `ibv_attach_mcast`, status
//! -1) and one without a QP `MULTICAST_JOIN`.

use crate::abi::*;
use crate::channel::Event;
use crate::ffi::{err, guard, read_sockaddr, ret};
use crate::world::{cma, lock, Phase};

macro_rules! enosys {
    ($($name:ident($($arg:ident: $t:ty),*) -> $r:ty;)*) => {$(
        /// rsockets: not provided (-1, `ENOSYS`).
        #[no_mangle]
        pub extern "C" fn $name($($arg: $t),*) -> $r {
            $(let _ = $arg;)*
            crate::sys::set_errno(libc::ENOSYS);
            -1
        }
    )*};
}

type P = *mut libc::c_void;
enosys! {
    rsocket(domain: i32, kind: i32, protocol: i32) -> i32;
    rbind(socket: i32, addr: P, len: u32) -> i32;
    rlisten(socket: i32, backlog: i32) -> i32;
    raccept(socket: i32, addr: P, len: P) -> i32;
    rconnect(socket: i32, addr: P, len: u32) -> i32;
    rshutdown(socket: i32, how: i32) -> i32;
    rclose(socket: i32) -> i32;
    rrecv(socket: i32, buf: P, len: usize, flags: i32) -> isize;
    rrecvfrom(socket: i32, buf: P, len: usize, flags: i32, src: P, alen: P) -> isize;
    rrecvmsg(socket: i32, msg: P, flags: i32) -> isize;
    rsend(socket: i32, buf: P, len: usize, flags: i32) -> isize;
    rsendto(socket: i32, buf: P, len: usize, flags: i32, dst: P, alen: u32) -> isize;
    rsendmsg(socket: i32, msg: P, flags: i32) -> isize;
    rread(socket: i32, buf: P, count: usize) -> isize;
    rreadv(socket: i32, iov: P, n: i32) -> isize;
    rwrite(socket: i32, buf: P, count: usize) -> isize;
    rwritev(socket: i32, iov: P, n: i32) -> isize;
    rpoll(fds: P, nfds: u64, timeout: i32) -> i32;
    rselect(nfds: i32, r: P, w: P, e: P, timeout: P) -> i32;
    rgetpeername(socket: i32, addr: P, len: P) -> i32;
    rgetsockname(socket: i32, addr: P, len: P) -> i32;
    rsetsockopt(socket: i32, level: i32, name: i32, val: P, len: u32) -> i32;
    rgetsockopt(socket: i32, level: i32, name: i32, val: P, len: P) -> i32;
    rfcntl(socket: i32, cmd: i32, arg: P) -> i32;
    riowrite(socket: i32, buf: P, count: usize, offset: i64, flags: i32) -> isize;
    riounmap(socket: i32, buf: P, len: usize) -> i32;
}

/// rsockets: `riomap` (-1 as `off_t`, `ENOSYS`).
#[no_mangle]
pub extern "C" fn riomap(socket: i32, buf: P, len: usize, prot: i32, flags: i32, offset: i64) -> i64 {
    let _ = (socket, buf, len, prot, flags, offset);
    crate::sys::set_errno(libc::ENOSYS);
    -1
}

fn ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> i32 {
    guard(-1, || {
        if ece.is_null() || lock().id(id).is_err() {
            return err(libc::EINVAL);
        }
        err(libc::EOPNOTSUPP)
    })
}

/// `rdma_set_local_ece`: `EOPNOTSUPP` (the device has no ECE).
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, e: *mut ibv_ece) -> i32 {
    ece(id, e)
}

/// `rdma_get_remote_ece`: `EOPNOTSUPP`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, e: *mut ibv_ece) -> i32 {
    ece(id, e)
}

fn join(id: *mut rdma_cm_id, addr: *const libc::sockaddr, context: *mut libc::c_void) -> Result<(), i32> {
    // SAFETY: the program's sockaddr of its family's size.
    let group = unsafe { read_sockaddr(addr) }.ok_or(libc::EINVAL)?;
    let mut w = lock();
    let s = w.id(id)?;
    if !matches!(s.phase, Phase::Bound | Phase::AddrResolved | Phase::RouteResolved) || s.dev.is_none() {
        return Err(libc::EINVAL);
    }
    s.mcast.push(group);
    let p = id as usize;
    // SAFETY: a live id box.
    let has_qp = !unsafe { (*cma(p)).id.qp }.is_null();
    let e = if has_qp {
        Event::new(p, RDMA_CM_EVENT_MULTICAST_ERROR, -1)
    } else {
        Event::new(p, RDMA_CM_EVENT_MULTICAST_JOIN, 0)
    };
    // SAFETY: a fresh event box.
    unsafe {
        (*e).ev.param.ud.private_data = context;
        (*e).ev.param.ud.qp_num = 0xff_ffff;
        (*e).ev.param.ud.qkey = RDMA_UDP_QKEY;
        (*e).ev.param.ud.ah_attr.grh.dgid = ibv_gid { raw: rdma_cm::mad::ip_cm::ip_to_gid(group.ip()) };
        (*e).ev.param.ud.ah_attr.is_global = 1;
        (*e).ev.param.ud.ah_attr.port_num = crate::devices::PORT;
    }
    w.deliver(e);
    Ok(())
}

/// `rdma_join_multicast`.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut libc::c_void,
) -> i32 {
    guard(-1, || ret(join(id, addr, context)))
}

/// `rdma_join_multicast_ex`: the address and flags of `mc_join_attr` (`EINVAL` without an
/// address, or with flags past send-only full member, as librdmacm).
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut libc::c_void,
) -> i32 {
    guard(-1, || {
        // SAFETY: the program's attributes (NULL refused).
        let Some(a) = (unsafe { mc_join_attr.as_ref() }) else { return err(libc::EINVAL) };
        if a.comp_mask & 3 != 3 || a.join_flags > 1 {
            return err(libc::EINVAL);
        }
        ret(join(id, a.addr, context))
    })
}

/// `rdma_leave_multicast`: `EADDRNOTAVAIL` for a group not joined, as librdmacm.
#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> i32 {
    guard(-1, || {
        // SAFETY: the program's sockaddr.
        let Some(group) = (unsafe { read_sockaddr(addr) }) else { return err(libc::EINVAL) };
        let mut w = lock();
        let Ok(s) = w.id(id) else { return err(libc::EINVAL) };
        match s.mcast.iter().position(|g| *g == group) {
            Some(i) => {
                s.mcast.remove(i);
                0
            }
            None => err(libc::EADDRNOTAVAIL),
        }
    })
}
