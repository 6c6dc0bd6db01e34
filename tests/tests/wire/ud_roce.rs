//! UD between two devices of one process over their RoCE v2 ports (each binds its own address,
//! one UDP port for both): over IPv4 the receiver's GRH area holds zeros then the IPv4 header
//! in bytes 20-39 (checksum valid); over IPv6 the IPv6 header as the GRH (two IPv6 addresses, in
//! the test's own network namespace). The answering address
//! from `ah_attr_from_wc` reaches the sender back. A wrong Q_Key and a missing receive drop the
//! datagram at the receiver, counted, while the sender completes SUCCESS.

use ib_core::{
    access, ah_attr_from_wc, AhAttr, Cq, Device, GlobalRoute, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr,
    Sge, Wc, WcStatus, WrOpcode, GRH_LEN,
};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::SimConfig;
use std::net::IpAddr;
use std::time::Duration;
use tests::fixture::poll_n;

const QKEY: u32 = 0x0bad_cafe;

struct End {
    dev: Device,
    sim: hca::platform::sim::SimPlatform,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
    /// GID index of the RoCE v2 address.
    sgid_index: u8,
}

/// An end on a RoCE address of its own (UDP 4791).
fn end() -> End {
    let (dev, sim) = tests::fixture::open_roce(RoceConfig::new(vec![]), SimConfig::default());
    end_of(dev, sim)
}

/// An end at `ip`, an address of the test's own network namespace.
fn end_at(ip: IpAddr) -> End {
    let (dev, sim) =
        hca::open_sim(SimConfig { roce: Some(RoceConfig::new(vec![ip])), ..Default::default() }).expect("probe");
    end_of(dev, sim)
}

fn end_of(dev: Device, sim: hca::platform::sim::SimPlatform) -> End {
    let ip = tests::fixture::roce_addr(&sim);
    let want = ib_core::gid_from_ip(ip);
    let sgid_index =
        (0..16u32).find(|&i| dev.query_gid(1, i).is_ok_and(|g| g == want)).expect("the address's GID") as u8;
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(32, None).unwrap();
    let mr = pd.alloc_mr(8192, access::LOCAL_WRITE).unwrap();
    let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        cap,
        qp_type: QpType::Ud,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let qp = pd.create_qp(&attr).expect("UD QP");
    qp.modify_ud_to_rts(1, QKEY, 0).expect("RTS");
    End { dev, sim, pd, cq, mr, qp, sgid_index }
}

impl End {
    fn ip(&self) -> IpAddr {
        tests::fixture::roce_addr(&self.sim)
    }

    /// The end's address's four bytes (an IPv4 end).
    fn v4(&self) -> [u8; 4] {
        match self.ip() {
            IpAddr::V4(a) => a.octets(),
            IpAddr::V6(a) => panic!("{a} is not IPv4"),
        }
    }

    fn ah_to(&self, other: &End) -> ib_core::Ah {
        let dgid = other.dev.query_gid(1, u32::from(other.sgid_index)).unwrap();
        let grh = GlobalRoute { dgid, sgid_index: self.sgid_index, hop_limit: 64, traffic_class: 0, flow_label: 0 };
        self.pd.create_ah(&AhAttr { grh, is_global: true, port_num: 1, ..Default::default() }).unwrap()
    }

    fn recv(&self, wr_id: u64) {
        let sge = [Sge { addr: self.mr.addr() + 4096, length: 2048, lkey: self.mr.lkey() }];
        self.qp.post_recv(&RecvWr { wr_id, sg_list: &sge }).unwrap();
    }

    fn send(&self, dest: ib_core::UdDest, data: &[u8]) -> Wc {
        self.mr.write(0, data).unwrap();
        let sge = [Sge { addr: self.mr.addr(), length: data.len() as u32, lkey: self.mr.lkey() }];
        let wr = SendWr {
            wr_id: 1,
            sg_list: &sge,
            opcode: WrOpcode::UdSend { dest, imm: None },
            signaled: true,
            solicited: false,
        };
        self.qp.post_send(&wr).unwrap();
        poll_n(&self.cq, 1)[0]
    }

    fn grh(&self) -> [u8; GRH_LEN] {
        let mut g = [0u8; GRH_LEN];
        self.mr.read(4096, &mut g).unwrap();
        g
    }

    fn payload(&self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mr.read(4096 + GRH_LEN, &mut v).unwrap();
        v
    }
}

