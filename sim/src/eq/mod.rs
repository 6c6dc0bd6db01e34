//! The device's event queues, as the provider's `eq.rs` names them: the two device-produced rings
//! the DSR describes, async events ([`Eqe`], MSI-X vector 1) and CQ notifications ([`Cqne`],
//! vector 2), and the MSI-X vectors that signal them (`msix`).

mod msix;

use crate::mem::GuestMemory;
use crate::ring::{Producer, Push};
use pvrdma_abi::event::{Cqne, Eqe, EqeType};
use zerocopy::little_endian::U32;
use zerocopy::IntoBytes;

pub use msix::{MsixVectors, VectorHandler};

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

    /// Writes `Eqe { kind, info }` to the async-event ring.
    pub fn push_async(&mut self, mem: &GuestMemory, kind: EqeType, info: u32) -> Push {
        let eqe = Eqe { type_: U32::new(kind as u32), info: U32::new(info) };
        self.async_ring.push(mem, eqe.as_bytes())
    }

    /// Writes `Cqne { info: handle }` to the CQ-notification ring.
    pub fn push_cq_notification(&mut self, mem: &GuestMemory, handle: u32) -> Push {
        let cqne = Cqne { info: U32::new(handle) };
        self.cq_ring.push(mem, cqne.as_bytes())
    }
}
