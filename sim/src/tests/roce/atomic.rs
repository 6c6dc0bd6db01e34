//! COMPARE SWAP and FETCH ADD over the RoCE v2 port (IBTA 9.4.5): AtomicETH out, ATOMIC
//! Acknowledge with the original value back; a duplicate request answered from the saved result
//! and never executed again; hostile atomics NAKed or dropped; FETCH ADD from two threads on two
//! QPs onto one address; and atomics through a lossy link (retransmitted requests are not
//! executed twice).

use super::forged::{bth, counted, device_and_peer, forge};
use super::*;
use pvrdma_abi::wqe::{wc_opcode, wc_status};
use roce_wire::{opcode as op, psn, Aeth, AtomicEth, Headers, NakCode, Syndrome};
use std::net::UdpSocket;

const ATOMIC: u32 = access::LOCAL_WRITE | access::REMOTE_ATOMIC;

/// Grants `e`'s QP remote atomic access (RTS -> RTS) and gives it an MR of 2 pages with
/// REMOTE_ATOMIC at `va`.
fn atomic_target(d: &mut Drv, e: &End, va: u64) -> TestMr {
    grant_atomic(d, e);
    d.create_mr(e.pd, va, 2 * PAGE, ATOMIC)
}

/// Grants `e`'s QP remote atomic access (RTS -> RTS).
fn grant_atomic(d: &mut Drv, e: &End) {
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::RTS);
    a.qp_access_flags = U32::new(access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC);
    assert_eq!(d.modify(e.qp.qpn, m::STATE | m::ACCESS_FLAGS, a), 0);
}

/// Posts an atomic from `e` whose original value goes to `e`'s receive MR at `res`.
#[allow(clippy::too_many_arguments)]
fn atomic(d: &Drv, e: &End, wr_id: u64, opcode: u32, va: u64, rkey: u32, compare_add: u64, swap: u64, res: u64) {
    let sg = [sge(e.dst.va + res, 8, e.dst.lkey)];
    d.post_atomic_wqe(&e.qp, wr_id, opcode, va, rkey, compare_add, swap, &sg);
}

fn u64_at(d: &Drv, iova: u64) -> u64 {
    d.dev.mem().read_u64(iova).unwrap()
}

#[test]
fn compare_swap_and_fetch_add_cross_the_wire() {
    let (a, ea, mut b, eb) = pair(&Opts::default(), LinkFaults::default());
    let t = atomic_target(&mut b, &eb, 0x7200_0000_0ff8);
    b.dev.mem().write(t.iova, &0x0102_0304_0506_0708u64.to_le_bytes()).unwrap();
    atomic(&a, &ea, 1, wr_opcode::ATOMIC_CMP_AND_SWP, t.va, t.rkey, 0x0102_0304_0506_0708, 99, 0);
    atomic(&a, &ea, 2, wr_opcode::ATOMIC_CMP_AND_SWP, t.va, t.rkey, 5, 6, 8);
    atomic(&a, &ea, 3, wr_opcode::ATOMIC_FETCH_AND_ADD, t.va + 8, t.rkey, u64::MAX, 0, 16);
    let got = wait(&a, &ea, 3, LONG);
    let seen: Vec<_> = got.iter().map(|c| (c.wr_id.get(), c.status.get(), c.opcode.get(), c.byte_len.get())).collect();
    assert_eq!(
        seen,
        [
            (1, wc_status::SUCCESS, wc_opcode::COMP_SWAP, 8),
            (2, wc_status::SUCCESS, wc_opcode::COMP_SWAP, 8),
            (3, wc_status::SUCCESS, wc_opcode::FETCH_ADD, 8)
        ]
    );
    let res = |off| u64_at(&a, ea.dst.iova + off);
    assert_eq!((res(0), res(8), res(16)), (0x0102_0304_0506_0708, 99, 0));
    // The target's first word straddles nothing: 0x...ff8 is its page's last 8 bytes.
    assert_eq!((u64_at(&b, t.iova), u64_at(&b, t.iova + 8)), (99, u64::MAX));
    assert_eq!(b.dev.stats().atomics_executed, 3);
}

/// A second QP of `d` in the PD of `e` (its own CQ and MRs).
fn end_in_pd(d: &mut Drv, e: &End, base: u64) -> End {
    let cq = d.create_cq(0, 4096);
    let qp = d.create_qp(e.pd, cq.handle, cq.handle, 64);
    let rw = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    let src = d.create_mr(e.pd, base, MR_LEN, rw);
    let dst = d.create_mr(e.pd, base + (1 << 32), MR_LEN, rw);
    End { pd: e.pd, qp, cq, src, dst }
}

