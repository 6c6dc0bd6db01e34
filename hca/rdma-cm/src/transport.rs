//! Where CM MADs go out and come in: the GSI QP (QP1) of a device port, or an in-memory pair in
//! tests. MADs are the 256-byte GMPs of IBTA 13.4; on RoCE each travels in a UD datagram to
//! QP1 with the GSI Q_Key ([`GSI_QKEY`]) and a GRH (IBTA Annex A16/A17).

/// The Q_Key of QP1 (IBTA 13.4.4 / C13-7.1).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The GSI's QP number.
pub const GSI_QPN: u32 = 1;
/// A MAD's size (IBTA 13.4.2).
pub const MAD_SIZE: usize = 256;

/// A datagram address on a RoCE/IB port: the remote end (for a send) or the sender (for a
/// received MAD), with the GRH fields that reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct MadAddr {
    /// The remote GID (RoCE v2: an IPv4-mapped or IPv6 address).
    pub gid: [u8; 16],
    /// The remote QP ([`GSI_QPN`] for CM MADs).
    pub qpn: u32,
    /// The Q_Key to send with ([`GSI_QKEY`]).
    pub qkey: u32,
    /// P_Key index on the local port.
    pub pkey_index: u16,
    /// The local GID index to send from (for a received MAD: the local GID it arrived at).
    pub sgid_index: u8,
    /// GRH hop limit (for RoCE v2 the IP TTL).
    pub hop_limit: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// GRH flow label (20 bits).
    pub flow_label: u32,
}

/// A MAD that arrived on QP1: who sent it and its bytes (at most [`MAD_SIZE`] are looked at;
/// shorter ones are malformed and dropped by the CM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMad {
    /// The sender (source GID and QP from the GRH and DETH) and the local GID index it reached.
    pub from: MadAddr,
    /// The datagram's payload.
    pub mad: Vec<u8>,
}

/// Sends MADs. Implementations: the GSI QP of a device (through libibverbs's private GSI
/// entry points), an in-memory pair in tests.
pub trait MadTransport: Send + Sync {
    /// Sends `mad` (exactly [`MAD_SIZE`] bytes) to `to`. An error is the transport's (the CM
    /// counts it and relies on its retries, as a lost MAD).
    fn send(&self, to: &MadAddr, mad: &[u8]) -> std::io::Result<()>;
}
