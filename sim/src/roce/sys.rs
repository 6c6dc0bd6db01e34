//! The socket options std does not expose, through libc: the one FFI module of the RoCE port;
//! and its wait for the sockets, the host's bounded `poll(2)` ([`osdep::poll_readable`]).
#![allow(unsafe_code)]

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

/// `UDP_NO_CHECK6_RX` (`include/uapi/linux/udp.h`): accept IPv6 UDP datagrams whose checksum is 0.
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// Sets an `int` socket option.
fn set_int(sock: &UdpSocket, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is open for the borrow of `sock`; `value` is a live `c_int` and `len`
    // is its size, as setsockopt(2) requires; the kernel only reads it.
    let rc = unsafe { libc::setsockopt(sock.as_raw_fd(), level, name, (&value as *const libc::c_int).cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `IP_MTU_DISCOVER = IP_PMTUDISC_DO` on an IPv4 socket: the kernel sends with DF set and, on an
/// unconnected socket, Identification 0 (rxe-peer fact 4), so the ICRC the model computes over ID 0
/// is the one the peer checks.
pub fn set_pmtudisc_do(sock: &UdpSocket) -> io::Result<()> {
    set_int(sock, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)
}

/// `UDP_NO_CHECK6_RX` on an IPv6 socket: rxe sends RoCE v2 over IPv6 with UDP checksum 0, which
/// Linux drops otherwise (rxe-peer fact 5).
pub fn set_no_check6_rx(sock: &UdpSocket) -> io::Result<()> {
    set_int(sock, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
}

/// Asks for `bytes` of receive and send buffer (`SO_RCVBUF`, `SO_SNDBUF`; Linux caps them at
/// `net.core.rmem_max` / `wmem_max`): a burst of a window of packets should not overflow the
/// socket.
pub fn set_buffers(sock: &UdpSocket, bytes: libc::c_int) -> io::Result<()> {
    set_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes)?;
    set_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes)
}

/// Waits up to `timeout` until one of `socks` is readable; `ready[i]` tells which (the host's
/// bounded wait, [`osdep::poll_readable`]).
pub fn poll_readable(socks: &[&UdpSocket], timeout: Duration, ready: &mut Vec<bool>) -> io::Result<()> {
    let fds: Vec<BorrowedFd<'_>> = socks.iter().map(|s| s.as_fd()).collect();
    ready.clear();
    ready.resize(fds.len(), false);
    osdep::poll_readable(&fds, timeout, ready).map(drop)
}