/// Posts `n` FETCH ADDs of 1 from `e` on `mr` (at most `window` outstanding), checking each
/// completes in order; returns the original values seen.
fn add_n(a: &Drv, e: &End, mr: &TestMr, n: u64) -> Vec<u64> {
    const WINDOW: u64 = 8;
    let mut seen = Vec::new();
    let (mut posted, mut done) = (0u64, 0u64);
    let deadline = Instant::now() + LONG;
    while done < n && Instant::now() < deadline {
        while posted < n && posted - done < WINDOW {
            atomic(a, e, posted, wr_opcode::ATOMIC_FETCH_AND_ADD, mr.va, mr.rkey, 1, 0, 8 * (posted % WINDOW));
            posted += 1;
        }
        match a.poll(&e.cq) {
            Some(c) => {
                assert_eq!((c.wr_id.get(), c.status.get()), (done, wc_status::SUCCESS));
                seen.push(u64_at(a, e.dst.iova + 8 * (done % WINDOW)));
                done += 1;
            }
            None => std::thread::sleep(Duration::from_micros(50)),
        }
    }
    seen
}

/// FETCH ADD from two threads, each driving its own QP of device A towards its own QP of device
/// B (both in one PD), onto one address of B: the final value is the sum, and every original
/// value was seen exactly once.
#[test]
fn fetch_add_from_two_qps_at_once_sums_exactly() {
    const N: u64 = 300;
    let o = Opts::default();
    let (mut a, ea1, mut b, eb1) = pair(&o, LinkFaults::default());
    let ea2 = end_in_pd(&mut a, &ea1, 0x7400_0000_0000);
    let eb2 = end_in_pd(&mut b, &eb1, 0x7400_0000_0000);
    connect(&mut a, ea2.qp.qpn, eb2.qp.qpn, ip(&b), &o);
    let ob = Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..o };
    connect(&mut b, eb2.qp.qpn, ea2.qp.qpn, ip(&a), &ob);
    let t = atomic_target(&mut b, &eb1, 0x7200_0000_0000);
    grant_atomic(&mut b, &eb2);
    let (a, b) = (&a, &b);
    let seen: Vec<u64> = std::thread::scope(|s| {
        let h1 = s.spawn(|| add_n(a, &ea1, &t, N));
        let h2 = s.spawn(|| add_n(a, &ea2, &t, N));
        [h1.join().unwrap(), h2.join().unwrap()].concat()
    });
    assert_eq!(seen.len() as u64, 2 * N, "every FETCH ADD completed");
    assert_eq!(u64_at(b, t.iova), 2 * N, "the sum");
    let mut sorted = seen;
    sorted.sort_unstable();
    assert!(sorted.iter().enumerate().all(|(i, &v)| v == i as u64), "each original value once");
}

/// Through a link that loses, reorders and duplicates packets both ways, every FETCH ADD is
/// executed exactly once: the requester re-sends an atomic whose ATOMIC Acknowledge was lost,
/// and the responder answers the duplicate from its saved result.
#[test]
fn atomics_through_a_lossy_link_execute_exactly_once() {
    const N: u64 = 300;
    let faults = LinkFaults { loss: 0.1, reorder: 0.05, duplicate: 0.05, seed: 215 };
    let o = Opts { timeout: 13, ..Opts::default() };
    let (a, ea, mut b, eb) = pair(&o, faults);
    let t = atomic_target(&mut b, &eb, 0x7200_0000_0000);
    let mut seen = add_n(&a, &ea, &t, N);
    assert_eq!(seen.len() as u64, N, "every FETCH ADD completed");
    assert_eq!(u64_at(&b, t.iova), N, "none executed twice");
    seen.sort_unstable();
    assert!(seen.iter().enumerate().all(|(i, &v)| v == i as u64));
    assert_eq!(b.dev.stats().atomics_executed, N);
    assert!(b.dev.stats().roce_atomic_replays > 0, "some duplicates were answered from the cache");
}

/// The next packet the device sent the peer, decoded.
fn next_packet(peer: &UdpSocket) -> Headers {
    let mut buf = vec![0u8; 1 << 16];
    let (n, _) = peer.recv_from(&mut buf).expect("a packet within LONG");
    roce_wire::decode(&buf[..n], None).unwrap().hdr
}

