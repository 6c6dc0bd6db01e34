//! Bounded state: a listener holds at most `backlog` REQs the consumer has not answered, the
//! CM at most `MAX_IDS` IDs; what does not fit is dropped and counted, and the requester's
//! retries come back once there is room.

use crate::harness::*;
use rdma_cm::cm::MAX_IDS;
use rdma_cm::mad::{encode, CmMad, Req};
use rdma_cm::CmEvent;

/// A REQ as a peer would send it, for communication ID `comm_id` and QP `qpn`.
fn req_mad(comm_id: u32, qpn: u32, service_id: u64) -> Vec<u8> {
    let mut r = Req {
        local_comm_id: comm_id,
        service_id,
        local_ca_guid: GUID_A,
        local_qkey: 0,
        local_qpn: qpn,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 18,
        transport_service_type: 0,
        end_to_end_flow_control: false,
        starting_psn: 1,
        local_cm_response_timeout: 18,
        retry_count: 7,
        partition_key: 0xFFFF,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 3,
        srq: false,
        extended_transport_type: 0,
        primary: Default::default(),
        alternate: Default::default(),
        sap_supported: false,
        private_data: [0; 92],
    };
    r.primary.local_ack_timeout = 15;
    encode(u64::from(comm_id), &CmMad::Req(Box::new(r))).to_vec()
}

#[test]
fn req_flood_is_held_to_the_backlog() {
    let net = Net::new();
    let l = net.b.create_id();
    net.b.listen(l, SERVICE, 4).unwrap();
    for i in 0..100u32 {
        net.inject(Side::B, addr(Side::A), req_mad(1000 + i, 100 + i, SERVICE));
    }
    let ev = net.pump(net.t0);
    let ids: Vec<_> =
        ev.iter().filter(|(_, _, e)| matches!(e, CmEvent::ReqReceived { .. })).map(|(_, id, _)| *id).collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(net.b.stats().dropped_backlog, 96);
    assert_eq!(net.b.ids_alive(), 5);
    // Answering one makes room for one more (a retry of a dropped REQ).
    net.b.send_rej(ids[0], 28, &[], &[], net.t0).unwrap();
    net.inject(Side::B, addr(Side::A), req_mad(1050, 150, SERVICE));
    net.inject(Side::B, addr(Side::A), req_mad(1051, 151, SERVICE));
    let ev = net.pump(net.t0);
    assert_eq!(ev.iter().filter(|(_, _, e)| matches!(e, CmEvent::ReqReceived { .. })).count(), 1);
    assert_eq!(net.b.stats().dropped_backlog, 97);
}

#[test]
fn ids_are_capped() {
    let net = Net::new();
    // Enough listeners with the largest backlog to pass MAX_IDS.
    let listeners = MAX_IDS / rdma_cm::cm::MAX_BACKLOG as usize + 1;
    for s in 0..listeners as u64 {
        let l = net.b.create_id();
        net.b.listen(l, SERVICE + s, 0).unwrap();
    }
    let mut n = 0u32;
    for s in 0..listeners as u64 {
        for _ in 0..rdma_cm::cm::MAX_BACKLOG {
            n += 1;
            net.inject(Side::B, addr(Side::A), req_mad(n, n, SERVICE + s));
        }
        net.pump(net.t0);
    }
    assert_eq!(net.b.ids_alive(), MAX_IDS);
    let s = net.b.stats();
    assert_eq!(s.dropped_id_limit as usize, n as usize - (MAX_IDS - listeners));
    assert_eq!(s.dropped_backlog, 0);
}
