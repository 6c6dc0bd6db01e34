//! A REQ that reaches the passive CM before its listener (perftest's `-R` pattern: the server
//! listens only after a handshake that already let the client go): held for `LISTEN_GRACE`,
//! delivered to a listener created meanwhile, rejected with Invalid Service ID after it.

use crate::harness::*;
use rdma_cm::cm::{LISTEN_GRACE, REJ_INVALID_SERVICE_ID};
use rdma_cm::mad::header::attr;
use rdma_cm::CmEvent;

const GRACE_MS: u64 = LISTEN_GRACE.as_millis() as u64;

#[test]
fn req_before_listen_reaches_the_listener() {
    let net = Net::new();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(b"early"), net.t0).unwrap();
    assert!(net.pump(net.t0).is_empty(), "nobody listens yet: no event");
    assert_eq!(net.count_sent(Side::B, attr::REJ), 0, "and no REJ yet");
    let listen = net.b.create_id();
    net.b.listen(listen, SERVICE, 8).unwrap();
    assert_eq!(net.b.next_deadline(), Some(net.t0), "the held REQ is due at once");
    let ev = net.run_until(net.at(1));
    let b = only(&ev, "REQ event", |(s, id, e)| match e {
        CmEvent::ReqReceived { listen_id, req } if *s == Side::B && *listen_id == listen => {
            assert_eq!(&req.private_data[..5], b"early");
            Some(*id)
        }
        _ => None,
    });
    net.b.send_rep(b, &rep_param(b""), net.at(1)).unwrap();
    let ev = net.pump(net.at(1));
    only(&ev, "REP event", |(s, id, e)| {
        matches!(e, CmEvent::RepReceived(_) if *s == Side::A && *id == a).then_some(())
    });
    let s = net.b.stats();
    assert_eq!((s.rejected_no_listener, s.duplicates), (0, 0));
}

#[test]
fn req_without_listener_is_rejected_after_the_grace() {
    let net = Net::new();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    assert!(net.run_until(net.at(GRACE_MS - 1)).is_empty());
    assert_eq!(net.count_sent(Side::B, attr::REJ), 0);
    let ev = net.run_until(net.at(GRACE_MS));
    only(&ev, "REJ", |(_, id, e)| {
        matches!(e, CmEvent::RejReceived { reason, .. } if *reason == REJ_INVALID_SERVICE_ID && *id == a).then_some(())
    });
    assert_eq!(net.b.stats().rejected_no_listener, 1);
    // A listener created afterwards gets nothing: the REQ is gone.
    let listen = net.b.create_id();
    net.b.listen(listen, SERVICE, 8).unwrap();
    assert!(net.run_until(net.at(GRACE_MS + 10)).is_empty());
    assert_eq!(net.b.next_deadline(), None);
    assert_eq!(net.b.ids_alive(), 1, "only the listener");
}

#[test]
fn a_resent_held_req_is_a_duplicate() {
    let net = Net::new();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    let req = net.hold(Side::B);
    assert_eq!(req.len(), 1);
    for _ in 0..3 {
        net.inject(Side::B, req[0].from, req[0].mad.clone());
    }
    assert!(net.pump(net.t0).is_empty());
    assert_eq!(net.b.stats().duplicates, 2, "held once, two resends dropped");
    let listen = net.b.create_id();
    net.b.listen(listen, SERVICE, 8).unwrap();
    let ev = net.run_until(net.at(1));
    only(&ev, "REQ event", |(s, _, e)| matches!(e, CmEvent::ReqReceived { .. } if *s == Side::B).then_some(()));
}