/// Sends `a` -> `b`, checks the receive, and answers `b` -> `a` through the AH built from the
/// completion. Returns `b`'s GRH area.
fn round_trip(a: &End, b: &End) -> [u8; GRH_LEN] {
    let ah = a.ah_to(b);
    b.recv(7);
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(a.send(ah.dest(b.qp.qpn(), QKEY), &data).status, WcStatus::Success);
    let w = poll_n(&b.cq, 1)[0];
    assert_eq!((w.status, w.wr_id, w.src_qp, w.grh), (WcStatus::Success, 7, a.qp.qpn(), true));
    assert_eq!(w.byte_len as usize, GRH_LEN + data.len());
    assert_eq!(b.payload(data.len()), data);
    let grh = b.grh();
    let back = ah_attr_from_wc(&b.dev, 1, &w, &grh).expect("an AH from the completion");
    assert_eq!(back.grh.dgid, a.dev.query_gid(1, u32::from(a.sgid_index)).unwrap());
    assert_eq!(back.grh.sgid_index, b.sgid_index);
    let reply = b.pd.create_ah(&back).unwrap();
    a.recv(8);
    assert_eq!(b.send(reply.dest(w.src_qp, QKEY), b"pong").status, WcStatus::Success);
    let r = poll_n(&a.cq, 1)[0];
    assert_eq!((r.status, r.src_qp, r.byte_len), (WcStatus::Success, b.qp.qpn(), GRH_LEN as u32 + 4));
    assert_eq!(a.payload(4), b"pong");
    grh
}

fn ipv4_sum(h: &[u8]) -> u32 {
    let mut s: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s
}

#[test]
fn ud_over_roce_ipv4_puts_the_ipv4_header_in_bytes_20_to_39() {
    ipv4_case(&end(), &end());
}

/// Two IPv4 ends: the GRH area of a round trip, then a wrong Q_Key and a missing receive.
fn ipv4_case(a: &End, b: &End) {
    let g = round_trip(a, b);
    assert_eq!(&g[..20], &[0u8; 20]);
    assert_eq!((g[20], g[29]), (0x45, 17), "IPv4, IHL 5, UDP");
    assert_eq!(&g[32..36], &a.v4(), "source: a");
    assert_eq!(&g[36..40], &b.v4(), "destination: b");
    assert_eq!(u16::from_be_bytes([g[22], g[23]]), 20 + 8 + 12 + 8 + 1000 + 4);
    assert_eq!(ipv4_sum(&g[20..]), 0xffff, "checksum holds");
    // A wrong Q_Key and a missing receive: dropped at b, counted; a completes SUCCESS.
    let ah = a.ah_to(b);
    b.recv(9);
    assert_eq!(a.send(ah.dest(b.qp.qpn(), QKEY + 1), b"x").status, WcStatus::Success);
    let settled = ib_core::time::poll_until(Duration::from_secs(5), || b.sim.device().stats().ud_dropped_qkey == 1);
    assert!(settled, "the wrong Q_Key is counted");
    assert_eq!(a.send(ah.dest(b.qp.qpn(), QKEY), b"y").status, WcStatus::Success);
    assert_eq!(poll_n(&b.cq, 1)[0].wr_id, 9, "the receive stayed for the right Q_Key");
    assert_eq!(a.send(ah.dest(b.qp.qpn(), QKEY), b"z").status, WcStatus::Success);
    let settled = ib_core::time::poll_until(Duration::from_secs(5), || b.sim.device().stats().ud_dropped_no_recv == 1);
    assert!(settled, "no receive posted: counted");
    assert!(a.sim.device().stats().ud_dropped_qkey == 0);
}

/// At `::1` and `fd00::2` in the test's own network namespace; where none can be made, the
/// IPv4 case instead (the reason printed).
#[test]
fn ud_over_roce_ipv6_puts_the_ipv6_header_as_the_grh() {
    netlease::netns::own(|net| {
        if net == netlease::netns::Netns::Host {
            return ipv4_case(&end(), &end());
        }
        let (a, b) = (end_at(netlease::netns::FIRST.into()), end_at(netlease::netns::SECOND.into()));
        let g = round_trip(&a, &b);
        assert_eq!(g[0] >> 4, 6);
        assert_eq!((g[6], g[7]), (17, 64), "next header UDP, hop limit");
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 8 + 12 + 8 + 1000 + 4);
        assert_eq!(&g[8..24], &a.dev.query_gid(1, u32::from(a.sgid_index)).unwrap());
        assert_eq!(&g[24..40], &b.dev.query_gid(1, u32::from(b.sgid_index)).unwrap());
    });
}

/// The fake peer's socket (UDP 4791 of an address of its own) and the device's address.
fn forger(dev_ip: IpAddr) -> (std::net::UdpSocket, std::net::SocketAddr) {
    (tests::fixture::peer_socket(), std::net::SocketAddr::new(dev_ip, pvrdma_sim::roce::ROCE_V2_UDP_PORT))
}

