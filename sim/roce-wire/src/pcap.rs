//! Captures of RoCE v2 traffic in the classic pcap format (via the `pcap-file` crate), link type
//! raw IP (LINKTYPE_RAW, 101): each record is an IPv4 or IPv6 header, a UDP header and the UDP
//! payload, the headers synthesized from the packet's [`IpContext`] the way the model sends it
//! (IPv4: Identification and DF from the context, TTL 64, TOS 0, header checksum; IPv6: hop limit
//! 64, traffic class and flow label 0; UDP checksum computed for both). Wireshark and tshark
//! decode UDP port 4791 as RoCE v2 ("RRoCE").

use crate::hdr::{Ipv4Hdr, Ipv6Hdr, UdpHdr, IPPROTO_UDP, IP_DF};
use crate::ip::{max_udp_len, udp_header, IpContext, IpHeader};
use crate::ROCE_V2_UDP_PORT;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader};
use pcap_file::DataLink;
use std::fs::File;
use std::io::{self, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};
use zerocopy::{FromBytes, IntoBytes};

/// TTL / hop limit of the synthesized IP headers (Linux's default).
const TTL: u8 = 64;

fn pcap_error(e: pcap_file::PcapError) -> io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        e => io::Error::new(io::ErrorKind::InvalidData, e),
    }
}

/// Writes one pcap file of RoCE v2 packets. Unbuffered: each record is in the file when
/// [`PcapWriter::write`] returns, so a capture stays whole if the process dies and can be read
/// while it is being written.
pub struct PcapWriter {
    out: pcap_file::pcap::PcapWriter<File>,
    frame: Vec<u8>,
}

impl PcapWriter {
    /// Creates (or truncates) `path` and writes the pcap file header (LINKTYPE_RAW, snap length
    /// 65535, microsecond timestamps).
    pub fn create(path: &Path) -> io::Result<Self> {
        let header = PcapHeader { datalink: DataLink::RAW, ..PcapHeader::default() };
        let out = pcap_file::pcap::PcapWriter::with_header(File::create(path)?, header).map_err(pcap_error)?;
        Ok(Self { out, frame: Vec::new() })
    }

    /// Appends one packet: the IP and UDP headers of `ip` around `udp_payload` (an encoded
    /// RoCE v2 packet, ICRC included), time-stamped now. Error `InvalidInput` when the payload
    /// does not fit a UDP datagram of that IP version; I/O errors as they come.
    pub fn write(&mut self, ip: &IpContext, udp_payload: &[u8]) -> io::Result<()> {
        let udp_len = 8 + udp_payload.len();
        if udp_len > max_udp_len(Some(ip)) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "packet too long for UDP"));
        }
        frame(ip, udp_len as u16, udp_payload, &mut self.frame);
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = self.frame.len() as u32;
        self.out.write_packet(&PcapPacket::new(ts, len, &self.frame)).map_err(pcap_error)?;
        Ok(())
    }
}

/// Builds the raw IP datagram of one packet into `out` (cleared first).
fn frame(ip: &IpContext, udp_len: u16, udp_payload: &[u8], out: &mut Vec<u8>) {
    let mut iph = IpHeader::new(ip, udp_len, TTL);
    let mut udp = udp_header(ip, udp_len);
    let pseudo = match &mut iph {
        IpHeader::V4(h) => {
            h.check = fold(sum(0, h.as_bytes())).into();
            let s = sum(sum(0, &h.saddr), &h.daddr);
            s + u32::from(IPPROTO_UDP) + u32::from(udp_len)
        }
        IpHeader::V6(h) => {
            let s = sum(sum(0, &h.src), &h.dst);
            s + u32::from(IPPROTO_UDP) + u32::from(udp_len)
        }
    };
    let check = fold(sum(sum(pseudo, udp.as_bytes()), udp_payload));
    // RFC 768: a computed 0 is sent as all-ones (0 means "no checksum").
    udp.check = if check == 0 { 0xffff } else { check }.into();
    out.clear();
    out.extend_from_slice(iph.as_bytes());
    out.extend_from_slice(udp.as_bytes());
    out.extend_from_slice(udp_payload);
}

/// One's-complement sum of big-endian 16-bit words (RFC 1071), not yet folded; an odd last
/// byte is padded with zero. Inputs here are below 64 KiB, so the u32 cannot overflow.
fn sum(acc: u32, bytes: &[u8]) -> u32 {
    let words = bytes.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])));
    words.fold(acc, |a, w| a + w)
}

