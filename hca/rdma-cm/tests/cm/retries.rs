//! Lost MADs recovered by retries, and each retried MAD's timeout after `max_cm_retries` at the
//! time `cm.c` derives: REQ 2 * packet life time + remote CM response timeout, REP the REQ's
//! Local CM Response Timeout, DREQ the ID's own.

use crate::harness::*;
use rdma_cm::mad::header::attr;
use rdma_cm::CmEvent;

fn listening(net: &Net) {
    let l = net.b.create_id();
    net.b.listen(l, SERVICE, 4).unwrap();
}

#[test]
fn lost_req_is_resent() {
    let net = Net::new();
    listening(&net);
    net.drop_next(Side::A, attr::REQ, 1);
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    assert!(net.run_until(net.at(REQ_WAIT_MS - 1)).is_empty());
    let ev = net.run_until(net.at(REQ_WAIT_MS));
    only(&ev, "REQ", |(_, _, e)| matches!(e, CmEvent::ReqReceived { .. }).then_some(()));
    assert_eq!(net.a.stats().retries, 1);
}

#[test]
fn req_times_out_after_max_retries() {
    let net = Net::new();
    listening(&net);
    net.drop_next(Side::A, attr::REQ, 100);
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    // Sent at 0, resent 3 times a wait apart, ReqError one wait after the last.
    assert!(net.run_until(net.at(4 * REQ_WAIT_MS - 1)).is_empty());
    assert_eq!(net.count_sent(Side::A, attr::REQ), 4);
    let ev = net.run_until(net.at(4 * REQ_WAIT_MS));
    assert_eq!(ev, vec![(Side::A, a, CmEvent::ReqError)]);
    assert_eq!(net.a.stats().timeouts, 1);
    assert_eq!(net.a.next_deadline(), None);
    net.a.destroy_id(a, net.at(5 * REQ_WAIT_MS));
    assert_eq!(net.a.ids_alive(), 0);
}

fn req_received(net: &Net) -> (rdma_cm::CmId, rdma_cm::CmId) {
    listening(net);
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    let ev = net.pump(net.t0);
    (a, only(&ev, "REQ", |(_, id, e)| matches!(e, CmEvent::ReqReceived { .. }).then_some(*id)))
}

#[test]
fn lost_rep_is_resent() {
    let net = Net::new();
    let (a, b) = req_received(&net);
    net.drop_next(Side::B, attr::REP, 1);
    net.b.send_rep(b, &rep_param(&[]), net.t0).unwrap();
    let ev = net.run_until(net.at(REP_WAIT_MS));
    only(&ev, "REP", |(_, id, e)| matches!(e, CmEvent::RepReceived(_) if *id == a).then_some(()));
}

#[test]
fn rep_times_out_after_max_retries() {
    let net = Net::new();
    let (_a, b) = req_received(&net);
    net.drop_next(Side::B, attr::REP, 100);
    net.drop_next(Side::A, attr::REQ, 100);
    net.b.send_rep(b, &rep_param(&[]), net.t0).unwrap();
    let ev = net.run_until(net.at(4 * REP_WAIT_MS - 1));
    assert!(ev.is_empty(), "{ev:?}");
    let ev = net.run_until(net.at(4 * REP_WAIT_MS));
    assert_eq!(ev, vec![(Side::B, b, CmEvent::RepError)]);
}

#[test]
fn lost_rtu_is_recovered_by_the_rep_retry() {
    let net = Net::new();
    let (a, b) = req_received(&net);
    net.b.send_rep(b, &rep_param(&[]), net.t0).unwrap();
    net.pump(net.t0);
    net.drop_next(Side::A, attr::RTU, 1);
    net.a.send_rtu(a, b"late", net.t0).unwrap();
    net.pump(net.t0);
    // B resends its REP; A, established, answers the duplicate with the RTU again.
    let ev = net.run_until(net.at(REP_WAIT_MS));
    let pd = only(&ev, "RTU", |(_, id, e)| match e {
        CmEvent::RtuReceived { private_data } if *id == b => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(&pd[..4], b"late");
    assert_eq!(net.a.stats().duplicates, 1);
}

#[test]
fn lost_dreq_and_drep_are_recovered() {
    let (net, a, _, b) = connected();
    net.drop_next(Side::A, attr::DREQ, 1);
    net.a.send_dreq(a, &[], net.t0).unwrap();
    let ev = net.run_until(net.at(REQ_WAIT_MS));
    only(&ev, "DREQ", |(_, id, e)| matches!(e, CmEvent::DreqReceived { .. } if *id == b).then_some(()));
    net.drop_next(Side::B, attr::DREP, 1);
    let now = net.at(REQ_WAIT_MS);
    net.b.send_drep(b, b"d", now).unwrap();
    net.pump(now);
    // A's DREQ again (a retry) while B is in time-wait: B resends its DREP, private data too.
    let dreq = net.log().into_iter().rev().find(|(s, m, _)| *s == Side::A && m[17] == attr::DREQ as u8).unwrap().1;
    net.inject(Side::B, addr(Side::A), dreq);
    let ev = net.pump(net.at(REQ_WAIT_MS + 10));
    let pd = only(&ev, "DREP", |(_, id, e)| match e {
        CmEvent::DrepReceived { private_data } if *id == a => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(pd[0], b'd');
}

#[test]
fn dreq_times_out_into_timewait() {
    let (net, a, _, _b) = connected();
    net.drop_next(Side::A, attr::DREQ, 100);
    net.a.send_dreq(a, &[], net.t0).unwrap();
    let ev = net.run_until(net.at(4 * REQ_WAIT_MS));
    assert_eq!(ev, vec![(Side::A, a, CmEvent::DreqError)]);
    let ev = net.run_until(net.at(4 * REQ_WAIT_MS + 128));
    assert_eq!(ev, vec![(Side::A, a, CmEvent::TimewaitExit)]);
}

#[test]
fn mra_extends_the_req_wait() {
    let net = Net::new();
    let (a, b) = req_received(&net);
    // Service timeout 20: 4096 ms, plus the path's ACK timeout (2^15 * 4.096 us = 128 ms).
    net.b.send_mra(b, 20, b"wait", net.t0).unwrap();
    let ev = net.pump(net.t0);
    only(&ev, "MRA", |(_, id, e)| {
        matches!(e, CmEvent::MraReceived { service_timeout: 20, .. } if *id == a).then_some(())
    });
    assert_eq!(net.a.next_deadline(), Some(net.at(4096 + 128)));
    assert!(net.run_until(net.at(4096 + 127)).is_empty());
    assert_eq!(net.count_sent(Side::A, attr::REQ), 1);
    net.b.send_rep(b, &rep_param(&[]), net.at(4000)).unwrap();
    let ev = net.pump(net.at(4000));
    only(&ev, "REP", |(_, id, e)| matches!(e, CmEvent::RepReceived(_) if *id == a).then_some(()));
    // The REP's MRA: A asks for time before its RTU.
    net.a.send_mra(a, 19, &[], net.at(4000)).unwrap();
    net.pump(net.at(4000));
    assert_eq!(net.b.next_deadline(), Some(net.at(4000 + 2048 + 128)));
    net.a.send_rtu(a, &[], net.at(5000)).unwrap();
    let ev = net.pump(net.at(5000));
    only(&ev, "RTU", |(_, id, e)| matches!(e, CmEvent::RtuReceived { .. } if *id == b).then_some(()));
}
