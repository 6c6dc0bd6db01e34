//! RESIZE_CQ, driver side. pvrdma's command carries only the CQ handle and the new size (Linux's
//! vmw_pvrdma never sends it; QEMU 7.2 names it without a handler), so the protocol is ours and
//! the model's (`sim/src/cq.rs`): the driver relists the page directory the CQ was created with —
//! page 0, the ring state, stays; the new entry pages follow — and posts RESIZE_CQ; the device
//! re-reads that directory and, under its per-CQ lock, copies the CQEs queued between the
//! consumer and the producer to slots `0 ..` of the new ring and rewrites the ring state
//! (`cons_head` 0, `prod_tail` the count). Once the command returns, the driver frees the old
//! entry pages and restarts its consumer index at 0. The ring's lock is held throughout, so no
//! poll reads either ring meanwhile; the core's and the device's arm states are not touched.
//!
//! The driver uses RESIZE_CQ only on a device found to carry it at probe ([`probe`]), and answers
//! [`Error::Unsupported`] (EOPNOTSUPP) elsewhere.

use super::{Cq, CqInner};
use crate::device::DeviceInner;
use crate::dma::Abandon;
use ib_core::{Error, Result};
use pvrdma_abi::cmd::ResizeCq;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl CqInner {
    /// Resizes the CQ to at least `cqe` entries (rounded up to a power of two) and returns the
    /// new size.
    ///
    /// Errors: [`Error::Unsupported`] on a device without RESIZE_CQ; [`Error::InvalidArgument`]
    /// for 0, more than `max_cqe`, or fewer entries than CQEs queued (the device's EINVAL too);
    /// [`Error::BadResponse`] if the device answers another size (the CQ is then unusable);
    /// [`Error::DeviceFatal`]; command and DMA failures.
    pub(super) fn resize(&self, cqe: u32) -> Result<u32> {
        self.dev.live()?;
        if !self.dev.resize_cq() {
            return Err(Error::Unsupported("RESIZE_CQ: the device has none (QEMU 7.2)"));
        }
        let entries = cqe.checked_next_power_of_two().unwrap_or(0);
        if cqe == 0 || entries == 0 || entries > self.dev.attr.max_cqe {
            return Err(Error::InvalidArgument("cqe out of range"));
        }
        if self.health.is_broken() || self.destroyed.load(Ordering::Acquire) {
            return Err(Error::DeviceFatal);
        }
        let mut ring = self.ring.lock();
        if self.pending(&ring)? > entries {
            return Err(Error::InvalidArgument("cqe below the CQEs queued"));
        }
        let staged = ring.stage_resize(&self.dev.platform, entries)?;
        let req = ResizeCq { cq_handle: self.handle.into(), cqe: entries.into(), ..Default::default() };
        self.resize_seq.fetch_add(1, Ordering::SeqCst);
        let answer = self.dev.cmd.post(req);
        let result = self.finish_resize(&mut ring, staged, entries, answer);
        self.resize_seq.fetch_add(1, Ordering::SeqCst);
        result
    }

    /// The driver's side of RESIZE_CQ's `answer`, under the ring's lock.
    fn finish_resize(
        &self,
        ring: &mut crate::ring::DevRing,
        mut staged: crate::ring::StagedResize,
        entries: u32,
        answer: Result<pvrdma_abi::cmd::ResizeCqResp>,
    ) -> Result<u32> {
        match answer {
            Ok(resp) if resp.cqe.get() == entries => {
                let old = ring.commit_resize(staged);
                self.elems.store(entries, Ordering::Release);
                // The device rewrote the ring state: an index out of range marks the CQ broken.
                self.pending(ring)?;
                drop(old);
                tracing::debug!(cq = self.handle, entries, "CQ resized");
                Ok(entries)
            }
            Ok(resp) => {
                // The device may now write into either ring at a size we do not know.
                tracing::error!(
                    cq = self.handle,
                    asked = entries,
                    got = resp.cqe.get(),
                    "RESIZE_CQ answered another size"
                );
                staged.abandon();
                self.mark_broken();
                Err(Error::BadResponse("RESIZE_CQ: cqe differs from the request"))
            }
            Err(e) if crate::device_status(&e).is_some() => {
                // Refused: the device kept the old ring.
                ring.abort_resize(&self.dev.platform, staged)?;
                Err(e)
            }
            Err(e) => {
                // No answer: the device may use either.
                staged.abandon();
                Err(e)
            }
        }
    }
}

impl Cq {
    /// RESIZE_CQ (see the module docs).
    pub(crate) fn resize(&self, cqe: u32) -> Result<u32> {
        self.0.resize(cqe)
    }
}

/// Whether the device carries RESIZE_CQ, asked with a command that changes nothing: RESIZE_CQ of
/// handle 0 (never a CQ's) to 0 entries (never a size), through
/// [`crate::cmd::Commands::post_optional`]. A device with the command answers it (with its ack
/// and EINVAL); QEMU 7.2 answers nothing (ack 0, `REG_ERR` 0xffff), which reads as "no" and leaves
/// the device healthy. No object is made, so the probe's other commands and handles are as they
/// were. Any other outcome reads as "no" (logged). Interrupt waits only.
pub(crate) fn probe(dev: &Arc<DeviceInner>) -> bool {
    let has = match dev.cmd.post_optional(ResizeCq::default()) {
        Err(Error::Unsupported(_)) => false,
        Err(e) if crate::device_status(&e).is_some() => true,
        Ok(_) => {
            tracing::warn!("RESIZE_CQ of no CQ succeeded: taken as unsupported");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "RESIZE_CQ probe failed; taken as unsupported");
            false
        }
    };
    tracing::info!(has, "RESIZE_CQ found by probe");
    has
}
