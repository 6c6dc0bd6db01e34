//! Packets forged by a peer that owns the connected address (UDP 4791, a valid ICRC): ACKs and
//! NAKs for PSNs the requester never sent, and duplicate READ requests the responder never
//! executed or that ask for more than the original READ. Each is dropped and counted; none
//! completes a work request or sends data.

use super::*;
use crate::SimStats;
use pvrdma_abi::wqe::wc_status;
use roce_wire::{opcode as op, psn, Aeth, Bth, Headers, IpContext, NakCode, Reth};
use std::net::{SocketAddr, UdpSocket};
use zerocopy::little_endian::U32;

/// The QPN the fake peer claims.
const PEER_QPN: u32 = 0x42;

/// A device at `127.77.<test>.1` with one QP connected to a fake peer at `.2` (a UDP socket on
/// 4791 the test drives), no local ACK timeout (so nothing times out under the test).
fn device_and_peer(test: u8) -> (Drv, End, UdpSocket, Opts) {
    let mut d = device(
        addr(test, 1),
        crate::roce::ROCE_V2_UDP_PORT,
        LinkFaults::default(),
    );
    let e = end(&mut d, 16);
    let o = Opts {
        timeout: 0,
        ..Opts::default()
    };
    connect(&mut d, e.qp.qpn, PEER_QPN, addr(test, 2), &o);
    let peer = UdpSocket::bind(SocketAddr::new(
        addr(test, 2),
        crate::roce::ROCE_V2_UDP_PORT,
    ))
    .unwrap();
    peer.set_read_timeout(Some(LONG)).unwrap();
    (d, e, peer, o)
}

/// Encodes `hdr` + `payload` as the peer sends it to the device.
fn forge(peer: &UdpSocket, test: u8, hdr: Headers, payload: &[u8]) {
    let to = SocketAddr::new(addr(test, 1), crate::roce::ROCE_V2_UDP_PORT);
    let mut out = Vec::new();
    let ip = IpContext::new(peer.local_addr().unwrap(), to);
    roce_wire::encode(&hdr, payload, &ip, &mut out).unwrap();
    peer.send_to(&out, to).unwrap();
}

fn bth(opcode: u8, qpn: u32, p: u32) -> Bth {
    Bth {
        opcode,
        pkey: 0xffff,
        dest_qp: qpn,
        ack_req: true,
        psn: p,
        ..Default::default()
    }
}

/// The next packet the device sent the peer: `(opcode, psn, payload length)`.
fn next_from_device(peer: &UdpSocket) -> (u8, u32, usize) {
    let mut buf = vec![0u8; 1 << 16];
    let (n, _) = peer.recv_from(&mut buf).expect("a packet within LONG");
    let pkt = roce_wire::decode(&buf[..n], None).unwrap();
    (pkt.hdr.bth.opcode, pkt.hdr.bth.psn, pkt.payload.len())
}

