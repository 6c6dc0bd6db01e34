//! The CM state machine (IBTA 12.9), one [`Cm`] per device port: communication IDs, REQ/REP/RTU
//! with their timeouts and retries, MRA, REJ, DREQ/DREP, time-wait, duplicate detection, SIDR.
//! The API follows Linux's `include/rdma/ib_cm.h`: `ib_create_cm_id` is [`Cm::create_id`],
//! `ib_cm_listen` [`Cm::listen`], `ib_send_cm_req` [`Cm::send_req`], and so on; the events
//! are `enum ib_cm_event_type`'s ([`CmEvent`]).
//!
//! H2 (the CM helper) owns this module: the signatures below are the contract with the RDMA
//! CM above (hca/rdmacm); their bodies and the private modules under `cm/` are the helper's.

mod params;

pub use params::*;

use crate::transport::{MadTransport, ReceivedMad};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

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
}

/// What the CM raised, for one ID (`struct ib_cm_event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ reached a listener: `id` is the new passive-side ID (state REQ_RCVD).
    ReqReceived { listen_id: CmId, req: Box<ReqEvent> },
    /// REQ was retried `max_cm_retries` times without an answer (`IB_CM_REQ_ERROR`).
    ReqError,
    /// A REP answered our REQ (state REP_RCVD): accept with [`Cm::send_rtu`] or refuse with
    /// [`Cm::send_rej`].
    RepReceived(Box<RepEvent>),
    /// Our REP was retried without an RTU (`IB_CM_REP_ERROR`).
    RepError,
    /// RTU received (or COMM_EST through [`Cm::establish`]): established.
    RtuReceived { private_data: Vec<u8> },
    /// The peer rejected (or we timed out and it is reported as a REJ with
    /// [`REJ_TIMEOUT`], as `cm.c` reports a REQ/REP timeout after the MRA'd wait).
    RejReceived { reason: u16, ari: Vec<u8>, private_data: Vec<u8> },
    /// MRA received: the peer asks for more time (informational; timers already extended).
    MraReceived { service_timeout: u8, private_data: Vec<u8> },
    /// DREQ received: answer with [`Cm::send_drep`] (or it is answered when the ID is destroyed).
    DreqReceived { private_data: Vec<u8> },
    /// Our DREQ was retried without a DREP.
    DreqError,
    /// DREP received.
    DrepReceived { private_data: Vec<u8> },
    /// Time-wait ended: the QP may be reused.
    TimewaitExit,
    /// A SIDR_REQ reached a listener: `id` is the new ID; answer with [`Cm::send_sidr_rep`].
    SidrReqReceived { listen_id: CmId, req: Box<SidrReqEvent> },
    /// SIDR_REP received (or, with `status` [`SidrStatus::Timeout`]-like error, none in time).
    SidrRepReceived(Box<SidrRepEvent>),
    /// SIDR_REQ retried without an answer.
    SidrReqError,
}

/// The Cm's state; one per device port.
pub struct Cm {
    transport: Arc<dyn MadTransport>,
    local_ca_guid: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u32,
    ids: BTreeMap<CmId, ()>,
    stats: CmStats,
}

impl Cm {
    /// A CM sending through `transport`; `local_ca_guid` goes into REQ/REP (Local CA GUID).
    pub fn new(transport: Arc<dyn MadTransport>, local_ca_guid: u64) -> Self {
        Cm { transport, local_ca_guid, inner: Mutex::new(Inner::default()) }
    }

    /// A new ID in state IDLE (`ib_create_cm_id`).
    pub fn create_id(&self) -> CmId {
        let mut g = self.lock();
        g.next = g.next.wrapping_add(1);
        let id = CmId(g.next);
        g.ids.insert(id, ());
        id
    }

    /// Destroys `id` (`ib_destroy_cm_id`): a REQ/REP in flight is answered with REJ
    /// (`REJ_TIMEOUT`/consumer reject as `cm.c`), an established connection gets a DREQ, a
    /// received DREQ its DREP; the communication ID then spends time-wait before reuse. Returns
    /// the events of other IDs this raised (none today; kept for symmetry).
    pub fn destroy_id(&self, id: CmId, now: Instant) -> Vec<(CmId, CmEvent)> {
        let _ = now;
        self.lock().ids.remove(&id);
        Vec::new()
    }

