//! The MADs this CM sends, built from an ID's record and the consumer's parameters as `cm.c`'s
//! `cm_format_*` functions build them; and the transport-type mapping between `enum ibv_qp_type`
//! and the REQ's Transport Service Type (IBTA Table 106).

use super::conn::{Conn, State};
use super::params::{Path, RepParam, ReqParam, SidrRepParam, SidrReqParam};
use super::timing::{ack_timeout, CA_ACK_DELAY};
use super::types::CmId;
use crate::mad::fields::ARI_LEN;
use crate::mad::msg::msg_response;
use crate::mad::{encode, CmMad, Drep, Dreq, Mra, Rej, Rep, Req, ReqPath, Rtu, SidrRep, SidrReq};
use crate::transport::MAD_SIZE;

/// `enum ibv_qp_type` values the CM knows.
pub const QPT_RC: u8 = 2;
pub const QPT_UC: u8 = 3;
pub const QPT_XRC_SEND: u8 = 9;
pub const QPT_XRC_RECV: u8 = 10;

/// The permissive LID (IBTA 4.1.2): what a REQ over a routed (RoCE v2) path carries.
pub const LID_PERMISSIVE: u16 = 0xFFFF;

/// `src` zero-padded to `N` bytes (callers check lengths first; longer input is cut).
pub fn fixed<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = src.len().min(N);
    out[..n].copy_from_slice(&src[..n]);
    out
}

/// The REQ's Transport Service Type and Extended Transport Type for a QP type
/// (`cm_req_set_qp_type`); `None` for types the CM does not connect.
pub fn transport_of(qp_type: u8) -> Option<(u8, u8)> {
    match qp_type {
        QPT_RC => Some((0, 0)),
        QPT_UC => Some((1, 0)),
        QPT_XRC_SEND => Some((3, 1)),
        _ => None,
    }
}

/// The QP type the passive side sees (`cm_req_get_qp_type`); `None` for RD and unknown types.
pub fn qp_type_of(transport: u8, extended: u8) -> Option<u8> {
    match (transport, extended) {
        (0, _) => Some(QPT_RC),
        (1, _) => Some(QPT_UC),
        (3, 1) => Some(QPT_XRC_RECV),
        _ => None,
    }
}

/// The REQ's primary path as `cm_format_req` fills it for RoCE: a path that leaves the subnet
/// (hop limit above 1: every RoCE v2 route `cma.c` resolves) carries permissive LIDs and Subnet
/// Local 0; a link-local one LID 0 (RoCE has no LIDs) and Subnet Local 1. GIDs, flow label,
/// traffic class, hop limit, SL and rate are the path's; Local ACK Timeout is `cm_ack_timeout`
/// of the device's ACK delay and the packet life time.
pub fn req_path(p: &Path) -> ReqPath {
    let local = p.hop_limit <= 1;
    let lid = if local { 0 } else { LID_PERMISSIVE };
    ReqPath {
        local_port_lid: lid,
        remote_port_lid: lid,
        local_port_gid: p.sgid,
        remote_port_gid: p.dgid,
        flow_label: p.flow_label & 0xF_FFFF,
        packet_rate: p.rate & 0x3F,
        traffic_class: p.traffic_class,
        hop_limit: p.hop_limit,
        sl: p.sl & 0xF,
        subnet_local: local,
        local_ack_timeout: ack_timeout(CA_ACK_DELAY, p.packet_life_time.min(31)),
    }
}

/// `cm_format_req`.
pub fn req(id: CmId, tid: u64, ca_guid: u64, p: &ReqParam, transport: (u8, u8)) -> [u8; MAD_SIZE] {
    let xrc = p.qp_type == QPT_XRC_SEND;
    let m = Req {
        local_comm_id: id.0,
        service_id: p.service_id,
        local_ca_guid: ca_guid,
        local_qkey: 0,
        local_qpn: p.qp_num & 0xFF_FFFF,
        responder_resources: if xrc { 0 } else { p.responder_resources },
        local_eecn: 0,
        initiator_depth: p.initiator_depth,
        remote_eecn: 0,
        remote_cm_response_timeout: p.remote_cm_response_timeout & 0x1F,
        transport_service_type: transport.0,
        end_to_end_flow_control: p.flow_control,
        starting_psn: p.starting_psn & 0xFF_FFFF,
        local_cm_response_timeout: p.local_cm_response_timeout & 0x1F,
        retry_count: if xrc { 0 } else { p.retry_count & 7 },
        partition_key: p.path.pkey,
        path_mtu: p.path.mtu & 0xF,
        rdc_exists: false,
        rnr_retry_count: if xrc { 0 } else { p.rnr_retry_count & 7 },
        max_cm_retries: p.max_cm_retries & 0xF,
        srq: !xrc && p.srq,
        extended_transport_type: transport.1,
        primary: req_path(&p.path),
        alternate: ReqPath::default(),
        sap_supported: false,
        private_data: fixed(&p.private_data),
    };
    encode(tid, &CmMad::Req(Box::new(m)))
}

