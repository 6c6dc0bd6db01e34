//! Connection setup and teardown: REQ, REP, RTU, DREQ, DREP, time-wait, REJ, and the REQ's
//! RoCE fields on the wire.

use crate::harness::*;
use rdma_cm::cm::{LISTEN_GRACE, REJ_CONSUMER_DEFINED, REJ_INVALID_SERVICE_ID};
use rdma_cm::mad::header::attr;
use rdma_cm::mad::{decode, CmMad};
use rdma_cm::CmEvent;

fn tid_of(m: &[u8]) -> u64 {
    decode(m).unwrap().header.tid.get()
}

#[test]
fn connect_disconnect_and_timewait() {
    let (net, a, listen, b) = connected();
    // The REQ's event carried the private data (all 92 bytes, ours first).
    net.a.send_dreq(a, b"bye", net.t0).unwrap();
    let ev = net.pump(net.t0);
    let pd = only(&ev, "DREQ", |(s, id, e)| match e {
        CmEvent::DreqReceived { private_data } if *s == Side::B && *id == b => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(&pd[..3], b"bye");
    assert_eq!(pd.len(), 220);
    net.b.send_drep(b, b"ok", net.t0).unwrap();
    let ev = net.pump(net.t0);
    only(&ev, "DREP", |(s, _, e)| {
        matches!(e, CmEvent::DrepReceived { private_data } if *s == Side::A && &private_data[..2] == b"ok")
            .then_some(())
    });
    // Both in time-wait for the path's ACK timeout: 4.096 us * 2^15, 128 ms.
    assert_eq!(net.a.next_deadline(), Some(net.at(128)));
    assert!(net.run_until(net.at(127)).is_empty());
    let ev = net.run_until(net.at(128));
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(ev.iter().all(|(_, _, e)| *e == CmEvent::TimewaitExit));
    // TIDs: REP, RTU answer with the REQ's; DREP with the DREQ's.
    let log = net.log();
    let by =
        |attr_id: u16| log.iter().find(|(_, m, _)| u16::from_be_bytes([m[16], m[17]]) == attr_id).unwrap().1.clone();
    let req_tid = tid_of(&by(attr::REQ));
    assert_eq!(tid_of(&by(attr::REP)), req_tid);
    assert_eq!(tid_of(&by(attr::RTU)), req_tid);
    assert_eq!(tid_of(&by(attr::DREP)), tid_of(&by(attr::DREQ)));
    assert_eq!(req_tid as u32, a.0, "a TID's low half is the sender's communication ID, as cm.c forms it");
    net.a.destroy_id(a, net.at(200));
    net.b.destroy_id(b, net.at(200));
    net.b.destroy_id(listen, net.at(200));
    assert_eq!((net.a.ids_alive(), net.b.ids_alive()), (0, 0));
    assert_eq!((net.a.ids_in_timewait(), net.b.ids_in_timewait()), (0, 0));
    assert_eq!(net.a.next_deadline(), None);
    let s = net.b.stats();
    assert_eq!((s.dropped_malformed, s.dropped_unknown_id, s.dropped_state, s.duplicates), (0, 0, 0, 0));
}

#[test]
fn req_carries_a_roce_path() {
    let net = Net::new();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(b"x"), net.t0).unwrap();
    let (_, m, _) = net.log().remove(0);
    let CmMad::Req(r) = decode(&m).unwrap().msg else { panic!("not a REQ") };
    assert_eq!((r.local_comm_id, r.service_id, r.local_ca_guid), (a.0, SERVICE, GUID_A));
    assert_eq!((r.local_qpn, r.starting_psn, r.transport_service_type), (0x11, 0x1000, 0));
    assert_eq!((r.responder_resources, r.initiator_depth, r.max_cm_retries), (4, 2, 3));
    assert_eq!((r.remote_cm_response_timeout, r.local_cm_response_timeout), (18, 18));
    assert_eq!((r.partition_key, r.path_mtu, r.retry_count, r.rnr_retry_count), (0xFFFF, 3, 7, 7));
    let p = r.primary;
    // A routed (RoCE v2) path: permissive LIDs, not subnet-local, as cm_format_req.
    assert_eq!((p.local_port_lid, p.remote_port_lid, p.subnet_local), (0xFFFF, 0xFFFF, false));
    assert_eq!((p.local_port_gid, p.remote_port_gid), (gid(1), gid(2)));
    assert_eq!((p.flow_label, p.hop_limit, p.traffic_class, p.sl), (0x12345, 64, 0, 0));
    assert_eq!(p.local_ack_timeout, 15, "cm_ack_timeout(0, 14)");
    assert_eq!(r.alternate, Default::default(), "no alternate path");
    assert!(r.end_to_end_flow_control);
}

#[test]
fn passive_side_sees_the_requester() {
    let net = Net::new();
    let listen = net.b.create_id();
    net.b.listen(listen, SERVICE, 1).unwrap();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(b"pd"), net.t0).unwrap();
    let ev = net.pump(net.t0);
    let req = only(&ev, "REQ", |(_, _, e)| match e {
        CmEvent::ReqReceived { listen_id, req } if *listen_id == listen => Some(req.clone()),
        _ => None,
    });
    assert_eq!((req.path.sgid, req.path.dgid, req.path.packet_life_time), (gid(2), gid(1), 14));
    assert_eq!((req.remote_ca_guid, req.remote_qpn, req.qp_type, req.service_id), (GUID_A, 0x11, 2, SERVICE));
    assert_eq!((req.responder_resources, req.initiator_depth), (2, 4), "swapped to the passive side's view");
    assert_eq!(req.from.gid, gid(1));
    assert_eq!(req.private_data.len(), 92);
    assert_eq!(&req.private_data[..2], b"pd");
}

