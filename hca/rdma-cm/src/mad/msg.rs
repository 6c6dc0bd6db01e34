//! The CM messages as values: one struct per attribute with every field IBTA 12.6 / 12.11
//! gives it (LAP and APR are not carried: no alternate paths), read from and written to a whole
//! MAD through the field table ([`super::fields`]). Reading a message never fails: every bit
//! pattern is some value; what a value means is the state machine's business.

use super::bits::{array, get, set, set_bytes, Bytes, Field, MadBuf};
use super::fields::*;

/// Reads a field that is at most 8 bits wide.
fn g8(b: &MadBuf, f: Field) -> u8 {
    get(b, f) as u8
}
fn g16(b: &MadBuf, f: Field) -> u16 {
    get(b, f) as u16
}
fn g32(b: &MadBuf, f: Field) -> u32 {
    get(b, f) as u32
}
fn gb(b: &MadBuf, f: Field) -> bool {
    get(b, f) != 0
}
fn pd<const N: usize>(b: &MadBuf, f: Bytes) -> [u8; N] {
    array(b, f)
}

/// A path of a REQ (IBTA Table 106, bytes 52..95 for the primary, 96..139 for the alternate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReqPath {
    pub local_port_lid: u16,
    pub remote_port_lid: u16,
    pub local_port_gid: [u8; 16],
    pub remote_port_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

impl ReqPath {
    fn read(b: &MadBuf, f: &req::PathFields) -> ReqPath {
        ReqPath {
            local_port_lid: g16(b, f.local_port_lid),
            remote_port_lid: g16(b, f.remote_port_lid),
            local_port_gid: array(b, f.local_port_gid),
            remote_port_gid: array(b, f.remote_port_gid),
            flow_label: g32(b, f.flow_label),
            packet_rate: g8(b, f.packet_rate),
            traffic_class: g8(b, f.traffic_class),
            hop_limit: g8(b, f.hop_limit),
            sl: g8(b, f.sl),
            subnet_local: gb(b, f.subnet_local),
            local_ack_timeout: g8(b, f.local_ack_timeout),
        }
    }

    fn write(&self, b: &mut MadBuf, f: &req::PathFields) {
        set(b, f.local_port_lid, self.local_port_lid.into());
        set(b, f.remote_port_lid, self.remote_port_lid.into());
        set_bytes(b, f.local_port_gid, &self.local_port_gid);
        set_bytes(b, f.remote_port_gid, &self.remote_port_gid);
        set(b, f.flow_label, self.flow_label.into());
        set(b, f.packet_rate, self.packet_rate.into());
        set(b, f.traffic_class, self.traffic_class.into());
        set(b, f.hop_limit, self.hop_limit.into());
        set(b, f.sl, self.sl.into());
        set(b, f.subnet_local, self.subnet_local.into());
        set(b, f.local_ack_timeout, self.local_ack_timeout.into());
    }
}

/// REQ (IBTA 12.6.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Req {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits (so are the EECNs and the PSN).
    pub local_qpn: u32,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    /// 5 bits each, 4.096 µs * 2^n.
    pub remote_cm_response_timeout: u8,
    /// 0 RC, 1 UC, 2 RD, 3 XRC/extended (IBTA Table 106).
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    pub starting_psn: u32,
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub partition_key: u16,
    /// 4 bits: 1 = 256 ... 5 = 4096.
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits (1 = XRC).
    pub extended_transport_type: u8,
    pub primary: ReqPath,
    pub alternate: ReqPath,
    pub sap_supported: bool,
    pub private_data: [u8; REQ_PRIVATE_DATA],
}