/// Folds the carries of [`sum`] and complements.
fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// One RoCE v2 packet read back from a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// Addresses and ports; for IPv4 the Identification and DF of the record (for IPv6 the
    /// IPv4 fields are 0 and `true`, as [`IpContext::new`] makes them).
    pub ip: IpContext,
    /// The UDP payload: the RoCE v2 packet, ICRC included.
    pub udp_payload: Vec<u8>,
}

/// Reads a LINKTYPE_RAW capture: every record that is an unfragmented IPv4 or IPv6 (no extension
/// headers) UDP datagram to port 4791; other records are skipped. Error `InvalidData` for another
/// link type or a damaged file; I/O errors as they come. Meant for tests: then
/// `decode(&c.udp_payload, Some(&c.ip))` checks each ICRC.
pub fn read(path: &Path) -> io::Result<Vec<Captured>> {
    let mut r = PcapReader::new(BufReader::new(File::open(path)?)).map_err(pcap_error)?;
    if r.header().datalink != DataLink::RAW {
        let msg = format!("link type {:?}, not RAW", r.header().datalink);
        return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
    }
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.extend(parse(&p.map_err(pcap_error)?.data));
    }
    Ok(out)
}

/// The context and UDP payload of one raw IP datagram, if it is RoCE v2.
fn parse(data: &[u8]) -> Option<Captured> {
    let (ip, udp) = match data.first()? >> 4 {
        4 => parse_v4(data)?,
        6 => parse_v6(data)?,
        _ => return None,
    };
    let (h, rest) = UdpHdr::read_from_prefix(udp).ok()?;
    let len = usize::from(h.len.get()).checked_sub(8)?;
    if h.dest.get() != ROCE_V2_UDP_PORT || len > rest.len() {
        return None;
    }
    let ip = IpContext {
        src: SocketAddr::new(ip.src.ip(), h.source.get()),
        dst: SocketAddr::new(ip.dst.ip(), h.dest.get()),
        ..ip
    };
    Some(Captured { ip, udp_payload: rest[..len].to_vec() })
}

fn parse_v4(data: &[u8]) -> Option<(IpContext, &[u8])> {
    let (h, _) = Ipv4Hdr::read_from_prefix(data).ok()?;
    let ihl = usize::from(h.version_ihl & 0x0f) * 4;
    let frag = h.frag_off.get();
    let fragmented = frag & !IP_DF != 0;
    if h.protocol != IPPROTO_UDP || ihl < 20 || fragmented {
        return None;
    }
    let datagram = data.get(ihl..usize::from(h.tot_len.get()))?;
    let addr = |a: [u8; 4]| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), 0);
    let ip = IpContext { src: addr(h.saddr), dst: addr(h.daddr), ipv4_id: h.id.get(), ipv4_df: frag & IP_DF != 0 };
    Some((ip, datagram))
}

fn parse_v6(data: &[u8]) -> Option<(IpContext, &[u8])> {
    let (h, rest) = Ipv6Hdr::read_from_prefix(data).ok()?;
    if h.nxt != IPPROTO_UDP {
        return None;
    }
    let datagram = rest.get(..usize::from(h.plen.get()))?;
    let addr = |a: [u8; 16]| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), 0);
    Some((IpContext::new(addr(h.src), addr(h.dst)), datagram))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_verify_to_zero() {
        for ip in [
            IpContext {
                ipv4_id: 0x4242,
                ..IpContext::new("192.0.2.1:5000".parse().unwrap(), "192.0.2.2:4791".parse().unwrap())
            },
            IpContext::new("[2001:db8::1]:5000".parse().unwrap(), "[2001:db8::2]:4791".parse().unwrap()),
        ] {
            for n in [0usize, 1, 7, 64] {
                let payload: Vec<u8> = (0..n).map(|i| (i * 37) as u8 ^ 0xa5).collect();
                let mut f = Vec::new();
                frame(&ip, (8 + n) as u16, &payload, &mut f);
                let ihl = if ip.is_ipv4() { 20 } else { 40 };
                if ip.is_ipv4() {
                    assert_eq!(fold(sum(0, &f[..20])), 0, "IPv4 header checksum");
                }
                let (ips, ipd) = if ip.is_ipv4() { (&f[12..16], &f[16..20]) } else { (&f[8..24], &f[24..40]) };
                let pseudo = sum(sum(0, ips), ipd) + 17 + (8 + n) as u32;
                assert_eq!(fold(sum(pseudo, &f[ihl..])), 0, "UDP checksum, {n} bytes");
                let c = parse(&f).unwrap();
                assert_eq!((c.ip, &c.udp_payload[..]), (ip, &payload[..]));
            }
        }
    }
}
