//! CREATE_UC, DESTROY_UC.

use crate::backend::Backend;
use crate::errno::{CmdResult, Errno};
use crate::uctx::*;
use pvrdma_abi::cmd::{CreateUc, CreateUcResp, DestroyUc, NoopResp};
use zerocopy::little_endian::U32;

/// CREATE_UC: the context owns UAR page `pfn - dsr.uar_pfn`.
///
/// Errors: `EINVAL` if that page is the kernel's or outside BAR2; `EBUSY` if another context owns
/// it; `ENOMEM` if every page is taken or the host budget is spent.
pub fn create(core: &Backend, uar_pfn: u64, req: &CreateUc) -> CmdResult<CreateUcResp> {
    let page = u64::from(req.pfn.get()).checked_sub(uar_pfn).ok_or(Errno::EINVAL)?;
    if page == 0 || page >= u64::from(crate::limits::MAX_UAR) {
        return Err(Errno::EINVAL);
    }
    let page = page as u32;
    let charge = core.budget.charge_object::<Uctx>(0)?;
    let mut objs = core.objects.lock();
    if objs.uar_pages.contains_key(&page) {
        return Err(Errno::EBUSY);
    }
    let handle = objs.ucs.alloc().ok_or(Errno::ENOMEM)?;
    objs.ucs.insert(handle, Uctx { page, _charge: charge });
    objs.uar_pages.insert(page, handle);
    Ok(CreateUcResp { ctx_handle: U32::new(handle), ..Default::default() })
}

/// DESTROY_UC: releases the context and its UAR page.
///
/// Errors: `EINVAL` for an unknown handle; `EBUSY` while a PD or CQ of the context exists (the
/// model does not tear down a context's objects behind the driver's back).
pub fn destroy(core: &Backend, req: &DestroyUc) -> CmdResult<NoopResp> {
    let h = req.ctx_handle.get();
    let mut objs = core.objects.lock();
    let page = objs.ucs.get(h).ok_or(Errno::EINVAL)?.page;
    if objs.pds.values().any(|p| p.ctx == h) || objs.cqs.values().any(|c| c.ctx == h) {
        return Err(Errno::EBUSY);
    }
    objs.ucs.remove(h);
    objs.uar_pages.remove(&page);
    Ok(NoopResp::default())
}
