//! The RoCE v2 wire crate (`roce-wire`) against the outside world:
//! - its IPv4, IPv6 and UDP header layouts against the C library's `struct iphdr`
//!   (`<netinet/ip.h>`), `struct ip6_hdr` (`<netinet/ip6.h>`) and `struct udphdr`
//!   (`<netinet/udp.h>`), through a C program compiled at test time (a missing compiler or header
//!   fails, it never skips);
//! - a capture of every RC opcode (atomics included, their AtomicETH and AtomicAckETH fields
//!   checked) over IPv4 and IPv6 against tshark's InfiniBand dissector: no
//!   "Malformed", every packet RRoCE with the expected opcode and PSN; and read back with
//!   `roce_wire::pcap::read`, every ICRC good. Without tshark this prints
//!   `SKIPPED: tshark not installed` and passes, unless `ROCE_REQUIRE_TSHARK=1`.

use roce_wire::hdr::{Ipv4Hdr, Ipv6Hdr, UdpHdr};
use roce_wire::opcode::{self, *};
use roce_wire::pcap::{read, PcapWriter};
use roce_wire::{decode, encode, Aeth, Bth, Headers, IpContext, NakCode, Reth};
use std::path::{Path, PathBuf};
use tests::cprobe::{require_header, CProbe};
use tests::tshark::{field, tshark_present, tshark_verbose};

/// One field: Rust name, C member, Rust offset and size.
type Field = (&'static str, &'static str, usize, usize);

macro_rules! fields {
    ($t:ty, [$($f:ident => $c:literal),+ $(,)?]) => {
        vec![$({
            let span = memoffset::span_of!($t, $f);
            (stringify!($f), $c, span.start, span.len())
        }),+]
    };
}

/// `(what, C expression, Rust value)` for the size, each field's offset and size, and the C-side
/// tiling of the listed fields (a gap means a member left out or padding).
fn layout_checks(c_type: &str, size: usize, fields: &[Field]) -> Vec<(String, String, usize)> {
    let off = |m: &str| format!("(long long)offsetof({c_type}, {m})");
    let sz = |m: &str| format!("(long long)sizeof(MEMBER({c_type}, {m}))");
    let mut v = vec![(format!("sizeof({c_type})"), format!("(long long)sizeof({c_type})"), size)];
    for &(r, c, o, s) in fields {
        v.push((format!("offset of {r} vs {c_type}.{c}"), off(c), o));
        v.push((format!("size of {r} vs {c_type}.{c}"), sz(c), s));
    }
    for w in fields.windows(2) {
        let (a, b) = (w[0].1, w[1].1);
        let gap = format!("({} - {} - {})", off(b), off(a), sz(a));
        v.push((format!("C gap between {c_type}.{a} and .{b}"), gap, 0));
    }
    if let Some(&(_, last, ..)) = fields.last() {
        let tail = format!("((long long)sizeof({c_type}) - {} - {})", off(last), sz(last));
        v.push((format!("C bytes after {c_type}.{last}"), tail, 0));
    }
    v
}

