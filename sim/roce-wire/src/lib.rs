//! RoCE v2 packets of the RC transport (IBTA Vol. 1 chapter 9 and Annex A17): the headers after
//! the UDP header (BTH, RETH, AETH, ImmDt, AtomicETH, AtomicAckETH), payload with pad, and the ICRC; 24-bit PSN
//! arithmetic; and pcap captures with synthesized IPv4/IPv6 and UDP headers. Pure packet code: no
//! QP, no device.
//!
//! What [`decode`] checks, and every violation is a [`WireError`], never a panic: the length (at
//! least the BTH and ICRC, at most what a UDP datagram carries), the ICRC when the caller knows
//! the IP context, transport header version 0, an RC opcode of SEND, RDMA WRITE, RDMA READ,
//! ATOMIC (CmpSwap, FetchAdd) or an acknowledge (other transports are
//! [`WireError::UnknownOpcode`]), room for exactly
//! the extension headers that opcode carries (IBTA Table 38), a pad count that fits the payload and
//! makes it a multiple of 4 bytes, and no payload on RDMA READ Request, the atomics or the acknowledges. [`encode`]
//! refuses a header set that does not match the opcode, pads, and appends the ICRC.
//!
//! The ICRC exception: the ICRC covers the IPv4 Identification (IBTA A17.4.5.1), which a UDP socket
//! never reports. An IPv4 packet read from a UDP socket therefore cannot have its ICRC checked;
//! its reader passes `ip: None` to [`decode`]. IPv6 has no such field, so IPv6 packets read from
//! a UDP socket are checked (and peers such as Linux rxe are best reached over IPv6 GIDs).
//! Facts about rxe as a peer: `docs/rxe.md` (Facts about rxe as a peer).
#![forbid(unsafe_code)]

mod codec;
pub mod hdr;
mod headers;
mod icrc;
mod ip;
pub mod opcode;
pub mod pcap;
pub mod psn;
pub mod ud;

pub use codec::{decode, encode, Packet, WireError, ICRC_LEN};
pub use headers::{Aeth, AtomicEth, Bth, Headers, NakCode, Reth, Syndrome};
pub use icrc::icrc;
pub use ip::IpContext;

/// UDP destination port of RoCE v2 (IANA "roce").
pub const ROCE_V2_UDP_PORT: u16 = 4791;