fn fetch_add(qpn: u32, p: u32, va: u64, rkey: u32, add: u64) -> Headers {
    let atomic_eth = Some(AtomicEth { va, rkey, swap_add: add, compare: 0 });
    Headers { bth: bth(op::RC_FETCH_ADD, qpn, p), atomic_eth, ..Default::default() }
}

/// A duplicate FETCH ADD (the same PSN and AtomicETH) is answered with the saved original value
/// and not executed again; a "duplicate" that differs from what was executed, or names a PSN no
/// atomic had, is dropped; the responder's memory holds one addition.
#[test]
fn a_duplicate_atomic_is_answered_from_the_saved_result() {
    let (mut d, e, peer, o) = device_and_peer();
    let t = atomic_target(&mut d, &e, 0x7200_0000_0000);
    d.dev.mem().write(t.iova, &40u64.to_le_bytes()).unwrap();
    let r = o.rq_psn;
    forge(&peer, &d, fetch_add(e.qp.qpn, r, t.va, t.rkey, 2), &[]);
    let ack = next_packet(&peer);
    assert_eq!((ack.bth.opcode, ack.bth.psn, ack.atomic_ack), (op::RC_ATOMIC_ACKNOWLEDGE, r, Some(40)));
    assert!(matches!(ack.aeth.map(|a| a.syndrome()), Some(Syndrome::Ack { .. })));
    // The same request again (its response was lost): the same answer, nothing executed.
    forge(&peer, &d, fetch_add(e.qp.qpn, r, t.va, t.rkey, 2), &[]);
    let again = next_packet(&peer);
    assert_eq!((again.bth.opcode, again.bth.psn, again.atomic_ack), (op::RC_ATOMIC_ACKNOWLEDGE, r, Some(40)));
    let before = d.dev.stats().roce_rx_dropped_psn;
    // Not what was executed at that PSN, and a PSN no atomic had: dropped.
    forge(&peer, &d, fetch_add(e.qp.qpn, r, t.va, t.rkey, 3), &[]);
    forge(&peer, &d, fetch_add(e.qp.qpn, psn::add(r, 0xff_fff0), t.va, t.rkey, 2), &[]);
    assert!(counted(&d, before + 1, |s| s.roce_rx_dropped_psn));
    assert_eq!(u64_at(&d, t.iova), 42, "one addition");
    let s = d.dev.stats();
    assert_eq!((s.atomics_executed, s.roce_atomic_replays), (1, 1));
    // The next new atomic is executed.
    forge(&peer, &d, fetch_add(e.qp.qpn, psn::add(r, 1), t.va, t.rkey, 8), &[]);
    let next = next_packet(&peer);
    assert_eq!((next.bth.psn, next.atomic_ack), (psn::add(r, 1), Some(42)));
    assert_eq!(u64_at(&d, t.iova), 50);
}

/// Hostile atomics at the expected PSN: a misaligned address is NAKed Invalid Request, a bad
/// R_Key Remote Access Error (IBTA 9.7.5.2.x; rxe does the same), nothing changed; either puts
/// the responder QP in ERR (Class C).
#[test]
fn hostile_atomics_are_naked_and_change_nothing() {
    for (what, off, bad_key, code) in [
        ("misaligned", 4u64, false, NakCode::InvalidRequest),
        ("bad R_Key", 0, true, NakCode::RemoteAccessError),
        ("past the MR", 2 * PAGE, false, NakCode::RemoteAccessError),
    ] {
        let (mut d, e, peer, o) = device_and_peer();
        let t = atomic_target(&mut d, &e, 0x7200_0000_0000);
        let rkey = if bad_key { t.rkey ^ 0x100 } else { t.rkey };
        forge(&peer, &d, fetch_add(e.qp.qpn, o.rq_psn, t.va + off, rkey, 1), &[]);
        let nak = next_packet(&peer);
        assert_eq!(nak.bth.opcode, op::RC_ACKNOWLEDGE, "{what}");
        assert_eq!(nak.aeth.map(|a| a.syndrome()), Some(Syndrome::Nak(code)), "{what}");
        assert_eq!((u64_at(&d, t.iova), u64_at(&d, t.iova + 8)), (0, 0), "{what}");
        assert_eq!(d.dev.stats().atomics_executed, 0, "{what}");
        assert_eq!(d.dev.core().qp(e.qp.qpn).unwrap().state(), qp_state::ERR, "{what}");
    }
}

