//! What every object sees of the device ([`Ctx`]): its configuration, guest memory, counters,
//! host-memory budget and event queues, and the work deferred until locks are released
//! ([`Effects`]). The objects (`cq`, `qp`, `srq`, `mr` ...) take a `&Ctx` where they need the
//! device, never the device itself.

use crate::budget::HostBudget;
use crate::config::SimConfig;
use crate::eq::{EventRings, MsixVectors};
use crate::mem::GuestMemory;
use crate::ring::Push;
use crate::stats::{Counters, SimStats};
use parking_lot::Mutex;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::regs::IntrVector;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Work deferred until the current locks are released (the lock order in `device.rs`).
#[derive(Default)]
pub(crate) struct Effects {
    /// QPNs whose parked packets the port should retry or fail.
    pub kicks: Vec<u32>,
    /// Unique ids of CQs that went into error: their QPs go to ERR.
    pub errored_cqs: Vec<u64>,
    /// A packet left the wire while QPs waited for the device's wire budget: resume them.
    pub resume_starved: bool,
    /// A CQ's arm fired: raise the CQ-notification vector once the locks are released (its
    /// handler may run on this thread, and may ring an arm doorbell).
    pub raise_cq: bool,
}

/// The device's configuration, memory, counters and event sink.
pub(crate) struct Ctx {
    pub cfg: SimConfig,
    pub mem: GuestMemory,
    pub vectors: MsixVectors,
    /// Surprise removal (`SimDevice::set_dead`): no interrupt is raised.
    pub dead: AtomicBool,
    /// `REG_IMR`: bit `n` masks vector `n`.
    pub imr: AtomicU32,
    /// The event rings of the loaded DSR.
    pub events: Mutex<Option<EventRings>>,
    pub budget: Arc<HostBudget>,
    stats: Counters,
    uids: AtomicU64,
}

impl Ctx {
    /// A context for a device configured by `cfg`, with no DSR loaded.
    pub fn new(cfg: SimConfig) -> Self {
        Self {
            mem: GuestMemory::new(cfg.mem_limit),
            budget: HostBudget::new(cfg.host_budget),
            cfg,
            vectors: MsixVectors::default(),
            dead: AtomicBool::new(false),
            imr: AtomicU32::new(0),
            events: Mutex::new(None),
            stats: Counters::default(),
            uids: AtomicU64::new(1),
        }
    }

    /// Bumps counters.
    pub(crate) fn count(&self, counter: impl FnOnce(&Counters) -> &AtomicU64) {
        counter(&self.stats).fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of the counters and the host budget.
    pub(crate) fn stats(&self) -> SimStats {
        SimStats { host_bytes: self.budget.used(), host_budget: self.budget.limit(), ..self.stats.snapshot() }
    }

    /// A number unique over the device's life (objects' `uid`).
    pub(crate) fn next_uid(&self) -> u64 {
        self.uids.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the function is gone (surprise removal).
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Raises `vector` unless the device is dead or `REG_IMR` masks it.
    pub(crate) fn raise(&self, vector: IntrVector) {
        let v = vector as u16;
        if self.is_dead() {
            return;
        }
        if self.imr.load(Ordering::Acquire) & (1 << v) != 0 {
            self.count(|c| &c.interrupts_masked);
            return;
        }
        self.count(|c| &c.interrupts[v as usize]);
        self.vectors.raise(v);
    }

    /// Posts an async event: writes `Eqe { type, info }` to the async ring and raises vector 1.
    /// A full (or broken) ring drops the entry and counts it, and still raises the vector so the
    /// driver drains what is there. No DSR: nothing happens.
    pub(crate) fn post_async_event(&self, kind: EqeType, info: u32) {
        let pushed = match self.events.lock().as_mut() {
            Some(ev) => ev.push_async(&self.mem, kind, info),
            None => return,
        };
        self.count(|c| match pushed {
            Push::Written => &c.async_events,
            Push::Full | Push::Fault => &c.async_events_dropped,
        });
        self.raise(IntrVector::Async);
    }

    /// Writes CQ `handle` into the CQ-notification ring. Returns whether the entry was written;
    /// a full or broken ring drops it and counts it. Does not raise the vector (the caller's
    /// profile decides).
    pub(crate) fn post_cq_notification(&self, handle: u32) -> bool {
        let pushed = match self.events.lock().as_mut() {
            Some(ev) => ev.push_cq_notification(&self.mem, handle),
            None => Push::Fault,
        };
        let written = pushed == Push::Written;
        self.count(|c| if written { &c.cq_notifications } else { &c.notifications_dropped });
        written
    }

    /// Raises the CQ-notification vector if an arm fired (its handler may run on this thread).
    pub(crate) fn raise_fired(&self, fx: &mut Effects) {
        if std::mem::take(&mut fx.raise_cq) {
            self.raise(IntrVector::Cq);
        }
    }
}
