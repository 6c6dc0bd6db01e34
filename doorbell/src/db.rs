//! The named doorbell writes. Each owns its ordering: a release fence, then one 32-bit MMIO write.

use crate::uar::UarPage;
use pvrdma_abi::uar::*;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// A 32-bit little-endian write into BAR2 at a byte offset: the one thing doorbells need from the
/// platform.
pub trait UarMmio: Send + Sync {
    /// Writes `value` at `offset` bytes into BAR2; the write has taken effect when this returns.
    fn uar_write32(&self, offset: u64, value: u32);
}

/// The doorbells of one UAR page.
#[derive(Clone)]
pub struct Doorbells {
    mmio: Arc<dyn UarMmio>,
    page: UarPage,
}

impl Doorbells {
    /// Doorbells rung through `page`.
    pub fn new(mmio: Arc<dyn UarMmio>, page: UarPage) -> Self {
        Self { mmio, page }
    }

    /// The page these doorbells ring.
    pub fn page(&self) -> UarPage {
        self.page
    }

    /// Announces new send WQEs of QP `handle`: orders the WQEs and the SQ producer index before it.
    pub fn qp_send(&self, handle: u32) {
        self.ring(UAR_QP_OFFSET, UAR_QP_SEND | (handle & UAR_HANDLE_MASK));
    }

    /// Announces new receive WQEs of QP `handle`: orders the WQEs and the RQ producer index first.
    pub fn qp_recv(&self, handle: u32) {
        self.ring(UAR_QP_OFFSET, UAR_QP_RECV | (handle & UAR_HANDLE_MASK));
    }

    /// Writes the CQ doorbell of CQ `handle` with `bits` (a combination of `UAR_CQ_ARM`,
    /// `UAR_CQ_ARM_SOL`, `UAR_CQ_POLL`): orders the consumer index update before it, so the
    /// device sees what was polled before the arm.
    pub fn cq(&self, handle: u32, bits: u32) {
        self.ring(UAR_CQ_OFFSET, bits | (handle & UAR_HANDLE_MASK));
    }

    /// Announces new receive WQEs on SRQ `handle`.
    pub fn srq_recv(&self, handle: u32) {
        self.ring(UAR_SRQ_OFFSET, UAR_SRQ_RECV | (handle & UAR_HANDLE_MASK));
    }

    fn ring(&self, offset: u32, value: u32) {
        // The ring contents and indices this doorbell announces live in DMA memory; the device
        // must see them before it sees the doorbell (mthca's wmb() before the UAR write).
        fence(Ordering::Release);
        self.mmio.uar_write32(self.page.bar_offset() + u64::from(offset), value);
    }
}
