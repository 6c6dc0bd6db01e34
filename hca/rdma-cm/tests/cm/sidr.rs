//! Service ID resolution (IBTA 12.11): SIDR_REQ and SIDR_REP, a SIDR_REQ nobody listens for,
//! retries and their timeout, duplicates, and a destroyed passive ID's reject.

use crate::harness::*;
use rdma_cm::cm::{SidrRepParam, SidrReqParam, SidrStatus};
use rdma_cm::mad::header::attr;
use rdma_cm::CmEvent;

fn sidr_param() -> SidrReqParam {
    SidrReqParam {
        dest: addr(Side::B),
        pkey: 0xFFFF,
        service_id: SERVICE,
        private_data: b"udp".to_vec(),
        timeout_ms: 500,
        max_cm_retries: 2,
    }
}

fn sidr_req_received(net: &Net) -> (rdma_cm::CmId, rdma_cm::CmId) {
    let l = net.b.create_id();
    net.b.listen(l, SERVICE, 4).unwrap();
    let a = net.a.create_id();
    net.a.send_sidr_req(a, &sidr_param(), net.t0).unwrap();
    let ev = net.pump(net.t0);
    let (b, req) = only(&ev, "SIDR_REQ", |(_, id, e)| match e {
        CmEvent::SidrReqReceived { listen_id, req } if *listen_id == l => Some((*id, req.clone())),
        _ => None,
    });
    assert_eq!((req.service_id, req.pkey, &req.private_data[..3]), (SERVICE, 0xFFFF, &b"udp"[..]));
    assert_eq!(req.private_data.len(), 216);
    assert_eq!(req.from.gid, gid(1));
    (a, b)
}

#[test]
fn sidr_resolves() {
    let net = Net::new();
    let (a, b) = sidr_req_received(&net);
    let p = SidrRepParam {
        qp_num: 0x77,
        qkey: 0x1234,
        status: SidrStatus::Success,
        info: vec![9; 3],
        private_data: b"r".to_vec(),
    };
    net.b.send_sidr_rep(b, &p, net.t0).unwrap();
    let ev = net.pump(net.t0);
    let rep = only(&ev, "SIDR_REP", |(_, id, e)| match e {
        CmEvent::SidrRepReceived(r) if *id == a => Some(r.clone()),
        _ => None,
    });
    assert_eq!(
        (rep.status, rep.qpn, rep.qkey, rep.info.as_slice(), rep.private_data[0]),
        (0, 0x77, 0x1234, &[9u8; 3][..], b'r')
    );
    assert_eq!(net.a.next_deadline(), None);
    net.a.destroy_id(a, net.t0);
    net.b.destroy_id(b, net.t0);
    assert_eq!((net.a.ids_alive(), net.b.ids_alive()), (0, 1));
}

#[test]
fn sidr_without_listener_is_unsupported() {
    let net = Net::new();
    let a = net.a.create_id();
    net.a.send_sidr_req(a, &sidr_param(), net.t0).unwrap();
    let ev = net.pump(net.t0);
    only(&ev, "SIDR_REP", |(_, _, e)| {
        matches!(e, CmEvent::SidrRepReceived(r) if r.status == SidrStatus::UnsupportedService as u8).then_some(())
    });
    assert_eq!(net.b.stats().rejected_no_listener, 1);
    assert_eq!(net.b.ids_alive(), 0);
}

#[test]
fn sidr_req_retries_then_errors() {
    let net = Net::new();
    net.drop_next(Side::A, attr::SIDR_REQ, 100);
    let a = net.a.create_id();
    net.a.send_sidr_req(a, &sidr_param(), net.t0).unwrap();
    assert!(net.run_until(net.at(3 * 500 - 1)).is_empty());
    assert_eq!(net.count_sent(Side::A, attr::SIDR_REQ), 3);
    assert_eq!(net.run_until(net.at(1500)), vec![(Side::A, a, CmEvent::SidrReqError)]);
}

#[test]
fn duplicate_sidr_req_and_destroyed_responder() {
    let net = Net::new();
    let (a, b) = sidr_req_received(&net);
    let req = net.log().into_iter().find(|(s, _, _)| *s == Side::A).unwrap().1;
    net.inject(Side::B, addr(Side::A), req);
    assert!(net.pump(net.t0).is_empty());
    assert_eq!(net.b.stats().duplicates, 1);
    net.b.destroy_id(b, net.t0);
    let ev = net.pump(net.t0);
    only(&ev, "SIDR_REP", |(_, id, e)| {
        matches!(e, CmEvent::SidrRepReceived(r) if r.status == SidrStatus::Reject as u8 && *id == a).then_some(())
    });
}
