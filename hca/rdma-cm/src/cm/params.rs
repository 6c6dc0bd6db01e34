//! What a consumer passes to the CM and what its events carry (`struct ib_cm_req_param`,
//! `ib_cm_req_event_param`, ... of `include/rdma/ib_cm.h`).

use crate::transport::MadAddr;

/// REJ reasons (IBTA 12.6.7.2 Table 112; `enum ib_cm_rej_reason` of `ib_cm.h`, same numbers).
pub const REJ_NO_QP: u16 = 1;
pub const REJ_NO_RESOURCES: u16 = 3;
/// A REQ or REP that was never answered in time (what `cm.c` reports after its retries).
pub const REJ_TIMEOUT: u16 = 4;
pub const REJ_INVALID_COMM_ID: u16 = 6;
/// Nobody listens on the REQ's Service ID: what a REQ to a port without a listener gets.
pub const REJ_INVALID_SERVICE_ID: u16 = 8;
pub const REJ_STALE_CONN: u16 = 10;
pub const REJ_INVALID_MTU: u16 = 26;
/// Consumer reject (`IB_CM_REJ_CONSUMER_DEFINED`): what `rdma_reject` sends.
pub const REJ_CONSUMER_DEFINED: u16 = 28;

/// The path a connection uses (the primary path of a REQ; `struct sa_path_rec`'s fields that a
/// RoCE REQ carries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Path {
    /// The local and remote GIDs (RoCE v2: the IP addresses as GIDs).
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    /// Local GID index of `sgid`.
    pub sgid_index: u8,
    pub flow_label: u32,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// Path MTU, as `enum ibv_mtu` (1 = 256 ... 5 = 4096).
    pub mtu: u8,
    /// Static rate, as IBTA's encoding (0 = port's current).
    pub rate: u8,
    /// Packet lifetime, 4.096 µs * 2^n.
    pub packet_life_time: u8,
    pub pkey: u16,
    pub sl: u8,
}

/// `ib_cm_req_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReqParam {
    pub path: Path,
    /// Where the REQ goes (the remote port's QP1 and the GRH to reach it).
    pub dest: MadAddr,
    pub service_id: u64,
    pub qp_num: u32,
    /// 2 = RC, 3 = UC (IBTA transport service types of the REQ: 0 RC, 1 UC, 3 XRC on the wire;
    /// here as `enum ibv_qp_type`: 2 RC, 3 UC, 9 XRC_SEND).
    pub qp_type: u8,
    pub starting_psn: u32,
    /// At most 92 bytes.
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 4.096 µs * 2^n each; the REQ's retransmission timeout is derived from them as `cm.c` does.
    pub remote_cm_response_timeout: u8,
    pub local_cm_response_timeout: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// How many times the REQ is resent before [`crate::CmEvent::ReqError`] (`max_cm_retries`).
    pub max_cm_retries: u8,
    pub srq: bool,
}

/// `ib_cm_req_event_param`: the REQ a listener received.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReqEvent {
    /// The new ID's path as the passive side sees it (sgid = our GID, dgid = the requester's).
    pub path: Path,
    /// The requester's QP1 (where the REP goes; also where the MAD came from).
    pub from: MadAddr,
    pub service_id: u64,
    pub remote_ca_guid: u64,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub qp_type: u8,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub local_cm_response_timeout: u8,
    pub remote_cm_response_timeout: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub max_cm_retries: u8,
    /// All 92 bytes of the REQ's private data.
    pub private_data: Vec<u8>,
}

/// `ib_cm_rep_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RepParam {
    pub qp_num: u32,
    pub starting_psn: u32,
    /// At most 196 bytes.
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub failover_accepted: bool,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
}

/// `ib_cm_rep_event_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RepEvent {
    pub remote_ca_guid: u64,
    pub remote_qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// All 196 bytes.
    pub private_data: Vec<u8>,
}

/// `ib_cm_sidr_req_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SidrReqParam {
    pub dest: MadAddr,
    pub pkey: u16,
    pub service_id: u64,
    /// At most 216 bytes.
    pub private_data: Vec<u8>,
    /// The wait for the SIDR_REP before a resend, in milliseconds.
    pub timeout_ms: u32,
    pub max_cm_retries: u8,
}

/// `ib_cm_sidr_req_event_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SidrReqEvent {
    /// The requester's QP1 (where the SIDR_REP goes), and the local GID index it reached.
    pub from: MadAddr,
    pub pkey: u16,
    pub service_id: u64,
    /// All 216 bytes.
    pub private_data: Vec<u8>,
}

/// SIDR_REP status (IBTA Table 119; `enum ib_cm_sidr_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum SidrStatus {
    #[default]
    Success = 0,
    UnsupportedService = 1,
    Reject = 2,
    NoQp = 3,
    Redirect = 4,
    UnsupportedVersion = 5,
}

/// `ib_cm_sidr_rep_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SidrRepParam {
    pub qp_num: u32,
    pub qkey: u32,
    pub status: SidrStatus,
    pub info: Vec<u8>,
    /// At most 136 bytes.
    pub private_data: Vec<u8>,
}

/// `ib_cm_sidr_rep_event_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SidrRepEvent {
    pub status: u8,
    pub qkey: u32,
    pub qpn: u32,
    pub info: Vec<u8>,
    /// All 136 bytes.
    pub private_data: Vec<u8>,
}
