//! Shared receive queues: CREATE_SRQ / MODIFY_SRQ / QUERY_SRQ / DESTROY_SRQ, the SRQ doorbell,
//! and the receive WQEs QPs created with `is_srq` take from it.
//!
//! An SRQ's pages: page 0 is the ring state (the driver produces receive WQEs into its `rx` half,
//! as QEMU 7.2's `create_srq_ring` and rdma-core's vmw_pvrdma provider place it), the WQEs
//! (`struct pvrdma_rq_wqe_hdr` plus SGEs, the stride a power of two) start at page 1.
//!
//! A QP takes a WQE when a message starts: on the loopback port with the message, on the RoCE
//! port at its first packet (`Qp::recv_capacity`), holding it until the last packet; a QP that
//! goes to ERR meanwhile flushes that one WQE, never the SRQ's others (they stay for its other
//! QPs). A QP moved to RESET or destroyed flushes it too, so the driver, which removes the CQEs
//! of a QP it resets or destroys (Linux's `_pvrdma_flush_cqe`), learns the WQE is gone rather
//! than owing it a completion forever (its `wr_id` reused by a later WQE would then be matched
//! to the lost one).
//!
//! The limit (IBTA 10.2.9.3, `ibv_modify_srq(3)`): MODIFY_SRQ with `LIMIT` and a nonzero
//! `srq_limit` arms it; when a QP takes a WQE and fewer than `srq_limit` stay posted, the device
//! raises SRQ_LIMIT_REACHED once and disarms (0). CREATE_SRQ ignores `srq_limit` (libibverbs:
//! "irrelevant for ibv_create_srq").
//!
//! # Profiles
//! - [`Profile::Ibta`]: the above; QUERY_SRQ answers `max_wr`, `max_sge` and the armed limit.
//! - [`Profile::Qemu72`]: QEMU 7.2's command table lists QUERY_SRQ before MODIFY_SRQ and is
//!   indexed by opcode, so opcode 18 (MODIFY_SRQ) runs the query and answers QUERY_SRQ's ack, and
//!   opcode 19 (QUERY_SRQ) runs the modify on the query's bytes (its `attr_mask` the request's
//!   reserved word: `EINVAL` unless it has `LIMIT`) and answers MODIFY_SRQ's ack
//!   (`table_opcode` in `cmd/srq.rs`). Its modify refuses `srq_limit` 0. QEMU's backend reads no async events
//!   of its host device, so SRQ_LIMIT_REACHED never reaches the guest: the limit is kept but
//!   never fires. Not reproduced (it would misroute a correct consumer's completions): QEMU 7.2
//!   completes every SRQ receive on the receive CQ of the last QP created on the SRQ (its
//!   `pvrdma_srq_recv` takes the SRQ's `recv_cq_handle`), naming the QP by its backend QPN; a
//!   consumer whose QPs share one receive CQ, as `ibv_srq_pingpong`'s do, sees no difference.
//!
//! Stricter than QEMU 7.2 in both profiles (which checks only the page count and the PD, then
//! leaves the rest to its host device): the type must be basic, `max_wr` a power of two up to
//! `MAX_SRQ_WR`, `max_sge` 1 ..= `MAX_SRQ_SGE`, `nchunks` exactly the ring-state page plus the
//! WQE pages, the PD one of a live context; DESTROY_SRQ with QPs attached is refused (`EBUSY`, as
//! `ibv_destroy_srq` answers; QEMU frees the ring under them); the doorbell obeys design
//! decision 5 (a user page rings only its own context's SRQs).

use crate::budget::Charge;
use crate::ctx::{Ctx, Effects};
use crate::ring::Consumer;
use crate::wqe::{read_sges, Sges};
use crate::Profile;
use parking_lot::Mutex;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::wqe::RqWqeHdr;
use zerocopy::{FromZeros, IntoBytes};

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    /// Handle (1 ..).
    pub handle: u32,
    /// Owning context (its PD's), 0 for the kernel.
    pub ctx: u32,
    /// Its PD.
    pub pd: u32,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) ring: Consumer,
    pub(crate) st: Mutex<SrqState>,
    /// Handles of the QPs created on it (a leaf lock): the doorbell kicks them, DESTROY_SRQ
    /// refuses while there are any.
    pub(crate) qps: Mutex<Vec<u32>>,
    pub(crate) _charge: Charge,
}

#[derive(Debug, Default)]
pub(crate) struct SrqState {
    /// The armed limit, 0 when disarmed.
    pub(crate) limit: u32,
    /// A ring fault put the SRQ in error (SRQ_ERR raised): nothing more is taken from it.
    pub(crate) broken: bool,
}

impl Srq {
    /// SGEs per WQE.
    pub(crate) fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Takes the next WQE for a receive: its header and its first `min(num_sge, max_sge)` SGEs;
    /// `Ok(None)` if none is posted. Then, if the limit is armed and fewer than it stay posted,
    /// disarms it and raises SRQ_LIMIT_REACHED (IBTA profile). Errors: a ring fault (an index out
    /// of range, ring memory gone): the SRQ goes into error with SRQ_ERR, once.
    pub(crate) fn take(&self, ctx: &Ctx) -> Result<Option<(RqWqeHdr, Sges)>, ()> {
        let mut st = self.st.lock();
        if st.broken {
            return Err(());
        }
        let wqe = match self.ring.next(&ctx.mem) {
            Ok(None) => return Ok(None),
            Ok(Some(slot)) => self.read(ctx, slot).filter(|_| self.ring.consume(&ctx.mem, slot).is_ok()),
            Err(_) => None,
        };
        let Some(wqe) = wqe else {
            st.broken = true;
            ctx.count(|c| &c.qp_ring_faults);
            ctx.post_async_event(EqeType::SrqErr, self.handle);
            return Err(());
        };
        let left = self.ring.posted(&ctx.mem).unwrap_or(0);
        if st.limit > 0 && left < st.limit && ctx.cfg.profile == Profile::Ibta {
            st.limit = 0;
            ctx.post_async_event(EqeType::SrqLimitReached, self.handle);
        }
        Ok(Some(wqe))
    }

    pub(crate) fn read(&self, ctx: &Ctx, slot: crate::ring::Slot) -> Option<(RqWqeHdr, Sges)> {
        let mut hdr = RqWqeHdr::new_zeroed();
        self.ring.read(&ctx.mem, slot, 0, hdr.as_mut_bytes()).ok()?;
        let n = hdr.num_sge.get().min(self.max_sge) as usize;
        let sges = read_sges(&ctx.mem, &self.ring, slot, size_of::<RqWqeHdr>(), n)?;
        Some((hdr, sges))
    }

    /// The SRQ doorbell: new WQEs are posted; packets parked for a QP of this SRQ are retried.
    pub(crate) fn doorbell(&self, fx: &mut Effects) {
        fx.kicks.extend_from_slice(&self.qps.lock());
    }

    /// QP `qp` was created on the SRQ.
    pub(crate) fn attach(&self, qp: u32) {
        self.qps.lock().push(qp);
    }

    /// QP `qp` was destroyed.
    pub(crate) fn detach(&self, qp: u32) {
        self.qps.lock().retain(|&q| q != qp);
    }
}
