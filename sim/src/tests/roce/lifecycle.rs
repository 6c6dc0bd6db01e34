//! Lifecycles and bounds of the RoCE port under stress: devices dropped and QPs destroyed, reset
//! or moved to ERR with traffic in flight, more READs than a responder remembers, zero-length
//! and scattered RDMA, addresses and `dgid`s that name no one host. Each work request completes
//! at most once, nothing hangs, and nothing is sent where it must not be.

use super::forged::counted;
use super::*;
use pvrdma_abi::wqe::wc_status;
use zerocopy::little_endian::U32;

/// Devices dropped with traffic in flight (a lossy link: retransmissions pending, an RNR NAK
/// loop, a READ outstanding) stop within a bound, and their addresses bind again at once.
#[test]
fn devices_dropped_mid_transfer_stop_and_their_addresses_bind_again() {
    let mut addrs = None;
    for round in 0..3u64 {
        let f = LinkFaults { loss: [1.0, 0.5, 0.0][round as usize], duplicate: 1.0, reorder: 1.0, seed: round };
        // The first round's addresses are held again by each round's devices.
        let (a, b) = match addrs {
            None => (device(f.clone()), device(f)),
            Some((ia, ib)) => (at(ia, f.clone()), at(ib, f)),
        };
        addrs = Some((ip(&a), ip(&b)));
        let (a, ea, b, eb) = join(a, b, &Opts::default());
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
    let (ia, ib) = addrs.unwrap();
    let no = LinkFaults::default();
    let (a, ea, b, eb) = join(at(ia, no.clone()), at(ib, no), &Opts::default());
    recv(&b, &eb, 1, 0, 64);
    send(&a, &ea, 1, b"again", 0, None);
    assert_eq!(wait(&b, &eb, 1, LONG)[0].status.get(), wc_status::SUCCESS);
}

/// A device at `ip`, which this test held before.
fn at(ip: IpAddr, faults: LinkFaults) -> Drv {
    device_at(RoceConfig { faults, ..RoceConfig::new(vec![ip]) }, SimConfig::default())
}

/// More READs posted at once than a responder remembers (the device's `max_qp_rd_atom`), through
/// a lossy link: a lost response is asked for again, and the responder still answers it (the
/// requester keeps at most that many READs outstanding). Each completes once, its bytes in place.
#[test]
fn many_reads_posted_at_once_through_loss_each_complete_once() {
    let f = LinkFaults { loss: 0.05, seed: 9, ..LinkFaults::default() };
    let o = Opts { timeout: 13, ..Opts::default() };
    let (a, ea, b, eb) = pair(&o, f);
    let remote = pattern(63, 64 * 100);
    b.dev.mem().write(eb.src.iova, &remote).unwrap();
    for i in 0..64u64 {
        let sg = [sge(ea.dst.va + i * 100, 100, ea.dst.lkey)];
        let (op, flags) = (wr_opcode::RDMA_READ, send_flags::SIGNALED);
        a.post_rdma_wqe(&ea.qp, i, op, flags, 0, eb.src.va + i * 100, eb.src.rkey, &sg);
    }
    a.qp_doorbell(&ea.qp, UAR_QP_SEND);
    let got = wait(&a, &ea, 64, Duration::from_secs(120));
    let st: Vec<(u64, u32)> = got.iter().map(|c| (c.wr_id.get(), c.status.get())).collect();
    let want: Vec<(u64, u32)> = (0..64).map(|i| (i, wc_status::SUCCESS)).collect();
    assert_eq!(st, want);
    assert_eq!(received(&a, &ea, 0, 64 * 100), remote);
    assert!(a.poll(&ea.cq).is_none(), "no completion twice");
}

/// A port address that names no one interface (a wildcard, multicast, broadcast or IPv4-mapped
/// IPv6 address: the source of every ICRC would be wrong) fails device creation.
#[test]
fn a_port_address_of_no_one_interface_fails_device_creation() {
    for ip in ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "::ffff:127.77.64.1", "ff02::1"] {
        let ip: IpAddr = ip.parse().unwrap();
        let roce = RoceConfig { udp_port: 47_964, ..RoceConfig::new(vec![ip]) };
        let got = crate::SimDevice::try_new(SimConfig { roce: Some(roce), ..SimConfig::default() });
        let err = got.err().unwrap_or_else(|| panic!("{ip} is refused"));
        assert!(matches!(err, crate::roce::RoceError::Bind { .. }), "{ip}: {err}");
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
    let f = LinkFaults { loss: 0.1, duplicate: 0.1, reorder: 0.1, seed: 65 };
    let o = Opts { timeout: 13, ..Opts::default() };
    let (mut a, ea, mut b, eb) = pair(&o, f);
    b.dev.mem().write(eb.src.iova, &pattern(65, 64 << 10)).unwrap();
    for (round, state) in [qp_state::ERR, qp_state::RESET].into_iter().enumerate() {
        for i in 0..30u64 {
            recv(&b, &eb, i, (i % 8) * 4096, 4096);
        }
        for i in 0..30u64 {
            let off = (i % 8) * 4096;
            let (op, local) = match i % 3 {
                0 => (wr_opcode::RDMA_READ, sge(ea.dst.va + off, 4000, ea.dst.lkey)),
                1 => (wr_opcode::RDMA_WRITE, sge(ea.src.va + off, 3000, ea.src.lkey)),
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
        let more = if state == qp_state::ERR { 30 - got.len() } else { 0 };
        got.extend(wait(&a, &ea, more, LONG).iter().map(|c| c.wr_id.get()));
        // Whatever was still on its way has arrived, or been dropped, by now.
        std::thread::sleep(Duration::from_millis(200));
        while let Some(c) = a.poll(&ea.cq) {
            got.push(c.wr_id.get());
        }
        let mut once = got.clone();
        once.sort_unstable();
        once.dedup();
        assert_eq!(once.len(), got.len(), "round {round}: a WR completed twice: {got:?}");
        if state == qp_state::ERR {
            assert_eq!(got, (0..30).collect::<Vec<_>>(), "round {round}: each WR, in order");
        }
        // Both ends start over with new PSNs.
        move_to(&mut a, ea.qp.qpn, qp_state::RESET);
        move_to(&mut b, eb.qp.qpn, qp_state::RESET);
        while b.poll(&eb.cq).is_some() {}
        let p = Opts { sq_psn: 0x1000 * (round as u32 + 1), rq_psn: 0x8000 * (round as u32 + 1), ..o };
        let pb = Opts { sq_psn: p.rq_psn, rq_psn: p.sq_psn, ..p };
        let (ia, ib) = (ip(&a), ip(&b));
        connect(&mut a, ea.qp.qpn, eb.qp.qpn, ib, &p);
        connect(&mut b, eb.qp.qpn, ea.qp.qpn, ia, &pb);
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
        assert_eq!((tx[0].wr_id.get(), tx[0].status.get()), (100, wc_status::SUCCESS));
    }
}

/// Zero-length WRITE, WRITE with immediate and READ (no SGE, an R_Key that names nothing:
/// IBTA C9-88 needs none), and a READ scattered over two SGEs in two MRs, cut by the MTU
/// elsewhere than the SGEs are: each completes successfully with its bytes in place.
#[test]
fn zero_length_rdma_and_a_read_over_sges_of_two_mrs() {
    let (a, ea, b, eb) = pair(&Opts::default(), LinkFaults::default());
    let remote = pattern(66, 5000);
    b.dev.mem().write(eb.src.iova, &remote).unwrap();
    recv(&b, &eb, 7, 0, 64);
    let flags = send_flags::SIGNALED;
    let zero = [(1, wr_opcode::RDMA_WRITE), (2, wr_opcode::RDMA_WRITE_WITH_IMM), (3, wr_opcode::RDMA_READ)];
    for (id, op) in zero {
        a.post_rdma_wqe(&ea.qp, id, op, flags, 0x1234, 0xdead_0000, 0x77, &[]);
    }
    let sg = [sge(ea.dst.va + 100, 1500, ea.dst.lkey), sge(ea.src.va + 9000, 3500, ea.src.lkey)];
    let (raddr, rkey) = (eb.src.va, eb.src.rkey);
    a.post_rdma_wqe(&ea.qp, 4, wr_opcode::RDMA_READ, flags, 0, raddr, rkey, &sg);
    a.qp_doorbell(&ea.qp, UAR_QP_SEND);
    let got: Vec<(u64, u32)> = wait(&a, &ea, 4, LONG).iter().map(|c| (c.wr_id.get(), c.status.get())).collect();
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

/// A QP connected to a `dgid` that names no one host (as a hostile `ibv_rc_pingpong` peer may
/// announce): its send completes LOC_QP_OP_ERR and nothing is sent there.
#[test]
fn a_dgid_of_no_one_host_fails_the_send_and_sends_nothing() {
    let mut d = device(LinkFaults::default());
    let o = Opts { timeout: 13, retry_cnt: 1, ..Opts::default() };
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
    d.ok(pvrdma_abi::cmd::DestroyQp { qp_handle: U32::new(qpn), ..Default::default() });
}

/// A WRITE with immediate waiting on the wire for a receive WQE (RNR NAKed, `rnr_retry` 7: for
/// ever) whose requester QP is then destroyed: the responder never completes it (a receive
/// posted afterwards stays posted), and the requester's device carries a new message.
#[test]
fn a_write_with_immediate_rnr_nakked_dies_with_its_requester() {
    let o = Opts { timeout: 13, ..Opts::default() };
    let (mut a, ea, b, eb) = pair(&o, LinkFaults::default());
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
