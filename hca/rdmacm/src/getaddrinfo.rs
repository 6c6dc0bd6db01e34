//! `rdma_getaddrinfo`/`rdma_freeaddrinfo`, as librdmacm's (`librdmacm/addrinfo.c`): the host's
//! `getaddrinfo` for the node and service (`RAI_PASSIVE` to `AI_PASSIVE`, `RAI_NUMERICHOST` to
//! `AI_NUMERICHOST`, the hints' family), its first answer as the destination (or, passive, the
//! source), the hints' source copied for an active side, the port space and QP type from the
//! hints or the socket type (stream: `RDMA_PS_TCP`/RC, datagram: `RDMA_PS_UDP`/UD). A
//! `getaddrinfo` failure is returned as its `EAI_*` code, as librdmacm does.

use crate::abi::*;
use crate::ffi::{err, guard, read_sockaddr, sockaddr_len, storage};
use std::ffi::CStr;
use std::net::SocketAddr;
use std::ptr::null_mut;

/// A `malloc`ed copy of `a` (freed by [`rdma_freeaddrinfo`] with `free`).
fn sockaddr_copy(a: SocketAddr) -> (*mut libc::sockaddr, u32) {
    let st = storage(Some(a));
    let len = sockaddr_len(&a);
    // SAFETY: a fresh allocation of `len` bytes, filled from `st`, which is larger.
    unsafe {
        let p = libc::calloc(1, len as usize).cast::<u8>();
        if !p.is_null() {
            std::ptr::copy_nonoverlapping((&st as *const libc::sockaddr_storage).cast::<u8>(), p, len as usize);
        }
        (p.cast(), len)
    }
}

fn lookup(
    node: *const libc::c_char,
    service: *const libc::c_char,
    hints: Option<&rdma_addrinfo>,
) -> Result<*mut rdma_addrinfo, i32> {
    let flags = hints.map_or(0, |h| h.ai_flags);
    // SAFETY: addrinfo is plain C data; all-zero is valid hints.
    let mut ai_hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    if flags & RAI_PASSIVE != 0 {
        ai_hints.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        ai_hints.ai_flags |= libc::AI_NUMERICHOST;
    }
    ai_hints.ai_family = hints.map_or(0, |h| h.ai_family);
    let (ps, qp_type) = match hints {
        Some(h) if h.ai_port_space != 0 => (h.ai_port_space, h.ai_qp_type),
        Some(h) if h.ai_qp_type == IBV_QPT_UD as i32 => (RDMA_PS_UDP as i32, h.ai_qp_type),
        Some(h) if h.ai_qp_type != 0 => (RDMA_PS_TCP as i32, h.ai_qp_type),
        _ => (RDMA_PS_TCP as i32, IBV_QPT_RC as i32),
    };
    let qp_type = if qp_type == 0 {
        if ps == RDMA_PS_UDP as i32 {
            IBV_QPT_UD as i32
        } else {
            IBV_QPT_RC as i32
        }
    } else {
        qp_type
    };
    ai_hints.ai_socktype = if qp_type == IBV_QPT_UD as i32 { libc::SOCK_DGRAM } else { libc::SOCK_STREAM };
    let mut found: Option<SocketAddr> = None;
    if !node.is_null() || !service.is_null() {
        let mut res: *mut libc::addrinfo = null_mut();
        // SAFETY: the program's strings (NUL-terminated or NULL); `res` freed below.
        let r = unsafe { libc::getaddrinfo(node, service, &ai_hints, &mut res) };
        if r != 0 {
            return Err(r);
        }
        // SAFETY: a result list of getaddrinfo: its first entry's address, then freed.
        unsafe {
            found = res.as_ref().and_then(|a| read_sockaddr(a.ai_addr));
            libc::freeaddrinfo(res);
        }
    }
    // SAFETY: rdma_addrinfo is plain C data; calloc gives it zeroed (freed by rdma_freeaddrinfo).
    let rai = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()).cast::<rdma_addrinfo>() };
    // SAFETY: just allocated (NULL checked).
    let r = unsafe { rai.as_mut() }.ok_or(libc::EAI_MEMORY)?;
    r.ai_flags = flags;
    r.ai_port_space = ps;
    r.ai_qp_type = qp_type;
    let passive = flags & RAI_PASSIVE != 0;
    if let Some(a) = found {
        r.ai_family = if a.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        let (p, len) = sockaddr_copy(a);
        if passive {
            (r.ai_src_addr, r.ai_src_len) = (p, len);
        } else {
            (r.ai_dst_addr, r.ai_dst_len) = (p, len);
        }
    }
    if let Some(h) = hints {
        // SAFETY: the hints' addresses are the program's sockaddrs (or NULL).
        let (src, dst) = unsafe { (read_sockaddr(h.ai_src_addr), read_sockaddr(h.ai_dst_addr)) };
        if let (Some(s), true) = (src, r.ai_src_addr.is_null()) {
            (r.ai_src_addr, r.ai_src_len) = sockaddr_copy(s);
        }
        if let (Some(d), true) = (dst, r.ai_dst_addr.is_null()) {
            (r.ai_dst_addr, r.ai_dst_len) = sockaddr_copy(d);
        }
        if r.ai_family == 0 {
            r.ai_family = h.ai_family;
        }
    }
    Ok(rai)
}

/// `rdma_getaddrinfo`: 0 and `*res`, or the `EAI_*` code of the host's lookup (`EINVAL` with
/// -1 for a NULL `res` or nothing to look up).
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const libc::c_char,
    service: *const libc::c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> i32 {
    guard(-1, || {
        // SAFETY: the program's hints or NULL.
        let h = unsafe { hints.as_ref() };
        let has_addr = h.is_some_and(|h| !h.ai_src_addr.is_null() || !h.ai_dst_addr.is_null());
        if res.is_null() || (node.is_null() && service.is_null() && !has_addr) {
            return err(libc::EINVAL);
        }
        // SAFETY: a NUL-terminated string from the program, when not NULL.
        if !node.is_null() && unsafe { CStr::from_ptr(node) }.to_bytes().len() > 1024 {
            return err(libc::EINVAL);
        }
        match lookup(node, service, h) {
            Ok(r) => {
                // SAFETY: the program's out-pointer, checked non-NULL.
                unsafe { *res = r };
                0
            }
            Err(e) => e,
        }
    })
}

/// `rdma_freeaddrinfo`: the whole list.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard((), || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: a list rdma_getaddrinfo made with calloc; each piece freed once.
            unsafe {
                let next = (*p).ai_next;
                libc::free((*p).ai_src_addr.cast());
                libc::free((*p).ai_dst_addr.cast());
                libc::free((*p).ai_src_canonname.cast());
                libc::free((*p).ai_dst_canonname.cast());
                libc::free((*p).ai_route);
                libc::free((*p).ai_connect);
                libc::free(p.cast());
                p = next;
            }
        }
    })
}
