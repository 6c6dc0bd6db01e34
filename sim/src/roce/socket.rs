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
/// Errors: the first address that cannot be bound or configured, with the OS error, or that
/// names no one interface (see [`unicast`]).
pub fn bind_all(addrs: &[IpAddr], udp_port: u16) -> Result<Vec<Socket>, RoceError> {
    if addrs.is_empty() {
        return Err(RoceError::NoAddress);
    }
    addrs
        .iter()
        .map(|&ip| {
            let local = SocketAddr::new(ip, udp_port);
            bind(local).map_err(|e| RoceError::Bind { addr: local, source: e.into() })
        })
        .collect()
}

fn bind(local: SocketAddr) -> io::Result<Socket> {
    unicast(local.ip())?;
    let udp = UdpSocket::bind(local)?;
    match local {
        SocketAddr::V4(_) => sys::set_pmtudisc_do(&udp)?,
        SocketAddr::V6(_) => sys::set_no_check6_rx(&udp)?,
    }
    sys::set_buffers(&udp, SOCKET_BUFFER)?;
    udp.set_nonblocking(true)?;
    Ok(Socket { udp, local })
}

/// A port address is the source address of what it sends, inside every ICRC, and becomes a GID:
/// the unspecified address (a wildcard bind), a multicast or the broadcast address, or an
/// IPv4-mapped IPv6 one (its packets are IPv4, their ICRC computed as IPv6) is refused with
/// `InvalidInput`.
fn unicast(ip: IpAddr) -> io::Result<()> {
    let bad = match ip {
        IpAddr::V4(a) => a.is_unspecified() || a.is_multicast() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_unspecified() || a.is_multicast() || a.to_ipv4_mapped().is_some(),
    };
    if bad {
        let why = "not a unicast address of one interface (a RoCE v2 GID names one)";
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    Ok(())
}
