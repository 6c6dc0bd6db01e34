//! What a QP's state does to its work queues against the model: RESET discards every posted WQE
//! (IBTA 10.3.1; Linux `pvrdma_reset_qp` resets the rings), and each state takes or refuses
//! posts as IBTA 10.8 says, ERR flushing what it takes.
use ib_core::{access, Error, QpAttr, QpAttrMask, QpState, RecvWr, SendWr, Sge, WcStatus, WrOpcode};
use ib_core::{Device, Qp};
use std::sync::Arc;
use std::time::Duration;
use tests::faults::Faults;
use tests::fixture::*;

fn reset(qp: &Qp) {
    qp.modify_qp(&QpAttr { qp_state: QpState::Reset, ..Default::default() }, QpAttrMask::STATE).unwrap();
}

fn reconnect(dev: &Device, qp: &Qp, remote: u32) {
    reset(qp);
    connect(qp, remote, gid(dev));
}

/// A receive posted before RESET is gone after RESET -> INIT -> RTR -> RTS: the next message
/// lands in the receive posted after.
#[test]
fn reset_discards_posted_receives() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq_a = dev.create_cq(16, None).unwrap();
    let cq_b = dev.create_cq(16, None).unwrap();
    let p = pair(&dev, &pd, (&cq_a, &cq_a), (&cq_b, &cq_b));
    p.recv_b(111, 0, 64);
    reset(&p.b);
    assert_eq!(p.b.state(), Ok(QpState::Reset));
    connect(&p.b, p.a.qpn(), gid(&dev));
    p.recv_b(222, 0, 64);
    p.send_a(1, 0, b"hello", WrOpcode::Send, false);
    let wcs = poll_n(&cq_b, 1);
    assert_eq!(wcs[0].wr_id, 222, "a receive posted before RESET consumed the message: {wcs:?}");
    assert_eq!(cq_b.poll(&mut [Default::default(); 2]), Ok(0), "no completion for the discarded receive");
}

/// After sends and a RESET the send queue starts over: the driver's indices and the device's
/// agree, and the next send is the only one that goes. Both ends reconnect, as a real one does:
/// the reset end's PSNs start over, so its peer's must too (the model checks them, as a wire's
/// responder does).
#[test]
fn reset_restarts_the_send_queue() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    for i in 0..3 {
        p.recv_b(100 + i, 0, 64);
        p.send_a(200 + i, 0, b"x", WrOpcode::Send, false);
    }
    let got = poll_n(&cq, 6);
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    reconnect(&dev, &p.a, p.b.qpn());
    reconnect(&dev, &p.b, p.a.qpn());
    p.recv_b(300, 0, 64);
    p.send_a(400, 0, b"y", WrOpcode::Send, false);
    let mut ids: Vec<u64> = poll_n(&cq, 2).iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, vec![300, 400]);
    assert_eq!(cq.poll(&mut [Default::default(); 2]), Ok(0), "nothing resent");
}

