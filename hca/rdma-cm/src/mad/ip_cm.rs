//! The RDMA IP CM Service private-data header (IBTA Annex A11, A11.6: `struct cma_hdr` in
//! Linux's `drivers/infiniband/core/cma.c`): the first 36 bytes of a REQ's (and SIDR_REQ's)
//! private data, carrying the IP version, the source port and both IP addresses. Its service ID
//! is `0x0000_0000_01_PS_PORT` ([`service_id`]).
//!
//! Layout: byte 0 the CM version (0x00), byte 1 the IP version in its upper nibble (4 or 6),
//! bytes 2..4 the requester's port (big-endian), bytes 4..20 the source address, bytes 20..36
//! the destination address. An IPv4 address sits in the last 4 bytes of its 16-byte field, the
//! first 12 zero (`union cma_ip_addr`'s `ip4.addr` after `pad[3]`). The listener's port is not
//! in the header: it is the service ID's low 16 bits ([`IpCmHeader::decode_for`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The header's size.
pub const IP_CM_HDR_LEN: usize = 36;
/// The only CM version of the header (Annex A11.6; `CMA_VERSION` in `cma.c`).
pub const CMA_VERSION: u8 = 0x00;

/// The Service ID for a port space and port (Annex A11.2.1; `cma_get_service_id`): the port
/// space (`RDMA_PS_TCP` = 0x106, `RDMA_PS_UDP` = 0x111, `RDMA_PS_IB` = 0x13F) above the 16-bit
/// port, e.g. `0x0000_0000_0106_4E20` for TCP port 20000.
pub fn service_id(port_space: u16, port: u16) -> u64 {
    u64::from(port_space) << 16 | u64::from(port)
}

/// A decoded header: source (the requester's) and destination (the listener's) addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpCmHeader {
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

fn ip_field(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut f = [0u8; 16];
            f[12..].copy_from_slice(&v4.octets());
            f
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn read_ip(version: u8, f: &[u8]) -> Option<IpAddr> {
    let f: [u8; 16] = f.try_into().ok()?;
    match version {
        4 => Some(IpAddr::V4(Ipv4Addr::new(f[12], f[13], f[14], f[15]))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(f))),
        _ => None,
    }
}

/// Both addresses in one family: IPv6 (IPv4 ones mapped) if either is IPv6.
fn same_family(a: IpAddr, b: IpAddr) -> (u8, IpAddr, IpAddr) {
    let v6 = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        v6 => v6,
    };
    match (a, b) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (4, a, b),
        _ => (6, v6(a), v6(b)),
    }
}

impl IpCmHeader {
    /// Writes the header into the first [`IP_CM_HDR_LEN`] bytes of `out`. Mixed families are
    /// written as IPv6 (the IPv4 address mapped).
    ///
    /// # Panics
    /// If `out` is shorter than [`IP_CM_HDR_LEN`] (a caller's bug: private data is 92 bytes).
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..IP_CM_HDR_LEN];
        let (version, src, dst) = same_family(self.src.ip(), self.dst.ip());
        out[0] = CMA_VERSION;
        out[1] = version << 4;
        out[2..4].copy_from_slice(&self.src.port().to_be_bytes());
        out[4..20].copy_from_slice(&ip_field(src));
        out[20..36].copy_from_slice(&ip_field(dst));
    }

    /// Reads a header; `None` for a bad CM version, an IP version other than 4 or 6, or fewer
    /// than [`IP_CM_HDR_LEN`] bytes. The destination's port is 0: the header does not carry it
    /// (use [`IpCmHeader::decode_for`]).
    pub fn decode(b: &[u8]) -> Option<IpCmHeader> {
        let b = b.get(..IP_CM_HDR_LEN)?;
        if b[0] != CMA_VERSION {
            return None;
        }
        let version = b[1] >> 4;
        let src = read_ip(version, &b[4..20])?;
        let dst = read_ip(version, &b[20..36])?;
        let port = u16::from_be_bytes([b[2], b[3]]);
        Some(IpCmHeader { src: SocketAddr::new(src, port), dst: SocketAddr::new(dst, 0) })
    }

    /// [`IpCmHeader::decode`] with the destination port taken from the REQ's service ID (its
    /// low 16 bits, Annex A11.2.1).
    pub fn decode_for(b: &[u8], service_id: u64) -> Option<IpCmHeader> {
        let mut h = IpCmHeader::decode(b)?;
        h.dst.set_port(service_id as u16);
        Some(h)
    }
}

/// An IP address as a GID (IPv4-mapped `::ffff:a.b.c.d` for IPv4, as RoCE v2 GIDs are).
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_sits_in_the_last_four_bytes() {
        let h = IpCmHeader { src: "10.0.0.1:5000".parse().unwrap(), dst: "10.0.0.2:7471".parse().unwrap() };
        let mut b = [0xAAu8; 40];
        h.encode(&mut b);
        assert_eq!(&b[..4], &[0x00, 0x40, 0x13, 0x88]);
        assert_eq!(&b[4..16], &[0; 12]);
        assert_eq!(&b[16..20], &[10, 0, 0, 1]);
        assert_eq!(&b[32..36], &[10, 0, 0, 2]);
        assert_eq!(b[36], 0xAA);
        assert_eq!(IpCmHeader::decode_for(&b, service_id(0x106, 7471)), Some(h));
    }

    #[test]
    fn ipv6_and_bad_headers() {
        let h = IpCmHeader { src: "[fe80::1]:1".parse().unwrap(), dst: "[fe80::2]:0".parse().unwrap() };
        let mut b = [0u8; 36];
        h.encode(&mut b);
        assert_eq!(b[1], 0x60);
        assert_eq!(IpCmHeader::decode(&b), Some(h));
        assert_eq!(IpCmHeader::decode(&b[..35]), None);
        let mut bad = b;
        bad[0] = 1;
        assert_eq!(IpCmHeader::decode(&bad), None);
        bad = b;
        bad[1] = 0x50;
        assert_eq!(IpCmHeader::decode(&bad), None);
    }

    #[test]
    fn service_ids_of_annex_a11() {
        assert_eq!(service_id(0x106, 20000), 0x0000_0000_0106_4E20);
        assert_eq!(ip_to_gid("10.1.2.3".parse().unwrap())[10..], [0xff, 0xff, 10, 1, 2, 3]);
    }
}
