//! CREATE_SRQ, MODIFY_SRQ, QUERY_SRQ, DESTROY_SRQ, and the SRQ a new QP names.

use crate::backend::Backend;
use crate::errno::{CmdResult, Errno};
use crate::limits;
use crate::pdir;
use crate::ring::{Consumer, Half, RingPages};
use crate::srq::*;
use crate::Profile;
use parking_lot::Mutex;
use pvrdma_abi::cmd::{opcode, CreateSrq, CreateSrqResp, DestroySrq, ModifySrq, NoopResp, QuerySrq, QuerySrqResp};
use pvrdma_abi::verbs::{srq_attr_mask as mask, srq_type, SrqAttr};
use pvrdma_abi::wqe::rq_wqe_stride;
use std::sync::Arc;
use zerocopy::little_endian::U32;

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
pub fn create(core: &Backend, req: &CreateSrq) -> CmdResult<CreateSrqResp> {
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
pub fn modify(core: &Backend, req: &ModifySrq) -> CmdResult<NoopResp> {
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
pub fn query(core: &Backend, req: &QuerySrq) -> CmdResult<QuerySrqResp> {
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
pub fn destroy(core: &Backend, req: &DestroySrq) -> CmdResult<NoopResp> {
    // Commands run one at a time (`Core::cmd`): no QP is created on it between check and removal.
    let h = req.srq_handle.get();
    if !core.srq(h).ok_or(Errno::EINVAL)?.qps.lock().is_empty() {
        return Err(Errno::EBUSY);
    }
    core.objects.lock().srqs.remove(h);
    Ok(NoopResp::default())
}

/// The SRQ a new QP receives from: `None` without `is_srq`. Errors: `EINVAL` for an unknown SRQ,
/// `EPERM` for another context's.
pub(crate) fn for_new_qp(core: &Backend, is_srq: bool, handle: u32, ctx: u32) -> CmdResult<Option<Arc<Srq>>> {
    if !is_srq {
        return Ok(None);
    }
    let srq = core.srq(handle).ok_or(Errno::EINVAL)?;
    if srq.ctx != ctx {
        return Err(Errno::EPERM);
    }
    Ok(Some(srq))
}
