//! Bytes that are not a CM MAD this CM takes: counted and dropped, nothing sent, no panic;
//! well-formed MADs naming communication IDs never issued: counted (and a DREQ answered).

use crate::harness::*;
use proptest::prelude::*;
use rdma_cm::mad::header::attr;
use rdma_cm::mad::{encode, CmMad, Drep, Dreq, Mra, Rej, Rep, Rtu, SidrRep};

fn valid_rtu() -> Vec<u8> {
    encode(7, &CmMad::Rtu(Box::new(Rtu { local_comm_id: 1, remote_comm_id: 2, private_data: [0; 224] }))).to_vec()
}

#[test]
fn truncated_oversized_and_garbage_are_counted() {
    let net = Net::new();
    let good = valid_rtu();
    let mut cases: Vec<Vec<u8>> = vec![vec![], vec![1], good[..24].to_vec(), good[..255].to_vec()];
    let mut long = good.clone();
    long.push(0);
    cases.push(long);
    cases.push(vec![0xA5; 4096]);
    for (byte, value) in [(0, 2u8), (1, 0x81), (2, 1), (3, 0x81)] {
        // Base version, class (SubnAdm), class version, method (GetResp).
        let mut m = good.clone();
        m[byte] = value;
        cases.push(m);
    }
    let mut unknown = good.clone();
    unknown[16..18].copy_from_slice(&0x0020u16.to_be_bytes());
    cases.push(unknown);
    let n = cases.len() as u64;
    for m in cases {
        assert!(net.b.recv(&rdma_cm::ReceivedMad { from: addr(Side::A), mad: m }, net.t0).is_empty());
    }
    let s = net.b.stats();
    assert_eq!((s.mads_received, s.dropped_malformed, s.mads_sent), (n, n, 0));
}

#[test]
fn class_port_info_lap_and_apr_are_unsupported() {
    let net = Net::new();
    for (attr_id, method) in [(attr::CLASS_PORT_INFO, 1u8), (attr::LAP, 3), (attr::APR, 3)] {
        let mut m = valid_rtu();
        m[3] = method;
        m[16..18].copy_from_slice(&attr_id.to_be_bytes());
        net.b.recv(&rdma_cm::ReceivedMad { from: addr(Side::A), mad: m }, net.t0);
    }
    assert_eq!(net.b.stats().dropped_unsupported, 3);
    assert_eq!(net.b.stats().dropped_malformed, 0);
}

#[test]
fn messages_for_ids_never_issued_are_counted() {
    let net = Net::new();
    let ids = (0x1234_5678, 0x0bad_cafe);
    let msgs = [
        CmMad::Rep(Box::new(Rep {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            local_qkey: 0,
            local_qpn: 5,
            local_eecn: 0,
            starting_psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: GUID_A,
            private_data: [0; 196],
        })),
        CmMad::Rtu(Box::new(Rtu { local_comm_id: ids.0, remote_comm_id: ids.1, private_data: [0; 224] })),
        CmMad::Drep(Box::new(Drep { local_comm_id: ids.0, remote_comm_id: ids.1, private_data: [0; 224] })),
        CmMad::Mra(Box::new(Mra {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            message_mraed: 1,
            service_timeout: 3,
            private_data: [0; 222],
        })),
        CmMad::Rej(Box::new(Rej {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            message_rejected: 2,
            ari_length: 0,
            reason: 28,
            ari: [0; 72],
            private_data: [0; 148],
        })),
        CmMad::SidrRep(Box::new(SidrRep {
            request_id: ids.1,
            status: 0,
            additional_info_length: 0,
            qpn: 1,
            service_id: 1,
            qkey: 1,
            additional_info: [0; 72],
            private_data: [0; 136],
        })),
    ];
    for m in &msgs {
        net.inject(Side::B, addr(Side::A), encode(9, m).to_vec());
    }
    assert!(net.pump(net.t0).is_empty());
    assert_eq!(net.b.stats().dropped_unknown_id, msgs.len() as u64);
    assert_eq!(net.b.stats().mads_sent, 0);
    let dreq = CmMad::Dreq(Box::new(Dreq {
        local_comm_id: ids.0,
        remote_comm_id: ids.1,
        remote_qpn: 3,
        private_data: [0; 220],
    }));
    net.inject(Side::B, addr(Side::A), encode(9, &dreq).to_vec());
    net.pump(net.t0);
    assert_eq!(net.b.stats().dropped_unknown_id, msgs.len() as u64 + 1);
    assert_eq!(net.count_sent(Side::B, attr::DREP), 1, "a DREQ to an unknown ID is answered, as cm.c does");
    assert_eq!(net.b.ids_alive(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any bytes, or any body behind a valid CM header of any attribute: no panic, no ID
    /// created without a listener, every MAD counted.
    #[test]
    fn any_bytes_are_survived(body in proptest::collection::vec(any::<u8>(), 0..300), a in 0x10u16..0x1b) {
        let net = Net::new();
        let mut framed = valid_rtu();
        let n = body.len().min(256 - 24);
        framed[24..24 + n].copy_from_slice(&body[..n]);
        framed[16..18].copy_from_slice(&a.to_be_bytes());
        net.b.recv(&rdma_cm::ReceivedMad { from: addr(Side::A), mad: body }, net.t0);
        net.b.recv(&rdma_cm::ReceivedMad { from: addr(Side::A), mad: framed }, net.t0);
        prop_assert_eq!(net.b.stats().mads_received, 2);
        prop_assert_eq!(net.b.ids_alive(), 0);
        net.b.on_timer(net.at(100_000));
    }
}
