//! The headers as they lie on the wire: `#[repr(C)]`, big-endian (network order) zerocopy types,
//! alignment 1, every reserved bit spelled out, size and field offsets asserted at compile time.
//! The IPv4, IPv6 and UDP layouts are also checked against `<netinet/ip.h>`, `<netinet/ip6.h>`
//! and `<netinet/udp.h>` by `tests/tests/wire/roce_wire.rs`.

use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Asserts at compile time that `$t` is `$size` bytes and that each named field sits at its offset
/// (the style of `pvrdma_abi::assert_layout!`).
macro_rules! assert_layout {
    ($t:ty, $size:expr $(, $field:ident = $off:expr)* $(,)?) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $size);
        $(const _: () = assert!(core::mem::offset_of!($t, $field) == $off);)*
    };
}

/// Base Transport Header (IBTA 9.2, Figure 99), 12 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct BthHdr {
    /// OpCode.
    pub opcode: u8,
    /// SE (bit 7), M (bit 6), PadCnt (bits 5:4), TVer (bits 3:0).
    pub flags: u8,
    /// Partition key.
    pub pkey: U16,
    /// resv8a in RoCE (FECN/BECN bits on InfiniBand); masked in the ICRC.
    pub resv8a: u8,
    /// Destination QP, 24 bits.
    pub dest_qp: [u8; 3],
    /// AckReq (bit 7) and 7 reserved bits.
    pub ack_req: u8,
    /// Packet sequence number, 24 bits.
    pub psn: [u8; 3],
}
assert_layout!(BthHdr, 12, opcode = 0, flags = 1, pkey = 2, resv8a = 4, dest_qp = 5, ack_req = 8, psn = 9);

/// RDMA Extended Transport Header (IBTA 9.3.3), 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct RethHdr {
    /// Virtual address of the first byte at the responder.
    pub va: U64,
    /// R_Key of the responder's memory region.
    pub rkey: U32,
    /// DMA length of the whole RDMA operation, in bytes.
    pub dma_len: U32,
}
assert_layout!(RethHdr, 16, va = 0, rkey = 8, dma_len = 12);

/// ACK Extended Transport Header (IBTA 9.3.5), 4 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct AethHdr {
    /// Syndrome (IBTA 9.7.5.2.1).
    pub syndrome: u8,
    /// Message sequence number, 24 bits.
    pub msn: [u8; 3],
}
assert_layout!(AethHdr, 4, syndrome = 0, msn = 1);

/// Immediate Data Extended Transport Header (IBTA 9.3.6), 4 bytes, carried as sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct ImmDtHdr {
    /// The immediate data.
    pub imm: U32,
}
assert_layout!(ImmDtHdr, 4, imm = 0);

/// Atomic Extended Transport Header (IBTA 9.3.4), 28 bytes: the request of a COMPARE SWAP or
/// FETCH ADD.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct AtomicEthHdr {
    /// Virtual address of the 8 bytes at the responder (8-byte aligned).
    pub va: U64,
    /// R_Key of the responder's memory region.
    pub rkey: U32,
    /// The value to swap in (COMPARE SWAP) or to add (FETCH ADD).
    pub swap_add: U64,
    /// The value to compare with (COMPARE SWAP; 0 for FETCH ADD).
    pub compare: U64,
}
assert_layout!(AtomicEthHdr, 28, va = 0, rkey = 8, swap_add = 12, compare = 20);

/// Atomic Acknowledge Extended Transport Header (IBTA 9.3.7), 8 bytes: the value the 8 bytes
/// held before the atomic operation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct AtomicAckEthHdr {
    /// The original value.
    pub orig: U64,
}
assert_layout!(AtomicAckEthHdr, 8, orig = 0);

/// IPv4 header without options (RFC 791), 20 bytes: the layout of Linux's `struct iphdr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct Ipv4Hdr {
    /// Version (bits 7:4, 4) and IHL (bits 3:0, 32-bit words).
    pub version_ihl: u8,
    /// Type of service (DSCP and ECN).
    pub tos: u8,
    /// Total length of the datagram, header included, in bytes.
    pub tot_len: U16,
    /// Identification.
    pub id: U16,
    /// Flags (bit 14 DF, bit 13 MF) and fragment offset.
    pub frag_off: U16,
    /// Time to live.
    pub ttl: u8,
    /// Protocol of the payload (17 for UDP).
    pub protocol: u8,
    /// Header checksum.
    pub check: U16,
    /// Source address.
    pub saddr: [u8; 4],
    /// Destination address.
    pub daddr: [u8; 4],
}
assert_layout!(
    Ipv4Hdr,
    20,
    version_ihl = 0,
    tos = 1,
    tot_len = 2,
    id = 4,
    frag_off = 6,
    ttl = 8,
    protocol = 9,
    check = 10,
    saddr = 12,
    daddr = 16
);

/// IPv6 fixed header (RFC 8200), 40 bytes: the layout of `struct ip6_hdr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct Ipv6Hdr {
    /// Version (bits 31:28, 6), traffic class (27:20), flow label (19:0).
    pub flow: U32,
    /// Payload length (what follows this header), in bytes.
    pub plen: U16,
    /// Next header (17 for UDP).
    pub nxt: u8,
    /// Hop limit.
    pub hlim: u8,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
}
assert_layout!(Ipv6Hdr, 40, flow = 0, plen = 4, nxt = 6, hlim = 7, src = 8, dst = 24);

/// UDP header (RFC 768), 8 bytes: the layout of `struct udphdr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct UdpHdr {
    /// Source port.
    pub source: U16,
    /// Destination port.
    pub dest: U16,
    /// Length of header and payload, in bytes.
    pub len: U16,
    /// Checksum (0: none, allowed for IPv4 and, by RoCE v2 senders such as rxe, for IPv6).
    pub check: U16,
}
assert_layout!(UdpHdr, 8, source = 0, dest = 2, len = 4, check = 6);

/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// The DF (don't fragment) flag in [`Ipv4Hdr::frag_off`].
pub const IP_DF: u16 = 0x4000;

/// Reads a 24-bit big-endian field.
pub(crate) fn u24(b: [u8; 3]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

/// The low 24 bits of `v`, big-endian.
pub(crate) fn to_u24(v: u32) -> [u8; 3] {
    let b = v.to_be_bytes();
    [b[1], b[2], b[3]]
}