/// RESET, INIT and RTR refuse sends; INIT and RTR keep receives; ERR takes both and flushes
/// them with WR_FLUSH_ERR and their wr_ids; ERR -> RTS is refused; RTS -> SQD -> RTS works
/// (`qp_transitions.rs` has the drain itself).
#[test]
fn posting_in_every_state() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let a = rc_qp(&pd, &cq, &cq);
    let b = rc_qp(&pd, &cq, &cq);
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    let send = |q: &Qp, id| {
        q.post_send(&SendWr { wr_id: id, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false })
    };
    let recv = |q: &Qp, id| q.post_recv(&RecvWr { wr_id: id, sg_list: &sge });
    assert_eq!((send(&a, 1), recv(&a, 2)), (Err(Error::InvalidState), Err(Error::InvalidState)));
    a.modify_to_init(1, access::LOCAL_WRITE).unwrap();
    assert_eq!((send(&a, 3), recv(&a, 4)), (Err(Error::InvalidState), Ok(())));
    a.modify_to_rtr(b.qpn(), gid(&dev), 0, 1024).unwrap();
    assert_eq!((send(&a, 5), recv(&a, 6)), (Err(Error::InvalidState), Ok(())));
    a.modify_to_err().unwrap();
    assert_eq!((send(&a, 7), recv(&a, 8)), (Ok(()), Ok(())));
    let mut got: Vec<(u64, WcStatus)> = poll_n(&cq, 4).iter().map(|w| (w.wr_id, w.status)).collect();
    got.sort_by_key(|x| x.0);
    let flushed = [4, 6, 7, 8].map(|id| (id, WcStatus::WrFlushErr));
    assert_eq!(got, flushed);
    assert_eq!(a.modify_to_rts(0), Err(Error::InvalidState));
    reconnect(&dev, &a, b.qpn());
    let sqd = a.modify_qp(&QpAttr { qp_state: QpState::Sqd, ..Default::default() }, QpAttrMask::STATE);
    assert_eq!(sqd, Ok(()));
    assert_eq!(a.state(), Ok(QpState::Sqd));
    assert_eq!(a.modify_qp(&QpAttr { qp_state: QpState::Rts, ..Default::default() }, QpAttrMask::STATE), Ok(()));
    assert_eq!(a.state(), Ok(QpState::Rts));
}

/// A query racing a modify never leaves the posting state older than the modify's: a monitor's
/// `state()` that read RTR while the application moved the QP to RTS does not make `post_send`
/// refuse a QP in RTS.
#[test]
fn a_query_racing_a_modify_does_not_leave_a_stale_state() {
    use pvrdma_abi::cmd::opcode::QUERY_QP;
    let plat = Arc::new(Faults::new(Default::default()));
    let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
    let dev = hca::probe(plat.clone(), opts).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let a = Arc::new(rc_qp(&pd, &cq, &cq));
    let b = rc_qp(&pd, &cq, &cq);
    let g = gid(&dev);
    a.modify_to_init(1, access::LOCAL_WRITE).unwrap();
    a.modify_to_rtr(b.qpn(), g, 0, 1024).unwrap();
    // The monitor's QUERY_QP is slow to be taken by the device.
    plat.hold_next(QUERY_QP);
    let monitor = std::thread::spawn({
        let a = a.clone();
        move || a.state()
    });
    tests::events::wait_for(WAIT, "QUERY_QP in flight", || plat.holding());
    let app = std::thread::spawn({
        let a = a.clone();
        move || a.modify_to_rts(0)
    });
    std::thread::sleep(Duration::from_millis(100)); // the modify holds the state lock, waits for the channel
    plat.release();
    assert_eq!(monitor.join().unwrap(), Ok(QpState::Rtr));
    assert_eq!(app.join().unwrap(), Ok(()));
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    let wr = SendWr { wr_id: 1, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
    let posted = a.post_send(&wr);
    assert!(
        posted != Err(Error::InvalidState),
        "post_send refused on a QP the application just moved to RTS (device: {:?})",
        plat.sim.device().qp_state(a.qpn())
    );
}

/// Modify to RESET with a send on the wire (latency 300 ms): no completion of the old send after
/// the reset, and the QP works again after reconnecting.
#[test]
fn reset_with_a_send_on_the_wire() {
    let cfg = pvrdma_sim::SimConfig { link_latency: Duration::from_millis(300), ..Default::default() };
    let (dev, _sim) = hca::open_sim_with(
        cfg,
        hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() },
    )
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cqa = dev.create_cq(16, None).unwrap();
    let cqb = dev.create_cq(16, None).unwrap();
    let p = pair(&dev, &pd, (&cqa, &cqa), (&cqb, &cqb));
    p.recv_b(1, 0, 64);
    p.send_a(100, 0, b"old", WrOpcode::Send, false);
    p.a.modify_qp(&ib_core::QpAttr { qp_state: QpState::Reset, ..Default::default() }, ib_core::QpAttrMask::STATE)
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let mut wc = [ib_core::Wc::default(); 4];
    assert_eq!(cqa.poll(&mut wc), Ok(0), "a completion for a send discarded by RESET: {:?}", &wc[..1]);
}
