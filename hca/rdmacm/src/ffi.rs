//! What every entry point shares: no panic crosses into C ([`guard`]), librdmacm's way of
//! failing (-1 with `errno`, or NULL), and socket addresses between C and Rust.

use crate::sys::set_errno;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs an entry point's body; a panic inside is caught (it must not unwind into C), sets
/// `errno` to `EIO` and returns `failed`.
pub(crate) fn guard<R>(failed: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            failed
        }
    }
}

/// librdmacm's `ERR(e)`: `errno = e`, -1.
pub(crate) fn err(e: i32) -> i32 {
    set_errno(e);
    -1
}

/// An `int` entry point's answer from a `Result` whose error is an errno.
pub(crate) fn ret(r: Result<(), i32>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => err(e),
    }
}

/// The socket address at `p` (an `AF_INET` or `AF_INET6` `sockaddr`), `None` for NULL or another
/// family (librdmacm's `ucma_addrlen` gives 0 for those).
///
/// # Safety
/// `p` is NULL or points at a `sockaddr` of its family's size.
pub(crate) unsafe fn read_sockaddr(p: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller's promise; the family is read first, then the struct it names.
    unsafe {
        match p.as_ref()?.sa_family as i32 {
            libc::AF_INET => {
                let s = &*p.cast::<libc::sockaddr_in>();
                let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
                Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(s.sin_port))))
            }
            libc::AF_INET6 => {
                let s = &*p.cast::<libc::sockaddr_in6>();
                let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
                let a = SocketAddrV6::new(ip, u16::from_be(s.sin6_port), s.sin6_flowinfo, s.sin6_scope_id);
                Some(SocketAddr::V6(a))
            }
            _ => None,
        }
    }
}

/// The family of the `sockaddr` at `p`, if it can be read (0 for NULL).
///
/// # Safety
/// `p` is NULL or points at a `sockaddr`.
pub(crate) unsafe fn family(p: *const libc::sockaddr) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { p.as_ref().map_or(0, |s| s.sa_family as i32) }
}

/// `a` as a `sockaddr_storage` (zero beyond its family's struct).
pub(crate) fn storage(a: Option<SocketAddr>) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain bytes; all-zero is AF_UNSPEC.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        None => {}
        Some(SocketAddr::V4(v4)) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut st as *mut libc::sockaddr_storage).cast(), sin) };
        }
        Some(SocketAddr::V6(v6)) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as u16,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut st as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    st
}

/// The size of the `sockaddr` for `a`'s family.
pub(crate) fn sockaddr_len(a: &SocketAddr) -> u32 {
    match a {
        SocketAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>() as u32,
        SocketAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>() as u32,
    }
}
