//! encode / decode / ICRC against independently computed vectors and against every malformation
//! decode must name.

use roce_wire::opcode::{self, *};
use roce_wire::{decode, encode, icrc, Aeth, AtomicEth, Bth, Headers, IpContext, NakCode, Reth, Syndrome, WireError};
use std::net::SocketAddr;

fn ctx(src: &str, dst: &str) -> IpContext {
    IpContext::new(src.parse::<SocketAddr>().unwrap(), dst.parse::<SocketAddr>().unwrap())
}

fn v4() -> IpContext {
    IpContext { ipv4_id: 0x1234, ..ctx("10.9.0.1:49152", "10.9.0.2:4791") }
}

fn v6() -> IpContext {
    ctx("[fd00::1]:49153", "[fd00::2]:4791")
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Computed offline with Python's `zlib.crc32` over 8 x 0xFF, the IPv4 header with TOS, TTL and
/// checksum all-ones (ID 0x1234, DF), the UDP header with checksum 0xFFFF, and the BTH with
/// resv8a 0xFF (the recipe of `docs/rxe.md`, fact 3, verified against rxe).
const V4_SEND_ONLY_IMM: (&str, u32) = ("05f0ffff00000011800001001234567868656c6c6f000000", 0x6606_2181);
/// Likewise over IPv6 (traffic class, flow label, hop limit all-ones), RDMA WRITE Only.
const V6_WRITE_ONLY: (&str, u32) =
    ("0a40ffff00abcdef00fffffe00007f001234500000001122000000080001020304050607", 0x9fb3_dedf);

fn send_only_imm() -> Headers {
    Headers {
        bth: Bth {
            opcode: RC_SEND_ONLY_WITH_IMMEDIATE,
            solicited: true,
            mig_req: true,
            pad: 3,
            pkey: 0xffff,
            dest_qp: 0x11,
            ack_req: true,
            psn: 0x100,
        },
        imm: Some(0x1234_5678),
        ..Headers::default()
    }
}

fn write_only() -> Headers {
    Headers {
        bth: Bth {
            opcode: RC_RDMA_WRITE_ONLY,
            mig_req: true,
            pkey: 0xffff,
            dest_qp: 0xab_cdef,
            psn: 0xff_fffe,
            ..Bth::default()
        },
        reth: Some(Reth { va: 0x7f00_1234_5000, rkey: 0x1122, dma_len: 8 }),
        ..Headers::default()
    }
}

fn vector(v: (&str, u32)) -> Vec<u8> {
    let mut b = hex(v.0);
    b.extend_from_slice(&v.1.to_le_bytes());
    b
}

#[test]
fn icrc_matches_the_independent_vectors() {
    let b4 = hex(V4_SEND_ONLY_IMM.0);
    assert_eq!(icrc(&v4(), &b4), V4_SEND_ONLY_IMM.1);
    let b6 = hex(V6_WRITE_ONLY.0);
    assert_eq!(icrc(&v6(), &b6), V6_WRITE_ONLY.1);
}

#[test]
fn encode_produces_the_vectors_byte_for_byte() {
    let mut out = vec![0xaa; 3];
    encode(&send_only_imm(), b"hello", &v4(), &mut out).unwrap();
    assert_eq!(out, vector(V4_SEND_ONLY_IMM));
    encode(&write_only(), &[0, 1, 2, 3, 4, 5, 6, 7], &v6(), &mut out).unwrap();
    assert_eq!(out, vector(V6_WRITE_ONLY));
}

#[test]
fn decode_reads_the_vectors() {
    let b = vector(V4_SEND_ONLY_IMM);
    let p = decode(&b, Some(&v4())).unwrap();
    assert_eq!((p.hdr, p.payload), (send_only_imm(), &b"hello"[..]));
    let b = vector(V6_WRITE_ONLY);
    let p = decode(&b, Some(&v6())).unwrap();
    assert_eq!((p.hdr, p.payload), (write_only(), &[0, 1, 2, 3, 4, 5, 6, 7][..]));
    assert_eq!(decode(&b, None).unwrap().hdr, write_only(), "no ICRC check without a context");
}

#[test]
fn any_corrupted_invariant_byte_fails_the_icrc() {
    for (v, ip) in [(V4_SEND_ONLY_IMM, v4()), (V6_WRITE_ONLY, v6())] {
        let good = vector(v);
        for i in (0..good.len()).filter(|&i| i != 4) {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                assert_eq!(decode(&b, Some(&ip)), Err(WireError::BadIcrc), "byte {i} bit {bit}");
            }
        }
    }
}

