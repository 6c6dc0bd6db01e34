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
//!   ([`table_opcode`]). Its modify refuses `srq_limit` 0. QEMU's backend reads no async events
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
use crate::device::{Core, Effects};
use crate::dsr::limits;
use crate::errno::{CmdResult, Errno};
use crate::pdir;
use crate::qp::Sges;
use crate::ring::{Consumer, Half, RingPages};
use crate::Profile;
use parking_lot::Mutex;
use pvrdma_abi::cmd::{opcode, CreateSrq, CreateSrqResp, DestroySrq, ModifySrq, NoopResp, QuerySrq, QuerySrqResp};
use pvrdma_abi::event::EqeType;
use pvrdma_abi::verbs::{srq_attr_mask as mask, srq_type, SrqAttr};
use pvrdma_abi::wqe::{rq_wqe_stride, RqWqeHdr};
use std::sync::Arc;
use zerocopy::little_endian::U32;
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
    max_wr: u32,
    max_sge: u32,
    ring: Consumer,
    st: Mutex<SrqState>,
    /// Handles of the QPs created on it (a leaf lock): the doorbell kicks them, DESTROY_SRQ
    /// refuses while there are any.
    qps: Mutex<Vec<u32>>,
    _charge: Charge,
}

#[derive(Debug, Default)]
struct SrqState {
    /// The armed limit, 0 when disarmed.
    limit: u32,
    /// A ring fault put the SRQ in error (SRQ_ERR raised): nothing more is taken from it.
    broken: bool,
}

/// The opcode whose handler a device of `profile` runs for `op` (QEMU 7.2 swaps MODIFY_SRQ and
/// QUERY_SRQ, see the module docs); the response carries that opcode's ack.
pub fn table_opcode(profile: Profile, op: u32) -> u32 {
    match (profile, op) {
        (Profile::Qemu72, opcode::MODIFY_SRQ) => opcode::QUERY_SRQ,
        (Profile::Qemu72, opcode::QUERY_SRQ) => opcode::MODIFY_SRQ,
        _ => op,
    }
}

/// CREATE_SRQ.
///
/// Errors: `EINVAL` for a type other than basic, a `max_wr` that is no power of two up to
/// `MAX_SRQ_WR`, a `max_sge` outside 1 ..= `MAX_SRQ_SGE`, an `nchunks` other than one ring-state
/// page plus the WQE pages (QEMU: 1 ..= 128), an unknown PD, or a page outside guest memory;
/// `ENOMEM` when `max_srq` exist or the host budget is spent.
pub fn create(core: &Core, req: &CreateSrq) -> CmdResult<CreateSrqResp> {
    let (wr, sge) = (req.attrs.max_wr.get(), req.attrs.max_sge.get());
    let geometry = req.srq_type == srq_type::BASIC
        && wr.is_power_of_two()
        && wr <= limits::MAX_SRQ_WR
        && (1..=limits::MAX_SRQ_SGE).contains(&sge);
    let stride = rq_wqe_stride(sge).filter(|_| geometry).ok_or(Errno::EINVAL)?;
    let pages = pdir::pages_for(u64::from(wr) * u64::from(stride)).ok_or(Errno::EINVAL)?;
    if u64::from(req.nchunks.get()) != 1 + pages {
        return Err(Errno::EINVAL);
    }
    let (pd, ctx) = {
        let objs = core.objects.lock();
        let pd = objs.pds.get(req.pd_handle.get()).ok_or(Errno::EINVAL)?;
        (pd.handle, pd.ctx)
    };
    let dir = req.pdir_dma.get();
    let state_page = pdir::resolve(&core.mem, dir, 0, 1)?[0];
    let wqes = pdir::resolve(&core.mem, dir, 1, pages as usize)?;
    let wqes = RingPages::new(&core.mem, wqes, stride, wr).ok_or(Errno::EINVAL)?;
    let charge = core.budget.charge_object::<Srq>(wqes.host_bytes())?;
    let mut objs = core.objects.lock();
    let handle = objs.srqs.alloc().ok_or(Errno::ENOMEM)?;
    let srq = Srq {
        handle,
        ctx,
        pd,
        max_wr: wr,
        max_sge: sge,
        ring: Consumer::new(&core.mem, wqes, state_page, Half::Rx),
        st: Mutex::new(SrqState::default()),
        qps: Mutex::new(Vec::new()),
        _charge: charge,
    };
    objs.srqs.insert(handle, Arc::new(srq));
    Ok(CreateSrqResp { srqn: U32::new(handle), ..Default::default() })
}