/// A UD packet (SEND Only, or with Immediate) as the peer sends it to `to`.
fn forge(
    s: &std::net::UdpSocket,
    to: std::net::SocketAddr,
    opcode: u8,
    pkey: u16,
    dest_qp: u32,
    qkey: u32,
    payload: &[u8],
) -> Vec<u8> {
    use roce_wire::ud::{encode_ud, UdPacket, UD_SEND_ONLY_WITH_IMMEDIATE};
    let bth = roce_wire::Bth { opcode, pkey, dest_qp, psn: 1, ..Default::default() };
    let imm = (opcode == UD_SEND_ONLY_WITH_IMMEDIATE).then_some(0x0102_0304);
    let p = UdPacket { bth, qkey, src_qp: 0x99, imm, payload };
    let mut out = Vec::new();
    encode_ud(&p, &roce_wire::IpContext::new(s.local_addr().unwrap(), to), &mut out).expect("encode");
    out
}

#[test]
fn forged_short_and_hostile_ud_packets_are_dropped_and_counted_by_reason() {
    use roce_wire::ud::{UD_SEND_ONLY, UD_SEND_ONLY_WITH_IMMEDIATE};
    let e = end();
    let (s, to) = forger(e.ip());
    let peer_ip = s.local_addr().unwrap().ip();
    let qpn = e.qp.qpn();
    let stats = || e.sim.device().stats();
    let wait_for = |what: &str, f: &dyn Fn(&pvrdma_sim::SimStats) -> bool| {
        let ok = ib_core::time::poll_until(Duration::from_secs(5), || f(&stats()));
        assert!(ok, "{what}: {:?}", stats());
    };
    e.recv(1);
    let good = forge(&s, to, UD_SEND_ONLY, 0xffff, qpn, QKEY, b"forged but fine");
    // Truncated: shorter than BTH + DETH + ICRC.
    for n in [1, 11, 19, 23] {
        s.send_to(&good[..n], to).unwrap();
    }
    wait_for("truncated", &|st| st.roce_rx_dropped_malformed >= 4);
    // A UD opcode the port does not carry (UD SEND Only is 0x64, with Immediate 0x65).
    let mut bad_op = good.clone();
    bad_op[0] = 0x66;
    s.send_to(&bad_op, to).unwrap();
    wait_for("unknown UD opcode", &|st| st.roce_rx_dropped_malformed >= 5);
    s.send_to(&forge(&s, to, UD_SEND_ONLY, 0x7fff, qpn, QKEY, b"p"), to).unwrap();
    wait_for("P_Key", &|st| st.roce_rx_dropped_pkey == 1);
    s.send_to(&forge(&s, to, UD_SEND_ONLY, 0xffff, qpn, QKEY + 1, b"q"), to).unwrap();
    wait_for("Q_Key", &|st| st.ud_dropped_qkey == 1);
    s.send_to(&forge(&s, to, UD_SEND_ONLY, 0xffff, 0x7777, QKEY, b"nobody"), to).unwrap();
    wait_for("no such QP", &|st| st.ud_dropped_qp == 1);
    // Random bytes behind a UD opcode: dropped, never a panic.
    let mut seed = 0x1234_5678_u64;
    for i in 0..200 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let len = (seed >> 40) as usize % 80;
        let mut junk: Vec<u8> = (0..len).map(|k| (seed >> (k % 56)) as u8).collect();
        if let Some(b) = junk.first_mut() {
            *b = if i % 2 == 0 { UD_SEND_ONLY } else { UD_SEND_ONLY_WITH_IMMEDIATE };
        }
        s.send_to(&junk, to).unwrap();
    }
    // The receive WQE is still there: the good datagram lands in it.
    s.send_to(&good, to).unwrap();
    let w = poll_n(&e.cq, 1)[0];
    assert_eq!((w.wr_id, w.status, w.src_qp, w.byte_len), (1, WcStatus::Success, 0x99, GRH_LEN as u32 + 15));
    assert_eq!(e.payload(15), b"forged but fine");
    let IpAddr::V4(from) = peer_ip else { unreachable!("an IPv4 peer") };
    assert_eq!(&e.grh()[32..40], &[from.octets(), e.v4()].concat()[..], "the addresses it came between");
    // With immediate data, and with no receive posted.
    e.recv(2);
    s.send_to(&forge(&s, to, UD_SEND_ONLY_WITH_IMMEDIATE, 0xffff, qpn, QKEY, b"imm"), to).unwrap();
    let w = poll_n(&e.cq, 1)[0];
    assert_eq!((w.wr_id, w.imm_data), (2, Some(0x0102_0304)));
    let before = stats().ud_dropped_no_recv;
    s.send_to(&good, to).unwrap();
    wait_for("no receive", &|st| st.ud_dropped_no_recv == before + 1);
    // Transports do not mix: a UD datagram to an RC QP, an RC SEND to the UD QP.
    let rc = tests::fixture::rc_qp(&e.pd, &e.cq, &e.cq);
    tests::fixture::connect_roce(&rc, 0x99, ib_core::gid_from_ip(peer_ip), e.sgid_index);
    let before = stats().ud_dropped_qp;
    s.send_to(&forge(&s, to, UD_SEND_ONLY, 0xffff, rc.qpn(), QKEY, b"to RC"), to).unwrap();
    wait_for("UD to an RC QP", &|st| st.ud_dropped_qp == before + 1);
    let before = stats().roce_rx_dropped_qp;
    let hdr = roce_wire::Headers {
        bth: roce_wire::Bth { opcode: 0x04, pkey: 0xffff, dest_qp: qpn, ..Default::default() },
        ..Default::default()
    };
    let mut rc_send = Vec::new();
    roce_wire::encode(&hdr, b"rc", &roce_wire::IpContext::new(s.local_addr().unwrap(), to), &mut rc_send).unwrap();
    s.send_to(&rc_send, to).unwrap();
    wait_for("RC to the UD QP", &|st| st.roce_rx_dropped_qp == before + 1);
    assert_eq!(stats().ud_delivered, 2);
}