#[test]
fn the_ip_and_udp_context_is_inside_the_icrc() {
    let b = vector(V4_SEND_ONLY_IMM);
    let ip = v4();
    let changed = [
        IpContext { ipv4_id: 0x1235, ..ip },
        IpContext { ipv4_df: false, ..ip },
        IpContext { src: "10.9.0.3:49152".parse().unwrap(), ..ip },
        IpContext { dst: "10.9.0.2:4792".parse().unwrap(), ..ip },
        IpContext { src: "10.9.0.1:49153".parse().unwrap(), ..ip },
    ];
    for c in changed {
        assert_eq!(decode(&b, Some(&c)), Err(WireError::BadIcrc), "{c:?}");
    }
    let b = vector(V6_WRITE_ONLY);
    let c = IpContext { src: "[fd00::3]:49153".parse().unwrap(), ..v6() };
    assert_eq!(decode(&b, Some(&c)), Err(WireError::BadIcrc));
    let c = IpContext { ipv4_id: 7, ipv4_df: false, ..v6() };
    assert!(decode(&b, Some(&c)).is_ok(), "IPv6 has no Identification");
}

#[test]
fn bth_resv8a_is_masked() {
    for (v, ip) in [(V4_SEND_ONLY_IMM, v4()), (V6_WRITE_ONLY, v6())] {
        let mut b = vector(v);
        for x in [0x01, 0x80, 0xc0, 0xff] {
            b[4] = x;
            assert!(decode(&b, Some(&ip)).is_ok(), "resv8a {x:#x}");
        }
    }
}

/// Headers for `op` with every extension header it carries.
fn headers_for(op: u8, psn: u32) -> Headers {
    let l = opcode::layout(op).unwrap();
    Headers {
        bth: Bth {
            opcode: op,
            mig_req: true,
            pkey: 0xffff,
            dest_qp: 0x12_3456,
            psn,
            ack_req: op % 3 == 0,
            solicited: op % 2 == 0,
            pad: 0,
        },
        reth: l.reth.then_some(Reth { va: 0xdead_beef_0000 + u64::from(op), rkey: 0x55, dma_len: 9 }),
        aeth: l.aeth.then_some(Aeth::ack(0xab_cdef, 0x1f)),
        imm: l.imm.then_some(0xcafe_0000 | u32::from(op)),
        atomic_eth: l.atomic_eth.then_some(AtomicEth {
            va: 0x7f00_0000_1000,
            rkey: 0x66,
            swap_add: 0x0102_0304_0506_0708,
            compare: 0x1112_1314_1516_1718,
        }),
        atomic_ack: l.atomic_ack_eth.then_some(0x2122_2324_2526_2728),
    }
}

#[test]
fn every_opcode_round_trips_with_every_pad() {
    let mut out = Vec::new();
    for ip in [v4(), v6()] {
        for op in opcode::ALL {
            let max = if opcode::layout(op).unwrap().payload { 9 } else { 0 };
            for n in 0..=max {
                let payload: Vec<u8> = (0..n as u8).collect();
                let h = headers_for(op, 0xff_fff0 + u32::from(n as u8));
                encode(&h, &payload, &ip, &mut out).unwrap();
                assert_eq!(out.len() % 4, 0);
                let p = decode(&out, Some(&ip)).unwrap();
                let pad = ((4 - n % 4) % 4) as u8;
                assert_eq!(p.hdr, Headers { bth: Bth { pad, ..h.bth }, ..h }, "op {op:#x} n {n}");
                assert_eq!(p.payload, &payload[..]);
            }
        }
    }
}

