//! CREATE_MR, DESTROY_MR.

use crate::backend::Backend;
use crate::errno::{CmdResult, Errno};
use crate::mr::*;
use crate::pdir;
use pvrdma_abi::cmd::{CreateMr, CreateMrResp, DestroyMr, NoopResp};
use pvrdma_abi::verbs::{access, mr_flags};
use std::sync::Arc;
use zerocopy::little_endian::U32;

/// CREATE_MR. A DMA MR carries `start`, `length`, `nchunks` and `pdir_dma` all 0, as Linux's
/// `pvrdma_get_dma_mr` sends it.
///
/// Errors: `EINVAL` for an unknown PD, unknown flag or access bits (outside `ACCESS_ALL`), a
/// fast-register MR (not
/// modelled), a zero or too large length, a chunk count other than the pages `[start, start +
/// length)` spans (Linux's `ib_umem` count; QEMU 7.2 wants `ceil(length / 4096)`, the same for a
/// page-aligned `start`, and cannot describe an MR whose start is not), a misaligned page, or a
/// page directory or page outside guest memory (as QEMU 7.2); `ENOMEM` when `max_mr` exist or
/// the host budget cannot pay for its page list (8 bytes per page, charged before the page
/// directory is read: a page list is read once, at registration, so what the guest writes to
/// its page tables afterwards changes nothing).
pub fn create(core: &Backend, req: &CreateMr) -> CmdResult<CreateMrResp> {
    let (pd, flags, acc) = (req.pd_handle.get(), req.flags.get(), req.access_flags.get());
    // Remote write and atomic access need local write (IBTA 10.6.3.1; Linux's
    // `ib_check_mr_access` refuses it before any device sees it).
    let remote_writes = access::REMOTE_WRITE | access::REMOTE_ATOMIC;
    let needs_local = acc & remote_writes != 0 && acc & access::LOCAL_WRITE == 0;
    if flags & !mr_flags::DMA != 0 || acc & !ACCESS_ALL != 0 || needs_local {
        return Err(Errno::EINVAL);
    }
    if core.objects.lock().pds.get(pd).is_none() {
        return Err(Errno::EINVAL);
    }
    let (start, length) = (req.start.get(), req.length.get());
    let (region, charge) = if flags & mr_flags::DMA != 0 {
        // A DMA MR describes no memory: every count it carries must say so (Linux sends zeros).
        if start != 0 || length != 0 || req.nchunks.get() != 0 || req.pdir_dma.get() != 0 {
            return Err(Errno::EINVAL);
        }
        (None, core.budget.charge_object::<Mr>(0)?)
    } else {
        if length == 0 || length > crate::limits::MAX_MR_SIZE {
            return Err(Errno::EINVAL);
        }
        start.checked_add(length).ok_or(Errno::EINVAL)?;
        let first_off = start % PAGE;
        let needed = pdir::pages_for(first_off + length).ok_or(Errno::EINVAL)? as usize;
        let nchunks = req.nchunks.get() as usize;
        if nchunks != needed {
            return Err(Errno::EINVAL);
        }
        let charge = core.budget.charge_object::<Mr>(8 * needed as u64)?;
        let pages = pdir::resolve(&core.mem, req.pdir_dma.get(), 0, needed)?;
        (Some(Region { pages, first_off }), charge)
    };
    let mut objs = core.objects.lock();
    let handle = objs.mrs.alloc().ok_or(Errno::ENOMEM)?;
    let lkey = objs.new_key();
    objs.lkeys.insert(lkey, handle);
    let rkey = objs.new_key();
    objs.rkeys.insert(rkey, handle);
    let mr = Mr { pd, start, length, access: acc, lkey, rkey, region, _charge: charge };
    objs.mrs.insert(handle, Arc::new(mr));
    Ok(CreateMrResp { mr_handle: U32::new(handle), lkey: U32::new(lkey), rkey: U32::new(rkey), ..Default::default() })
}

/// DESTROY_MR. Errors: `EINVAL` for an unknown handle. A send that already gathered its payload
/// is not affected.
pub fn destroy(core: &Backend, req: &DestroyMr) -> CmdResult<NoopResp> {
    let mut objs = core.objects.lock();
    let mr = objs.mrs.remove(req.mr_handle.get()).ok_or(Errno::EINVAL)?;
    objs.lkeys.remove(&mr.lkey);
    objs.rkeys.remove(&mr.rkey);
    Ok(NoopResp::default())
}