#[test]
fn ud_packets_in_the_ports_capture_decode_with_good_icrcs_and_in_tshark() {
    use tests::tshark::{field, tshark_present, tshark_verbose, COMPLAINTS};
    let dir = std::env::temp_dir().join(format!("ud-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("ud.pcap");
    // UDP 4791: the capture reader and tshark know RoCE v2 by it (the address is this test's own).
    let roce = RoceConfig { pcap: Some(pcap.clone()), ..RoceConfig::new(vec![]) };
    let (dev, sim) = tests::fixture::open_roce(roce, SimConfig::default());
    let ip = tests::fixture::roce_addr(&sim);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(32, None).unwrap();
    let mr = pd.alloc_mr(8192, access::LOCAL_WRITE).unwrap();
    let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        cap,
        qp_type: QpType::Ud,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let (a, b) = (pd.create_qp(&attr).unwrap(), pd.create_qp(&attr).unwrap());
    a.modify_ud_to_rts(1, QKEY, 0).unwrap();
    b.modify_ud_to_rts(1, QKEY, 0).unwrap();
    let grh = GlobalRoute { dgid: ib_core::gid_from_ip(ip), sgid_index: 1, hop_limit: 64, ..Default::default() };
    let ah = pd.create_ah(&AhAttr { grh, is_global: true, port_num: 1, ..Default::default() }).unwrap();
    for (i, imm) in [(0u64, None), (1, Some(0x5555))] {
        let rs = [Sge { addr: mr.addr() + 4096, length: 1024, lkey: mr.lkey() }];
        b.post_recv(&RecvWr { wr_id: i, sg_list: &rs }).unwrap();
        let ss = [Sge { addr: mr.addr(), length: 13, lkey: mr.lkey() }];
        let opcode = WrOpcode::UdSend { dest: ah.dest(b.qpn(), QKEY), imm };
        a.post_send(&SendWr { wr_id: i, sg_list: &ss, opcode, signaled: true, solicited: false }).unwrap();
        assert!(poll_n(&cq, 2).iter().all(|w| w.status == WcStatus::Success));
    }
    // The capture file is complete once the device is gone.
    drop((a, b, ah, mr, cq, pd, dev, sim));
    let records = roce_wire::pcap::read(&pcap).expect("read the capture");
    // (The probe's self-test sent RC packets first.)
    let ops: Vec<u8> = records
        .iter()
        .filter(|c| roce_wire::ud::is_ud(&c.udp_payload))
        .map(|c| {
            roce_wire::ud::decode_ud(&c.udp_payload, Some(&c.ip)).expect("a UD packet with a good ICRC").bth.opcode
        })
        .collect();
    // Each datagram is captured sent and received.
    assert_eq!(ops, [0x64, 0x64, 0x65, 0x65], "UD SEND Only, then with Immediate");
    if !tshark_present() {
        println!("SKIPPED: tshark not installed");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let text = tshark_verbose(&pcap);
    for b in COMPLAINTS {
        assert!(!text.contains(b), "tshark reports {b:?} in the port's capture");
    }
    assert_eq!(text.matches("DETH - Datagram Extended Transport Header").count(), 4, "{text}");
    assert_eq!(field(&text, "Queue Key:"), Some("0x000000000badcafe"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
