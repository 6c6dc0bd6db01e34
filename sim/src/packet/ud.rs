//! The UD datagram on the wire (IBTA 9.8.3 and 11.4.1.2): what it carries beyond an RC SEND
//! (the DETH's Q_Key), and the GRH a receiver finds in the first 40 bytes of its buffer.

use pvrdma_abi::verbs::Gid;
use pvrdma_abi::wqe::network_type;
use std::net::Ipv6Addr;

/// Bytes of the GRH area at the start of a UD receive buffer (IBTA 11.4.1.2).
pub const GRH_LEN: usize = 40;
/// A `remote_qkey` with this bit set means "send with the QP's own Q_Key" (IBTA 10.2.5).
pub const QKEY_OWN: u32 = 1 << 31;
/// The port's active MTU in bytes: the largest UD message (IBTA C10-93.1.1).
pub const UD_MTU: u64 = 1024;
/// BTH (12), DETH (8) and ICRC (4) bytes of a UD packet on RoCE v2, ImmDt not included.
pub const IBA_BYTES: usize = 12 + 8 + 4;
/// UDP header bytes.
const UDP_BYTES: usize = 8;

/// What a UD datagram carries beyond an RC SEND: the DETH's Q_Key (already resolved from the
/// sender's QP when the WQE asked for it) and the GRH as the receiver will see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The DETH's Q_Key.
    pub qkey: u32,
    /// The GRH area the receiver scatters first (see [`grh`]).
    pub grh: [u8; GRH_LEN],
    /// `network_hdr_type` of the receive CQE: IPv4 or IPv6 (RoCE v2).
    pub network: u8,
    /// The sender's GID index (the RoCE port sends from that GID's address).
    pub sgid_index: u8,
}

/// A datagram's route: what its IP (or IB GRH) header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Source GID (the sender's).
    pub sgid: Gid,
    /// Destination GID.
    pub dgid: Gid,
    /// Traffic class (IPv4 TOS).
    pub traffic_class: u8,
    /// Flow label (20 bits; not carried by IPv4).
    pub flow_label: u32,
    /// Hop limit (IPv4 TTL).
    pub hop_limit: u8,
}

/// `network_hdr_type` for a datagram from `sgid`: IPv4 for an IPv4-mapped GID, else IPv6.
pub fn network(sgid: &Gid) -> u8 {
    if Ipv6Addr::from(*sgid).to_ipv4_mapped().is_some() {
        network_type::IPV4
    } else {
        network_type::IPV6
    }
}

/// The 40-byte GRH area of a datagram of `iba_len` bytes from BTH to ICRC, as Linux rxe and mlx5
/// fill it and `ibv_init_ah_from_wc` reads it: for an IPv4-mapped source GID (RoCE v2 over
/// IPv4), 20 zero bytes then the IPv4 header (IHL 5, DF, protocol UDP, its checksum valid); else
/// the IPv6 header as the GRH (next header UDP for RoCE v2, 0x1B for RoCE v1 / IB), payload
/// length from the UDP header on (RoCE v2) or the BTH on (RoCE v1).
pub fn grh(r: &Route, iba_len: usize, roce_v2: bool) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let src4 = Ipv6Addr::from(r.sgid).to_ipv4_mapped();
    let dst4 = Ipv6Addr::from(r.dgid).to_ipv4_mapped();
    if let (Some(s), Some(d), true) = (src4, dst4, roce_v2) {
        let h = &mut g[20..];
        let total = (20 + UDP_BYTES + iba_len).min(0xffff) as u16;
        h[0] = 0x45;
        h[1] = r.traffic_class;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[6] = 0x40; // Don't Fragment
        h[8] = r.hop_limit;
        h[9] = 17; // UDP
        h[12..16].copy_from_slice(&s.octets());
        h[16..20].copy_from_slice(&d.octets());
        let sum = ipv4_checksum(h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        return g;
    }
    let vtf = (6u32 << 28) | (u32::from(r.traffic_class) << 20) | (r.flow_label & 0xf_ffff);
    g[0..4].copy_from_slice(&vtf.to_be_bytes());
    let (plen, next) = if roce_v2 { (UDP_BYTES + iba_len, 17) } else { (iba_len, 0x1b) };
    g[4..6].copy_from_slice(&(plen.min(0xffff) as u16).to_be_bytes());
    g[6] = next;
    g[7] = r.hop_limit;
    g[8..24].copy_from_slice(&r.sgid);
    g[24..40].copy_from_slice(&r.dgid);
    g
}

/// The IPv4 header checksum (RFC 791) of a 20-byte header whose checksum field is zero.
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> Gid {
        std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }

    #[test]
    fn an_ipv4_grh_is_an_ipv4_header_in_bytes_20_to_39_with_a_valid_checksum() {
        let r = Route {
            sgid: v4([10, 0, 0, 1]),
            dgid: v4([10, 0, 0, 2]),
            traffic_class: 0x10,
            flow_label: 0,
            hop_limit: 64,
        };
        let g = grh(&r, 100 + IBA_BYTES, true);
        assert_eq!(&g[..20], &[0u8; 20]);
        assert_eq!(g[20], 0x45);
        assert_eq!((g[21], g[28], g[29]), (0x10, 64, 17));
        assert_eq!(u16::from_be_bytes([g[22], g[23]]), (20 + 8 + 100 + IBA_BYTES) as u16);
        assert_eq!(&g[32..36], &[10, 0, 0, 1]);
        assert_eq!(&g[36..40], &[10, 0, 0, 2]);
        assert_eq!(ipv4_checksum(&g[20..]), 0, "a valid header sums to zero");
        assert_eq!(network(&r.sgid), network_type::IPV4);
    }

    #[test]
    fn an_ipv6_grh_is_the_ipv6_header() {
        let s: Ipv6Addr = "fd00::1".parse().unwrap();
        let d: Ipv6Addr = "fd00::2".parse().unwrap();
        let r = Route { sgid: s.octets(), dgid: d.octets(), traffic_class: 3, flow_label: 0x12345, hop_limit: 7 };
        let g = grh(&r, 50, true);
        assert_eq!(u32::from_be_bytes([g[0], g[1], g[2], g[3]]), 0x6031_2345);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 58);
        assert_eq!((g[6], g[7]), (17, 7));
        assert_eq!(&g[8..24], &s.octets());
        assert_eq!(&g[24..40], &d.octets());
        assert_eq!(grh(&r, 50, false)[6], 0x1b, "RoCE v1: next header IB");
    }
}
