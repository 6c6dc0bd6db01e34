//! A QP's path on the RoCE v2 port: which socket it sends from (its `sgid_index` GID) and where
//! to (its `dgid`), from its address vector (IBTA A17.4: a RoCE v2 GID is an IP address).

use super::socket::Socket;
use crate::backend::Backend;
use pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
use pvrdma_abi::verbs::{mtu, Gid, QpAttr};
use pvrdma_abi::wqe::wc_status;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Where a QP's packets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Path {
    /// Index of the socket bound to the source address.
    pub sock: usize,
    /// The peer: the dgid's address, UDP port [`super::RoceConfig::udp_port`].
    pub dst: SocketAddr,
    /// The remote QPN (`dest_qp_num`).
    pub dest_qp: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
}

/// The IP address a RoCE v2 GID stands for: an IPv4-mapped GID (`::ffff:a.b.c.d`) is IPv4.
pub fn gid_ip(gid: &Gid) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The GID of an IP address (IPv4 mapped), as RoCE v2 GIDs are formed.
pub fn ip_gid(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The path of a QP with attributes `a`. Errors (the work request's completion status):
/// `LOC_QP_OP_ERR` when the `sgid_index` GID is not a RoCE v2 GID whose address the port has
/// bound (a RoCE v1 GID, as the link-local index 0, has no UDP socket to send from), when the
/// `dgid` is of the other IP family or names no one host (unspecified, multicast, broadcast: an
/// RC connection has one peer, IBTA 10.5 and A17), or when the path MTU is no IB MTU.
pub fn resolve(core: &Backend, socks: &[Socket], udp_port: u16, a: &QpAttr) -> Result<Path, u32> {
    let grh = &a.ah_attr.grh;
    let entry = core.gid_entry(grh.sgid_index).ok_or(wc_status::LOC_QP_OP_ERR)?;
    if entry.gid_type != GID_TYPE_FLAG_ROCE_V2 {
        return Err(wc_status::LOC_QP_OP_ERR);
    }
    let src = gid_ip(&entry.gid);
    let sock = socks.iter().position(|s| s.local.ip() == src).ok_or(wc_status::LOC_QP_OP_ERR)?;
    let dst = gid_ip(&grh.dgid);
    if dst.is_ipv4() != src.is_ipv4() || !unicast(dst) {
        return Err(wc_status::LOC_QP_OP_ERR);
    }
    let mtu = mtu::bytes(a.path_mtu.get()).ok_or(wc_status::LOC_QP_OP_ERR)?;
    Ok(Path { sock, dst: SocketAddr::new(dst, udp_port), dest_qp: a.dest_qp_num.get(), mtu })
}

/// Whether `ip` names one host (a peer an RC QP can be connected to).
fn unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}
