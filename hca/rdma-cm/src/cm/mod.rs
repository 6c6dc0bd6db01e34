//! The CM state machine (IBTA 12.9), one [`Cm`] per device port: communication IDs, REQ/REP/RTU
//! with their timeouts and retries, MRA, REJ, DREQ/DREP, time-wait, duplicate detection, SIDR.
//! The API follows Linux's `include/rdma/ib_cm.h`: `ib_create_cm_id` is [`Cm::create_id`],
//! `ib_cm_listen` [`Cm::listen`], `ib_send_cm_req` [`Cm::send_req`], and so on; the events
//! are `enum ib_cm_event_type`'s ([`CmEvent`]).
//!
//! Below [`Cm`]: `types` and `params` (the vocabulary), `timing` (IBTA times and the bounds),
//! `conn` (one ID's record), `table` (the tables under the lock), `format` (the MADs sent),
//! `verbs` (the consumer's calls), `recv` (the MADs received), `timer` and `destroy`. See
//! `docs/cm.md` for the behaviour as a whole.

mod conn;
mod destroy;
mod format;
mod params;
mod recv;
mod table;
mod timer;
mod timing;
mod types;
mod verbs;

pub use params::*;
pub use timing::{iba_time_ms, LISTEN_GRACE, MAX_CM_RETRIES, MAX_IDS};
pub use types::{CmEvent, CmId, CmStats, Error};
pub use verbs::MAX_BACKLOG;

use crate::transport::{MadTransport, ReceivedMad};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use table::{Inner, Out};

/// The Cm's state; one per device port. Internally locked: every method takes `&self`, and a
/// `Cm` is shared between threads (`Send + Sync`). MADs are sent after the lock is released, so
/// a transport may call back into the CM.
pub struct Cm {
    transport: Arc<dyn MadTransport>,
    inner: Mutex<Inner>,
}

impl Cm {
    /// A CM sending through `transport`; `local_ca_guid` goes into REQ/REP (Local CA GUID).
    pub fn new(transport: Arc<dyn MadTransport>, local_ca_guid: u64) -> Self {
        Cm { transport, inner: Mutex::new(Inner::new(local_ca_guid, None)) }
    }

    /// [`Cm::new`] with the communication IDs and transaction IDs it issues fixed by `seed`
    /// (they are otherwise drawn from the process's random state): for reproducible runs, as a
    /// fuzzer needs. Two CMs with the same seed issue the same IDs in the same order.
    pub fn with_seed(transport: Arc<dyn MadTransport>, local_ca_guid: u64, seed: u64) -> Self {
        Cm { transport, inner: Mutex::new(Inner::new(local_ca_guid, Some(seed))) }
    }

    /// A new ID in state IDLE (`ib_create_cm_id`).
    pub fn create_id(&self) -> CmId {
        self.lock().alloc_id()
    }

    /// Destroys `id` (`ib_destroy_cm_id`): a REQ/REP in flight is answered with REJ
    /// (`REJ_TIMEOUT`/consumer reject as `cm.c`), an established connection gets a DREQ, a
    /// received DREQ its DREP; the communication ID then spends time-wait before reuse. Returns
    /// the events of other IDs this raised (none today; kept for symmetry).
    pub fn destroy_id(&self, id: CmId, now: Instant) -> Vec<(CmId, CmEvent)> {
        self.run(|g| destroy::destroy(g, id, now))
    }

    /// Destroys every ID, as [`Cm::destroy_id`] each (what a kernel does for the IDs of a
    /// process whose file it closes: Linux `ucma_close`): each sends what its state asks for.
    pub fn destroy_all(&self, now: Instant) {
        self.run(|g| {
            let ids: Vec<CmId> = g.ids.keys().copied().collect();
            for id in ids {
                destroy::destroy(g, id, now);
            }
        });
    }

    /// Listens on `service_id` (exact match) with at most `backlog` REQs and SIDR_REQs not yet
    /// answered by the consumer (REQ_RCVD, MRA_REQ_SENT, SIDR_REQ_RCVD); further ones are
    /// dropped and counted as [`CmStats::dropped_backlog`] (the requester's retries come back).
    /// A backlog of 0 or above [`MAX_BACKLOG`] is [`MAX_BACKLOG`].
    pub fn listen(&self, id: CmId, service_id: u64, backlog: u32) -> Result<(), Error> {
        self.call(|g| verbs::listen(g, id, service_id, backlog))
    }

    /// Sends a REQ (`ib_send_cm_req`); the ID goes to REQ_SENT and retries on its timeout.
    pub fn send_req(&self, id: CmId, p: &ReqParam, now: Instant) -> Result<(), Error> {
        self.call(|g| verbs::send_req(g, id, p, now))
    }

    /// Answers a received REQ with a REP (`ib_send_cm_rep`); ID to REP_SENT.
    pub fn send_rep(&self, id: CmId, p: &RepParam, now: Instant) -> Result<(), Error> {
        self.call(|g| verbs::send_rep(g, id, p, now))
    }