    /// Listens on `service_id` (exact match) with at most `backlog` REQs not yet accepted or
    /// rejected (further REQs are answered REJ `REJ_CONSUMER_REJECT`... or dropped and counted
    /// as [`CmStats::dropped_backlog`]).
    pub fn listen(&self, id: CmId, service_id: u64, backlog: u32) -> Result<(), Error> {
        let _ = (id, service_id, backlog);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// Sends a REQ (`ib_send_cm_req`); the ID goes to REQ_SENT and retries on its timeout.
    pub fn send_req(&self, id: CmId, p: &ReqParam, now: Instant) -> Result<(), Error> {
        let _ = (id, p, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// Answers a received REQ with a REP (`ib_send_cm_rep`); ID to REP_SENT.
    pub fn send_rep(&self, id: CmId, p: &RepParam, now: Instant) -> Result<(), Error> {
        let _ = (id, p, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// Sends the RTU for a received REP (`ib_send_cm_rtu`); ID ESTABLISHED.
    pub fn send_rtu(&self, id: CmId, private_data: &[u8], now: Instant) -> Result<(), Error> {
        let _ = (id, private_data, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// Sends a REJ for a received REQ or REP (`ib_send_cm_rej`); ID to IDLE (or time-wait).
    pub fn send_rej(&self, id: CmId, reason: u16, ari: &[u8], private_data: &[u8], now: Instant) -> Result<(), Error> {
        let _ = (id, reason, ari, private_data, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// Sends an MRA for a received REQ or REP (`ib_send_cm_mra`).
    pub fn send_mra(&self, id: CmId, service_timeout: u8, private_data: &[u8], now: Instant) -> Result<(), Error> {
        let _ = (id, service_timeout, private_data, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// Sends a DREQ on an established connection (`ib_send_cm_dreq`); retries on its timeout.
    pub fn send_dreq(&self, id: CmId, private_data: &[u8], now: Instant) -> Result<(), Error> {
        let _ = (id, private_data, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// Answers a received DREQ (`ib_send_cm_drep`); ID to time-wait.
    pub fn send_drep(&self, id: CmId, private_data: &[u8], now: Instant) -> Result<(), Error> {
        let _ = (id, private_data, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// The passive side saw traffic before the RTU (`ib_cm_notify(IB_EVENT_COMM_EST)`):
    /// REP_SENT/MRA_REP_RCVD to ESTABLISHED; raises [`CmEvent::RtuReceived`] with no data.
    pub fn establish(&self, id: CmId, now: Instant) -> Result<Vec<(CmId, CmEvent)>, Error> {
        let _ = (id, now);
        Err(Error::InvalidState)
    }

    /// Sends a SIDR_REQ (`ib_send_cm_sidr_req`).
    pub fn send_sidr_req(&self, id: CmId, p: &SidrReqParam, now: Instant) -> Result<(), Error> {
        let _ = (id, p, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// Answers a SIDR_REQ (`ib_send_cm_sidr_rep`); the ID is done afterwards.
    pub fn send_sidr_rep(&self, id: CmId, p: &SidrRepParam, now: Instant) -> Result<(), Error> {
        let _ = (id, p, now);
        let _ = (&self.transport, self.local_ca_guid);
        Err(Error::InvalidState)
    }

    /// A MAD from QP1: decoded, matched, answered; returns the events raised. Malformed or
    /// unmatched MADs are dropped and counted ([`CmStats`]).
    pub fn recv(&self, mad: &ReceivedMad, now: Instant) -> Vec<(CmId, CmEvent)> {
        let _ = (mad, now);
        self.lock().stats.mads_received += 1;
        Vec::new()
    }

    /// The earliest instant at which [`Cm::on_timer`] has work (a retry, a timeout, a
    /// time-wait's end).
    pub fn next_deadline(&self) -> Option<Instant> {
        None
    }

    /// Runs the timers due at `now`: retransmissions, timeouts, time-wait exits.
    pub fn on_timer(&self, now: Instant) -> Vec<(CmId, CmEvent)> {
        let _ = now;
        Vec::new()
    }

    /// Counters.
    pub fn stats(&self) -> CmStats {
        self.lock().stats
    }

    /// IDs alive (not destroyed), for leak checks in tests.
    pub fn ids_alive(&self) -> usize {
        self.lock().ids.len()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}
