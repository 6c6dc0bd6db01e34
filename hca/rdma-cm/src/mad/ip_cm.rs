//! The RDMA IP CM Service private-data header (IBTA Annex A11, A11.6: `struct cma_hdr` in
//! Linux's `cma.c`): the first 36 bytes of a REQ's (and SIDR_REQ's) private data, carrying the
//! IP version, the source port and both IP addresses. Its service ID is
//! `0x0000_0000_01_PS_PORT` ([`service_id`]).

use std::net::{IpAddr, SocketAddr};

/// The header's size.
pub const IP_CM_HDR_LEN: usize = 36;

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

impl IpCmHeader {
    /// Writes the header into the first [`IP_CM_HDR_LEN`] bytes of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        let _ = out;
        todo!("H2")
    }

    /// Reads a header; `None` for a bad CM version, an IP version other than 4 or 6, mixed
    /// families, or fewer than [`IP_CM_HDR_LEN`] bytes.
    pub fn decode(b: &[u8]) -> Option<IpCmHeader> {
        let _ = b;
        todo!("H2")
    }
}

/// An IP address as a GID (IPv4-mapped `::ffff:a.b.c.d` for IPv4, as RoCE v2 GIDs are).
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}
