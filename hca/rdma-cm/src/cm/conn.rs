//! One communication ID's record: its state (IBTA 12.9.6, Figure 144; `enum ib_cm_state` of
//! `ib_cm.h`), what it knows of the remote end, and the MAD it is waiting on an answer for.

use super::types::CmId;
use crate::transport::{MadAddr, MAD_SIZE};
use std::time::{Duration, Instant};

/// The states of IBTA 12.9.6 as `cm.c` names them (LAP states are not kept: no alternate paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    Idle,
    Listen,
    ReqSent,
    ReqRcvd,
    MraReqSent,
    MraReqRcvd,
    RepSent,
    RepRcvd,
    MraRepSent,
    MraRepRcvd,
    Established,
    DreqSent,
    DreqRcvd,
    Timewait,
    SidrReqSent,
    SidrReqRcvd,
}

/// A sent MAD waiting for its answer (`ib_post_send_mad` with a timeout and retries): resent
/// at `deadline` while `retries_left`, then the ID's timeout runs.
#[derive(Clone, Debug)]
pub struct Retry {
    pub mad: [u8; MAD_SIZE],
    pub to: MadAddr,
    pub timeout: Duration,
    pub deadline: Instant,
    pub retries_left: u8,
}

/// The key of the remote-ID table (`cm.remote_id_table`): the remote's communication ID and CA
/// GUID; and of the remote-QP table (`cm.remote_qp_table`): the remote QPN and CA GUID.
pub type RemoteKey = (u32, u64);

/// One ID.
#[derive(Clone, Debug)]
pub struct Conn {
    pub state: State,
    /// Destroyed by the consumer while in time-wait: kept (its communication ID reserved, a
    /// DREQ still answered) until time-wait ends, then dropped without an event.
    pub destroyed: bool,
    pub remote_id: u32,
    pub remote_ca_guid: u64,
    pub remote_qpn: u32,
    pub local_qpn: u32,
    pub service_id: u64,
    /// The transaction ID this ID's answers carry (`cm_id_priv->tid`).
    pub tid: u64,
    /// The remote CM (its QP1).
    pub dest: MadAddr,
    /// The wait for an answer before a resend (`cm_id_priv->timeout_ms`).
    pub timeout: Duration,
    pub max_cm_retries: u8,
    /// The path's ACK timeout exponent (`cm_id_priv->av.timeout`): MRA waits and time-wait
    /// derive from it.
    pub av_timeout: u8,
    /// A listener's bound on REQs not yet answered.
    pub backlog: u32,
    /// The listener a passive ID came from (for the backlog).
    pub listen_id: Option<CmId>,
    pub retry: Option<Retry>,
    /// The private data of the last RTU, MRA or DREP, resent with duplicates' answers.
    pub private_data: Vec<u8>,
    /// The service timeout of the MRA we sent.
    pub service_timeout: u8,
    pub timewait_until: Option<Instant>,
    pub remote_id_key: Option<RemoteKey>,
    pub remote_qpn_key: Option<RemoteKey>,
    /// A passive SIDR ID's key in the SIDR table: request ID and the requester's GID.
    pub sidr_key: Option<(u32, [u8; 16])>,
}

impl Conn {
    /// A fresh ID in IDLE.
    pub fn idle() -> Conn {
        Conn {
            state: State::Idle,
            destroyed: false,
            remote_id: 0,
            remote_ca_guid: 0,
            remote_qpn: 0,
            local_qpn: 0,
            service_id: 0,
            tid: 0,
            dest: MadAddr::default(),
            timeout: Duration::ZERO,
            max_cm_retries: 0,
            av_timeout: 0,
            backlog: 0,
            listen_id: None,
            retry: None,
            private_data: Vec::new(),
            service_timeout: 0,
            timewait_until: None,
            remote_id_key: None,
            remote_qpn_key: None,
            sidr_key: None,
        }
    }

    /// The earliest instant this ID has work.
    pub fn deadline(&self) -> Option<Instant> {
        match (self.retry.as_ref().map(|r| r.deadline), self.timewait_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Holds an answer still pending from the consumer (counts toward its listener's backlog).
    pub fn is_pending(&self) -> bool {
        matches!(self.state, State::ReqRcvd | State::MraReqSent | State::SidrReqRcvd)
    }
}
