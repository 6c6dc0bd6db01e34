//! `rxe_capture`: what a capture of the soft-RoCE interop traffic shows, for the VM stage
//! (`tests/qemu/l1-rxe.sh`) and docs/rxe.md's table of rxe's behaviour.
//!
//! ```text
//! rxe_capture FILE --rxe ADDR [--rxe ADDR]...
//! ```
//! FILE is a pcap of Ethernet frames (`tcpdump -w` on a veth, full snap length); `--rxe` names
//! rxe's addresses, which tell the two directions apart. Every RoCE v2 packet (UDP to 4791) is
//! decoded with `roce_wire::decode` and its ICRC checked against the IP header as captured (so an
//! IPv4 packet's Identification counts, which a UDP socket never shows). For each direction and IP
//! version it prints `OBSERVED: capture ...` lines: ICRC results, the IP and UDP header fields a
//! sender chooses (UDP checksum, TTL / hop limit, traffic class, flow label, IPv4 Identification
//! and DF, UDP source ports), BTH fields (M bit, P_Key, AckReq per opcode), the opcodes, the AETH
//! syndromes, and request packets per acknowledge. Exit status 0 when at least one packet went
//! each way and every packet decoded with a good ICRC; 1 otherwise; 2 when the file cannot be
//! read.
#![forbid(unsafe_code)]

use pcap_file::pcap::PcapReader;
use pcap_file::DataLink;
use roce_wire::hdr::{Ipv4Hdr, Ipv6Hdr, UdpHdr, IPPROTO_UDP, IP_DF};
use roce_wire::{decode, opcode, ud, Aeth, Bth, IpContext, WireError, ROCE_V2_UDP_PORT};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::BufReader;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use zerocopy::FromBytes;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;

/// One captured RoCE v2 datagram with the header fields its sender chose.
struct Frame {
    ip: IpContext,
    ttl: u8,
    tclass: u8,
    flow_label: u32,
    udp_check: u16,
    udp_payload: Vec<u8>,
}

/// What one direction and IP version showed.
#[derive(Default)]
struct Dir {
    packets: u64,
    icrc_ok: u64,
    icrc_bad: u64,
    malformed: BTreeMap<String, u64>,
    udp_check_zero: u64,
    ttl: BTreeMap<u8, u64>,
    tclass: BTreeMap<u8, u64>,
    flow_labels: BTreeSet<u32>,
    sports: BTreeSet<u16>,
    ipv4_ids: BTreeSet<u16>,
    ipv4_id_zero: u64,
    ipv4_df: u64,
    mig_req: u64,
    pkeys: BTreeSet<u16>,
    opcodes: BTreeMap<u8, (u64, u64)>,
    syndromes: BTreeMap<String, u64>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (file, rxe) = match parse(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rxe_capture: {e}");
            return ExitCode::from(2);
        }
    };
    let frames = match read(&file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rxe_capture: {file}: {e}");
            return ExitCode::from(2);
        }
    };
    let dirs = tally(&frames, &rxe);
    for ((dir, fam), d) in &dirs {
        report(&format!("{dir} {fam}"), d);
    }
    acks_per_request(&dirs);
    let each_way = ["rxe->model", "model->rxe"].iter().all(|w| dirs.keys().any(|(d, _)| d == w));
    let all_good = dirs.values().all(|d| d.icrc_bad == 0 && d.malformed.is_empty());
    println!("OBSERVED: capture: {} RoCE v2 packets, each way: {each_way}, every ICRC good: {all_good}", frames.len());
    if each_way && all_good {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn parse(args: &[String]) -> Result<(String, Vec<IpAddr>), String> {
    let usage = || "usage: rxe_capture FILE --rxe ADDR [--rxe ADDR]...".to_string();
    let (mut file, mut rxe) = (None, Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rxe" => rxe.push(it.next().and_then(|v| v.parse().ok()).ok_or_else(usage)?),
            _ if file.is_none() => file = Some(a.clone()),
            _ => return Err(usage()),
        }
    }
    match file {
        Some(f) if !rxe.is_empty() => Ok((f, rxe)),
        _ => Err(usage()),
    }
}

/// The RoCE v2 datagrams of an Ethernet capture; other frames are skipped.
fn read(path: &str) -> Result<Vec<Frame>, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let mut r = PcapReader::new(BufReader::new(file)).map_err(|e| e.to_string())?;
    if r.header().datalink != DataLink::ETHERNET {
        return Err(format!("link type {:?}, not Ethernet", r.header().datalink));
    }
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.map_err(|e| e.to_string())?;
        if p.data.len() < p.orig_len as usize {
            return Err("a truncated frame: capture with the full snap length".into());
        }
        out.extend(frame(&p.data));
    }
    Ok(out)
}

