//! The port's UDP sockets: one per address of [`super::RoceConfig::addrs`], bound to
//! `(addr, udp_port)` when the device is created, non-blocking (the receive thread waits with
//! `poll`).

use super::{sys, RoceError};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// Bytes of socket buffer asked for in each direction (the kernel may grant less).
const SOCKET_BUFFER: i32 = 4 << 20;

/// One bound socket and the address it is bound to (the source of what it sends).
pub struct Socket {
    pub udp: UdpSocket,
    pub local: SocketAddr,
}

/// Binds one socket per address. IPv4 sockets send with `IP_PMTUDISC_DO` (Identification 0 on an
/// unconnected socket, rxe-peer fact 4); IPv6 sockets accept a zero UDP checksum (fact 5).
/// Errors: the first address that cannot be bound or configured, with the OS error.
pub fn bind_all(addrs: &[IpAddr], udp_port: u16) -> Result<Vec<Socket>, RoceError> {
    if addrs.is_empty() {
        return Err(RoceError::NoAddress);
    }
    addrs
        .iter()
        .map(|&ip| {
            let local = SocketAddr::new(ip, udp_port);
            bind(local).map_err(|e| RoceError::Bind {
                addr: local,
                source: e.into(),
            })
        })
        .collect()
}

fn bind(local: SocketAddr) -> io::Result<Socket> {
    let udp = UdpSocket::bind(local)?;
    match local {
        SocketAddr::V4(_) => sys::set_pmtudisc_do(&udp)?,
        SocketAddr::V6(_) => sys::set_no_check6_rx(&udp)?,
    }
    sys::set_buffers(&udp, SOCKET_BUFFER)?;
    udp.set_nonblocking(true)?;
    Ok(Socket { udp, local })
}