/// Waits (bounded) until `counter` of the device's stats grew past `before`.
fn counted(d: &Drv, before: u64, counter: fn(&SimStats) -> u64) -> bool {
    let deadline = Instant::now() + LONG;
    while Instant::now() < deadline {
        if counter(&d.dev.stats()) > before {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

#[test]
fn acks_and_naks_for_psns_never_sent_complete_nothing() {
    const T: u8 = 60;
    let (d, e, peer, o) = device_and_peer(T);
    // 200 packets: the window sends the first 128, the rest wait for ACKs.
    send(&d, &e, 1, &pattern(1, 200 << 10), 0, None);
    assert_eq!(next_from_device(&peer).1, o.sq_psn);
    let unsent = psn::add(o.sq_psn, 199);
    let next = psn::add(o.sq_psn, 200);
    let cases = [
        (
            "ACK of the last PSN, never sent",
            unsent,
            Aeth::ack(1, 0x1f),
        ),
        (
            "remote access NAK of a PSN never sent",
            unsent,
            Aeth::nak(0, NakCode::RemoteAccessError),
        ),
        (
            "invalid request NAK of the next new PSN",
            next,
            Aeth::nak(1, NakCode::InvalidRequest),
        ),
        (
            "PSN sequence error NAK of a PSN never sent",
            unsent,
            Aeth::nak(0, NakCode::PsnSequenceError),
        ),
        ("RNR NAK of a PSN never sent", unsent, Aeth::rnr_nak(0, 1)),
        (
            "remote access NAK of a PSN before the first (already acknowledged)",
            psn::add(o.sq_psn, 0xff_ffff),
            Aeth::nak(0, NakCode::RemoteAccessError),
        ),
        (
            "RNR NAK of a PSN far behind",
            psn::add(o.sq_psn, 0xf0_0000),
            Aeth::rnr_nak(0, 0),
        ),
    ];
    for (what, p, aeth) in cases {
        let before = d.dev.stats().roce_rx_dropped_psn;
        let hdr = Headers {
            bth: bth(op::RC_ACKNOWLEDGE, e.qp.qpn, p),
            aeth: Some(aeth),
            ..Default::default()
        };
        forge(&peer, T, hdr, &[]);
        assert!(
            counted(&d, before, |s| s.roce_rx_dropped_psn),
            "{what}: dropped"
        );
        assert!(d.poll(&e.cq).is_none(), "{what}: completes nothing");
    }
}

#[test]
fn duplicate_read_requests_are_answered_only_within_a_read_executed() {
    const T: u8 = 61;
    let (d, e, peer, o) = device_and_peer(T);
    d.dev.mem().write(e.dst.iova, &pattern(2, 8192)).unwrap();
    let r = o.rq_psn;
    let read = |p: u32, va: u64, rkey: u32, len: u32| Headers {
        bth: bth(op::RC_RDMA_READ_REQUEST, e.qp.qpn, p),
        reth: Some(Reth {
            va,
            rkey,
            dma_len: len,
        }),
        ..Default::default()
    };
    let (va, rkey) = (e.dst.va, e.dst.rkey);
    forge(&peer, T, read(r, va, rkey, 4096), &[]);
    for k in 0..4 {
        assert_eq!(next_from_device(&peer).1, psn::add(r, k), "response {k}");
    }
    let hostile = [
        (
            "a PSN no READ had",
            read(psn::add(r, 0xff_ff00), va, rkey, 200 << 10),
        ),
        ("the READ's PSN, longer", read(r, va, rkey, 200 << 10)),
        (
            "a later PSN past the end",
            read(psn::add(r, 1), va + 1024, rkey, 8192),
        ),
        ("another R_Key", read(r, e.src.va, e.src.rkey, 4096)),
        ("before the READ's address", read(r, va - 1024, rkey, 4096)),
    ];
    for (_, hdr) in hostile {
        forge(&peer, T, hdr, &[]);
    }
    // A retried READ asking for its last two responses is answered.
    forge(&peer, T, read(psn::add(r, 2), va + 2048, rkey, 2048), &[]);
    // A duplicate SEND asking for an ACK marks the end of what the device answers.
    let probe = Headers {
        bth: bth(op::RC_SEND_ONLY, e.qp.qpn, psn::add(r, 0xff_ffff)),
        ..Default::default()
    };
    forge(&peer, T, probe, b"x");
    let mut got = Vec::new();
    loop {
        let (opcode, p, len) = next_from_device(&peer);
        if opcode == op::RC_ACKNOWLEDGE {
            break;
        }
        got.push((p, len));
        assert!(got.len() < 1000, "responses keep coming");
    }
    assert_eq!(got, [(psn::add(r, 2), 1024), (psn::add(r, 3), 1024)]);
}

/// Devices dropped with traffic in flight (a lossy link: retransmissions pending, an RNR NAK
/// loop, a READ outstanding) stop within a bound, and their addresses bind again at once.
#[test]
fn devices_dropped_mid_transfer_stop_and_their_addresses_bind_again() {
    const T: u8 = 62;
    for round in 0..3u64 {
        let f = LinkFaults {
            loss: [1.0, 0.5, 0.0][round as usize],
            duplicate: 1.0,
            reorder: 1.0,
            seed: round,
        };
        let (a, ea, b, eb) = pair(T, &Opts::default(), f);
        for i in 0..8 {
            // No receive WQE on b: SENDs that arrive are RNR NAKed (rnr_retry 7: for ever).
            send(&a, &ea, i, &pattern(i, 5000), i * 8192, None);
            send(&b, &eb, i, &pattern(i, 3000), i * 8192, None);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop((a, ea));
            drop((b, eb));
            tx.send(()).ok();
        });
        rx.recv_timeout(LONG).expect("both devices stop");
    }
    // The same addresses again, and a message through them.
    let (a, ea, b, eb) = pair(T, &Opts::default(), LinkFaults::default());
    recv(&b, &eb, 1, 0, 64);
    send(&a, &ea, 1, b"again", 0, None);
    assert_eq!(wait(&b, &eb, 1, LONG)[0].status.get(), wc_status::SUCCESS);
}

/// More READs posted at once than a responder remembers (the device's `max_qp_rd_atom`), through
/// a lossy link: a lost response is asked for again, and the responder still answers it (the
/// requester keeps at most that many READs outstanding). Each completes once, its bytes in place.
#[test]
fn many_reads_posted_at_once_through_loss_each_complete_once() {
    let f = LinkFaults {
        loss: 0.05,
        seed: 9,
        ..LinkFaults::default()
    };
    let o = Opts {
        timeout: 13,
        ..Opts::default()
    };
    let (a, ea, b, eb) = pair(63, &o, f);
    let remote = pattern(63, 64 * 100);
    b.dev.mem().write(eb.src.iova, &remote).unwrap();
    for i in 0..64u64 {
        let sg = [sge(ea.dst.va + i * 100, 100, ea.dst.lkey)];
        let (op, flags) = (wr_opcode::RDMA_READ, send_flags::SIGNALED);
        a.post_rdma_wqe(
            &ea.qp,
            i,
            op,
            flags,
            0,
            eb.src.va + i * 100,
            eb.src.rkey,
            &sg,
        );
    }
    a.qp_doorbell(&ea.qp, UAR_QP_SEND);
    let got = wait(&a, &ea, 64, Duration::from_secs(120));
    let st: Vec<(u64, u32)> = got
        .iter()
        .map(|c| (c.wr_id.get(), c.status.get()))
        .collect();
    let want: Vec<(u64, u32)> = (0..64).map(|i| (i, wc_status::SUCCESS)).collect();
    assert_eq!(st, want);
    assert_eq!(received(&a, &ea, 0, 64 * 100), remote);
    assert!(a.poll(&ea.cq).is_none(), "no completion twice");
}

/// A port address that names no one interface (a wildcard, multicast, broadcast or IPv4-mapped
/// IPv6 address: the source of every ICRC would be wrong) fails device creation.
#[test]
fn a_port_address_of_no_one_interface_fails_device_creation() {
    for ip in [
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "255.255.255.255",
        "::ffff:127.77.64.1",
        "ff02::1",
    ] {
        let ip: IpAddr = ip.parse().unwrap();
        let roce = RoceConfig {
            udp_port: 47_964,
            ..RoceConfig::new(vec![ip])
        };
        let got = crate::SimDevice::try_new(SimConfig {
            roce: Some(roce),
            ..SimConfig::default()
        });
        let err = got.err().unwrap_or_else(|| panic!("{ip} is refused"));
        assert!(
            matches!(err, crate::roce::RoceError::Bind { .. }),
            "{ip}: {err}"
        );
    }
}

/// Moves QP `qpn` to `state` (ERR or RESET).
fn move_to(d: &mut Drv, qpn: u32, state: u32) {
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(state);
    assert_eq!(d.modify(qpn, m::STATE, a), 0);
}

/// A requester moved to ERR, or reset, while its READs, WRITEs and SENDs are on a lossy wire and
/// their responses and ACKs arrive: no work request completes twice, after ERR each completes
/// (those not done flushed), and the QPs connect again afterwards and carry a message.
#[test]
fn a_requester_moved_to_err_or_reset_mid_transfer_completes_each_wr_at_most_once() {
    const T: u8 = 65;
    let f = LinkFaults {
        loss: 0.1,
        duplicate: 0.1,
        reorder: 0.1,
        seed: 65,
    };
    let o = Opts {
        timeout: 13,
        ..Opts::default()
    };
    let (mut a, ea, mut b, eb) = pair(T, &o, f);
    b.dev
        .mem()
        .write(eb.src.iova, &pattern(65, 64 << 10))
        .unwrap();
    for (round, state) in [qp_state::ERR, qp_state::RESET].into_iter().enumerate() {
        for i in 0..30u64 {
            recv(&b, &eb, i, (i % 8) * 4096, 4096);
        }
        for i in 0..30u64 {
            let off = (i % 8) * 4096;
            let (op, local) = match i % 3 {
                0 => (
                    wr_opcode::RDMA_READ,
                    sge(ea.dst.va + off, 4000, ea.dst.lkey),
                ),
                1 => (
                    wr_opcode::RDMA_WRITE,
                    sge(ea.src.va + off, 3000, ea.src.lkey),
                ),
                _ => (wr_opcode::SEND, sge(ea.src.va + off, 2000, ea.src.lkey)),
            };
            let (raddr, rkey) = match i % 3 {
                0 => (eb.src.va + off, eb.src.rkey),
                _ => (eb.dst.va + (32 << 10) + off, eb.dst.rkey),
            };
            let flags = send_flags::SIGNALED;
            a.post_rdma_wqe(&ea.qp, i, op, flags, 0, raddr, rkey, &[local]);
        }
        a.qp_doorbell(&ea.qp, UAR_QP_SEND);
        // Some of it done, the rest on the wire.
        let first = wait(&a, &ea, 3, LONG);
        move_to(&mut a, ea.qp.qpn, state);
        let mut got: Vec<u64> = first.iter().map(|c| c.wr_id.get()).collect();
        let more = if state == qp_state::ERR {
            30 - got.len()
        } else {
            0
        };
        got.extend(wait(&a, &ea, more, LONG).iter().map(|c| c.wr_id.get()));
        // Whatever was still on its way has arrived, or been dropped, by now.
        std::thread::sleep(Duration::from_millis(200));
        while let Some(c) = a.poll(&ea.cq) {
            got.push(c.wr_id.get());
        }
        let mut once = got.clone();
        once.sort_unstable();
        once.dedup();
        assert_eq!(
            once.len(),
            got.len(),
            "round {round}: a WR completed twice: {got:?}"
        );
        if state == qp_state::ERR {
            assert_eq!(
                got,
                (0..30).collect::<Vec<_>>(),
                "round {round}: each WR, in order"
            );
        }
        // Both ends start over with new PSNs.
        move_to(&mut a, ea.qp.qpn, qp_state::RESET);
        move_to(&mut b, eb.qp.qpn, qp_state::RESET);
        while b.poll(&eb.cq).is_some() {}
        let p = Opts {
            sq_psn: 0x1000 * (round as u32 + 1),
            rq_psn: 0x8000 * (round as u32 + 1),
            ..o
        };
        let pb = Opts {
            sq_psn: p.rq_psn,
            rq_psn: p.sq_psn,
            ..p
        };
        connect(&mut a, ea.qp.qpn, eb.qp.qpn, addr(T, 2), &p);
        connect(&mut b, eb.qp.qpn, ea.qp.qpn, addr(T, 1), &pb);
        recv(&b, &eb, 100, 0, 4096);
        send(&a, &ea, 100, b"after", 0, None);
        let rx = wait(&b, &eb, 1, LONG);
        assert_eq!(rx.len(), 1, "round {round}: a message after reconnecting");
        // The ring keeps the receives posted before the reset (the mini-driver does not reset
        // its rings): the message lands in the oldest.
        let w = rx[0].wr_id.get();
        let off = if w == 100 { 0 } else { (w % 8) * 4096 };
        assert_eq!(rx[0].status.get(), wc_status::SUCCESS);
        assert_eq!(received(&b, &eb, off, 5), b"after");
        let tx = wait(&a, &ea, 1, LONG);
        assert_eq!(
            (tx[0].wr_id.get(), tx[0].status.get()),
            (100, wc_status::SUCCESS)
        );
    }
}

/// Zero-length WRITE, WRITE with immediate and READ (no SGE, an R_Key that names nothing:
/// IBTA C9-88 needs none), and a READ scattered over two SGEs in two MRs, cut by the MTU
/// elsewhere than the SGEs are: each completes successfully with its bytes in place.
#[test]
fn zero_length_rdma_and_a_read_over_sges_of_two_mrs() {
    let (a, ea, b, eb) = pair(66, &Opts::default(), LinkFaults::default());
    let remote = pattern(66, 5000);
    b.dev.mem().write(eb.src.iova, &remote).unwrap();
    recv(&b, &eb, 7, 0, 64);
    let flags = send_flags::SIGNALED;
    let zero = [
        (1, wr_opcode::RDMA_WRITE),
        (2, wr_opcode::RDMA_WRITE_WITH_IMM),
        (3, wr_opcode::RDMA_READ),
    ];
    for (id, op) in zero {
        a.post_rdma_wqe(&ea.qp, id, op, flags, 0x1234, 0xdead_0000, 0x77, &[]);
    }
    let sg = [
        sge(ea.dst.va + 100, 1500, ea.dst.lkey),
        sge(ea.src.va + 9000, 3500, ea.src.lkey),
    ];
    let (raddr, rkey) = (eb.src.va, eb.src.rkey);
    a.post_rdma_wqe(&ea.qp, 4, wr_opcode::RDMA_READ, flags, 0, raddr, rkey, &sg);
    a.qp_doorbell(&ea.qp, UAR_QP_SEND);
    let got: Vec<(u64, u32)> = wait(&a, &ea, 4, LONG)
        .iter()
        .map(|c| (c.wr_id.get(), c.status.get()))
        .collect();
    let ok = wc_status::SUCCESS;
    assert_eq!(got, [(1, ok), (2, ok), (3, ok), (4, ok)]);
    let imm = wait(&b, &eb, 1, LONG);
    assert_eq!((imm[0].wr_id.get(), imm[0].byte_len.get()), (7, 0));
    let mut back = received(&a, &ea, 100, 1500);
    let mut rest = vec![0u8; 3500];
    a.dev.mem().read(ea.src.iova + 9000, &mut rest).unwrap();
    back.extend(rest);
    assert_eq!(back, remote);
}

/// A READ whose local MR is deregistered while its response is on the way: the response writes
/// nothing there, and the READ completes with a local protection error (the QP then in ERR).
#[test]
fn a_read_response_for_a_deregistered_mr_writes_nothing() {
    const T: u8 = 67;
    let (mut d, e, peer, o) = device_and_peer(T);
    let before = pattern(67, 4096);
    d.dev.mem().write(e.dst.iova, &before).unwrap();
    let sg = [sge(e.dst.va, 2048, e.dst.lkey)];
    let flags = send_flags::SIGNALED;
    d.post_rdma_wqe(&e.qp, 1, wr_opcode::RDMA_READ, flags, 0, 0x9000, 0x55, &sg);
    d.qp_doorbell(&e.qp, UAR_QP_SEND);
    let (opcode, p, _) = next_from_device(&peer);
    assert_eq!((opcode, p), (op::RC_RDMA_READ_REQUEST, o.sq_psn));
    d.ok(pvrdma_abi::cmd::DestroyMr {
        mr_handle: U32::new(e.dst.handle),
        ..Default::default()
    });
    for (k, opcode) in [
        op::RC_RDMA_READ_RESPONSE_FIRST,
        op::RC_RDMA_READ_RESPONSE_LAST,
    ]
    .into_iter()
    .enumerate()
    {
        let hdr = Headers {
            bth: bth(opcode, e.qp.qpn, psn::add(p, k as u32)),
            aeth: Some(Aeth::ack(1, 0x1f)),
            ..Default::default()
        };
        forge(&peer, T, hdr, &[0xee; 1024]);
    }
    let c = wait(&d, &e, 1, LONG);
    assert_eq!(
        (c[0].wr_id.get(), c[0].status.get()),
        (1, wc_status::LOC_PROT_ERR)
    );
    let mut now = vec![0u8; 4096];
    d.dev.mem().read(e.dst.iova, &mut now).unwrap();
    assert_eq!(now, before, "nothing written");
    assert_eq!(d.dev.qp_state(e.qp.qpn), Some(qp_state::ERR));
}

/// A QP connected to a `dgid` that names no one host (as a hostile `ibv_rc_pingpong` peer may
/// announce): its send completes LOC_QP_OP_ERR and nothing is sent there.
#[test]
fn a_dgid_of_no_one_host_fails_the_send_and_sends_nothing() {
    let ip = addr(68, 1);
    let mut d = device(ip, crate::roce::ROCE_V2_UDP_PORT, LinkFaults::default());
    let o = Opts {
        timeout: 13,
        retry_cnt: 1,
        ..Opts::default()
    };
    let bad = ["0.0.0.0", "224.0.0.1", "239.1.2.3", "255.255.255.255"];
    for (i, dst) in bad.iter().enumerate() {
        let e = end(&mut d, 16);
        connect(&mut d, e.qp.qpn, 0x42, dst.parse().unwrap(), &o);
        send(&d, &e, i as u64, b"to nobody", 0, None);
        let c = wait(&d, &e, 1, LONG);
        assert_eq!(c[0].status.get(), wc_status::LOC_QP_OP_ERR, "{dst}");
    }
    assert_eq!(d.dev.stats().roce_tx_packets, 0);
}

/// Posts a WRITE with immediate of 3000 bytes from `ea` to `eb` on `d` (the requester's device).
fn write_imm(d: &Drv, ea: &End, eb: &End) {
    let sg = [sge(ea.src.va, 3000, ea.src.lkey)];
    let (op, flags) = (wr_opcode::RDMA_WRITE_WITH_IMM, send_flags::SIGNALED);
    d.post_rdma_wqe(&ea.qp, 1, op, flags, 0x77, eb.dst.va, eb.dst.rkey, &sg);
    d.qp_doorbell(&ea.qp, UAR_QP_SEND);
}

fn destroy_qp(d: &mut Drv, qpn: u32) {
    d.ok(pvrdma_abi::cmd::DestroyQp {
        qp_handle: U32::new(qpn),
        ..Default::default()
    });
}

/// A WRITE with immediate waiting on the wire for a receive WQE (RNR NAKed, `rnr_retry` 7: for
/// ever) whose requester QP is then destroyed: the responder never completes it (a receive
/// posted afterwards stays posted), and the requester's device carries a new message.
#[test]
fn a_write_with_immediate_rnr_nakked_dies_with_its_requester() {
    let o = Opts {
        timeout: 13,
        ..Opts::default()
    };
    let (mut a, ea, b, eb) = pair(69, &o, LinkFaults::default());
    write_imm(&a, &ea, &eb);
    let rnr = b.dev.stats().roce_rnr_naks_sent;
    assert!(counted(&b, rnr, |s| s.roce_rnr_naks_sent), "RNR NAKed");
    destroy_qp(&mut a, ea.qp.qpn);
    // What was on the wire when the QP went has arrived (and been RNR NAKed) by now.
    std::thread::sleep(Duration::from_millis(50));
    let idle = a.dev.stats().roce_tx_packets;
    recv(&b, &eb, 2, 0, 4096);
    // Give any retransmission time to come (the RNR timer is 0.01 ms): none may complete.
    std::thread::sleep(Duration::from_millis(100));
    assert!(b.poll(&eb.cq).is_none(), "no completion at the responder");
    assert_eq!(a.dev.stats().roce_tx_packets, idle, "the requester stopped");
}

/// The same on the loopback port: the parked WRITE with immediate is dropped with its
/// requester.
#[test]
fn a_parked_write_with_immediate_dies_with_its_requester_on_the_loopback_port() {
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let (x, y) = (end(&mut d, 16), end(&mut d, 16));
    let rw = access::REMOTE_WRITE | access::REMOTE_READ;
    d.connect_access(x.qp.qpn, y.qp.qpn, rw);
    d.connect_access(y.qp.qpn, x.qp.qpn, rw);
    write_imm(&d, &x, &y);
    assert!(counted(&d, 0, |s| s.packets_parked), "parked");
    destroy_qp(&mut d, x.qp.qpn);
    recv(&d, &y, 2, 0, 4096);
    assert!(d.dev.wait_port_idle(LONG));
    assert!(d.poll(&y.cq).is_none(), "no completion at the responder");
}

/// Forged WRITE packets that disagree with their RETH (a middle packet reaching its end, a last
/// or middle one with no WRITE begun, a first one whose payload is its whole length, an only one
/// shorter than it): each is refused (NAK) and writes nothing; only the one packet that fits is
/// written.
#[test]
fn write_packets_that_disagree_with_their_reth_write_nothing() {
    const T: u8 = 70;
    let (d, e, peer, o) = device_and_peer(T);
    let before = pattern(70, 16384);
    d.dev.mem().write(e.dst.iova, &before).unwrap();
    let r = o.rq_psn;
    let va = e.dst.va + 4096;
    let reth = |len: u32| {
        Some(Reth {
            va,
            rkey: e.dst.rkey,
            dma_len: len,
        })
    };
    let pkt = |opcode: u8, p: u32, reth: Option<Reth>| Headers {
        bth: bth(opcode, e.qp.qpn, p),
        reth,
        ..Default::default()
    };
    let mtu = 1024;
    let sends: [(Headers, usize); 6] = [
        (pkt(op::RC_RDMA_WRITE_FIRST, r, reth(2048)), mtu),
        (pkt(op::RC_RDMA_WRITE_MIDDLE, psn::add(r, 1), None), mtu),
        (pkt(op::RC_RDMA_WRITE_LAST, psn::add(r, 1), None), mtu),
        (pkt(op::RC_RDMA_WRITE_MIDDLE, psn::add(r, 1), None), mtu),
        (
            pkt(op::RC_RDMA_WRITE_FIRST, psn::add(r, 1), reth(1024)),
            mtu,
        ),
        (pkt(op::RC_RDMA_WRITE_ONLY, psn::add(r, 1), reth(4096)), 512),
    ];
    let mut replies = Vec::new();
    for (hdr, len) in sends {
        forge(&peer, T, hdr, &vec![0xee; len]);
        let (opcode, p, _) = next_from_device(&peer);
        replies.push((opcode, psn::diff(p, r)));
    }
    // An ACK of the first packet, then a NAK of each other at the PSN still expected.
    let nak = (op::RC_ACKNOWLEDGE, 1);
    assert_eq!(replies, [(op::RC_ACKNOWLEDGE, 0), nak, nak, nak, nak, nak]);
    let mut now = vec![0u8; 16384];
    d.dev.mem().read(e.dst.iova, &mut now).unwrap();
    let mut want = before;
    want[4096..5120].fill(0xee);
    assert!(now == want, "only the first packet was written");
}
