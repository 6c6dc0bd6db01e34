//! The CM's vocabulary: communication IDs, errors, counters and events (`struct ib_cm_event`,
//! `enum ib_cm_event_type` of Linux's `include/rdma/ib_cm.h`).

use super::params::{RepEvent, ReqEvent, SidrRepEvent, SidrReqEvent};

/// A communication ID of this CM (the Local Communication ID of IBTA 12.6.2, unique among the
/// IDs alive and in time-wait).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The ID is not in a state where this is allowed (`EINVAL` in `cm.c`).
    #[error("the CM ID's state does not allow this")]
    InvalidState,
    /// No such ID (destroyed, or never created).
    #[error("no such CM ID")]
    NoId,
    /// Private data longer than the MAD carries (`EINVAL`).
    #[error("private data of {len} bytes exceeds the {max} bytes the MAD carries")]
    PrivateDataTooLong { len: usize, max: usize },
    /// Another ID listens on this service ID (`EBUSY`).
    #[error("the service ID is already listened on")]
    Busy,
    /// A parameter out of range (`EINVAL`).
    #[error("{0}")]
    Invalid(&'static str),
}

/// Counters of what came in and was dropped (each drop has its reason), for tests and `hca`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    pub mads_received: u64,
    pub mads_sent: u64,
    pub retries: u64,
    /// Shorter than a MAD, wrong base version/class/method, unknown attribute.
    pub dropped_malformed: u64,
    /// A REP/RTU/DREQ/DREP/MRA/REJ naming a communication ID this CM never issued or no longer has.
    pub dropped_unknown_id: u64,
    /// A duplicate (retransmitted) MAD answered or ignored as IBTA 12.9.8 says.
    pub duplicates: u64,
    /// A REQ refused because its listener's backlog was full.
    pub dropped_backlog: u64,
    pub send_errors: u64,
    /// A well-formed CM MAD this CM does not take: ClassPortInfo, LAP, APR (no alternate paths).
    pub dropped_unsupported: u64,
    /// A MAD naming a live ID in a state that does not take it (a late REP after a timeout, a
    /// DREQ naming another QP, ...), dropped as `cm.c` drops it.
    pub dropped_state: u64,
    /// A REQ or SIDR_REQ dropped because the CM holds `MAX_IDS` IDs already.
    pub dropped_id_limit: u64,
    /// REQs answered REJ Invalid Service ID and SIDR_REQs answered SIDR_REP Unsupported Service:
    /// nobody listens.
    pub rejected_no_listener: u64,
    /// REQs and REPs answered REJ Stale Connection (IBTA 12.9.8.3).
    pub rejected_stale: u64,
    /// REQ, REP, DREQ and SIDR_REQ sends that ran out of retries.
    pub timeouts: u64,
}

/// What the CM raised, for one ID (`struct ib_cm_event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ reached a listener: `id` is the new passive-side ID (state REQ_RCVD).
    ReqReceived { listen_id: CmId, req: Box<ReqEvent> },
    /// REQ was retried `max_cm_retries` times without an answer (`IB_CM_REQ_ERROR`).
    ReqError,
    /// A REP answered our REQ (state REP_RCVD): accept with `Cm::send_rtu` or refuse with
    /// `Cm::send_rej`.
    RepReceived(Box<RepEvent>),
    /// Our REP was retried without an RTU (`IB_CM_REP_ERROR`).
    RepError,
    /// RTU received (or COMM_EST through `Cm::establish`): established.
    RtuReceived { private_data: Vec<u8> },
    /// The peer rejected (or we timed out and it is reported as a REJ with
    /// `REJ_TIMEOUT`, as `cm.c` reports a REQ/REP timeout after the MRA'd wait).
    RejReceived { reason: u16, ari: Vec<u8>, private_data: Vec<u8> },
    /// MRA received: the peer asks for more time (informational; timers already extended).
    MraReceived { service_timeout: u8, private_data: Vec<u8> },
    /// DREQ received: answer with `Cm::send_drep` (or it is answered when the ID is destroyed).
    DreqReceived { private_data: Vec<u8> },
    /// Our DREQ was retried without a DREP.
    DreqError,
    /// DREP received.
    DrepReceived { private_data: Vec<u8> },
    /// Time-wait ended: the QP may be reused.
    TimewaitExit,
    /// A SIDR_REQ reached a listener: `id` is the new ID; answer with `Cm::send_sidr_rep`.
    SidrReqReceived { listen_id: CmId, req: Box<SidrReqEvent> },
    /// SIDR_REP received (or, with `status` `SidrStatus`-like error, none in time).
    SidrRepReceived(Box<SidrRepEvent>),
    /// SIDR_REQ retried without an answer.
    SidrReqError,
}
