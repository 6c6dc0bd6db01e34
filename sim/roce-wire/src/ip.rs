//! The IP and UDP context of a packet and the IPv4/IPv6 + UDP headers synthesized from it, for
//! the ICRC (IBTA A17.4.5.1) and for captures.

use crate::hdr::{Ipv4Hdr, Ipv6Hdr, UdpHdr, IPPROTO_UDP, IP_DF};
use std::net::{IpAddr, SocketAddr};
use zerocopy::IntoBytes;

/// The IP and UDP context the ICRC covers (IBTA A17.4.5.1): both addresses with their UDP ports,
/// and for IPv4 the Identification and the Don't-Fragment flag (the model sends ID 0 with DF set,
/// as an unconnected Linux UDP socket with `IP_PMTUDISC_DO` does).
///
/// Both addresses IPv4 means an IPv4 packet; otherwise the packet is IPv6 and an IPv4 address in
/// it stands for its IPv4-mapped form (`::ffff:a.b.c.d`); `ipv4_id` and `ipv4_df` then do not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpContext {
    /// Source address and UDP port.
    pub src: SocketAddr,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// IPv4 Identification.
    pub ipv4_id: u16,
    /// IPv4 Don't Fragment flag.
    pub ipv4_df: bool,
}

impl IpContext {
    /// A context with IPv4 Identification 0 and DF set (what the model sends).
    pub fn new(src: SocketAddr, dst: SocketAddr) -> Self {
        Self { src, dst, ipv4_id: 0, ipv4_df: true }
    }

    /// Whether the packet travels over IPv4 (both addresses IPv4).
    pub fn is_ipv4(&self) -> bool {
        self.src.is_ipv4() && self.dst.is_ipv4()
    }
}

/// The synthesized IP header of a packet.
pub(crate) enum IpHeader {
    V4(Ipv4Hdr),
    V6(Ipv6Hdr),
}

impl IpHeader {
    /// The header for a UDP datagram of `udp_len` bytes (header included), with TTL / hop limit
    /// `ttl`, TOS / traffic class and flow label 0, and a zero IPv4 checksum.
    /// `udp_len` must have been checked against [`max_udp_len`].
    pub(crate) fn new(ip: &IpContext, udp_len: u16, ttl: u8) -> Self {
        match (ip.src.ip(), ip.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Self::V4(Ipv4Hdr {
                version_ihl: 0x45,
                tos: 0,
                tot_len: (20 + udp_len).into(),
                id: ip.ipv4_id.into(),
                frag_off: if ip.ipv4_df { IP_DF } else { 0 }.into(),
                ttl,
                protocol: IPPROTO_UDP,
                check: 0.into(),
                saddr: s.octets(),
                daddr: d.octets(),
            }),
            (s, d) => Self::V6(Ipv6Hdr {
                flow: (6u32 << 28).into(),
                plen: udp_len.into(),
                nxt: IPPROTO_UDP,
                hlim: ttl,
                src: v6(s),
                dst: v6(d),
            }),
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::V4(h) => h.as_bytes(),
            Self::V6(h) => h.as_bytes(),
        }
    }
}

fn v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// The largest UDP length (header included) the IP header can describe.
pub(crate) fn max_udp_len(ip: Option<&IpContext>) -> usize {
    match ip {
        Some(ip) if ip.is_ipv4() => usize::from(u16::MAX) - 20,
        _ => usize::from(u16::MAX),
    }
}

/// The UDP header for `udp_len` bytes with checksum 0.
pub(crate) fn udp_header(ip: &IpContext, udp_len: u16) -> UdpHdr {
    UdpHdr { source: ip.src.port().into(), dest: ip.dst.port().into(), len: udp_len.into(), check: 0.into() }
}
