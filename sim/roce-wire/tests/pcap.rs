//! Captures written by `pcap::PcapWriter` read back by `pcap::read`, and the ICRC of the records
//! against edits of the synthesized IP and UDP headers: the masked fields (IBTA A17.4.5.1) change
//! nothing, the invariant ones break it.

use roce_wire::opcode::RC_SEND_ONLY;
use roce_wire::pcap::{read, PcapWriter};
use roce_wire::{decode, encode, Bth, Headers, IpContext, WireError};
use std::path::PathBuf;

/// Bytes in front of the first record's IP header: pcap file header and record header.
const FRAME: usize = 24 + 16;

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("roce-wire-{}-{name}.pcap", std::process::id()))
}

fn v4() -> IpContext {
    IpContext { ipv4_id: 0x0102, ..IpContext::new("10.0.0.1:50000".parse().unwrap(), "10.0.0.2:4791".parse().unwrap()) }
}

fn v6() -> IpContext {
    IpContext::new("[fd00::1]:50001".parse().unwrap(), "[fd00::2]:4791".parse().unwrap())
}

fn packet(ip: &IpContext, psn: u32) -> Vec<u8> {
    let h = Headers {
        bth: Bth { opcode: RC_SEND_ONLY, psn, dest_qp: 0x42, pkey: 0xffff, mig_req: true, ..Bth::default() },
        ..Headers::default()
    };
    let mut out = Vec::new();
    encode(&h, b"capture!x", ip, &mut out).unwrap();
    out
}

/// A capture of one packet, as file bytes.
fn one(ip: &IpContext, name: &str) -> (PathBuf, Vec<u8>) {
    let path = tmp(name);
    let mut w = PcapWriter::create(&path).unwrap();
    w.write(ip, &packet(ip, 7)).unwrap();
    drop(w);
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// The ICRC verdict of the capture after `edit` changed its bytes.
fn verdict(path: &PathBuf, bytes: &[u8], edit: impl Fn(&mut [u8])) -> Result<(), WireError> {
    let mut b = bytes.to_vec();
    edit(&mut b[FRAME..]);
    std::fs::write(path, &b).unwrap();
    let c = read(path).unwrap();
    assert_eq!(c.len(), 1);
    decode(&c[0].udp_payload, Some(&c[0].ip)).map(|_| ())
}

#[test]
fn captures_read_back_with_good_icrcs() {
    let path = tmp("mixed");
    let mut w = PcapWriter::create(&path).unwrap();
    let other = IpContext { dst: "10.0.0.2:5000".parse().unwrap(), ..v4() };
    let sent = [(v4(), 1), (v6(), 2), (other, 3), (v4(), 4)];
    for (ip, psn) in &sent {
        w.write(ip, &packet(ip, *psn)).unwrap();
    }
    let got = read(&path).unwrap();
    assert_eq!(got.len(), 3, "the record to UDP port 5000 is skipped");
    for (c, (ip, psn)) in got.iter().zip([sent[0], sent[1], sent[3]]) {
        assert_eq!(c.ip, ip);
        assert_eq!(c.udp_payload, packet(&ip, psn));
        assert_eq!(decode(&c.udp_payload, Some(&c.ip)).unwrap().hdr.bth.psn, psn);
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn ipv4_masked_fields_do_not_count_and_invariant_ones_do() {
    let (path, bytes) = one(&v4(), "v4");
    assert_eq!(verdict(&path, &bytes, |_| {}), Ok(()));
    // TOS, TTL, header checksum, UDP checksum.
    for off in [1usize, 8, 10, 11, 26, 27] {
        assert_eq!(verdict(&path, &bytes, |f| f[off] ^= 0x5a), Ok(()), "masked byte {off}");
    }
    // Identification, DF, source and destination address, source port.
    for off in [4usize, 5, 6, 12, 15, 16, 19, 20, 21] {
        assert_eq!(verdict(&path, &bytes, |f| f[off] ^= 0x40), Err(WireError::BadIcrc), "byte {off}");
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn ipv6_masked_fields_do_not_count_and_invariant_ones_do() {
    let (path, bytes) = one(&v6(), "v6");
    assert_eq!(verdict(&path, &bytes, |_| {}), Ok(()));
    // Traffic class (low nibble of byte 0 and high of byte 1), flow label, hop limit, UDP checksum.
    for (off, x) in [(0usize, 0x0f), (1, 0xff), (2, 0xff), (3, 0xff), (7, 0xff), (46, 0x12), (47, 0x34)] {
        assert_eq!(verdict(&path, &bytes, |f| f[off] ^= x), Ok(()), "masked byte {off}");
    }
    // Source and destination address, source port.
    for off in [8usize, 23, 24, 39, 40, 41] {
        assert_eq!(verdict(&path, &bytes, |f| f[off] ^= 0x01), Err(WireError::BadIcrc), "byte {off}");
    }
    std::fs::remove_file(&path).unwrap();
}