    /// Sends the RTU for a received REP (`ib_send_cm_rtu`); ID ESTABLISHED.
    pub fn send_rtu(&self, id: CmId, private_data: &[u8], now: Instant) -> Result<(), Error> {
        let _ = now;
        self.call(|g| verbs::send_rtu(g, id, private_data))
    }

    /// Sends a REJ for a received REQ or REP (`ib_send_cm_rej`); ID to IDLE (or time-wait).
    pub fn send_rej(&self, id: CmId, reason: u16, ari: &[u8], private_data: &[u8], now: Instant) -> Result<(), Error> {
        self.call(|g| verbs::send_rej(g, id, reason, ari, private_data, now))
    }

    /// Sends an MRA for a received REQ or REP (`ib_send_cm_mra`).
    pub fn send_mra(&self, id: CmId, service_timeout: u8, private_data: &[u8], now: Instant) -> Result<(), Error> {
        let _ = now;
        self.call(|g| verbs::send_mra(g, id, service_timeout, private_data))
    }

    /// Sends a DREQ on an established connection (`ib_send_cm_dreq`); retries on its timeout.
    pub fn send_dreq(&self, id: CmId, private_data: &[u8], now: Instant) -> Result<(), Error> {
        self.call(|g| verbs::send_dreq(g, id, private_data, now))
    }

    /// Answers a received DREQ (`ib_send_cm_drep`); ID to time-wait.
    pub fn send_drep(&self, id: CmId, private_data: &[u8], now: Instant) -> Result<(), Error> {
        self.call(|g| verbs::send_drep(g, id, private_data, now))
    }

    /// The passive side saw traffic before the RTU (`ib_cm_notify(IB_EVENT_COMM_EST)`):
    /// REP_SENT/MRA_REP_RCVD to ESTABLISHED; raises [`CmEvent::RtuReceived`] with no data.
    pub fn establish(&self, id: CmId, now: Instant) -> Result<Vec<(CmId, CmEvent)>, Error> {
        let _ = now;
        let mut r = Ok(());
        let events = self.run(|g| r = verbs::establish(g, id));
        r.map(|()| events)
    }

    /// Sends a SIDR_REQ (`ib_send_cm_sidr_req`).
    pub fn send_sidr_req(&self, id: CmId, p: &SidrReqParam, now: Instant) -> Result<(), Error> {
        self.call(|g| verbs::send_sidr_req(g, id, p, now))
    }

    /// Answers a SIDR_REQ (`ib_send_cm_sidr_rep`); the ID is done afterwards.
    pub fn send_sidr_rep(&self, id: CmId, p: &SidrRepParam, now: Instant) -> Result<(), Error> {
        let _ = now;
        self.call(|g| verbs::send_sidr_rep(g, id, p))
    }

    /// A MAD from QP1: decoded, matched, answered; returns the events raised. Malformed or
    /// unmatched MADs are dropped and counted ([`CmStats`]).
    pub fn recv(&self, mad: &ReceivedMad, now: Instant) -> Vec<(CmId, CmEvent)> {
        self.run(|g| recv::recv(g, mad, now))
    }

    /// The earliest instant at which [`Cm::on_timer`] has work (a retry, a timeout, a
    /// time-wait's end).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.lock().next_deadline()
    }

    /// Runs the timers due at `now`: retransmissions, timeouts, time-wait exits.
    pub fn on_timer(&self, now: Instant) -> Vec<(CmId, CmEvent)> {
        self.run(|g| {
            recv::on_timer(g, now);
            timer::on_timer(g, now)
        })
    }

    /// Counters.
    pub fn stats(&self) -> CmStats {
        self.lock().stats
    }

    /// IDs alive (not destroyed), for leak checks in tests.
    pub fn ids_alive(&self) -> usize {
        self.lock().alive()
    }

    /// Communication IDs held in time-wait after their ID was destroyed (reserved until it ends).
    pub fn ids_in_timewait(&self) -> usize {
        self.lock().ids.values().filter(|c| c.destroyed).count()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` under the lock, then sends what it queued and returns the events it raised.
    fn run(&self, f: impl FnOnce(&mut Inner)) -> Vec<(CmId, CmEvent)> {
        let out = {
            let mut g = self.lock();
            f(&mut g);
            std::mem::take(&mut g.out)
        };
        self.flush(out)
    }

    /// [`Cm::run`] for a consumer's call: its result, events dropped (a call raises none but
    /// `establish`'s).
    fn call(&self, f: impl FnOnce(&mut Inner) -> Result<(), Error>) -> Result<(), Error> {
        let mut r = Ok(());
        self.run(|g| r = f(g));
        r
    }

    fn flush(&self, out: Out) -> Vec<(CmId, CmEvent)> {
        if out.sends.is_empty() {
            return out.events;
        }
        let (mut sent, mut failed) = (0, 0);
        for (to, mad) in &out.sends {
            match self.transport.send(to, mad) {
                Ok(()) => sent += 1,
                Err(_) => failed += 1,
            }
        }
        let mut g = self.lock();
        g.stats.mads_sent += sent;
        g.stats.send_errors += failed;
        out.events
    }
}

// One CM per port, shared by the RDMA CM's threads.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Cm>();
};