#[test]
fn reject_with_private_data() {
    let net = Net::new();
    let listen = net.b.create_id();
    net.b.listen(listen, SERVICE, 4).unwrap();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    let ev = net.pump(net.t0);
    let b = only(&ev, "REQ", |(_, id, e)| matches!(e, CmEvent::ReqReceived { .. }).then_some(*id));
    assert_eq!(
        net.b.send_rej(b, REJ_CONSUMER_DEFINED, &[1, 2, 3], &[7; 149], net.t0),
        Err(rdma_cm::Error::PrivateDataTooLong { len: 149, max: 148 })
    );
    net.b.send_rej(b, REJ_CONSUMER_DEFINED, &[1, 2, 3], b"no thanks", net.t0).unwrap();
    let ev = net.pump(net.t0);
    let (reason, ari, pd) = only(&ev, "REJ", |(s, id, e)| match e {
        CmEvent::RejReceived { reason, ari, private_data } if *s == Side::A && *id == a => {
            Some((*reason, ari.clone(), private_data.clone()))
        }
        _ => None,
    });
    assert_eq!((reason, ari.as_slice(), &pd[..9]), (REJ_CONSUMER_DEFINED, &[1u8, 2, 3][..], &b"no thanks"[..]));
    // A is IDLE again (no timer left) and may send a new REQ.
    assert_eq!(net.a.next_deadline(), None);
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
}

#[test]
fn req_to_unknown_service_gets_rej_invalid_service_id() {
    let net = Net::new();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    // Held for the grace a late listener has (req_before_listen.rs), then rejected.
    let ev = net.run_until(net.t0 + LISTEN_GRACE);
    only(&ev, "REJ", |(_, id, e)| {
        matches!(e, CmEvent::RejReceived { reason, .. } if *reason == REJ_INVALID_SERVICE_ID && *id == a).then_some(())
    });
    assert_eq!(net.b.stats().rejected_no_listener, 1);
    assert_eq!(net.b.ids_alive(), 0);
    assert_eq!(net.a.next_deadline(), None, "the REQ's retries stop");
}

#[test]
fn establish_before_rtu_and_destroy_sends_dreq() {
    let net = Net::new();
    let listen = net.b.create_id();
    net.b.listen(listen, SERVICE, 4).unwrap();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(&[]), net.t0).unwrap();
    let ev = net.pump(net.t0);
    let b = only(&ev, "REQ", |(_, id, e)| matches!(e, CmEvent::ReqReceived { .. }).then_some(*id));
    net.b.send_rep(b, &rep_param(&[]), net.t0).unwrap();
    net.drop_next(Side::A, attr::RTU, 1);
    net.pump(net.t0);
    net.a.send_rtu(a, &[], net.t0).unwrap();
    net.pump(net.t0);
    let ev = net.b.establish(b, net.t0).unwrap();
    assert_eq!(ev, vec![(b, CmEvent::RtuReceived { private_data: vec![] })]);
    assert_eq!(net.b.establish(b, net.t0), Err(rdma_cm::Error::InvalidState));
    // Destroying an established ID sends one DREQ and spends time-wait.
    net.a.destroy_id(a, net.t0);
    assert_eq!(net.a.ids_alive(), 0);
    assert_eq!(net.a.ids_in_timewait(), 1);
    let ev = net.pump(net.t0);
    only(&ev, "DREQ", |(s, _, e)| matches!(e, CmEvent::DreqReceived { .. } if *s == Side::B).then_some(()));
    net.b.destroy_id(b, net.t0);
    net.pump(net.t0);
    assert_eq!(net.count_sent(Side::B, attr::DREP), 1);
    assert!(net.run_until(net.at(1000)).is_empty(), "destroyed IDs leave time-wait silently");
    assert_eq!((net.a.ids_in_timewait(), net.b.ids_in_timewait()), (0, 0));
    assert_eq!(net.count_sent(Side::A, attr::DREQ), 1);
}
