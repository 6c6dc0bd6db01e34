//! Duplicates and reordering (IBTA 12.9.8; `cm_dup_req_handler`, `cm_dup_rep_handler`,
//! `cm_match_req` of `cm.c`): a retransmitted REQ, REP or DREQ is answered as its state says
//! and raises no second event; a REQ for a stale connection is refused.

use crate::harness::*;
use rdma_cm::cm::REJ_STALE_CONN;
use rdma_cm::mad::header::attr;
use rdma_cm::mad::{decode, CmMad};
use rdma_cm::CmEvent;

fn sent_by(net: &Net, side: Side, attr_id: u16) -> Vec<u8> {
    net.log().into_iter().rev().find(|(s, m, _)| *s == side && m[16..18] == attr_id.to_be_bytes()).unwrap().1
}

fn replay(net: &Net, side: Side, attr_id: u16) {
    let to = if side == Side::A { Side::B } else { Side::A };
    net.inject(to, addr(side), sent_by(net, side, attr_id));
}

#[test]
fn duplicate_req_is_ignored_then_answered_by_state() {
    let net = Net::new();
    let l = net.b.create_id();
    net.b.listen(l, SERVICE, 4).unwrap();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    let ev = net.pump(net.t0);
    let b = only(&ev, "REQ", |(_, id, e)| matches!(e, CmEvent::ReqReceived { .. }).then_some(*id));
    // REQ_RCVD: the consumer has not answered; the duplicate is dropped.
    replay(&net, Side::A, attr::REQ);
    assert!(net.pump(net.t0).is_empty());
    assert_eq!(net.b.stats().duplicates, 1);
    assert_eq!(net.b.ids_alive(), 2);
    // MRA sent: the duplicate gets the MRA again.
    net.b.send_mra(b, 18, b"m", net.t0).unwrap();
    net.pump(net.t0);
    replay(&net, Side::A, attr::REQ);
    net.pump(net.t0);
    assert_eq!(net.count_sent(Side::B, attr::MRA), 2);
    assert_eq!(net.a.stats().duplicates, 1, "the second MRA is a duplicate at A");
    // REP sent: the duplicate gets the REP again.
    net.b.send_rep(b, &rep_param(&[]), net.t0).unwrap();
    let ev = net.pump(net.t0);
    only(&ev, "REP", |(_, _, e)| matches!(e, CmEvent::RepReceived(_)).then_some(()));
    net.a.send_rtu(a, &[], net.t0).unwrap();
    replay(&net, Side::A, attr::REQ);
    let ev = net.pump(net.t0);
    only(&ev, "RTU", |(_, _, e)| matches!(e, CmEvent::RtuReceived { .. }).then_some(()));
    assert_eq!(net.b.stats().duplicates, 3);
}

#[test]
fn duplicate_rep_gets_the_rtu_again() {
    let (net, _a, _, _b) = connected();
    replay(&net, Side::B, attr::REP);
    assert!(net.pump(net.t0).is_empty());
    assert_eq!(net.count_sent(Side::A, attr::RTU), 2);
    assert_eq!(net.a.stats().duplicates, 1);
    assert_eq!(net.b.stats().duplicates, 1, "the second RTU is a duplicate at B");
}

#[test]
fn req_replayed_in_timewait_is_rejected_stale() {
    let (net, a, _, b) = connected();
    net.a.send_dreq(a, &[], net.t0).unwrap();
    net.pump(net.t0);
    net.b.send_drep(b, &[], net.t0).unwrap();
    net.pump(net.t0);
    replay(&net, Side::A, attr::REQ);
    net.pump(net.at(10));
    let CmMad::Rej(rej) = decode(&sent_by(&net, Side::B, attr::REJ)).unwrap().msg else { panic!() };
    assert_eq!(rej.reason, REJ_STALE_CONN);
    assert_eq!((rej.local_comm_id, rej.remote_comm_id), (b.0, a.0));
}

#[test]
fn new_req_from_a_connected_qp_is_stale() {
    let (net, a, _, b) = connected();
    // A second ID at A, reusing the QP number of the live connection (A lost it).
    let a2 = net.a.create_id();
    net.a.send_req(a2, &req_param(&[]), net.t0).unwrap();
    let ev = net.pump(net.t0);
    only(&ev, "REJ", |(_, id, e)| {
        matches!(e, CmEvent::RejReceived { reason: REJ_STALE_CONN, .. } if *id == a2).then_some(())
    });
    // The old connection is ended: B sent it a DREQ.
    only(&ev, "DREQ", |(_, id, e)| matches!(e, CmEvent::DreqReceived { .. } if *id == a).then_some(()));
    assert_eq!(net.b.stats().rejected_stale, 1);
    let _ = b;
}

#[test]
fn dreq_overtaking_the_rtu() {
    let net = Net::new();
    let l = net.b.create_id();
    net.b.listen(l, SERVICE, 4).unwrap();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    let ev = net.pump(net.t0);
    let b = only(&ev, "REQ", |(_, id, e)| matches!(e, CmEvent::ReqReceived { .. }).then_some(*id));
    net.b.send_rep(b, &rep_param(&[]), net.t0).unwrap();
    net.pump(net.t0);
    net.a.send_rtu(a, &[], net.t0).unwrap();
    net.a.send_dreq(a, &[], net.t0).unwrap();
    let mut held = net.hold(Side::B);
    assert_eq!(held.len(), 2);
    held.reverse();
    let mut ev = Vec::new();
    for m in held {
        ev.extend(net.b.recv(&m, net.t0));
    }
    // REP_SENT takes the DREQ (cm_dreq_handler); the late RTU finds DREQ_RCVD and is counted.
    assert!(matches!(ev.as_slice(), [(id, CmEvent::DreqReceived { .. })] if *id == b), "{ev:?}");
    assert_eq!(net.b.stats().duplicates, 1);
    net.b.send_drep(b, &[], net.t0).unwrap();
    let ev = net.pump(net.t0);
    only(&ev, "DREP", |(_, id, e)| matches!(e, CmEvent::DrepReceived { .. } if *id == a).then_some(()));
}

#[test]
fn dreq_for_an_unknown_id_gets_a_drep() {
    let (net, a, _, b) = connected();
    net.a.destroy_id(a, net.t0);
    net.b.destroy_id(b, net.t0);
    net.run_until(net.at(10_000));
    // Both IDs are gone; A's DREQ replayed to B is answered with a DREP, and counted.
    replay(&net, Side::A, attr::DREQ);
    let before = net.count_sent(Side::B, attr::DREP);
    net.pump(net.at(10_000));
    assert_eq!(net.count_sent(Side::B, attr::DREP), before + 1);
    assert_eq!(net.b.stats().dropped_unknown_id, 1);
    let CmMad::Drep(d) = decode(&sent_by(&net, Side::B, attr::DREP)).unwrap().msg else { panic!() };
    assert_eq!((d.local_comm_id, d.remote_comm_id), (b.0, a.0));
}