fn frame(eth: &[u8]) -> Option<Frame> {
    let ethertype = u16::from_be_bytes([*eth.get(12)?, *eth.get(13)?]);
    let ip = eth.get(14..)?;
    let (f, udp) = match ethertype {
        ETHERTYPE_IPV4 => ipv4(ip)?,
        ETHERTYPE_IPV6 => ipv6(ip)?,
        _ => return None,
    };
    let (h, rest) = UdpHdr::read_from_prefix(udp).ok()?;
    let len = usize::from(h.len.get()).checked_sub(8)?;
    if h.dest.get() != ROCE_V2_UDP_PORT || len > rest.len() {
        return None;
    }
    let ip = IpContext {
        src: SocketAddr::new(f.ip.src.ip(), h.source.get()),
        dst: SocketAddr::new(f.ip.dst.ip(), h.dest.get()),
        ..f.ip
    };
    Some(Frame { ip, udp_check: h.check.get(), udp_payload: rest[..len].to_vec(), ..f })
}

fn ipv4(data: &[u8]) -> Option<(Frame, &[u8])> {
    let (h, _) = Ipv4Hdr::read_from_prefix(data).ok()?;
    let ihl = usize::from(h.version_ihl & 0x0f) * 4;
    let frag = h.frag_off.get();
    if h.protocol != IPPROTO_UDP || ihl < 20 || frag & !IP_DF != 0 {
        return None;
    }
    let addr = |a: [u8; 4]| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), 0);
    let ip = IpContext { src: addr(h.saddr), dst: addr(h.daddr), ipv4_id: h.id.get(), ipv4_df: frag & IP_DF != 0 };
    let f = Frame { ip, ttl: h.ttl, tclass: h.tos, flow_label: 0, udp_check: 0, udp_payload: Vec::new() };
    Some((f, data.get(ihl..usize::from(h.tot_len.get()))?))
}

fn ipv6(data: &[u8]) -> Option<(Frame, &[u8])> {
    let (h, rest) = Ipv6Hdr::read_from_prefix(data).ok()?;
    if h.nxt != IPPROTO_UDP {
        return None;
    }
    let addr = |a: [u8; 16]| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), 0);
    let flow = h.flow.get();
    let f = Frame {
        ip: IpContext::new(addr(h.src), addr(h.dst)),
        ttl: h.hlim,
        tclass: (flow >> 20) as u8,
        flow_label: flow & 0xf_ffff,
        udp_check: 0,
        udp_payload: Vec::new(),
    };
    Some((f, rest.get(..usize::from(h.plen.get()))?))
}

type Key = (&'static str, &'static str);

fn tally(frames: &[Frame], rxe: &[IpAddr]) -> BTreeMap<Key, Dir> {
    let mut dirs: BTreeMap<Key, Dir> = BTreeMap::new();
    for f in frames {
        let dir = if rxe.contains(&f.ip.src.ip()) { "rxe->model" } else { "model->rxe" };
        let fam = if f.ip.is_ipv4() { "IPv4" } else { "IPv6" };
        dirs.entry((dir, fam)).or_default().add(f);
    }
    dirs
}

impl Dir {
    fn add(&mut self, f: &Frame) {
        self.packets += 1;
        self.udp_check_zero += u64::from(f.udp_check == 0);
        *self.ttl.entry(f.ttl).or_default() += 1;
        *self.tclass.entry(f.tclass).or_default() += 1;
        self.flow_labels.insert(f.flow_label);
        self.sports.insert(f.ip.src.port());
        if f.ip.is_ipv4() {
            self.ipv4_ids.insert(f.ip.ipv4_id);
            self.ipv4_id_zero += u64::from(f.ip.ipv4_id == 0);
            self.ipv4_df += u64::from(f.ip.ipv4_df);
        }
        match bth_and_aeth(&f.udp_payload, &f.ip) {
            Ok((b, aeth)) => {
                self.icrc_ok += 1;
                self.mig_req += u64::from(b.mig_req);
                self.pkeys.insert(b.pkey);
                let e = self.opcodes.entry(b.opcode).or_default();
                e.0 += 1;
                e.1 += u64::from(b.ack_req);
                if let Some(a) = aeth {
                    *self.syndromes.entry(format!("{:?}", a.syndrome())).or_default() += 1;
                }
            }
            Err(WireError::BadIcrc) => self.icrc_bad += 1,
            Err(e) => *self.malformed.entry(e.to_string()).or_default() += 1,
        }
    }
}