impl Req {
    pub fn read(b: &MadBuf) -> Req {
        Req {
            local_comm_id: g32(b, req::LOCAL_COMM_ID),
            service_id: get(b, req::SERVICE_ID),
            local_ca_guid: get(b, req::LOCAL_CA_GUID),
            local_qkey: g32(b, req::LOCAL_Q_KEY),
            local_qpn: g32(b, req::LOCAL_QPN),
            responder_resources: g8(b, req::RESPONDER_RESOURCES),
            local_eecn: g32(b, req::LOCAL_EECN),
            initiator_depth: g8(b, req::INITIATOR_DEPTH),
            remote_eecn: g32(b, req::REMOTE_EECN),
            remote_cm_response_timeout: g8(b, req::REMOTE_CM_RESPONSE_TIMEOUT),
            transport_service_type: g8(b, req::TRANSPORT_SERVICE_TYPE),
            end_to_end_flow_control: gb(b, req::END_TO_END_FLOW_CONTROL),
            starting_psn: g32(b, req::STARTING_PSN),
            local_cm_response_timeout: g8(b, req::LOCAL_CM_RESPONSE_TIMEOUT),
            retry_count: g8(b, req::RETRY_COUNT),
            partition_key: g16(b, req::PARTITION_KEY),
            path_mtu: g8(b, req::PATH_PACKET_PAYLOAD_MTU),
            rdc_exists: gb(b, req::RDC_EXISTS),
            rnr_retry_count: g8(b, req::RNR_RETRY_COUNT),
            max_cm_retries: g8(b, req::MAX_CM_RETRIES),
            srq: gb(b, req::SRQ),
            extended_transport_type: g8(b, req::EXTENDED_TRANSPORT_TYPE),
            primary: ReqPath::read(b, &req::PRIMARY),
            alternate: ReqPath::read(b, &req::ALTERNATE),
            sap_supported: gb(b, req::SAP_SUPPORTED),
            private_data: pd(b, req::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, req::LOCAL_COMM_ID, self.local_comm_id.into());
        set(b, req::SERVICE_ID, self.service_id);
        set(b, req::LOCAL_CA_GUID, self.local_ca_guid);
        set(b, req::LOCAL_Q_KEY, self.local_qkey.into());
        set(b, req::LOCAL_QPN, self.local_qpn.into());
        set(b, req::RESPONDER_RESOURCES, self.responder_resources.into());
        set(b, req::LOCAL_EECN, self.local_eecn.into());
        set(b, req::INITIATOR_DEPTH, self.initiator_depth.into());
        set(b, req::REMOTE_EECN, self.remote_eecn.into());
        set(b, req::REMOTE_CM_RESPONSE_TIMEOUT, self.remote_cm_response_timeout.into());
        set(b, req::TRANSPORT_SERVICE_TYPE, self.transport_service_type.into());
        set(b, req::END_TO_END_FLOW_CONTROL, self.end_to_end_flow_control.into());
        set(b, req::STARTING_PSN, self.starting_psn.into());
        set(b, req::LOCAL_CM_RESPONSE_TIMEOUT, self.local_cm_response_timeout.into());
        set(b, req::RETRY_COUNT, self.retry_count.into());
        set(b, req::PARTITION_KEY, self.partition_key.into());
        set(b, req::PATH_PACKET_PAYLOAD_MTU, self.path_mtu.into());
        set(b, req::RDC_EXISTS, self.rdc_exists.into());
        set(b, req::RNR_RETRY_COUNT, self.rnr_retry_count.into());
        set(b, req::MAX_CM_RETRIES, self.max_cm_retries.into());
        set(b, req::SRQ, self.srq.into());
        set(b, req::EXTENDED_TRANSPORT_TYPE, self.extended_transport_type.into());
        self.primary.write(b, &req::PRIMARY);
        self.alternate.write(b, &req::ALTERNATE);
        set(b, req::SAP_SUPPORTED, self.sap_supported.into());
        set_bytes(b, req::PRIVATE_DATA, &self.private_data);
    }
}

/// Which message an MRA or REJ answers (IBTA Tables 107 and 108: 0 REQ, 1 REP, 2 LAP / other).
pub mod msg_response {
    pub const REQ: u8 = 0;
    pub const REP: u8 = 1;
    pub const OTHER: u8 = 2;
}

/// MRA (IBTA 12.6.6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits: [`msg_response`].
    pub message_mraed: u8,
    /// 5 bits.
    pub service_timeout: u8,
    pub private_data: [u8; MRA_PRIVATE_DATA],
}

impl Mra {
    pub fn read(b: &MadBuf) -> Mra {
        Mra {
            local_comm_id: g32(b, mra::LOCAL_COMM_ID),
            remote_comm_id: g32(b, mra::REMOTE_COMM_ID),
            message_mraed: g8(b, mra::MESSAGE_MRAED),
            service_timeout: g8(b, mra::SERVICE_TIMEOUT),
            private_data: pd(b, mra::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, mra::LOCAL_COMM_ID, self.local_comm_id.into());
        set(b, mra::REMOTE_COMM_ID, self.remote_comm_id.into());
        set(b, mra::MESSAGE_MRAED, self.message_mraed.into());
        set(b, mra::SERVICE_TIMEOUT, self.service_timeout.into());
        set_bytes(b, mra::PRIVATE_DATA, &self.private_data);
    }
}

/// REJ (IBTA 12.6.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rej {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits: [`msg_response`].
    pub message_rejected: u8,
    /// 7 bits: how many bytes of `ari` mean something.
    pub ari_length: u8,
    pub reason: u16,
    pub ari: [u8; ARI_LEN],
    pub private_data: [u8; REJ_PRIVATE_DATA],
}

