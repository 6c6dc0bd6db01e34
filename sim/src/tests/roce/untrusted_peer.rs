//! Hostile datagrams injected from a plain UDP socket: each is dropped and counted under its
//! reason, none panics or hangs the port, and the connection keeps working after them. A
//! capture of the traffic reads back with every ICRC valid.

use super::*;
use crate::SimStats;
use pvrdma_abi::wqe::wc_status;
use roce_wire::{opcode as op, psn, Bth, Headers, IpContext};
use std::net::{SocketAddr, UdpSocket};

/// The RoCE port (the capture reader takes UDP 4791 only).
const V6_PORT: u16 = crate::roce::ROCE_V2_UDP_PORT;

/// A SEND_ONLY of `payload` to QP `qpn` at PSN `p` with P_Key `pkey`, as `from` would send it to
/// `to`.
fn send_only(from: SocketAddr, to: SocketAddr, qpn: u32, p: u32, pkey: u16, payload: &[u8]) -> Vec<u8> {
    let bth = Bth { opcode: op::RC_SEND_ONLY, pkey, dest_qp: qpn, ack_req: true, psn: p, ..Default::default() };
    let mut out = Vec::new();
    roce_wire::encode(&Headers { bth, ..Default::default() }, payload, &IpContext::new(from, to), &mut out).unwrap();
    out
}