/// `cm_format_rep`.
pub fn rep(id: CmId, c: &Conn, ca_guid: u64, p: &RepParam) -> [u8; MAD_SIZE] {
    let m = Rep {
        local_comm_id: id.0,
        remote_comm_id: c.remote_id,
        local_qkey: 0,
        local_qpn: p.qp_num & 0xFF_FFFF,
        local_eecn: 0,
        starting_psn: p.starting_psn & 0xFF_FFFF,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        target_ack_delay: CA_ACK_DELAY,
        failover_accepted: u8::from(p.failover_accepted),
        end_to_end_flow_control: p.flow_control,
        rnr_retry_count: p.rnr_retry_count & 7,
        srq: p.srq,
        local_ca_guid: ca_guid,
        private_data: fixed(&p.private_data),
    };
    encode(c.tid, &CmMad::Rep(Box::new(m)))
}

/// `cm_format_rtu`.
pub fn rtu(id: CmId, c: &Conn, private_data: &[u8]) -> [u8; MAD_SIZE] {
    let m = Rtu { local_comm_id: id.0, remote_comm_id: c.remote_id, private_data: fixed(private_data) };
    encode(c.tid, &CmMad::Rtu(Box::new(m)))
}

/// `cm_format_mra`.
pub fn mra(id: CmId, c: &Conn, mraed: u8, service_timeout: u8, private_data: &[u8]) -> [u8; MAD_SIZE] {
    let m = Mra {
        local_comm_id: id.0,
        remote_comm_id: c.remote_id,
        message_mraed: mraed,
        service_timeout: service_timeout & 0x1F,
        private_data: fixed(private_data),
    };
    encode(c.tid, &CmMad::Mra(Box::new(m)))
}

/// `cm_format_rej`: which message is rejected and the local ID follow the state the ID was
/// in (a REQ_RCVD ID rejects with Local Communication ID 0, as `cm.c` does).
pub fn rej(id: CmId, c: &Conn, reason: u16, ari: &[u8], private_data: &[u8]) -> [u8; MAD_SIZE] {
    let (local, rejected) = match c.state {
        State::ReqRcvd => (0, msg_response::REQ),
        State::MraReqSent => (id.0, msg_response::REQ),
        State::RepRcvd | State::MraRepSent => (id.0, msg_response::REP),
        _ => (id.0, msg_response::OTHER),
    };
    let m = Rej {
        local_comm_id: local,
        remote_comm_id: c.remote_id,
        message_rejected: rejected,
        ari_length: ari.len().min(ARI_LEN) as u8,
        reason,
        ari: fixed(ari),
        private_data: fixed(private_data),
    };
    encode(c.tid, &CmMad::Rej(Box::new(m)))
}

/// `cm_issue_rej`: a REJ answering a received message no ID holds, with its TID and the
/// communication IDs swapped.
pub fn issue_rej(tid: u64, local: u32, remote: u32, rejected: u8, reason: u16) -> [u8; MAD_SIZE] {
    let m = Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: rejected,
        ari_length: 0,
        reason,
        ari: [0; ARI_LEN],
        private_data: [0; crate::mad::fields::REJ_PRIVATE_DATA],
    };
    encode(tid, &CmMad::Rej(Box::new(m)))
}

/// `cm_format_dreq`.
pub fn dreq(id: CmId, tid: u64, c: &Conn, private_data: &[u8]) -> [u8; MAD_SIZE] {
    let m = Dreq {
        local_comm_id: id.0,
        remote_comm_id: c.remote_id,
        remote_qpn: c.remote_qpn & 0xFF_FFFF,
        private_data: fixed(private_data),
    };
    encode(tid, &CmMad::Dreq(Box::new(m)))
}

/// `cm_format_drep`.
pub fn drep(id: CmId, c: &Conn, private_data: &[u8]) -> [u8; MAD_SIZE] {
    drep_for(c.tid, id.0, c.remote_id, private_data)
}

/// A DREP with these IDs (`cm_issue_drep` answers a DREQ no ID holds with it).
pub fn drep_for(tid: u64, local: u32, remote: u32, private_data: &[u8]) -> [u8; MAD_SIZE] {
    let m = Drep { local_comm_id: local, remote_comm_id: remote, private_data: fixed(private_data) };
    encode(tid, &CmMad::Drep(Box::new(m)))
}

/// `cm_format_sidr_req`.
pub fn sidr_req(id: CmId, tid: u64, p: &SidrReqParam) -> [u8; MAD_SIZE] {
    let m = SidrReq {
        request_id: id.0,
        partition_key: p.pkey,
        service_id: p.service_id,
        private_data: fixed(&p.private_data),
    };
    encode(tid, &CmMad::SidrReq(Box::new(m)))
}

/// `cm_format_sidr_rep`.
pub fn sidr_rep(tid: u64, request_id: u32, service_id: u64, p: &SidrRepParam) -> [u8; MAD_SIZE] {
    let m = SidrRep {
        request_id,
        status: p.status as u8,
        additional_info_length: p.info.len().min(ARI_LEN) as u8,
        qpn: p.qp_num & 0xFF_FFFF,
        service_id,
        qkey: p.qkey,
        additional_info: fixed(&p.info),
        private_data: fixed(&p.private_data),
    };
    encode(tid, &CmMad::SidrRep(Box::new(m)))
}
