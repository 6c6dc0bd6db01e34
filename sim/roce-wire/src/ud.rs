//! UD packets (IBTA 9.8.3): opcodes of transport bits 011, a DETH (Q_Key, source QP; IBTA 9.3.2)
//! after the BTH, ImmDt for "with Immediate", one packet per message. Kept beside the RC codec:
//! [`is_ud`] tells a UDP payload's transport, [`decode_ud`] and [`encode_ud`] check and build it
//! with the same BTH, pad and ICRC rules as [`crate::decode`] and [`crate::encode`].

use crate::codec::{bth_value, bth_wire, WireError, ICRC_LEN};
use crate::hdr::{to_u24, u24, BthHdr, ImmDtHdr};
use crate::headers::Bth;
use crate::icrc::icrc;
use crate::ip::{max_udp_len, IpContext};
use zerocopy::byteorder::network_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// UD SEND Only.
pub const UD_SEND_ONLY: u8 = 0x64;
/// UD SEND Only with Immediate.
pub const UD_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x65;
/// The transport bits (7:5) of a UD opcode.
const UD_TRANSPORT: u8 = 0x60;

/// Datagram Extended Transport Header (IBTA 9.3.2), 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct DethHdr {
    /// Queue key.
    pub qkey: U32,
    /// Reserved (8 bits), then the source QP (24 bits).
    pub resv8: u8,
    /// Source QP, 24 bits.
    pub src_qp: [u8; 3],
}
const _: () = assert!(core::mem::size_of::<DethHdr>() == 8);
const _: () = assert!(core::mem::offset_of!(DethHdr, src_qp) == 5);

/// One UD packet: BTH, DETH, immediate data if the opcode carries it, payload without pad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdPacket<'a> {
    /// Base transport header (`opcode` one of [`UD_SEND_ONLY`], [`UD_SEND_ONLY_WITH_IMMEDIATE`]).
    pub bth: Bth,
    /// The DETH's Q_Key.
    pub qkey: u32,
    /// The DETH's source QP (24 bits).
    pub src_qp: u32,
    /// ImmDt (with Immediate only).
    pub imm: Option<u32>,
    /// Payload.
    pub payload: &'a [u8],
}

/// Whether a UDP payload is a UD packet (its first byte, the opcode, has transport bits 011).
pub fn is_ud(udp_payload: &[u8]) -> bool {
    udp_payload.first().is_some_and(|op| op & 0xe0 == UD_TRANSPORT)
}

