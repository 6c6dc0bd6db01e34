//! Which local address and device reach a destination (the addressing rules), and the
//! host's routing asked the way a program would: a UDP socket bound to the candidate source and
//! connected to the destination (no datagram is sent); `getsockname` gives the source the host
//! picks when none is bound.

use std::net::{IpAddr, SocketAddr, UdpSocket};

/// A local RoCE address: device index, GID index, address.
pub type Local = (usize, u8, IpAddr);

/// Whether the host has a route from `src` to `dst`.
pub fn reaches(src: IpAddr, dst: IpAddr) -> bool {
    let Ok(s) = UdpSocket::bind(SocketAddr::new(src, 0)) else { return false };
    s.connect(SocketAddr::new(dst, 9)).is_ok()
}

/// The source address the host's routing picks for `dst`.
pub fn host_source(dst: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = if dst.is_ipv4() { [0, 0, 0, 0].into() } else { std::net::Ipv6Addr::UNSPECIFIED.into() };
    let s = UdpSocket::bind(SocketAddr::new(any, 0)).ok()?;
    s.connect(SocketAddr::new(dst, 9)).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// The local address that reaches `dst`: the given source when there is one (it must be one of
/// `locals` and reach `dst`); else the host's choice when it is one of `locals`; else the first
/// of `locals` (of `dst`'s family) from which `dst` is reachable. `Err` with the negative
/// status of ADDR_ERROR: `-ENODEV` when the host reaches `dst` but from no device's address,
/// `-ENETUNREACH` when it does not reach it at all.
pub fn pick(src: Option<IpAddr>, dst: IpAddr, locals: &[Local]) -> Result<Local, i32> {
    let unreachable = || if host_source(dst).is_some() { -libc::ENODEV } else { -libc::ENETUNREACH };
    if let Some(src) = src.filter(|s| !s.is_unspecified()) {
        let l = locals.iter().find(|l| l.2 == src).copied().ok_or(-libc::ENODEV)?;
        return if reaches(src, dst) { Ok(l) } else { Err(unreachable()) };
    }
    if let Some(h) = host_source(dst) {
        if let Some(l) = locals.iter().find(|l| l.2 == h) {
            return Ok(*l);
        }
    }
    locals
        .iter()
        .filter(|l| l.2.is_ipv4() == dst.is_ipv4())
        .find(|l| reaches(l.2, dst))
        .copied()
        .ok_or_else(unreachable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_destination_is_reached_from_a_device_on_another_loopback_address() {
        let locals = [(0, 1, IpAddr::from([127, 0, 0, 2]))];
        assert_eq!(pick(None, [127, 0, 0, 1].into(), &locals), Ok(locals[0]));
    }

    #[test]
    fn a_given_source_that_no_device_holds_is_refused() {
        let locals = [(0, 1, IpAddr::from([127, 0, 0, 2]))];
        assert_eq!(pick(Some([127, 0, 0, 3].into()), [127, 0, 0, 1].into(), &locals), Err(-libc::ENODEV));
    }

    #[test]
    fn without_devices_nothing_is_reached() {
        assert!(pick(None, [127, 0, 0, 1].into(), &[]).is_err());
    }

    #[test]
    fn an_ipv6_destination_is_not_reached_from_an_ipv4_device() {
        let locals = [(0, 1, IpAddr::from([127, 0, 0, 2]))];
        assert!(pick(None, std::net::Ipv6Addr::LOCALHOST.into(), &locals).is_err());
    }
}
