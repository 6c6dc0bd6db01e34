//! The CM's tables under its one lock (`struct ib_cm` of `cm.c`): the IDs by local
//! communication ID, the listeners by service ID, the remote-ID and remote-QP tables that find
//! duplicate and stale REQs and REPs, the SIDR table; the counters; and what a call has to send
//! and report once the lock is released.

use super::conn::{Conn, RemoteKey, Retry, State};
use super::timing::iba_time_ms;
use super::types::{CmEvent, CmId, CmStats};
use crate::transport::{MadAddr, ReceivedMad, MAD_SIZE};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

/// What a call produced: MADs to send (after the lock is released) and events to return.
#[derive(Default)]
pub struct Out {
    pub sends: Vec<(MadAddr, [u8; MAD_SIZE])>,
    pub events: Vec<(CmId, CmEvent)>,
}

/// A REQ waiting for a listener of its service ID (`recv::held`).
pub struct HeldReq {
    pub mad: ReceivedMad,
    pub key: RemoteKey,
    pub service_id: u64,
    pub tid: u64,
    /// When it came: due at once when a listener appears.
    pub since: Instant,
    /// When it is rejected.
    pub until: Instant,
}

/// The CM's state.
pub struct Inner {
    pub ids: BTreeMap<CmId, Conn>,
    pub listeners: HashMap<u64, CmId>,
    pub remote_ids: HashMap<RemoteKey, CmId>,
    pub remote_qpns: HashMap<RemoteKey, CmId>,
    pub sidr: HashMap<(u32, [u8; 16]), CmId>,
    /// REQs that came before their listener, oldest first.
    pub held: Vec<HeldReq>,
    pub stats: CmStats,
    pub local_ca_guid: u64,
    /// The high half of every transaction ID this CM starts (`mad_agent->hi_tid`).
    hi_tid: u32,
    /// Local IDs are a cyclic counter XORed with this (`cm.random_id_operand`).
    id_operand: u32,
    id_next: u32,
    pub out: Out,
}

impl Inner {
    /// `seed` fixes the communication IDs and transaction IDs (reproducible runs); `None` draws
    /// them from the process's random state.
    pub fn new(local_ca_guid: u64, seed: Option<u64>) -> Inner {
        let r = seed.unwrap_or_else(|| RandomState::new().hash_one(local_ca_guid));
        Inner {
            ids: BTreeMap::new(),
            listeners: HashMap::new(),
            remote_ids: HashMap::new(),
            remote_qpns: HashMap::new(),
            sidr: HashMap::new(),
            held: Vec::new(),
            stats: CmStats::default(),
            local_ca_guid,
            hi_tid: (r >> 32) as u32 | 1,
            id_operand: r as u32,
            id_next: 0,
            out: Out::default(),
        }
    }

    /// A new local communication ID, never 0 and never one alive or in time-wait.
    pub fn alloc_id(&mut self) -> CmId {
        loop {
            self.id_next = self.id_next.wrapping_add(1);
            let id = CmId(self.id_next ^ self.id_operand);
            if id.0 != 0 && !self.ids.contains_key(&id) {
                self.ids.insert(id, Conn::idle());
                return id;
            }
        }
    }

    /// The transaction ID of a request `id` starts (`cm_form_tid`).
    pub fn tid(&self, id: CmId) -> u64 {
        u64::from(self.hi_tid) << 32 | u64::from(id.0)
    }

    /// The live (not destroyed) ID `local` whose remote communication ID is `remote`
    /// (`cm_acquire_id`).
    pub fn acquire(&self, local: u32, remote: u32) -> Option<CmId> {
        let id = CmId(local);
        let c = self.ids.get(&id)?;
        (!c.destroyed && c.remote_id == remote).then_some(id)
    }

    pub fn conn(&mut self, id: CmId) -> Option<&mut Conn> {
        self.ids.get_mut(&id)
    }

    /// How many IDs of `listen` wait for the consumer's answer.
    pub fn pending(&self, listen: CmId) -> usize {
        self.ids.values().filter(|c| c.listen_id == Some(listen) && c.is_pending()).count()
    }

    pub fn send(&mut self, to: MadAddr, mad: [u8; MAD_SIZE]) {
        self.out.sends.push((to, mad));
    }

