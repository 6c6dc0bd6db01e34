//! The `roce_packet` target: `roce_wire::decode` on arbitrary bytes, and the round trip of what
//! it accepts.
//!
//! Input: byte 0 picks the IP context (bit 0: IPv6 instead of IPv4; bit 1: IPv4 DF), bytes 1-2
//! are the IPv4 Identification, the rest is the UDP payload. The whole input is also decoded
//! without a context (no ICRC check), as a UDP socket's IPv4 reader does.
//!
//! Invariants: no panic; whatever decodes re-encodes (`encode`) under the same context, and that
//! decodes, ICRC checked, to the same headers and payload; with a context, a decoded packet's
//! re-encoding is the input itself except for the bits `encode` writes as zero (BTH resv8a, the
//! reserved bits after AckReq, the pad bytes).

use roce_wire::{decode, encode, IpContext, Packet};
use std::net::SocketAddr;

/// The context byte 0 and bytes 1-2 describe.
pub fn context(mode: u8, id: u16) -> IpContext {
    let (src, dst): (SocketAddr, SocketAddr) = if mode & 1 == 0 {
        ("192.0.2.1:49152".parse().unwrap(), "192.0.2.2:4791".parse().unwrap())
    } else {
        ("[2001:db8::1]:49152".parse().unwrap(), "[2001:db8::2]:4791".parse().unwrap())
    };
    IpContext { src, dst, ipv4_id: id, ipv4_df: mode & 2 != 0 }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let v6 = context(1, 0);
    if let Ok(p) = decode(data, None) {
        round_trip(&p, &v6);
    }
    let [mode, a, b, pkt @ ..] = data else { return };
    let ip = context(*mode, u16::from_be_bytes([*a, *b]));
    if let Ok(p) = decode(pkt, Some(&ip)) {
        let out = round_trip(&p, &ip);
        assert_eq!(out.len(), pkt.len(), "re-encoding changed the length");
        for (i, (x, y)) in out.iter().zip(pkt).enumerate() {
            let free = match i {
                4 => 0xff,
                8 => 0x7f,
                _ if i >= out.len() - 4 - usize::from(p.hdr.bth.pad) && i < out.len() - 4 => 0xff,
                _ => 0,
            };
            // The ICRC differs exactly when a free bit did.
            if i < out.len() - 4 {
                assert_eq!(x & !free, y & !free, "byte {i} changed by the round trip");
            }
        }
    }
}

/// Encodes `p` under `ip` and checks the result decodes to the same packet.
fn round_trip(p: &Packet<'_>, ip: &IpContext) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&p.hdr, p.payload, ip, &mut out).expect("a decoded packet re-encodes");
    let q = decode(&out, Some(ip)).expect("a re-encoded packet decodes");
    assert_eq!((q.hdr, q.payload), (p.hdr, p.payload));
    out
}
