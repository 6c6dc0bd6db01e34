//! Packets forged by a peer that owns the connected address (UDP 4791, a valid ICRC): ACKs and
//! NAKs for PSNs the requester never sent, duplicate READ requests the responder never executed
//! or that ask for more than the original READ, READ responses for a deregistered MR, WRITE
//! packets that disagree with their RETH. Each is dropped and counted, or NAKed; none completes
//! a work request it must not, sends data no READ asked for, or writes memory.

use super::*;
use crate::SimStats;
use pvrdma_abi::wqe::wc_status;
use roce_wire::{opcode as op, psn, Aeth, Bth, Headers, IpContext, NakCode, Reth};
use std::net::{SocketAddr, UdpSocket};
use zerocopy::little_endian::U32;

/// The QPN the fake peer claims.
const PEER_QPN: u32 = 0x42;

/// A device with one QP connected to a fake peer (a UDP socket on 4791 of an address of its
/// own, which the test drives), no local ACK timeout (so nothing times out under the test).
pub(super) fn device_and_peer() -> (Drv, End, UdpSocket, Opts) {
    let mut d = device(LinkFaults::default());
    let e = end(&mut d, 16);
    let o = Opts { timeout: 0, ..Opts::default() };
    let peer = peer_socket();
    connect_to_peer(&mut d, &e, &peer, &o);
    peer.set_read_timeout(Some(LONG)).unwrap();
    (d, e, peer, o)
}

/// Connects end `e`'s QP of device `d` to the peer's QP at the peer socket's address.
fn connect_to_peer(d: &mut Drv, e: &End, peer: &UdpSocket, o: &Opts) {
    connect(d, e.qp.qpn, PEER_QPN, peer.local_addr().unwrap().ip(), o);
}

/// Encodes `hdr` + `payload` as the peer sends it to device `d`.
pub(super) fn forge(peer: &UdpSocket, d: &Drv, hdr: Headers, payload: &[u8]) {
    let to = SocketAddr::new(ip(d), crate::roce::ROCE_V2_UDP_PORT);
    let mut out = Vec::new();
    let ip = IpContext::new(peer.local_addr().unwrap(), to);
    roce_wire::encode(&hdr, payload, &ip, &mut out).unwrap();
    peer.send_to(&out, to).unwrap();
}

pub(super) fn bth(opcode: u8, qpn: u32, p: u32) -> Bth {
    Bth { opcode, pkey: 0xffff, dest_qp: qpn, ack_req: true, psn: p, ..Default::default() }
}

/// The next packet the device sent the peer: `(opcode, psn, payload length)`.
fn next_from_device(peer: &UdpSocket) -> (u8, u32, usize) {
    let mut buf = vec![0u8; 1 << 16];
    let (n, _) = peer.recv_from(&mut buf).expect("a packet within LONG");
    let pkt = roce_wire::decode(&buf[..n], None).unwrap();
    (pkt.hdr.bth.opcode, pkt.hdr.bth.psn, pkt.payload.len())
}

/// Waits (bounded) until `counter` of the device's stats grew past `before`.
pub(super) fn counted(d: &Drv, before: u64, counter: fn(&SimStats) -> u64) -> bool {
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
    let (d, e, peer, o) = device_and_peer();
    // 200 packets: the window sends the first 128, the rest wait for ACKs.
    send(&d, &e, 1, &pattern(1, 200 << 10), 0, None);
    assert_eq!(next_from_device(&peer).1, o.sq_psn);
    let unsent = psn::add(o.sq_psn, 199);
    let next = psn::add(o.sq_psn, 200);
    let cases = [
        ("ACK of the last PSN, never sent", unsent, Aeth::ack(1, 0x1f)),
        ("remote access NAK of a PSN never sent", unsent, Aeth::nak(0, NakCode::RemoteAccessError)),
        ("invalid request NAK of the next new PSN", next, Aeth::nak(1, NakCode::InvalidRequest)),
        ("PSN sequence error NAK of a PSN never sent", unsent, Aeth::nak(0, NakCode::PsnSequenceError)),
        ("RNR NAK of a PSN never sent", unsent, Aeth::rnr_nak(0, 1)),
        (
            "remote access NAK of a PSN before the first (already acknowledged)",
            psn::add(o.sq_psn, 0xff_ffff),
            Aeth::nak(0, NakCode::RemoteAccessError),
        ),
        ("RNR NAK of a PSN far behind", psn::add(o.sq_psn, 0xf0_0000), Aeth::rnr_nak(0, 0)),
    ];
    for (what, p, aeth) in cases {
        let before = d.dev.stats().roce_rx_dropped_psn;
        let hdr = Headers { bth: bth(op::RC_ACKNOWLEDGE, e.qp.qpn, p), aeth: Some(aeth), ..Default::default() };
        forge(&peer, &d, hdr, &[]);
        assert!(counted(&d, before, |s| s.roce_rx_dropped_psn), "{what}: dropped");
        assert!(d.poll(&e.cq).is_none(), "{what}: completes nothing");
    }
}