    pub fn event(&mut self, id: CmId, e: CmEvent) {
        self.out.events.push((id, e));
    }

    /// Sends `mad` from `id` and waits for its answer: resent after the ID's timeout, at most
    /// its `max_cm_retries` times.
    pub fn send_retried(&mut self, id: CmId, mad: [u8; MAD_SIZE], now: Instant) {
        let Some(c) = self.ids.get_mut(&id) else { return };
        let to = c.dest;
        c.retry =
            Some(Retry { mad, to, timeout: c.timeout, deadline: now + c.timeout, retries_left: c.max_cm_retries });
        self.send(to, mad);
    }

    /// Records the remote end of `id` in the remote-ID table; `false` (and nothing recorded)
    /// if another ID already has that key (`cm_insert_remote_id`).
    pub fn insert_remote_id(&mut self, id: CmId, key: RemoteKey) -> Option<CmId> {
        if let Some(&other) = self.remote_ids.get(&key) {
            return Some(other);
        }
        self.remote_ids.insert(key, id);
        if let Some(c) = self.ids.get_mut(&id) {
            c.remote_id_key = Some(key);
        }
        None
    }

    /// The same for the remote-QP table (`cm_insert_remote_qpn`).
    pub fn insert_remote_qpn(&mut self, id: CmId, key: RemoteKey) -> Option<CmId> {
        if let Some(&other) = self.remote_qpns.get(&key) {
            return Some(other);
        }
        self.remote_qpns.insert(key, id);
        if let Some(c) = self.ids.get_mut(&id) {
            c.remote_qpn_key = Some(key);
        }
        None
    }

    fn forget_remote_qpn(&mut self, id: CmId) {
        if let Some(key) = self.ids.get_mut(&id).and_then(|c| c.remote_qpn_key.take()) {
            self.remote_qpns.remove(&key);
        }
    }

    fn forget_remote(&mut self, id: CmId) {
        self.forget_remote_qpn(id);
        let Some(c) = self.ids.get_mut(&id) else { return };
        let (rk, sk) = (c.remote_id_key.take(), c.sidr_key.take());
        if let Some(k) = rk {
            self.remote_ids.remove(&k);
        }
        if let Some(k) = sk {
            self.sidr.remove(&k);
        }
    }

    /// Back to IDLE, forgetting the remote end (`cm_reset_to_idle`).
    pub fn reset_to_idle(&mut self, id: CmId) {
        self.forget_remote(id);
        if let Some(c) = self.ids.get_mut(&id) {
            c.state = State::Idle;
            c.retry = None;
            c.timewait_until = None;
        }
    }

    /// To TIMEWAIT (`cm_enter_timewait`) for the path's ACK timeout: the remote QP may be
    /// reused by a new connection at once (its entry leaves the remote-QP table, as in `cm.c`);
    /// the remote communication ID stays in the remote-ID table until time-wait ends, so a
    /// late duplicate REQ is answered REJ Stale Connection rather than starting a connection.
    pub fn enter_timewait(&mut self, id: CmId, now: Instant) {
        self.forget_remote_qpn(id);
        if let Some(c) = self.ids.get_mut(&id) {
            c.state = State::Timewait;
            c.retry = None;
            c.timewait_until = Some(now + Duration::from_millis(iba_time_ms(c.av_timeout)));
        }
    }

    /// Drops `id` and every table entry naming it.
    pub fn remove(&mut self, id: CmId) {
        self.forget_remote(id);
        if let Some(c) = self.ids.remove(&id) {
            if c.state == State::Listen && self.listeners.get(&c.service_id) == Some(&id) {
                self.listeners.remove(&c.service_id);
            }
        }
    }

    /// The earliest deadline of any ID or held REQ (due at once when its listener exists).
    pub fn next_deadline(&self) -> Option<Instant> {
        let held = self.held.iter().map(|h| if self.listeners.contains_key(&h.service_id) { h.since } else { h.until });
        self.ids.values().filter_map(Conn::deadline).chain(held).min()
    }

    /// IDs not destroyed.
    pub fn alive(&self) -> usize {
        self.ids.values().filter(|c| !c.destroyed).count()
    }
}
