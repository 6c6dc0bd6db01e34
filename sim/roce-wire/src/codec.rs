//! Encoding and decoding the UDP payload of a RoCE v2 RC packet: BTH, extension headers, payload,
//! pad, ICRC (IBTA 9.2-9.3, Annex A17.4).

use crate::hdr::{to_u24, u24, AethHdr, AtomicAckEthHdr, AtomicEthHdr, BthHdr, ImmDtHdr, RethHdr};
use crate::headers::{Aeth, AtomicEth, Bth, Headers, Reth};
use crate::icrc::icrc;
use crate::ip::{max_udp_len, IpContext};
use crate::opcode::{self, Layout};
use crate::psn::PSN_MASK;
use zerocopy::{FromBytes, IntoBytes};

/// Bytes of the ICRC at the end of every packet.
pub const ICRC_LEN: usize = 4;

const SE: u8 = 0x80;
const MIG: u8 = 0x40;
const PAD_SHIFT: u32 = 4;
const TVER_MASK: u8 = 0x0f;
const ACK_REQ: u8 = 0x80;

/// One decoded packet: its headers and its payload without the pad bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// BTH and extension headers.
    pub hdr: Headers,
    /// Payload bytes (pad and ICRC removed), borrowed from the UDP payload.
    pub payload: &'a [u8],
}

/// Why a packet could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the BTH, the extension headers of its opcode and the ICRC.
    #[error("packet shorter than its headers and ICRC")]
    Truncated,
    /// The BTH transport header version is not 0 (IBTA 9.2: only version 0 is defined).
    #[error("BTH transport header version is not 0")]
    BadVersion,
    /// Not an RC SEND, RDMA WRITE, RDMA READ, ATOMIC or acknowledge opcode.
    #[error("unknown or unsupported opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// Encode: the RETH / AETH / ImmDt / AtomicETH / AtomicAckETH given are not the set the
    /// opcode carries.
    #[error("extension headers do not match the opcode")]
    BadHeaders,
    /// The pad count exceeds the payload, or payload and pad are not a multiple of 4 bytes.
    #[error("pad count does not fit the payload")]
    BadPad,
    /// Payload on an opcode that carries none (RDMA READ Request, the acknowledges, the atomics).
    #[error("payload on an opcode that carries none")]
    UnexpectedPayload,
    /// Encode: a 24-bit field (PSN, destination QP, MSN) has bits above 24 set.
    #[error("a 24-bit field is out of range")]
    FieldRange,
    /// The ICRC does not match the packet.
    #[error("ICRC mismatch")]
    BadIcrc,
    /// Longer than a UDP datagram in the IP header can carry.
    #[error("packet longer than a UDP datagram can carry")]
    TooLong,
}

fn header_len(l: Layout) -> usize {
    let reth = if l.reth { size_of::<RethHdr>() } else { 0 };
    let imm = if l.imm { size_of::<ImmDtHdr>() } else { 0 };
    let aeth = if l.aeth { size_of::<AethHdr>() } else { 0 };
    let atomic = if l.atomic_eth { size_of::<AtomicEthHdr>() } else { 0 };
    let atomic_ack = if l.atomic_ack_eth { size_of::<AtomicAckEthHdr>() } else { 0 };
    size_of::<BthHdr>() + reth + imm + aeth + atomic + atomic_ack
}

fn check_headers(hdr: &Headers, payload: &[u8]) -> Result<Layout, WireError> {
    let op = hdr.bth.opcode;
    let l = opcode::layout(op).ok_or(WireError::UnknownOpcode(op))?;
    if hdr.reth.is_some() != l.reth || hdr.aeth.is_some() != l.aeth || hdr.imm.is_some() != l.imm {
        return Err(WireError::BadHeaders);
    }
    if hdr.atomic_eth.is_some() != l.atomic_eth || hdr.atomic_ack.is_some() != l.atomic_ack_eth {
        return Err(WireError::BadHeaders);
    }
    if !l.payload && !payload.is_empty() {
        return Err(WireError::UnexpectedPayload);
    }
    let msn_ok = hdr.aeth.map_or(true, |a| a.msn <= PSN_MASK);
    if hdr.bth.psn > PSN_MASK || hdr.bth.dest_qp > PSN_MASK || !msn_ok {
        return Err(WireError::FieldRange);
    }
    Ok(l)
}

pub(crate) fn bth_wire(b: &Bth, pad: u8) -> BthHdr {
    let flags = if b.solicited { SE } else { 0 } | if b.mig_req { MIG } else { 0 };
    BthHdr {
        opcode: b.opcode,
        flags: flags | (pad << PAD_SHIFT),
        pkey: b.pkey.into(),
        resv8a: 0,
        dest_qp: to_u24(b.dest_qp),
        ack_req: if b.ack_req { ACK_REQ } else { 0 },
        psn: to_u24(b.psn),
    }
}