#[test]
fn ip_and_udp_layouts_match_the_c_headers() {
    for (h, pkg) in [
        ("/usr/include/netinet/ip.h", "libc6-dev"),
        ("/usr/include/netinet/ip6.h", "libc6-dev"),
        ("/usr/include/netinet/udp.h", "libc6-dev"),
    ] {
        require_header(h, pkg).unwrap_or_else(|e| panic!("{e}"));
    }
    // iphdr's first byte is the ihl/version bit-field pair, which offsetof cannot name: the
    // check starts at tos, at offset 1, and the Rust side spells the byte as `version_ihl`.
    let v4 = fields!(Ipv4Hdr, [tos => "tos", tot_len => "tot_len", id => "id",
        frag_off => "frag_off", ttl => "ttl", protocol => "protocol", check => "check",
        saddr => "saddr", daddr => "daddr"]);
    let v6 = fields!(Ipv6Hdr, [flow => "ip6_flow", plen => "ip6_plen", nxt => "ip6_nxt",
        hlim => "ip6_hlim", src => "ip6_src", dst => "ip6_dst"]);
    let udp = fields!(UdpHdr, [source => "source", dest => "dest", len => "len",
        check => "check"]);
    let mut checks = layout_checks("struct iphdr", size_of::<Ipv4Hdr>(), &v4);
    checks.extend(layout_checks("struct ip6_hdr", size_of::<Ipv6Hdr>(), &v6));
    checks.extend(layout_checks("struct udphdr", size_of::<UdpHdr>(), &udp));
    checks.push(("uh_sport aliases source".into(), "(long long)offsetof(struct udphdr, uh_sport)".into(), 0));
    let mut p = CProbe::new();
    for h in ["netinet/ip.h", "netinet/ip6.h", "netinet/udp.h"] {
        p.include(h);
    }
    for (_, e, _) in &checks {
        p.expr(e);
    }
    let values = p.run().unwrap_or_else(|e| panic!("{e}"));
    let bad: Vec<String> = checks
        .iter()
        .zip(&values)
        .filter(|((_, _, rust), &c)| c != *rust as i64)
        .map(|((what, _, rust), c)| format!("{what}: C {c}, Rust {rust}"))
        .collect();
    assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
}

/// Headers for `op` carrying every extension header it needs; PSN and details vary with `i`.
fn headers(op: u8, i: u32) -> Headers {
    let l = opcode::layout(op).expect("RC opcode");
    let aeth = match i % 4 {
        0 => Aeth::ack(i, 0x1f),
        1 => Aeth::rnr_nak(i, 0x0e),
        2 => Aeth::nak(i, NakCode::PsnSequenceError),
        _ => Aeth::nak(i, NakCode::RemoteAccessError),
    };
    Headers {
        bth: Bth {
            opcode: op,
            solicited: i % 2 == 1,
            mig_req: true,
            pad: 0,
            pkey: 0xffff,
            dest_qp: 0x11 + i,
            ack_req: matches!(i % 3, 0),
            psn: roce_wire::psn::add(0xff_fff8, i),
        },
        reth: l.reth.then_some(Reth { va: 0x7f00_0000_1000 + u64::from(i), rkey: 0x1234, dma_len: 4096 }),
        aeth: l.aeth.then_some(if op == RC_ACKNOWLEDGE { aeth } else { Aeth::ack(i, 0x1f) }),
        imm: l.imm.then_some(0xc0de_0000 | i),
        atomic_eth: l.atomic_eth.then_some(roce_wire::AtomicEth {
            va: 0x7f00_0000_2000 + 8 * u64::from(i),
            rkey: 0x4321,
            swap_add: 0x0102_0304_0506_0708 + u64::from(i),
            compare: 0x1112_1314_1516_1718,
        }),
        atomic_ack: l.atomic_ack_eth.then_some(0x2122_2324_2526_2728 + u64::from(i)),
    }
}

/// Writes a capture of every RC opcode over IPv4 and IPv6 (payload lengths 0..=5 so every pad
/// count occurs); returns the headers written, in order.
fn write_capture(path: &Path) -> Vec<Headers> {
    let v4 = IpContext::new("10.9.0.1:49152".parse().unwrap(), "10.9.0.2:4791".parse().unwrap());
    let v6 = IpContext::new("[fd00::1]:49153".parse().unwrap(), "[fd00::2]:4791".parse().unwrap());
    let mut w = PcapWriter::create(path).unwrap();
    let (mut out, mut sent) = (Vec::new(), Vec::new());
    for ip in [v4, v6] {
        for op in opcode::ALL {
            for _ in 0..if op == RC_ACKNOWLEDGE { 4 } else { 2 } {
                let i = sent.len() as u32;
                let h = headers(op, i);
                let n = if opcode::layout(op).unwrap().payload { (i % 6) as usize } else { 0 };
                let payload: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(29) ^ 0x5a).collect();
                encode(&h, &payload, &ip, &mut out).unwrap();
                w.write(&ip, &out).unwrap();
                sent.push(h);
            }
        }
    }
    sent
}
/// IBTA Table 38's names of the RC opcodes, as tshark prints them after "Reliable Connection (RC) - ".
fn ibta_name(op: u8) -> &'static str {
    const NAMES: [&str; 21] = [
        "SEND First",
        "SEND Middle",
        "SEND Last",
        "SEND Last with Immediate",
        "SEND Only",
        "SEND Only with Immediate",
        "RDMA WRITE First",
        "RDMA WRITE Middle",
        "RDMA WRITE Last",
        "RDMA WRITE Last with Immediate",
        "RDMA WRITE Only",
        "RDMA WRITE Only with Immediate",
        "RDMA READ Request",
        "RDMA READ response First",
        "RDMA READ response Middle",
        "RDMA READ response Last",
        "RDMA READ response Only",
        "Acknowledge",
        "ATOMIC Acknowledge",
        "CmpSwap",
        "FetchAdd",
    ];
    NAMES[usize::from(op)]
}

