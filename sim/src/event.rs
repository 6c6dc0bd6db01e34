//! The two device-produced rings the DSR describes: async events ([`Eqe`], MSI-X vector 1) and CQ
//! notifications ([`Cqne`], vector 2).

use crate::device::Core;
use crate::ring::{Producer, Push};
use pvrdma_abi::event::{Cqne, Eqe, EqeType};
use pvrdma_abi::regs::IntrVector;
use zerocopy::little_endian::U32;
use zerocopy::IntoBytes;

/// The async-event and CQ-notification rings of a loaded DSR.
#[derive(Debug)]
pub struct EventRings {
    async_ring: Producer,
    cq_ring: Producer,
}

impl EventRings {
    /// Rings as [`crate::dsr::load`] mapped them.
    pub fn new(async_ring: Producer, cq_ring: Producer) -> Self {
        Self { async_ring, cq_ring }
    }
}

impl Core {
    /// Posts an async event: writes `Eqe { type, info }` to the async ring and raises vector 1.
    /// A full (or broken) ring drops the entry and counts it, and still raises the vector so the
    /// driver drains what is there. No DSR: nothing happens.
    pub(crate) fn post_async_event(&self, kind: EqeType, info: u32) {
        let eqe = Eqe { type_: U32::new(kind as u32), info: U32::new(info) };
        let pushed = match self.events.lock().as_mut() {
            Some(ev) => ev.async_ring.push(&self.mem, eqe.as_bytes()),
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
        let cqne = Cqne { info: U32::new(handle) };
        let pushed = match self.events.lock().as_mut() {
            Some(ev) => ev.cq_ring.push(&self.mem, cqne.as_bytes()),
            None => Push::Fault,
        };
        let written = pushed == Push::Written;
        self.count(|c| if written { &c.cq_notifications } else { &c.notifications_dropped });
        written
    }
}