#[test]
fn encode_refuses_header_sets_that_do_not_match_the_opcode() {
    let mut out = vec![1, 2, 3];
    let ip = v6();
    for op in opcode::ALL {
        let good = headers_for(op, 1);
        let wrong = [
            Headers { reth: good.reth.xor(Some(Reth::default())), ..good },
            Headers { aeth: good.aeth.xor(Some(Aeth::default())), ..good },
            Headers { imm: good.imm.xor(Some(0)), ..good },
            Headers { atomic_eth: good.atomic_eth.xor(Some(AtomicEth::default())), ..good },
            Headers { atomic_ack: good.atomic_ack.xor(Some(0)), ..good },
        ];
        for h in wrong {
            assert_eq!(encode(&h, &[], &ip, &mut out), Err(WireError::BadHeaders), "{h:?}");
        }
    }
    assert_eq!(out, [1, 2, 3], "nothing written on error");
    for op in [0x15, 0x16, 0x1f, 0x20, 0x64, 0xff] {
        let h = Headers { bth: Bth { opcode: op, ..Bth::default() }, ..Headers::default() };
        assert_eq!(encode(&h, &[], &ip, &mut out), Err(WireError::UnknownOpcode(op)));
    }
    for op in [RC_RDMA_READ_REQUEST, RC_ACKNOWLEDGE, RC_ATOMIC_ACKNOWLEDGE, RC_COMPARE_SWAP, RC_FETCH_ADD] {
        let h = headers_for(op, 1);
        assert_eq!(encode(&h, &[1], &ip, &mut out), Err(WireError::UnexpectedPayload));
    }
    let h = headers_for(RC_SEND_ONLY, 1 << 24);
    assert_eq!(encode(&h, &[], &ip, &mut out), Err(WireError::FieldRange));
    let mut h = headers_for(RC_SEND_ONLY, 1);
    h.bth.dest_qp = 1 << 24;
    assert_eq!(encode(&h, &[], &ip, &mut out), Err(WireError::FieldRange));
    let mut h = headers_for(RC_ACKNOWLEDGE, 1);
    h.aeth = Some(Aeth { syndrome: 0, msn: 1 << 24 });
    assert_eq!(encode(&h, &[], &ip, &mut out), Err(WireError::FieldRange));
}

#[test]
fn encode_refuses_what_a_udp_datagram_cannot_carry() {
    let mut out = Vec::new();
    let h = headers_for(RC_SEND_ONLY, 1);
    // UDP length 65535 at most: 8 UDP + 12 BTH + payload + 4 ICRC; IPv4 also 20 IP bytes.
    // The payload is padded to a multiple of 4.
    let v6_max = vec![0; (65535 - 8 - 12 - 4) & !3];
    encode(&h, &v6_max, &v6(), &mut out).unwrap();
    assert!(decode(&out, Some(&v6())).is_ok());
    assert_eq!(encode(&h, &[0; 65512 - 3], &v6(), &mut out), Err(WireError::TooLong));
    let v4_max = vec![0; (65535 - 20 - 8 - 12 - 4) & !3];
    encode(&h, &v4_max, &v4(), &mut out).unwrap();
    assert!(decode(&out, Some(&v4())).is_ok());
    assert_eq!(encode(&h, &v6_max, &v4(), &mut out), Err(WireError::TooLong));
    let long = vec![0; 65535 - 8 + 1];
    assert_eq!(decode(&long, None), Err(WireError::TooLong));
}

fn encoded(h: &Headers, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(h, payload, &v6(), &mut out).unwrap();
    out
}

/// Rewrites the ICRC after a change, so decode gets past it to the check under test.
fn reseal(b: &mut [u8]) {
    let n = b.len() - 4;
    let c = icrc(&v6(), &b[..n]);
    b[n..].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn decode_names_each_malformation() {
    let ip = v6();
    let d = |b: &[u8]| decode(b, Some(&ip)).map(|p| p.hdr);
    for n in 0..16 {
        assert_eq!(decode(&vec![0; n], Some(&ip)), Err(WireError::Truncated), "{n} bytes");
        assert_eq!(decode(&vec![0; n], None), Err(WireError::Truncated), "{n} bytes");
    }
    let mut b = encoded(&headers_for(RC_SEND_ONLY, 5), b"abcd");
    b[1] |= 0x01;
    reseal(&mut b);
    assert_eq!(d(&b), Err(WireError::BadVersion));
    for op in [0x15u8, 0x17, 0x20, 0x24, 0x64, 0x81, 0xff] {
        let mut b = encoded(&headers_for(RC_SEND_ONLY, 5), b"abcd");
        b[0] = op;
        reseal(&mut b);
        assert_eq!(d(&b), Err(WireError::UnknownOpcode(op)));
    }
    // An opcode whose extension headers do not fit: RDMA WRITE Only without its RETH.
    let mut b = encoded(&headers_for(RC_SEND_ONLY, 5), b"abcd");
    b[0] = RC_RDMA_WRITE_ONLY;
    reseal(&mut b);
    assert_eq!(d(&b), Err(WireError::Truncated));
    // Pad count larger than the payload, and a payload not a multiple of 4.
    let mut b = encoded(&headers_for(RC_SEND_ONLY, 5), b"");
    b[1] |= 0x10;
    reseal(&mut b);
    assert_eq!(d(&b), Err(WireError::BadPad));
    let mut b = encoded(&headers_for(RC_SEND_ONLY, 5), b"abcd");
    b.insert(12, 0);
    reseal(&mut b);
    assert_eq!(d(&b), Err(WireError::BadPad));
    // Payload (or pad) on an opcode that carries none.
    for op in [RC_RDMA_READ_REQUEST, RC_ACKNOWLEDGE] {
        let mut b = encoded(&headers_for(op, 5), b"");
        let n = b.len() - 4;
        b.splice(n..n, [0, 0, 0, 0]);
        reseal(&mut b);
        assert_eq!(d(&b), Err(WireError::UnexpectedPayload));
        let mut b = encoded(&headers_for(op, 5), b"");
        b[1] |= 0x30;
        reseal(&mut b);
        assert_eq!(d(&b), Err(WireError::BadPad));
    }
}

#[test]
fn decode_of_every_prefix_and_of_noise_is_an_error_not_a_panic() {
    let b = encoded(&headers_for(RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 5), b"0123456789");
    for n in 0..b.len() {
        assert!(decode(&b[..n], Some(&v6())).is_err(), "prefix {n}");
        let _ = decode(&b[..n], None);
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 80) as usize;
        let noise: Vec<u8> = (0..len).map(|i| (x >> (i % 8 * 8)) as u8 ^ i as u8).collect();
        let _ = decode(&noise, None);
        let _ = decode(&noise, Some(&v4()));
    }
}