/// Builds a UD packet into `out` (cleared first), as [`crate::encode`] builds an RC one.
/// Errors: [`WireError::UnknownOpcode`] for another opcode, [`WireError::BadHeaders`] for
/// immediate data the opcode does not carry (or missing), [`WireError::FieldRange`],
/// [`WireError::TooLong`].
pub fn encode_ud(p: &UdPacket<'_>, ip: &IpContext, out: &mut Vec<u8>) -> Result<(), WireError> {
    let with_imm = match p.bth.opcode {
        UD_SEND_ONLY => false,
        UD_SEND_ONLY_WITH_IMMEDIATE => true,
        op => return Err(WireError::UnknownOpcode(op)),
    };
    if p.imm.is_some() != with_imm {
        return Err(WireError::BadHeaders);
    }
    if p.bth.psn > 0xff_ffff || p.bth.dest_qp > 0xff_ffff || p.src_qp > 0xff_ffff {
        return Err(WireError::FieldRange);
    }
    let pad = (4 - p.payload.len() % 4) % 4;
    let hdrs = 12 + 8 + if with_imm { 4 } else { 0 };
    if 8 + hdrs + p.payload.len() + pad + ICRC_LEN > max_udp_len(Some(ip)) {
        return Err(WireError::TooLong);
    }
    out.clear();
    out.extend_from_slice(bth_wire(&p.bth, pad as u8).as_bytes());
    let deth = DethHdr { qkey: p.qkey.into(), resv8: 0, src_qp: to_u24(p.src_qp) };
    out.extend_from_slice(deth.as_bytes());
    if let Some(imm) = p.imm {
        out.extend_from_slice(ImmDtHdr { imm: imm.into() }.as_bytes());
    }
    out.extend_from_slice(p.payload);
    out.resize(out.len() + pad, 0);
    let crc = icrc(ip, out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Parses a UDP payload as a UD packet, checking as [`crate::decode`] does (length, ICRC when
/// `ip` is given, version 0, a UD SEND Only opcode, room for DETH and ImmDt, the pad).
pub fn decode_ud<'a>(udp_payload: &'a [u8], ip: Option<&IpContext>) -> Result<UdPacket<'a>, WireError> {
    if 8 + udp_payload.len() > max_udp_len(ip) {
        return Err(WireError::TooLong);
    }
    let body_len = udp_payload.len().checked_sub(ICRC_LEN).ok_or(WireError::Truncated)?;
    let (body, crc) = udp_payload.split_at(body_len);
    let (bth, rest) = BthHdr::read_from_prefix(body).map_err(|_| WireError::Truncated)?;
    if let Some(ip) = ip {
        if icrc(ip, body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(WireError::BadIcrc);
        }
    }
    if bth.flags & 0x0f != 0 {
        return Err(WireError::BadVersion);
    }
    let with_imm = match bth.opcode {
        UD_SEND_ONLY => false,
        UD_SEND_ONLY_WITH_IMMEDIATE => true,
        op => return Err(WireError::UnknownOpcode(op)),
    };
    let (deth, mut rest) = DethHdr::read_from_prefix(rest).map_err(|_| WireError::Truncated)?;
    let mut imm = None;
    if with_imm {
        let (i, tail) = ImmDtHdr::read_from_prefix(rest).map_err(|_| WireError::Truncated)?;
        imm = Some(i.imm.get());
        rest = tail;
    }
    let bth = bth_value(&bth);
    if rest.len() % 4 != 0 {
        return Err(WireError::BadPad);
    }
    let payload = rest.len().checked_sub(usize::from(bth.pad)).map(|n| &rest[..n]).ok_or(WireError::BadPad)?;
    Ok(UdPacket { bth, qkey: deth.qkey.get(), src_qp: u24(deth.src_qp), imm, payload })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn ip() -> IpContext {
        let a: SocketAddr = "[fd00::1]:4791".parse().unwrap();
        let b: SocketAddr = "[fd00::2]:4791".parse().unwrap();
        IpContext::new(a, b)
    }

    #[test]
    fn ud_packets_round_trip_and_refuse_what_they_do_not_carry() {
        let bth = Bth { opcode: UD_SEND_ONLY_WITH_IMMEDIATE, pkey: 0xffff, dest_qp: 9, psn: 3, ..Bth::default() };
        let p = UdPacket { bth, qkey: 0x1111_2222, src_qp: 7, imm: Some(0xabcd), payload: b"hello" };
        let mut out = Vec::new();
        encode_ud(&p, &ip(), &mut out).unwrap();
        assert!(is_ud(&out));
        assert_eq!(out.len(), 12 + 8 + 4 + 8 + 4);
        let back = decode_ud(&out, Some(&ip())).unwrap();
        assert_eq!((back.qkey, back.src_qp, back.imm, back.payload), (p.qkey, 7, Some(0xabcd), &b"hello"[..]));
        assert_eq!((back.bth.dest_qp, back.bth.psn, back.bth.pad), (9, 3, 3));
        let mut bad = out.clone();
        bad[13] ^= 1;
        assert_eq!(decode_ud(&bad, Some(&ip())), Err(WireError::BadIcrc));
        for n in 0..out.len() - 5 {
            assert!(decode_ud(&out[..n], None).is_err(), "truncated to {n}");
        }
        assert_eq!(encode_ud(&UdPacket { imm: None, ..p }, &ip(), &mut out), Err(WireError::BadHeaders));
        let rc = UdPacket { bth: Bth { opcode: 0x04, ..bth }, ..p };
        assert_eq!(encode_ud(&rc, &ip(), &mut out), Err(WireError::UnknownOpcode(0x04)));
        assert!(!is_ud(&[0x04]) && !is_ud(&[]));
    }
}