impl Rej {
    pub fn read(b: &MadBuf) -> Rej {
        Rej {
            local_comm_id: g32(b, rej::LOCAL_COMM_ID),
            remote_comm_id: g32(b, rej::REMOTE_COMM_ID),
            message_rejected: g8(b, rej::MESSAGE_REJECTED),
            ari_length: g8(b, rej::REJECTED_INFO_LENGTH),
            reason: g16(b, rej::REASON),
            ari: pd(b, rej::ARI),
            private_data: pd(b, rej::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, rej::LOCAL_COMM_ID, self.local_comm_id.into());
        set(b, rej::REMOTE_COMM_ID, self.remote_comm_id.into());
        set(b, rej::MESSAGE_REJECTED, self.message_rejected.into());
        set(b, rej::REJECTED_INFO_LENGTH, self.ari_length.into());
        set(b, rej::REASON, self.reason.into());
        set_bytes(b, rej::ARI, &self.ari);
        set_bytes(b, rej::PRIVATE_DATA, &self.private_data);
    }

    /// The meaningful ARI bytes (at most the field's 72, whatever the length field claims).
    pub fn ari(&self) -> &[u8] {
        &self.ari[..usize::from(self.ari_length).min(ARI_LEN)]
    }
}

/// REP (IBTA 12.6.8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    pub local_qpn: u32,
    pub local_eecn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; REP_PRIVATE_DATA],
}

impl Rep {
    pub fn read(b: &MadBuf) -> Rep {
        Rep {
            local_comm_id: g32(b, rep::LOCAL_COMM_ID),
            remote_comm_id: g32(b, rep::REMOTE_COMM_ID),
            local_qkey: g32(b, rep::LOCAL_Q_KEY),
            local_qpn: g32(b, rep::LOCAL_QPN),
            local_eecn: g32(b, rep::LOCAL_EECN),
            starting_psn: g32(b, rep::STARTING_PSN),
            responder_resources: g8(b, rep::RESPONDER_RESOURCES),
            initiator_depth: g8(b, rep::INITIATOR_DEPTH),
            target_ack_delay: g8(b, rep::TARGET_ACK_DELAY),
            failover_accepted: g8(b, rep::FAILOVER_ACCEPTED),
            end_to_end_flow_control: gb(b, rep::END_TO_END_FLOW_CONTROL),
            rnr_retry_count: g8(b, rep::RNR_RETRY_COUNT),
            srq: gb(b, rep::SRQ),
            local_ca_guid: get(b, rep::LOCAL_CA_GUID),
            private_data: pd(b, rep::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, rep::LOCAL_COMM_ID, self.local_comm_id.into());
        set(b, rep::REMOTE_COMM_ID, self.remote_comm_id.into());
        set(b, rep::LOCAL_Q_KEY, self.local_qkey.into());
        set(b, rep::LOCAL_QPN, self.local_qpn.into());
        set(b, rep::LOCAL_EECN, self.local_eecn.into());
        set(b, rep::STARTING_PSN, self.starting_psn.into());
        set(b, rep::RESPONDER_RESOURCES, self.responder_resources.into());
        set(b, rep::INITIATOR_DEPTH, self.initiator_depth.into());
        set(b, rep::TARGET_ACK_DELAY, self.target_ack_delay.into());
        set(b, rep::FAILOVER_ACCEPTED, self.failover_accepted.into());
        set(b, rep::END_TO_END_FLOW_CONTROL, self.end_to_end_flow_control.into());
        set(b, rep::RNR_RETRY_COUNT, self.rnr_retry_count.into());
        set(b, rep::SRQ, self.srq.into());
        set(b, rep::LOCAL_CA_GUID, self.local_ca_guid);
        set_bytes(b, rep::PRIVATE_DATA, &self.private_data);
    }
}

/// RTU (IBTA 12.6.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rtu {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; RTU_PRIVATE_DATA],
}

