//! CREATE_PD, DESTROY_PD.

use crate::backend::Backend;
use crate::errno::{CmdResult, Errno};
use crate::pd::*;
use pvrdma_abi::cmd::{CreatePd, CreatePdResp, DestroyPd, NoopResp};
use zerocopy::little_endian::U32;

/// CREATE_PD. Errors: `EINVAL` for an unknown context; `ENOMEM` when `max_pd` exist or the
/// host budget is spent.
pub fn create(core: &Backend, req: &CreatePd) -> CmdResult<CreatePdResp> {
    let ctx = req.ctx_handle.get();
    let charge = core.budget.charge_object::<Pd>(0)?;
    let mut objs = core.objects.lock();
    if ctx != 0 && objs.ucs.get(ctx).is_none() {
        return Err(Errno::EINVAL);
    }
    let handle = objs.pds.alloc().ok_or(Errno::ENOMEM)?;
    objs.pds.insert(handle, Pd { handle, ctx, _charge: charge });
    Ok(CreatePdResp { pd_handle: U32::new(handle), ..Default::default() })
}

/// DESTROY_PD. Errors: `EINVAL` for an unknown handle; `EBUSY` while a QP or MR uses it (QEMU
/// destroys it anyway).
pub fn destroy(core: &Backend, req: &DestroyPd) -> CmdResult<NoopResp> {
    let h = req.pd_handle.get();
    let mut objs = core.objects.lock();
    objs.pds.get(h).ok_or(Errno::EINVAL)?;
    let srq_uses = objs.srqs.values().any(|s| s.pd == h);
    if objs.qps.values().any(|q| q.pd == h) || objs.mrs.values().any(|m| m.pd == h) || srq_uses {
        return Err(Errno::EBUSY);
    }
    objs.pds.remove(h);
    Ok(NoopResp::default())
}