/// Builds the UDP payload into `out` (cleared first): BTH, the extension headers the opcode
/// carries, payload, pad to a multiple of 4 bytes (the BTH pad count is computed; `hdr.bth.pad` is
/// ignored), and the ICRC over `ip`. The transport header version and reserved fields are 0.
///
/// Errors (nothing is written then): [`WireError::UnknownOpcode`]; [`WireError::BadHeaders`] when
/// a RETH, AETH or ImmDt the opcode carries is missing or one it does not carry is present;
/// [`WireError::UnexpectedPayload`]; [`WireError::FieldRange`]; [`WireError::TooLong`] past the
/// UDP length of `ip`'s IP version.
pub fn encode(hdr: &Headers, payload: &[u8], ip: &IpContext, out: &mut Vec<u8>) -> Result<(), WireError> {
    let l = check_headers(hdr, payload)?;
    let pad = (4 - payload.len() % 4) % 4;
    let total = header_len(l) + payload.len() + pad + ICRC_LEN;
    if 8 + total > max_udp_len(Some(ip)) {
        return Err(WireError::TooLong);
    }
    out.clear();
    out.reserve(total);
    out.extend_from_slice(bth_wire(&hdr.bth, pad as u8).as_bytes());
    if let Some(r) = hdr.reth {
        let w = RethHdr { va: r.va.into(), rkey: r.rkey.into(), dma_len: r.dma_len.into() };
        out.extend_from_slice(w.as_bytes());
    }
    if let Some(imm) = hdr.imm {
        out.extend_from_slice(ImmDtHdr { imm: imm.into() }.as_bytes());
    }
    if let Some(a) = hdr.atomic_eth {
        let w = AtomicEthHdr {
            va: a.va.into(),
            rkey: a.rkey.into(),
            swap_add: a.swap_add.into(),
            compare: a.compare.into(),
        };
        out.extend_from_slice(w.as_bytes());
    }
    if let Some(a) = hdr.aeth {
        out.extend_from_slice(AethHdr { syndrome: a.syndrome, msn: to_u24(a.msn) }.as_bytes());
    }
    if let Some(orig) = hdr.atomic_ack {
        out.extend_from_slice(AtomicAckEthHdr { orig: orig.into() }.as_bytes());
    }
    out.extend_from_slice(payload);
    out.resize(out.len() + pad, 0);
    let crc = icrc(ip, out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Parses a UDP payload (what follows the UDP header) as an RC packet.
///
/// Checks, in order: length within a UDP datagram ([`WireError::TooLong`]) and at least a BTH and
/// an ICRC ([`WireError::Truncated`]); the ICRC when `ip` is given ([`WireError::BadIcrc`]; an IPv4
/// packet read from a UDP socket has no known Identification, so the caller passes `None` and the
/// ICRC is not checked); transport header version 0; an RC opcode this crate knows; room for its
/// extension headers; the pad count against the payload; no payload where the opcode carries
/// none. Never panics, whatever the bytes.
pub fn decode<'a>(udp_payload: &'a [u8], ip: Option<&IpContext>) -> Result<Packet<'a>, WireError> {
    if 8 + udp_payload.len() > max_udp_len(ip) {
        return Err(WireError::TooLong);
    }
    let Some(body_len) = udp_payload.len().checked_sub(ICRC_LEN) else {
        return Err(WireError::Truncated);
    };
    let (body, crc) = udp_payload.split_at(body_len);
    let (bth, rest) = BthHdr::read_from_prefix(body).map_err(|_| WireError::Truncated)?;
    if let Some(ip) = ip {
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if icrc(ip, body) != stored {
            return Err(WireError::BadIcrc);
        }
    }
    if bth.flags & TVER_MASK != 0 {
        return Err(WireError::BadVersion);
    }
    let l = opcode::layout(bth.opcode).ok_or(WireError::UnknownOpcode(bth.opcode))?;
    let (hdr, data) = extension_headers(&bth, l, rest)?;
    let payload = strip_pad(l, hdr.bth.pad, data)?;
    Ok(Packet { hdr, payload })
}

fn extension_headers<'a>(bth: &BthHdr, l: Layout, mut rest: &'a [u8]) -> Result<(Headers, &'a [u8]), WireError> {
    let mut hdr = Headers { bth: bth_value(bth), ..Headers::default() };
    if l.reth {
        let (r, tail) = RethHdr::read_from_prefix(rest).map_err(|_| WireError::Truncated)?;
        hdr.reth = Some(Reth { va: r.va.get(), rkey: r.rkey.get(), dma_len: r.dma_len.get() });
        rest = tail;
    }
    if l.imm {
        let (i, tail) = ImmDtHdr::read_from_prefix(rest).map_err(|_| WireError::Truncated)?;
        hdr.imm = Some(i.imm.get());
        rest = tail;
    }
    if l.atomic_eth {
        let (a, tail) = AtomicEthHdr::read_from_prefix(rest).map_err(|_| WireError::Truncated)?;
        let (va, rkey) = (a.va.get(), a.rkey.get());
        let (swap_add, compare) = (a.swap_add.get(), a.compare.get());
        hdr.atomic_eth = Some(AtomicEth { va, rkey, swap_add, compare });
        rest = tail;
    }
    if l.aeth {
        let (a, tail) = AethHdr::read_from_prefix(rest).map_err(|_| WireError::Truncated)?;
        hdr.aeth = Some(Aeth { syndrome: a.syndrome, msn: u24(a.msn) });
        rest = tail;
    }
    if l.atomic_ack_eth {
        let (a, tail) = AtomicAckEthHdr::read_from_prefix(rest).map_err(|_| WireError::Truncated)?;
        hdr.atomic_ack = Some(a.orig.get());
        rest = tail;
    }
    Ok((hdr, rest))
}

pub(crate) fn bth_value(b: &BthHdr) -> Bth {
    Bth {
        opcode: b.opcode,
        solicited: b.flags & SE != 0,
        mig_req: b.flags & MIG != 0,
        pad: (b.flags >> PAD_SHIFT) & 3,
        pkey: b.pkey.get(),
        dest_qp: u24(b.dest_qp),
        ack_req: b.ack_req & ACK_REQ != 0,
        psn: u24(b.psn),
    }
}

fn strip_pad(l: Layout, pad: u8, data: &[u8]) -> Result<&[u8], WireError> {
    if !l.payload && !data.is_empty() {
        return Err(WireError::UnexpectedPayload);
    }
    if data.len() % 4 != 0 {
        return Err(WireError::BadPad);
    }
    data.len().checked_sub(usize::from(pad)).map(|n| &data[..n]).ok_or(WireError::BadPad)
}
