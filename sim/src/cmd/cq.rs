//! CREATE_CQ, RESIZE_CQ, DESTROY_CQ.

use crate::backend::Backend;
use crate::cq::*;
use crate::errno::{CmdResult, Errno};
use crate::pdir;
use crate::ring::{Producer, RingPages};
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateCq, CreateCqResp, DestroyCq, NoopResp, ResizeCq, ResizeCqResp};
use std::sync::Arc;
use zerocopy::little_endian::U32;

/// CREATE_CQ: `cqe` entries (a power of two, 1 ..= `MAX_CQE`) over exactly
/// `nchunks = 1 + ceil(cqe * 64 / 4096)` pages (the ring-state page, then the entries), the count
/// Linux's `pvrdma_create_cq` sends. QEMU 7.2 refuses `nchunks` 0 or above 128; an exact count
/// is stricter (the largest CQ, 4096 CQEs, takes 65).
///
/// Errors: `EINVAL` for an unknown context, a bad size, a chunk count other than that one, a
/// misaligned page, or a
/// ring-state page whose `prod_tail` is out of range, or pages outside guest memory (as QEMU
/// 7.2); `ENOMEM` when `max_cq` exist or the host budget is spent.
pub fn create(core: &Backend, req: &CreateCq) -> CmdResult<CreateCqResp> {
    let (ctx, cqe, nchunks) = (req.ctx_handle.get(), req.cqe.get(), req.nchunks.get() as usize);
    if ctx != 0 && core.objects.lock().ucs.get(ctx).is_none() {
        return Err(Errno::EINVAL);
    }
    if !cqe.is_power_of_two() || cqe > crate::limits::MAX_CQE {
        return Err(Errno::EINVAL);
    }
    let needed = 1 + pdir::pages_for(u64::from(cqe) * u64::from(CQE_SIZE)).unwrap_or(0) as usize;
    if nchunks != needed {
        return Err(Errno::EINVAL);
    }
    let mut pages = pdir::resolve(&core.mem, req.pdir_dma.get(), 0, needed)?;
    let state_page = pages.remove(0);
    let entries = RingPages::new(&core.mem, pages, CQE_SIZE, cqe).ok_or(Errno::EINVAL)?;
    let charge = core.budget.charge_object::<Cq>(entries.host_bytes())?;
    let ring = Producer::new(&core.mem, entries, state_page).ok_or(Errno::EINVAL)?;
    let st = CqState { ring, arm: ArmState::Disarmed, error: false, dead: false, resized: None };
    let mut objs = core.objects.lock();
    let handle = objs.cqs.alloc().ok_or(Errno::ENOMEM)?;
    let cq = Cq {
        handle,
        uid: core.next_uid(),
        ctx,
        pdir_dma: req.pdir_dma.get(),
        state_page,
        st: Mutex::new(st),
        _charge: charge,
    };
    objs.cqs.insert(handle, Arc::new(cq));
    Ok(CreateCqResp { cq_handle: U32::new(handle), cqe: U32::new(cqe), ..Default::default() })
}

/// RESIZE_CQ (see the module docs): `cqe` entries, a power of two of at most `MAX_CQE` and at
/// least the CQEs queued, over the pages the CQ's page directory lists now (page 0 must still be
/// the ring-state page). Answers the new size.
///
/// Errors: `EINVAL` for an unknown handle, a bad size, fewer entries than CQEs queued, a changed
/// ring-state page, a page outside guest memory, or a CQ whose `cons_head` is out of range;
/// `ENOMEM` when the host budget cannot pay for the new ring's page list (the old ring stays).
pub fn resize(core: &Backend, req: &ResizeCq) -> CmdResult<ResizeCqResp> {
    let (h, cqe) = (req.cq_handle.get(), req.cqe.get());
    let cq = core.objects.lock().cqs.get(h).cloned().ok_or(Errno::EINVAL)?;
    if !cqe.is_power_of_two() || cqe > crate::limits::MAX_CQE {
        return Err(Errno::EINVAL);
    }
    let needed = 1 + pdir::pages_for(u64::from(cqe) * u64::from(CQE_SIZE)).unwrap_or(0) as usize;
    let mut st = cq.st.lock();
    if st.dead || st.ring.queued(&core.mem).map_err(|_| Errno::EINVAL)? > cqe {
        return Err(Errno::EINVAL);
    }
    let mut pages = pdir::resolve(&core.mem, cq.pdir_dma, 0, needed)?;
    if pages.remove(0) != cq.state_page {
        return Err(Errno::EINVAL);
    }
    let entries = RingPages::new(&core.mem, pages, CQE_SIZE, cqe).ok_or(Errno::EINVAL)?;
    let charge = core.budget.charge(entries.host_bytes())?;
    st.ring.move_to(&core.mem, entries).map_err(|_| Errno::EINVAL)?;
    st.resized = Some(charge);
    Ok(ResizeCqResp { cqe: U32::new(cqe), ..Default::default() })
}

/// DESTROY_CQ. Errors: `EINVAL` for an unknown handle; `EBUSY` while a QP uses it.
pub fn destroy(core: &Backend, req: &DestroyCq) -> CmdResult<NoopResp> {
    let h = req.cq_handle.get();
    let cq = {
        let mut objs = core.objects.lock();
        let uid = objs.cqs.get(h).ok_or(Errno::EINVAL)?.uid;
        if objs.qps.values().any(|q| q.send_cq.uid == uid || q.recv_cq.uid == uid) {
            return Err(Errno::EBUSY);
        }
        objs.cqs.remove(h).ok_or(Errno::EINVAL)?
    };
    cq.kill();
    Ok(NoopResp::default())
}