/// MODIFY_SRQ: arms (or, IBTA profile, with 0 disarms) the limit.
///
/// Errors: `EINVAL` for an unknown handle, `MAX_WR` in the mask (Linux's vmw_pvrdma and QEMU 7.2
/// refuse a resize), an unknown mask bit, a limit above `max_wr`; QEMU 7.2 profile also for a
/// mask without `LIMIT` or a limit of 0.
pub fn modify(core: &Core, req: &ModifySrq) -> CmdResult<NoopResp> {
    let srq = core.srq(req.srq_handle.get()).ok_or(Errno::EINVAL)?;
    let (m, limit) = (req.attr_mask.get(), req.attrs.srq_limit.get());
    let qemu = core.cfg.profile == Profile::Qemu72;
    let refused = m & !(mask::MAX_WR | mask::LIMIT) != 0
        || m & mask::MAX_WR != 0
        || (qemu && (m & mask::LIMIT == 0 || limit == 0))
        || (m & mask::LIMIT != 0 && limit > srq.max_wr);
    if refused {
        return Err(Errno::EINVAL);
    }
    if m & mask::LIMIT != 0 {
        srq.st.lock().limit = limit;
    }
    Ok(NoopResp::default())
}

/// QUERY_SRQ: `max_wr`, `max_sge` and the armed limit (0 once it fired). Errors: `EINVAL` for an
/// unknown handle.
pub fn query(core: &Core, req: &QuerySrq) -> CmdResult<QuerySrqResp> {
    let srq = core.srq(req.srq_handle.get()).ok_or(Errno::EINVAL)?;
    let attrs = SrqAttr {
        max_wr: U32::new(srq.max_wr),
        max_sge: U32::new(srq.max_sge),
        srq_limit: U32::new(srq.st.lock().limit),
        reserved: U32::new(0),
    };
    Ok(QuerySrqResp { attrs, ..Default::default() })
}

/// DESTROY_SRQ. Errors: `EINVAL` for an unknown handle; `EBUSY` while a QP uses it.
pub fn destroy(core: &Core, req: &DestroySrq) -> CmdResult<NoopResp> {
    // Commands run one at a time (`Core::cmd`): no QP is created on it between check and removal.
    let h = req.srq_handle.get();
    if !core.srq(h).ok_or(Errno::EINVAL)?.qps.lock().is_empty() {
        return Err(Errno::EBUSY);
    }
    core.objects.lock().srqs.remove(h);
    Ok(NoopResp::default())
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
    pub(crate) fn take(&self, core: &Core) -> Result<Option<(RqWqeHdr, Sges)>, ()> {
        let mut st = self.st.lock();
        if st.broken {
            return Err(());
        }
        let wqe = match self.ring.next(&core.mem) {
            Ok(None) => return Ok(None),
            Ok(Some(slot)) => self.read(core, slot).filter(|_| self.ring.consume(&core.mem, slot).is_ok()),
            Err(_) => None,
        };
        let Some(wqe) = wqe else {
            st.broken = true;
            core.count(|c| &c.qp_ring_faults);
            core.post_async_event(EqeType::SrqErr, self.handle);
            return Err(());
        };
        let left = self.ring.posted(&core.mem).unwrap_or(0);
        if st.limit > 0 && left < st.limit && core.cfg.profile == Profile::Ibta {
            st.limit = 0;
            core.post_async_event(EqeType::SrqLimitReached, self.handle);
        }
        Ok(Some(wqe))
    }

    fn read(&self, core: &Core, slot: crate::ring::Slot) -> Option<(RqWqeHdr, Sges)> {
        let mut hdr = RqWqeHdr::new_zeroed();
        self.ring.read(&core.mem, slot, 0, hdr.as_mut_bytes()).ok()?;
        let n = hdr.num_sge.get().min(self.max_sge) as usize;
        let sges = crate::qp::read_sges(&core.mem, &self.ring, slot, size_of::<RqWqeHdr>(), n)?;
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

impl Core {
    /// The SRQ named `handle`.
    pub(crate) fn srq(&self, handle: u32) -> Option<Arc<Srq>> {
        self.objects.lock().srqs.get(handle).cloned()
    }
}

/// The SRQ a new QP receives from: `None` without `is_srq`. Errors: `EINVAL` for an unknown SRQ,
/// `EPERM` for another context's.
pub(crate) fn for_new_qp(core: &Core, is_srq: bool, handle: u32, ctx: u32) -> CmdResult<Option<Arc<Srq>>> {
    if !is_srq {
        return Ok(None);
    }
    let srq = core.srq(handle).ok_or(Errno::EINVAL)?;
    if srq.ctx != ctx {
        return Err(Errno::EPERM);
    }
    Ok(Some(srq))
}