/// Sends `bytes` and waits (bounded) until the device counted one more datagram received.
fn inject(d: &Drv, sock: &UdpSocket, to: SocketAddr, bytes: &[u8]) -> SimStats {
    let before = d.dev.stats().roce_rx_packets;
    sock.send_to(bytes, to).unwrap();
    let deadline = Instant::now() + LONG;
    loop {
        let s = d.dev.stats();
        if s.roce_rx_packets > before || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The drop counters, in one tuple: icrc, malformed, pkey, qp, psn.
fn drops(s: &SimStats) -> [u64; 5] {
    [
        s.roce_rx_dropped_icrc,
        s.roce_rx_dropped_malformed,
        s.roce_rx_dropped_pkey,
        s.roce_rx_dropped_qp,
        s.roce_rx_dropped_psn,
    ]
}

/// `n` round trips x -> y that must all succeed.
fn still_works(d: &Drv, x: &End, y: &End, first: u64, n: u64) {
    for i in first..first + n {
        recv(d, y, i, 0, 4096);
        send(d, x, i, &pattern(i, 1500), 0, None);
        let rx = wait(d, y, 1, LONG);
        assert_eq!(rx.len(), 1, "message {i} arrives");
        assert_eq!((rx[0].wr_id.get(), rx[0].status.get()), (i, wc_status::SUCCESS));
        assert_eq!(received(d, y, 0, 1500), pattern(i, 1500));
        assert_eq!(wait(d, x, 1, LONG)[0].status.get(), wc_status::SUCCESS);
    }
}

/// On `[::1]:4791` in the test's own network namespace (over IPv4 where none can be made).
#[test]
fn hostile_datagrams_over_ipv6_are_dropped_and_counted_and_the_connection_survives() {
    netlease::netns::own(|net| {
        let pcap = std::env::temp_dir().join(format!("pvrdma-roce-hostile-{}.pcap", std::process::id()));
        let roce = RoceConfig { pcap: Some(pcap.clone()), ..RoceConfig::new(vec![]) };
        let mut d = device_for(net, roce, crate::SimConfig::default());
        let ip = ip(&d);
        let (x, y) = (end(&mut d, 16), end(&mut d, 16));
        let o = Opts::default();
        connect_both(&mut d, x.qp.qpn, y.qp.qpn, ip, &o);
        still_works(&d, &x, &y, 0, 3);

        // The attacker sends from the peer's address (any UDP port), so only what it sends decides.
        let evil = UdpSocket::bind((ip, 0)).unwrap();
        let (from, to) = (evil.local_addr().unwrap(), SocketAddr::new(ip, V6_PORT));
        let epsn = psn::add(o.rq_psn, 3);
        let good = send_only(from, to, y.qp.qpn, epsn, 0xffff, b"hostile");
        let mut bad_icrc = good.clone();
        *bad_icrc.last_mut().unwrap() ^= 0x40;
        let mut flipped = good.clone();
        flipped[14] ^= 0x01;
        // The ICRC is checked over IPv6 only (the Identification of a received IPv4 header is
        // unknown): over IPv4 instead, those two cases are left out.
        let icrc = [("bad ICRC", bad_icrc, 0), ("a payload bit flipped", flipped, 0)];
        let icrc = if ip.is_ipv6() { icrc.to_vec() } else { Vec::new() };
        let n_icrc = icrc.len();
        let rest: [(&str, Vec<u8>, usize); 5] = [
            ("truncated", good[..10].to_vec(), 1),
            ("wrong P_Key", send_only(from, to, y.qp.qpn, epsn, 0x7fff, b"x"), 2),
            ("unknown QP", send_only(from, to, 0x77_7777 & 0xff_ffff, epsn, 0xffff, b"x"), 3),
            ("QP in INIT", send_only(from, to, end(&mut d, 16).qp.qpn, epsn, 0xffff, b"x"), 3),
            ("PSN out of window", send_only(from, to, y.qp.qpn, psn::add(epsn, 1 << 22), 0xffff, b"x"), 4),
        ];
        for (what, bytes, counter) in icrc.into_iter().chain(rest) {
            let before = drops(&d.dev.stats());
            let after = drops(&inject(&d, &evil, to, &bytes));
            let mut want = before;
            want[counter] += 1;
            assert_eq!(after, want, "{what}");
        }
        // Random garbage of every length up to 300 bytes (one at a time: a burst would overflow the
        // socket's buffer, and the kernel's drops are not the port's): each dropped for some reason.
        let mut rng = fastrand::Rng::with_seed(11);
        let before: u64 = drops(&d.dev.stats()).iter().sum();
        for len in 0..300usize {
            let junk: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            inject(&d, &evil, to, &junk);
        }
        let s = d.dev.stats();
        assert_eq!(drops(&s).iter().sum::<u64>(), before + 300, "every junk datagram dropped: {s:?}");
        assert!(d.poll(&y.cq).is_none(), "nothing hostile was delivered");
        still_works(&d, &x, &y, 3, 3);

        // The capture holds what the port sent and received: the port's own packets (from UDP
        // 4791: 6 messages of 2 packets, 6 ACKs and the NAK of the PSN out of window, each captured
        // sent and received) all verify; the hostile ones (from the attacker's port) are there too.
        drop(d);
        let captured = roce_wire::pcap::read(&pcap).unwrap();
        std::fs::remove_file(&pcap).ok();
        let (own, hostile): (Vec<_>, Vec<_>) = captured.iter().partition(|c| c.ip.src.port() == V6_PORT);
        assert_eq!(own.len(), 2 * (12 + 6 + 1));
        for c in own {
            roce_wire::decode(&c.udp_payload, Some(&c.ip)).expect("ICRC verifies");
        }
        assert_eq!(hostile.len(), n_icrc + 5 + 300);
    });
}

#[test]
fn a_sender_at_another_address_is_not_the_connected_peer() {
    let (a, ea, b, eb) = pair(&Opts::default(), LinkFaults::default());
    // From a third address (any port), its own.
    let evil = netlease::udp_v4(0);
    let to = SocketAddr::new(ip(&b), crate::roce::ROCE_V2_UDP_PORT);
    let pkt = send_only(evil.local_addr().unwrap(), to, eb.qp.qpn, Opts::default().rq_psn, 0xffff, b"x");
    recv(&b, &eb, 1, 0, 64);
    let s = inject(&b, &evil, to, &pkt);
    assert_eq!(s.roce_rx_dropped_qp, 1);
    assert!(b.poll(&eb.cq).is_none());
    send(&a, &ea, 1, b"real", 0, None);
    assert_eq!(wait(&b, &eb, 1, LONG)[0].status.get(), wc_status::SUCCESS);
    assert_eq!(received(&b, &eb, 0, 4), b"real");
}

#[test]
fn a_capture_between_two_devices_verifies_every_icrc() {
    let pcap = std::env::temp_dir().join(format!("pvrdma-roce-v4-{}.pcap", std::process::id()));
    let roce = RoceConfig { pcap: Some(pcap.clone()), ..RoceConfig::new(vec![]) };
    let mut a = device_from(roce, crate::SimConfig::default());
    let mut b = device(LinkFaults::default());
    let (ia, ib) = (ip(&a), ip(&b));
    let (ea, eb) = (end(&mut a, 16), end(&mut b, 16));
    let o = Opts::default();
    connect(&mut a, ea.qp.qpn, eb.qp.qpn, ib, &o);
    connect(&mut b, eb.qp.qpn, ea.qp.qpn, ia, &Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..o });
    recv(&b, &eb, 1, 0, 8192);
    send(&a, &ea, 1, &pattern(1, 5000), 0, Some(7));
    assert_eq!(wait(&b, &eb, 1, LONG).len(), 1);
    assert_eq!(wait(&a, &ea, 1, LONG).len(), 1);
    let sent = a.dev.stats().roce_tx_packets;
    drop(a);
    let captured = roce_wire::pcap::read(&pcap).unwrap();
    std::fs::remove_file(&pcap).ok();
    // 5 packets of the SEND out, 1 ACK in.
    assert_eq!((sent, captured.len()), (5, 6));
    for c in &captured {
        assert!(c.ip.ipv4_df && c.ip.ipv4_id == 0);
        roce_wire::decode(&c.udp_payload, Some(&c.ip)).expect("ICRC verifies");
    }
}

/// A random but well-formed RC packet (any opcode, PSN near `epsn` or anywhere, mostly the right
/// P_Key and QP) as `from` would send it to `to`.
fn random_packet(
    rng: &mut fastrand::Rng,
    from: SocketAddr,
    to: SocketAddr,
    qpn: u32,
    epsn: u32,
    mr: &TestMr,
) -> Vec<u8> {
    let opcode = rng.u8(0..=op::RC_FETCH_ADD);
    let reth = matches!(
        opcode,
        op::RC_RDMA_WRITE_FIRST
            | op::RC_RDMA_WRITE_ONLY
            | op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
            | op::RC_RDMA_READ_REQUEST
    );
    let aeth = matches!(
        opcode,
        op::RC_ACKNOWLEDGE
            | op::RC_ATOMIC_ACKNOWLEDGE
            | op::RC_RDMA_READ_RESPONSE_FIRST
            | op::RC_RDMA_READ_RESPONSE_LAST
            | op::RC_RDMA_READ_RESPONSE_ONLY
    );
    let imm = matches!(
        opcode,
        op::RC_SEND_LAST_WITH_IMMEDIATE
            | op::RC_SEND_ONLY_WITH_IMMEDIATE
            | op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE
            | op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
    );
    let p = if rng.bool() { psn::add(epsn, rng.u32(..8)) } else { rng.u32(..1 << 24) };
    let bth = Bth {
        opcode,
        pkey: if rng.u8(..10) == 0 { rng.u16(..) } else { 0xffff },
        dest_qp: if rng.u8(..10) == 0 { rng.u32(..1 << 24) } else { qpn },
        ack_req: rng.bool(),
        psn: p,
        ..Default::default()
    };
    let hdr = Headers {
        bth,
        reth: reth.then(|| match rng.u8(..5) {
            // Mostly inside the responder's MR, so WRITEs and READs get executed.
            0 => roce_wire::Reth { va: rng.u64(..), rkey: rng.u32(..), dma_len: rng.u32(..1 << 20) },
            _ => roce_wire::Reth { va: mr.va + rng.u64(..MR_LEN - 8192), rkey: mr.rkey, dma_len: rng.u32(..8192) },
        }),
        aeth: aeth.then(|| roce_wire::Aeth { syndrome: rng.u8(..), msn: rng.u32(..1 << 24) }),
        imm: imm.then(|| rng.u32(..)),
        // Mostly 8-aligned inside the responder's MR.
        atomic_eth: matches!(opcode, op::RC_COMPARE_SWAP | op::RC_FETCH_ADD).then(|| roce_wire::AtomicEth {
            va: mr.va + rng.u64(..MR_LEN / 8) * 8 + u64::from(rng.u8(..10) == 0),
            rkey: if rng.u8(..10) == 0 { rng.u32(..) } else { mr.rkey },
            swap_add: rng.u64(..),
            compare: rng.u64(..),
        }),
        atomic_ack: (opcode == op::RC_ATOMIC_ACKNOWLEDGE).then(|| rng.u64(..)),
    };
    let no_payload = [
        op::RC_RDMA_READ_REQUEST,
        op::RC_ACKNOWLEDGE,
        op::RC_ATOMIC_ACKNOWLEDGE,
        op::RC_COMPARE_SWAP,
        op::RC_FETCH_ADD,
    ];
    let len = if no_payload.contains(&opcode) { 0 } else { [0, 1, 1023, 1024, rng.usize(..1100)][rng.usize(..5)] };
    let payload: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
    let mut out = Vec::new();
    roce_wire::encode(&hdr, &payload, &IpContext::new(from, to), &mut out).unwrap();
    out
}

#[test]
fn random_rc_packets_from_the_peer_address_never_break_the_port() {
    let (mut a, ea, mut b, _eb) = pair(&Opts::default(), LinkFaults::default());
    let (ia, ib) = (ip(&a), ip(&b));
    let evil = UdpSocket::bind((ia, 0)).unwrap();
    let to = SocketAddr::new(ib, crate::roce::ROCE_V2_UDP_PORT);
    let from = evil.local_addr().unwrap();
    let mut rng = fastrand::Rng::with_seed(42);
    let o = Opts::default();
    // A responder QP with receive WQEs posted; a new one whenever the last one went to ERR
    // (a remote access error or a receive too small moves it there, as it should).
    let mut victims = 0;
    let mut target: Option<End> = None;
    for _ in 0..3000 {
        let live = target.as_ref().is_some_and(|t| b.dev.qp_state(t.qp.qpn) == Some(qp_state::RTS));
        if !live {
            let t = end(&mut b, 16);
            connect(&mut b, t.qp.qpn, ea.qp.qpn, ia, &o);
            for i in 0..4 {
                recv(&b, &t, i, i * 4096, 4096);
            }
            target = Some(t);
            victims += 1;
        }
        let t = target.as_ref().unwrap();
        let pkt = random_packet(&mut rng, from, to, t.qp.qpn, o.rq_psn, &t.dst);
        inject(&b, &evil, to, &pkt);
    }
    let s = b.dev.stats();
    assert_eq!(s.roce_rx_packets, 3000);
    assert!(victims > 1 && s.roce_acks_sent > 0 && s.roce_naks_sent > 0, "{victims} {s:?}");
    // The port still works: a fresh connection between the two devices carries messages.
    let (x, y) = (end(&mut a, 16), end(&mut b, 16));
    connect(&mut a, x.qp.qpn, y.qp.qpn, ib, &o);
    let ob = Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..o };
    connect(&mut b, y.qp.qpn, x.qp.qpn, ia, &ob);
    recv(&b, &y, 5, 0, 4096);
    send(&a, &x, 5, &pattern(5, 3000), 0, None);
    assert_eq!(wait(&b, &y, 1, LONG)[0].status.get(), wc_status::SUCCESS);
    assert_eq!(received(&b, &y, 0, 3000), pattern(5, 3000));
}
