//! The invariant CRC of RoCE v2 (IBTA A17.4.5.1; rxe's `rxe_icrc.c` computes the same).

use crate::hdr::BthHdr;
use crate::ip::{udp_header, IpContext, IpHeader};
use zerocopy::IntoBytes;

/// IPv6 version 6 with traffic class and flow label all-ones.
const IPV6_VERSION_MASKED: u32 = 0x6fff_ffff;
/// Offset of resv8a in the BTH.
const BTH_RESV8A: usize = core::mem::offset_of!(BthHdr, resv8a);

/// The ICRC of a packet: CRC-32 (zlib's polynomial and conditioning, as `crc32fast`) over 8 bytes
/// of 0xFF, the IP header with its variant fields all-ones (IPv4 TOS, TTL and header checksum;
/// IPv6 traffic class, flow label and hop limit), the UDP header with checksum 0xFFFF, and the UDP
/// payload up to the ICRC with BTH byte 4 (resv8a) all-ones. The UDP length counts the 4 ICRC
/// bytes that follow `udp_payload_without_icrc`. The ICRC travels little-endian after the payload.
///
/// Lengths beyond what a UDP header can hold wrap (such a packet has no valid ICRC; [`crate::decode`]
/// rejects it before computing one).
pub fn icrc(ip: &IpContext, udp_payload_without_icrc: &[u8]) -> u32 {
    let udp_len = (8 + udp_payload_without_icrc.len() + 4) as u16;
    let mut iph = IpHeader::new(ip, udp_len, 0xff);
    match &mut iph {
        IpHeader::V4(h) => {
            h.tos = 0xff;
            h.check = 0xffff.into();
        }
        IpHeader::V6(h) => h.flow = IPV6_VERSION_MASKED.into(),
    }
    let mut udp = udp_header(ip, udp_len);
    udp.check = 0xffff.into();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[0xff; 8]);
    crc.update(iph.as_bytes());
    crc.update(udp.as_bytes());
    let (bth, rest) = udp_payload_without_icrc.split_at(udp_payload_without_icrc.len().min(BTH_RESV8A + 1));
    let mut masked = [0u8; BTH_RESV8A + 1];
    masked[..bth.len()].copy_from_slice(bth);
    if bth.len() == masked.len() {
        masked[BTH_RESV8A] = 0xff;
    }
    crc.update(&masked[..bth.len()]);
    crc.update(rest);
    crc.finalize()
}
