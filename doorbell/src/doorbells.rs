//! The doorbells of one UAR page, as typed operations on typed handles. Each owns its ordering
//! (see the crate docs' table): [`crate::barrier::io_wmb`], then one 32-bit write.

use crate::barrier::io_wmb;
use crate::encoding::{ArmEncoding, DoorbellOp};
use crate::handle::{CqHandle, Owner, QpHandle, SrqHandle};
use crate::mmio::UarMmio;
use crate::page::{Lease, UarPage};
use crate::DoorbellError;
use alloc::sync::Arc;

#[derive(Clone)]
enum Page {
    /// Page 0: rings any object; never revoked.
    Kernel { mmio: Arc<dyn UarMmio>, page: UarPage },
    /// A context's mapping: rings the context's own objects, until revoked.
    User { lease: Arc<Lease>, owner: Owner },
}

/// The doorbells of one UAR page: the kernel's ([`crate::UarTable::kernel_doorbells`]) or a
/// user context's mapping ([`crate::ContextUar::map`]). Cheap to clone.
///
/// Errors of every ring: [`DoorbellError::NotOwner`] when a user page is asked to ring another
/// owner's object (nothing is written); [`DoorbellError::Revoked`] through a revoked mapping
/// (nothing is written); [`DoorbellError::Unsupported`] for an operation the device's encoding
/// cannot express.
#[derive(Clone)]
pub struct Doorbells {
    page: Page,
}

impl Doorbells {
    pub(crate) fn kernel(mmio: Arc<dyn UarMmio>, page: UarPage) -> Self {
        Self { page: Page::Kernel { mmio, page } }
    }

    pub(crate) fn user(lease: Arc<Lease>, owner: Owner) -> Self {
        Self { page: Page::User { lease, owner } }
    }

    /// The page these doorbells ring.
    pub fn page(&self) -> UarPage {
        match &self.page {
            Page::Kernel { page, .. } => *page,
            Page::User { lease, .. } => lease.page,
        }
    }

    /// Whether this page may ring an object of `owner` (ownership only: a revoked mapping still
    /// answers for its owner, and every ring through it fails with `Revoked`).
    pub fn may_ring(&self, owner: Owner) -> bool {
        match &self.page {
            Page::Kernel { .. } => true,
            Page::User { owner: mine, .. } => *mine == owner,
        }
    }

    /// Announces new send WQEs of `qp`. Orders the WQEs and the SQ's `prod_tail` before it.
    pub fn qp_send(&self, qp: &QpHandle) -> Result<(), DoorbellError> {
        self.ring(qp.owner(), DoorbellOp::QpSend, qp.raw(), ArmEncoding::Ibta)
    }

    /// Announces new receive WQEs of `qp`. Orders the WQEs and the RQ's `prod_tail` before it.
    pub fn qp_recv(&self, qp: &QpHandle) -> Result<(), DoorbellError> {
        self.ring(qp.owner(), DoorbellOp::QpRecv, qp.raw(), ArmEncoding::Ibta)
    }

    /// Tells the device `cq` was polled. Orders the CQ's `cons_head` before it.
    pub fn cq_poll(&self, cq: &CqHandle) -> Result<(), DoorbellError> {
        self.ring(cq.owner(), DoorbellOp::CqPoll, cq.raw(), ArmEncoding::Ibta)
    }

    /// Arms `cq` for its next completion, encoded for a device arming as `enc`. Orders the CQ's
    /// `cons_head` before it. The driver's arms go through [`crate::CqArmDoorbell`]; this is the
    /// raw device operation (an arm rung here is the device's, not the driver's state).
    pub fn cq_arm_next(&self, cq: &CqHandle, enc: ArmEncoding) -> Result<(), DoorbellError> {
        self.ring(cq.owner(), DoorbellOp::CqArmNext, cq.raw(), enc)
    }

    /// Arms `cq` for its next solicited completion, encoded as `enc` (unsupported on QEMU 7.2).
    pub fn cq_arm_solicited(&self, cq: &CqHandle, enc: ArmEncoding) -> Result<(), DoorbellError> {
        self.ring(cq.owner(), DoorbellOp::CqArmSolicited, cq.raw(), enc)
    }

    /// Announces new receive WQEs on `srq`. Orders the WQEs and the SRQ's `prod_tail` first.
    pub fn srq_recv(&self, srq: &SrqHandle) -> Result<(), DoorbellError> {
        self.ring(srq.owner(), DoorbellOp::SrqRecv, srq.raw(), ArmEncoding::Ibta)
    }

    fn ring(&self, owner: Owner, op: DoorbellOp, handle: u32, enc: ArmEncoding) -> Result<(), DoorbellError> {
        if !self.may_ring(owner) {
            return Err(DoorbellError::NotOwner);
        }
        let w = op.encode(handle, enc).ok_or(DoorbellError::Unsupported)?;
        match &self.page {
            Page::Kernel { mmio, page } => {
                io_wmb();
                mmio.uar_write32(page.bar_offset() + u64::from(w.offset), w.value);
            }
            Page::User { lease, .. } => {
                let _in_flight = lease.enter().ok_or(DoorbellError::Revoked)?;
                // Gone with its table (the device was released): nothing left to ring.
                let mmio = lease.mmio().ok_or(DoorbellError::Revoked)?;
                io_wmb();
                mmio.uar_write32(lease.page.bar_offset() + u64::from(w.offset), w.value);
            }
        }
        Ok(())
    }
}