/// The BTH and AETH of an RC or a UD packet (`roce_wire::decode` / `roce_wire::ud::decode_ud`),
/// its ICRC checked.
fn bth_and_aeth(payload: &[u8], ip: &IpContext) -> Result<(Bth, Option<Aeth>), WireError> {
    if ud::is_ud(payload) {
        return ud::decode_ud(payload, Some(ip)).map(|p| (p.bth, None));
    }
    decode(payload, Some(ip)).map(|p| (p.hdr.bth, p.hdr.aeth))
}

fn report(what: &str, d: &Dir) {
    println!(
        "OBSERVED: capture {what}: {} packets, ICRC good {} bad {}, malformed {:?}",
        d.packets, d.icrc_ok, d.icrc_bad, d.malformed
    );
    let ip = if what.ends_with("IPv4") {
        format!(
            "TTL {:?}, TOS {:?}, IPv4 Identification 0 in {} of {} ({} distinct values), DF in {}",
            d.ttl,
            d.tclass,
            d.ipv4_id_zero,
            d.packets,
            d.ipv4_ids.len(),
            d.ipv4_df
        )
    } else {
        format!("hop limit {:?}, traffic class {:?}, flow labels {}", d.ttl, d.tclass, few(&d.flow_labels))
    };
    println!(
        "OBSERVED: capture {what}: UDP checksum 0 in {} of {}; {ip}; UDP source ports {}",
        d.udp_check_zero,
        d.packets,
        few(&d.sports)
    );
    println!("OBSERVED: capture {what}: BTH M bit set in {} of {}; P_Keys {}", d.mig_req, d.icrc_ok, few(&d.pkeys));
    let ops: Vec<String> = d.opcodes.iter().map(|(op, (n, ack))| format!("{} {n} (AckReq {ack})", name(*op))).collect();
    println!("OBSERVED: capture {what}: opcodes {}", ops.join(", "));
    if !d.syndromes.is_empty() {
        println!("OBSERVED: capture {what}: AETH syndromes {:?}", d.syndromes);
    }
}

/// For each direction: request packets the other side sent per acknowledge this side sent (an
/// acknowledge can cover several requests: coalescing).
fn acks_per_request(dirs: &BTreeMap<Key, Dir>) {
    let count = |dir: &str, f: &dyn Fn(u8) -> bool| -> u64 {
        dirs.iter()
            .filter(|((d, _), _)| *d == dir)
            .flat_map(|(_, v)| v.opcodes.iter())
            .filter(|(op, _)| f(**op))
            .map(|(_, (n, _))| n)
            .sum()
    };
    let is_request = |op: u8| op <= opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE;
    let is_ack = |op: u8| op == opcode::RC_ACKNOWLEDGE;
    for (me, peer) in [("rxe->model", "model->rxe"), ("model->rxe", "rxe->model")] {
        let (acks, reqs) = (count(me, &is_ack), count(peer, &is_request));
        if acks > 0 {
            println!(
                "OBSERVED: capture {me}: {acks} acknowledges for {reqs} SEND/WRITE packets received ({:.2} per acknowledge)",
                reqs as f64 / acks as f64
            );
        }
    }
}

fn few<T: std::fmt::LowerHex>(s: &BTreeSet<T>) -> String {
    let shown: Vec<String> = s.iter().take(6).map(|v| format!("{v:#x}")).collect();
    let more = if s.len() > 6 { format!(" and {} more", s.len() - 6) } else { String::new() };
    format!("{{{}}}{more}", shown.join(", "))
}

fn name(op: u8) -> String {
    const NAMES: [&str; 21] = [
        "SEND_FIRST",
        "SEND_MIDDLE",
        "SEND_LAST",
        "SEND_LAST_WITH_IMMEDIATE",
        "SEND_ONLY",
        "SEND_ONLY_WITH_IMMEDIATE",
        "RDMA_WRITE_FIRST",
        "RDMA_WRITE_MIDDLE",
        "RDMA_WRITE_LAST",
        "RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "RDMA_WRITE_ONLY",
        "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        "RDMA_READ_REQUEST",
        "RDMA_READ_RESPONSE_FIRST",
        "RDMA_READ_RESPONSE_MIDDLE",
        "RDMA_READ_RESPONSE_LAST",
        "RDMA_READ_RESPONSE_ONLY",
        "ACKNOWLEDGE",
        "ATOMIC_ACKNOWLEDGE",
        "COMPARE_SWAP",
        "FETCH_ADD",
    ];
    match op {
        ud::UD_SEND_ONLY => "UD_SEND_ONLY".into(),
        ud::UD_SEND_ONLY_WITH_IMMEDIATE => "UD_SEND_ONLY_WITH_IMMEDIATE".into(),
        _ => NAMES.get(usize::from(op)).map_or_else(|| format!("{op:#04x}"), |n| n.to_string()),
    }
}