impl Rtu {
    pub fn read(b: &MadBuf) -> Rtu {
        Rtu {
            local_comm_id: g32(b, rtu::LOCAL_COMM_ID),
            remote_comm_id: g32(b, rtu::REMOTE_COMM_ID),
            private_data: pd(b, rtu::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, rtu::LOCAL_COMM_ID, self.local_comm_id.into());
        set(b, rtu::REMOTE_COMM_ID, self.remote_comm_id.into());
        set_bytes(b, rtu::PRIVATE_DATA, &self.private_data);
    }
}

/// DREQ (IBTA 12.6.10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dreq {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits: the QPN of the DREQ's receiver.
    pub remote_qpn: u32,
    pub private_data: [u8; DREQ_PRIVATE_DATA],
}

impl Dreq {
    pub fn read(b: &MadBuf) -> Dreq {
        Dreq {
            local_comm_id: g32(b, dreq::LOCAL_COMM_ID),
            remote_comm_id: g32(b, dreq::REMOTE_COMM_ID),
            remote_qpn: g32(b, dreq::REMOTE_QPN_EECN),
            private_data: pd(b, dreq::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, dreq::LOCAL_COMM_ID, self.local_comm_id.into());
        set(b, dreq::REMOTE_COMM_ID, self.remote_comm_id.into());
        set(b, dreq::REMOTE_QPN_EECN, self.remote_qpn.into());
        set_bytes(b, dreq::PRIVATE_DATA, &self.private_data);
    }
}

/// DREP (IBTA 12.6.11).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; DREP_PRIVATE_DATA],
}

impl Drep {
    pub fn read(b: &MadBuf) -> Drep {
        Drep {
            local_comm_id: g32(b, drep::LOCAL_COMM_ID),
            remote_comm_id: g32(b, drep::REMOTE_COMM_ID),
            private_data: pd(b, drep::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, drep::LOCAL_COMM_ID, self.local_comm_id.into());
        set(b, drep::REMOTE_COMM_ID, self.remote_comm_id.into());
        set_bytes(b, drep::PRIVATE_DATA, &self.private_data);
    }
}

/// SIDR_REQ (IBTA 12.11.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrReq {
    pub request_id: u32,
    pub partition_key: u16,
    pub service_id: u64,
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA],
}

impl SidrReq {
    pub fn read(b: &MadBuf) -> SidrReq {
        SidrReq {
            request_id: g32(b, sidr_req::REQUEST_ID),
            partition_key: g16(b, sidr_req::PARTITION_KEY),
            service_id: get(b, sidr_req::SERVICE_ID),
            private_data: pd(b, sidr_req::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, sidr_req::REQUEST_ID, self.request_id.into());
        set(b, sidr_req::PARTITION_KEY, self.partition_key.into());
        set(b, sidr_req::SERVICE_ID, self.service_id);
        set_bytes(b, sidr_req::PRIVATE_DATA, &self.private_data);
    }
}

/// SIDR_REP (IBTA 12.11.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrRep {
    pub request_id: u32,
    pub status: u8,
    pub additional_info_length: u8,
    /// 24 bits.
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    pub additional_info: [u8; ARI_LEN],
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA],
}

impl SidrRep {
    pub fn read(b: &MadBuf) -> SidrRep {
        SidrRep {
            request_id: g32(b, sidr_rep::REQUEST_ID),
            status: g8(b, sidr_rep::STATUS),
            additional_info_length: g8(b, sidr_rep::ADDITIONAL_INFORMATION_LENGTH),
            qpn: g32(b, sidr_rep::QPN),
            service_id: get(b, sidr_rep::SERVICE_ID),
            qkey: g32(b, sidr_rep::Q_KEY),
            additional_info: pd(b, sidr_rep::ADDITIONAL_INFORMATION),
            private_data: pd(b, sidr_rep::PRIVATE_DATA),
        }
    }

    pub fn write(&self, b: &mut MadBuf) {
        set(b, sidr_rep::REQUEST_ID, self.request_id.into());
        set(b, sidr_rep::STATUS, self.status.into());
        set(b, sidr_rep::ADDITIONAL_INFORMATION_LENGTH, self.additional_info_length.into());
        set(b, sidr_rep::QPN, self.qpn.into());
        set(b, sidr_rep::SERVICE_ID, self.service_id);
        set(b, sidr_rep::Q_KEY, self.qkey.into());
        set_bytes(b, sidr_rep::ADDITIONAL_INFORMATION, &self.additional_info);
        set_bytes(b, sidr_rep::PRIVATE_DATA, &self.private_data);
    }

    /// The meaningful Additional Information bytes.
    pub fn info(&self) -> &[u8] {
        &self.additional_info[..usize::from(self.additional_info_length).min(ARI_LEN)]
    }
}