#[test]
fn tshark_decodes_every_rc_opcode_over_ipv4_and_ipv6() {
    let dir = std::env::temp_dir().join(format!("roce-wire-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap: PathBuf = dir.join("every-opcode.pcap");
    let sent = write_capture(&pcap);

    // Our own reader: every record comes back and every ICRC is good.
    let got = read(&pcap).unwrap();
    assert_eq!(got.len(), sent.len());
    for (i, (c, h)) in got.iter().zip(&sent).enumerate() {
        let p = decode(&c.udp_payload, Some(&c.ip)).unwrap_or_else(|e| panic!("record {i}: {e}"));
        assert_eq!(Headers { bth: Bth { pad: 0, ..p.hdr.bth }, ..p.hdr }, *h, "record {i}");
    }

    if !tshark_present() {
        println!("SKIPPED: tshark not installed");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let text = tshark_verbose(&pcap);
    for b in tests::tshark::COMPLAINTS {
        assert!(!text.contains(b), "tshark reports {b:?}:\n{text}");
    }
    let frames: Vec<&str> = text.split("\nFrame ").collect();
    assert_eq!(frames.len(), sent.len(), "frames in tshark's output");
    for (i, (f, h)) in frames.iter().zip(&sent).enumerate() {
        let op = h.bth.opcode;
        let want = format!("Reliable Connection (RC) - {} ({op})", ibta_name(op));
        let v4 = i < sent.len() / 2;
        let stack = if v4 { "raw:ip:udp:infiniband" } else { "raw:ipv6:udp:infiniband" };
        let protocols = field(f, "[Protocols in frame:").unwrap_or_default();
        assert!(protocols.starts_with(stack), "frame {i}: {protocols}");
        assert!(f.contains("\nInfiniBand\n"), "frame {i} is not InfiniBand:\n{f}");
        assert_eq!(field(f, "Opcode:"), Some(want.as_str()), "frame {i}");
        let psn = h.bth.psn.to_string();
        assert_eq!(field(f, "Packet Sequence Number:"), Some(psn.as_str()), "frame {i}");
        // The atomic headers as an independent dissector reads them (IBTA 9.3.4, 9.3.7).
        if let Some(a) = h.atomic_eth {
            let va = format!("{:#018x}", a.va);
            assert_eq!(field(f, "Virtual Address:"), Some(va.as_str()), "frame {i}");
            let (swap, compare) = (a.swap_add.to_string(), a.compare.to_string());
            assert_eq!(field(f, "Swap (Or Add) Data:"), Some(swap.as_str()), "frame {i}");
            assert_eq!(field(f, "Compare Data:"), Some(compare.as_str()), "frame {i}");
        }
        if let Some(orig) = h.atomic_ack {
            let orig = orig.to_string();
            assert_eq!(field(f, "Original Remote Data:"), Some(orig.as_str()), "frame {i}");
        }
        let ip_ok = if v4 { "[Header checksum status: Good]" } else { "Version: 6" };
        assert!(f.contains(ip_ok) && f.contains("[Checksum Status: Good]"), "frame {i}:\n{f}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