#[test]
fn aeth_syndromes() {
    assert_eq!(Aeth::ack(0x1ff_ffff, 0x1f), Aeth { syndrome: 0x1f, msn: 0xff_ffff });
    assert_eq!(Aeth::ack(1, 3).syndrome(), Syndrome::Ack { credits: 3 });
    assert_eq!(Aeth::rnr_nak(1, 0x12).syndrome, 0x32);
    assert_eq!(Aeth::rnr_nak(1, 0x12).syndrome(), Syndrome::RnrNak { timer: 0x12 });
    let codes = [
        (NakCode::PsnSequenceError, 0x60),
        (NakCode::InvalidRequest, 0x61),
        (NakCode::RemoteAccessError, 0x62),
        (NakCode::RemoteOperationalError, 0x63),
        (NakCode::InvalidRdRequest, 0x64),
        (NakCode::Reserved(9), 0x69),
    ];
    for (code, byte) in codes {
        assert_eq!(Aeth::nak(2, code).syndrome, byte);
        assert_eq!(Aeth::nak(2, code).syndrome(), Syndrome::Nak(code));
    }
    for byte in [0x40, 0x5f, 0x80, 0xe0, 0xff] {
        assert_eq!(Aeth { syndrome: byte, msn: 0 }.syndrome(), Syndrome::Reserved(byte));
    }
}

/// The atomic headers lie on the wire as IBTA 9.3.4 and 9.3.7 draw them, big-endian: AtomicETH
/// (VA, R_Key, swap/add, compare; 28 bytes) right after the BTH; AETH then AtomicAckETH (8 bytes).
#[test]
fn atomic_headers_lie_where_ibta_puts_them() {
    let ip = v6();
    let mut out = Vec::new();
    let h = headers_for(RC_COMPARE_SWAP, 7);
    encode(&h, &[], &ip, &mut out).unwrap();
    assert_eq!(out.len(), 12 + 28 + 4);
    assert_eq!(out[12..20], 0x7f00_0000_1000u64.to_be_bytes());
    assert_eq!(out[20..24], 0x66u32.to_be_bytes());
    assert_eq!(out[24..32], 0x0102_0304_0506_0708u64.to_be_bytes());
    assert_eq!(out[32..40], 0x1112_1314_1516_1718u64.to_be_bytes());
    let h = headers_for(RC_ATOMIC_ACKNOWLEDGE, 7);
    encode(&h, &[], &ip, &mut out).unwrap();
    assert_eq!(out.len(), 12 + 4 + 8 + 4);
    assert_eq!(out[12], 0x1f);
    assert_eq!(out[16..24], 0x2122_2324_2526_2728u64.to_be_bytes());
    // One byte short of the AtomicAckETH: truncated, not misread.
    let mut short = out[..23].to_vec();
    short.extend_from_slice(&[0; 4]);
    assert_eq!(decode(&short, None), Err(WireError::Truncated));
}