/// The requester's side against a forged peer: an ATOMIC Acknowledge for a PSN never sent, one
/// whose AETH is a NAK, and one answering no atomic are dropped and counted and complete
/// nothing; the real answer completes the FETCH ADD with its original value, and a duplicate of
/// it afterwards changes nothing.
#[test]
fn forged_atomic_acknowledges_are_dropped_and_counted() {
    let (d, e, peer, o) = device_and_peer();
    let ack = |p: u32, aeth: Aeth, orig: u64| Headers {
        bth: bth(op::RC_ATOMIC_ACKNOWLEDGE, e.qp.qpn, p),
        aeth: Some(aeth),
        atomic_ack: Some(orig),
        ..Default::default()
    };
    atomic(&d, &e, 5, wr_opcode::ATOMIC_FETCH_AND_ADD, 0x9000_0000, 0x77, 3, 0, 0);
    let req = next_packet(&peer);
    let eth = req.atomic_eth.expect("an AtomicETH");
    assert_eq!(
        (req.bth.opcode, req.bth.psn, eth.va, eth.rkey, eth.swap_add),
        (op::RC_FETCH_ADD, o.sq_psn, 0x9000_0000, 0x77, 3)
    );
    let s1 = d.dev.stats();
    forge(&peer, &d, ack(psn::add(o.sq_psn, 5), Aeth::ack(0, 0x1f), 1), &[]);
    assert!(counted(&d, s1.roce_rx_dropped_psn, |s| s.roce_rx_dropped_psn), "never sent");
    forge(&peer, &d, ack(o.sq_psn, Aeth::nak(0, NakCode::RemoteAccessError), 1), &[]);
    assert!(
        counted(&d, s1.roce_rx_dropped_malformed, |s| s.roce_rx_dropped_malformed),
        "a NAK in an ATOMIC Acknowledge"
    );
    forge(&peer, &d, ack(psn::add(o.sq_psn, 0xff_ffff), Aeth::ack(0, 0x1f), 1), &[]);
    assert!(counted(&d, s1.roce_rx_duplicates, |s| s.roce_rx_duplicates), "answers no atomic");
    assert!(d.poll(&e.cq).is_none(), "nothing completed");
    forge(&peer, &d, ack(o.sq_psn, Aeth::ack(1, 0x1f), 0xabcd), &[]);
    let c = wait(&d, &e, 1, LONG);
    assert_eq!((c[0].wr_id.get(), c[0].status.get(), c[0].opcode.get()), (5, wc_status::SUCCESS, wc_opcode::FETCH_ADD));
    assert_eq!(u64_at(&d, e.dst.iova), 0xabcd);
    let s2 = d.dev.stats();
    forge(&peer, &d, ack(o.sq_psn, Aeth::ack(1, 0x1f), 0x9999), &[]);
    assert!(counted(&d, s2.roce_rx_duplicates.max(s2.roce_rx_dropped_psn), |s| s
        .roce_rx_duplicates
        .max(s.roce_rx_dropped_psn)));
    assert_eq!(u64_at(&d, e.dst.iova), 0xabcd, "a late duplicate writes nothing");
    assert!(d.poll(&e.cq).is_none());
}

/// Across the wire, an atomic the responder refuses completes at the requester with the status
/// its NAK names (a bad R_Key: remote access error; a misaligned address: remote invalid
/// request), nothing changes, and both QPs end in ERR.
#[test]
fn refused_atomics_complete_with_the_nak_status() {
    for (what, off, bad_key, status) in
        [("bad R_Key", 0u64, true, wc_status::REM_ACCESS_ERR), ("misaligned", 4, false, wc_status::REM_INV_REQ_ERR)]
    {
        let (a, ea, mut b, eb) = pair(&Opts::default(), LinkFaults::default());
        let t = atomic_target(&mut b, &eb, 0x7200_0000_0000);
        let rkey = if bad_key { t.rkey ^ 0x100 } else { t.rkey };
        atomic(&a, &ea, 1, wr_opcode::ATOMIC_CMP_AND_SWP, t.va + off, rkey, 0, 1, 0);
        let c = wait(&a, &ea, 1, LONG);
        assert_eq!((c.len(), c[0].wr_id.get(), c[0].status.get()), (1, 1, status), "{what}");
        assert_eq!((u64_at(&b, t.iova), u64_at(&b, t.iova + 8)), (0, 0), "{what}");
        assert_eq!(a.dev.core().qp(ea.qp.qpn).unwrap().state(), qp_state::ERR, "{what}: requester");
        assert_eq!(b.dev.core().qp(eb.qp.qpn).unwrap().state(), qp_state::ERR, "{what}: responder");
    }
}