#[test]
fn duplicate_read_requests_are_answered_only_within_a_read_executed() {
    let (d, e, peer, o) = device_and_peer();
    d.dev.mem().write(e.dst.iova, &pattern(2, 8192)).unwrap();
    let r = o.rq_psn;
    let read = |p: u32, va: u64, rkey: u32, len: u32| Headers {
        bth: bth(op::RC_RDMA_READ_REQUEST, e.qp.qpn, p),
        reth: Some(Reth { va, rkey, dma_len: len }),
        ..Default::default()
    };
    let (va, rkey) = (e.dst.va, e.dst.rkey);
    forge(&peer, &d, read(r, va, rkey, 4096), &[]);
    for k in 0..4 {
        assert_eq!(next_from_device(&peer).1, psn::add(r, k), "response {k}");
    }
    let hostile = [
        ("a PSN no READ had", read(psn::add(r, 0xff_ff00), va, rkey, 200 << 10)),
        ("the READ's PSN, longer", read(r, va, rkey, 200 << 10)),
        ("a later PSN past the end", read(psn::add(r, 1), va + 1024, rkey, 8192)),
        ("another R_Key", read(r, e.src.va, e.src.rkey, 4096)),
        ("before the READ's address", read(r, va - 1024, rkey, 4096)),
    ];
    for (_, hdr) in hostile {
        forge(&peer, &d, hdr, &[]);
    }
    // A retried READ asking for its last two responses is answered.
    forge(&peer, &d, read(psn::add(r, 2), va + 2048, rkey, 2048), &[]);
    // A duplicate SEND asking for an ACK marks the end of what the device answers.
    let probe = Headers { bth: bth(op::RC_SEND_ONLY, e.qp.qpn, psn::add(r, 0xff_ffff)), ..Default::default() };
    forge(&peer, &d, probe, b"x");
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

/// A READ whose local MR is deregistered while its response is on the way: the response writes
/// nothing there, and the READ completes with a local protection error (the QP then in ERR).
#[test]
fn a_read_response_for_a_deregistered_mr_writes_nothing() {
    let (mut d, e, peer, o) = device_and_peer();
    let before = pattern(67, 4096);
    d.dev.mem().write(e.dst.iova, &before).unwrap();
    let sg = [sge(e.dst.va, 2048, e.dst.lkey)];
    let flags = send_flags::SIGNALED;
    d.post_rdma_wqe(&e.qp, 1, wr_opcode::RDMA_READ, flags, 0, 0x9000, 0x55, &sg);
    d.qp_doorbell(&e.qp, UAR_QP_SEND);
    let (opcode, p, _) = next_from_device(&peer);
    assert_eq!((opcode, p), (op::RC_RDMA_READ_REQUEST, o.sq_psn));
    d.ok(pvrdma_abi::cmd::DestroyMr { mr_handle: U32::new(e.dst.handle), ..Default::default() });
    for (k, opcode) in [op::RC_RDMA_READ_RESPONSE_FIRST, op::RC_RDMA_READ_RESPONSE_LAST].into_iter().enumerate() {
        let hdr = Headers {
            bth: bth(opcode, e.qp.qpn, psn::add(p, k as u32)),
            aeth: Some(Aeth::ack(1, 0x1f)),
            ..Default::default()
        };
        forge(&peer, &d, hdr, &[0xee; 1024]);
    }
    let c = wait(&d, &e, 1, LONG);
    assert_eq!((c[0].wr_id.get(), c[0].status.get()), (1, wc_status::LOC_PROT_ERR));
    let mut now = vec![0u8; 4096];
    d.dev.mem().read(e.dst.iova, &mut now).unwrap();
    assert_eq!(now, before, "nothing written");
    assert_eq!(d.dev.qp_state(e.qp.qpn), Some(qp_state::ERR));
}

/// Forged WRITE packets that disagree with their RETH (a middle packet reaching its end, a last
/// or middle one with no WRITE begun, a first one whose payload is its whole length, an only one
/// shorter than it): each is refused (NAK) and writes nothing; only the one packet that fits is
/// written.
#[test]
fn write_packets_that_disagree_with_their_reth_write_nothing() {
    let (mut d, e, peer, o) = device_and_peer();
    let r = o.rq_psn;
    let mtu = 1024;
    // Each case on a QP of its own (an invalid request moves the QP to ERR): packets before
    // the bad one, then the bad one, NAKed at the PSN still expected.
    type Case = Vec<(u8, u32, Option<u32>, usize)>;
    let cases: [Case; 5] = [
        vec![(op::RC_RDMA_WRITE_FIRST, r, Some(2048), mtu), (op::RC_RDMA_WRITE_MIDDLE, psn::add(r, 1), None, mtu)],
        vec![(op::RC_RDMA_WRITE_LAST, r, None, mtu)],
        vec![(op::RC_RDMA_WRITE_MIDDLE, r, None, mtu)],
        vec![(op::RC_RDMA_WRITE_FIRST, r, Some(1024), mtu)],
        vec![(op::RC_RDMA_WRITE_ONLY, r, Some(4096), 512)],
    ];
    let mut qp = Some(e);
    for (i, case) in cases.into_iter().enumerate() {
        let e = qp.take().unwrap_or_else(|| {
            let e = end(&mut d, 16);
            connect_to_peer(&mut d, &e, &peer, &o);
            e
        });
        let before = pattern(70, 16384);
        d.dev.mem().write(e.dst.iova, &before).unwrap();
        let va = e.dst.va + 4096;
        let n = case.len();
        let mut replies = Vec::new();
        for (opcode, p, len, bytes) in case {
            let hdr = Headers {
                bth: bth(opcode, e.qp.qpn, p),
                reth: len.map(|dma_len| Reth { va, rkey: e.dst.rkey, dma_len }),
                ..Default::default()
            };
            forge(&peer, &d, hdr, &vec![0xee; bytes]);
            let (opcode, p, _) = next_from_device(&peer);
            replies.push((opcode, psn::diff(p, r)));
        }
        // An ACK of each good packet, then a NAK of the bad one.
        let want: Vec<(u8, i32)> = (0..n).map(|k| (op::RC_ACKNOWLEDGE, k as i32)).collect();
        assert_eq!(replies, want, "case {i}");
        assert_eq!(d.dev.qp_state(e.qp.qpn), Some(qp_state::ERR), "case {i}");
        let mut now = vec![0u8; 16384];
        d.dev.mem().read(e.dst.iova, &mut now).unwrap();
        let mut want = before;
        want[4096..4096 + (n - 1) * mtu].fill(0xee);
        assert!(now == want, "case {i}: only the packets before the bad one were written");
    }
}

#[test]
fn a_send_longer_than_the_max_message_size_is_refused_not_buffered() {
    // A receive WQE whose SGEs claim 8 GiB (the scatter would check them later) and a peer
    // that keeps sending SEND_MIDDLE packets: the responder buffers the message, so it must
    // stop at the device's max_msg_sz (16 MiB), not at the WQE's claim.
    let (d, e, peer, o) = device_and_peer();
    let huge = sge(e.dst.va, u32::MAX, e.dst.lkey);
    d.recv(&e.qp, 1, &[huge, huge]);
    let r = o.rq_psn;
    let mtu = 1024;
    let most = crate::limits::MAX_MSG_SZ as usize / mtu;
    let payload = vec![0x5a; mtu];
    let mut k = 0u32;
    let reply = loop {
        let opcode = if k == 0 { op::RC_SEND_FIRST } else { op::RC_SEND_MIDDLE };
        let hdr = Headers { bth: bth(opcode, e.qp.qpn, psn::add(r, k)), ..Default::default() };
        forge(&peer, &d, hdr, &payload);
        let mut buf = vec![0u8; 1 << 16];
        let (n, _) = peer.recv_from(&mut buf).expect("a reply within LONG");
        let pkt = roce_wire::decode(&buf[..n], None).unwrap();
        let nak = pkt.hdr.aeth.map(|a| a.syndrome()) != Some(roce_wire::Syndrome::Ack { credits: 0x1f });
        if nak || k as usize > most + 1 {
            break (k, pkt.hdr.aeth);
        }
        k += 1;
    };
    assert_eq!(
        reply,
        (most as u32, Some(Aeth::nak(0, NakCode::InvalidRequest))),
        "the packet past max_msg_sz is refused"
    );
    assert_eq!(d.dev.qp_state(e.qp.qpn), Some(qp_state::ERR));
}

#[test]
fn partial_sends_on_many_qps_are_bounded_by_the_device_wire_budget() {
    // Receive WQEs that claim 8 GiB each, and a peer that starts a SEND on each QP and never
    // ends it: what the responders reassemble together stays within the device's wire budget
    // (here 32 MiB): past it, a first packet gets an RNR NAK instead of a buffer.
    let cfg = crate::SimConfig { device_bytes_in_flight: 32 << 20, ..crate::SimConfig::default() };
    let mut d = device_with(LinkFaults::default(), cfg);
    let peer = peer_socket();
    peer.set_read_timeout(Some(LONG)).unwrap();
    let o = Opts { timeout: 0, ..Opts::default() };
    let mut replies = Vec::new();
    for i in 0..4 {
        let e = end(&mut d, 16);
        connect_to_peer(&mut d, &e, &peer, &o);
        let huge = sge(e.dst.va, u32::MAX, e.dst.lkey);
        d.recv(&e.qp, i, &[huge, huge]);
        let hdr = Headers { bth: bth(op::RC_SEND_FIRST, e.qp.qpn, o.rq_psn), ..Default::default() };
        forge(&peer, &d, hdr, &[0x5a; 1024]);
        let mut buf = vec![0u8; 1 << 16];
        let (n, _) = peer.recv_from(&mut buf).expect("a reply within LONG");
        let pkt = roce_wire::decode(&buf[..n], None).unwrap();
        replies.push(pkt.hdr.aeth.map(|a| a.syndrome()));
    }
    // Each message may grow to max_msg_sz (16 MiB): two fit in 32 MiB, the others wait.
    let ack = Some(roce_wire::Syndrome::Ack { credits: 0x1f });
    let rnr = Some(roce_wire::Syndrome::RnrNak { timer: o.min_rnr_timer });
    assert_eq!(replies, [ack, ack, rnr, rnr]);
}
