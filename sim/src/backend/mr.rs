//! The data path's access to memory regions: SGEs checked by lkey and gathered or scattered,
//! and the responder's RDMA and atomic accesses checked by rkey (IBTA 9.4.3 - 9.4.5).

use crate::backend::Backend;
use crate::mr::Pieces;
use crate::mr::*;
use pvrdma_abi::verbs::access;
use pvrdma_abi::wqe::{wc_status, Sge};
use smallvec::SmallVec;
use std::sync::Arc;

/// One checked SGE: the MR it names and the range within it.
struct Checked {
    mr: Arc<Mr>,
    addr: u64,
    len: usize,
}

/// Checks every non-empty SGE: the lkey exists, the MR is in `pd`, the range lies inside the MR,
/// the MR has memory, and it grants `need` access bits. Failure: `LOC_PROT_ERR`.
fn check(core: &Backend, pd: u32, sges: &[Sge], need: u32) -> Result<SmallVec<[Checked; 4]>, u32> {
    let objs = core.objects.lock();
    let mut out = SmallVec::new();
    for sge in sges.iter().filter(|s| s.length.get() != 0) {
        let (addr, len) = (sge.addr.get(), sge.length.get());
        let mr = objs.lkeys.get(&sge.lkey.get()).and_then(|h| objs.mrs.get(*h)).ok_or(wc_status::LOC_PROT_ERR)?;
        let ok = mr.pd == pd && mr.region.is_some() && mr.access & need == need && mr.covers(addr, u64::from(len));
        if !ok {
            return Err(wc_status::LOC_PROT_ERR);
        }
        out.push(Checked { mr: mr.clone(), addr, len: len as usize });
    }
    Ok(out)
}

/// Gathers a send's payload from `sges` (local read access, always granted), with one access to
/// guest memory for the whole list.
///
/// Errors (a completion status): `LOC_PROT_ERR` for a bad SGE or memory that is gone (freed, or
/// the consumer's pages unmapped or unreadable),
/// `LOC_LEN_ERR` for a message longer than `MAX_MSG_SZ`.
pub fn gather(core: &Backend, pd: u32, sges: &[Sge]) -> Result<Vec<u8>, u32> {
    let checked = check(core, pd, sges, 0)?;
    let total: u64 = checked.iter().map(|c| c.len as u64).sum();
    if total > u64::from(crate::limits::MAX_MSG_SZ) {
        return Err(wc_status::LOC_LEN_ERR);
    }
    let mut pieces = Pieces::new();
    if !checked.iter().all(|c| c.mr.pieces(c.addr, c.len, &mut pieces)) {
        return Err(wc_status::LOC_PROT_ERR);
    }
    let mut payload = vec![0u8; total as usize];
    core.mem.read_pieces(&pieces, &mut payload).map_err(|_| wc_status::LOC_PROT_ERR)?;
    Ok(payload)
}

/// Scatters a received `payload` into `sges` (needs `LOCAL_WRITE`).
///
/// Errors (a completion status): `LOC_PROT_ERR` for a bad SGE or memory that is gone (freed, or
/// the consumer's pages unmapped or no longer writable; what came before may have landed),
/// `LOC_LEN_ERR` if the payload does not fit.
pub fn scatter(core: &Backend, pd: u32, sges: &[Sge], payload: &[u8]) -> Result<(), u32> {
    scatter_at(core, pd, sges, 0, payload)
}

/// The MR an incoming RDMA request names by `rkey`, checked as a responder checks the RETH
/// (IBTA 9.4.3, 9.4.4; Linux rxe's `check_rkey`): the rkey names a live MR of the responder
/// QP's PD `pd` that has memory and grants `need` (`REMOTE_WRITE` or `REMOTE_READ`), and
/// `[addr, addr + len)` lies inside it (overflow-safe). Failure: `REM_ACCESS_ERR`, the status
/// the requester completes with (NAK Remote Access Error).
pub(crate) fn remote(core: &Backend, pd: u32, rkey: u32, addr: u64, len: u64, need: u32) -> Result<Arc<Mr>, u32> {
    let objs = core.objects.lock();
    let mr = objs.rkeys.get(&rkey).and_then(|h| objs.mrs.get(*h));
    let mr = mr.ok_or(wc_status::REM_ACCESS_ERR)?;
    let ok = mr.pd == pd && mr.region.is_some() && mr.access & need == need && mr.covers(addr, len);
    if !ok {
        return Err(wc_status::REM_ACCESS_ERR);
    }
    Ok(mr.clone())
}

/// Writes `data` at `addr` of the MR `rkey` names (an RDMA WRITE's responder side), after the
/// checks of [`remote`] with `REMOTE_WRITE`. A zero-length write checks nothing and writes
/// nothing (IBTA C9-88: a zero-length request need not carry a valid R_Key; Linux rxe's
/// `check_rkey` skips it too). Errors: `REM_ACCESS_ERR`, with nothing written when a check
/// fails (memory that went away part-way may leave the pieces before it written).
pub fn remote_write(core: &Backend, pd: u32, rkey: u32, addr: u64, data: &[u8]) -> Result<(), u32> {
    if data.is_empty() {
        return Ok(());
    }
    let mr = remote(core, pd, rkey, addr, data.len() as u64, access::REMOTE_WRITE)?;
    if mr.write(&core.mem, addr, data) {
        Ok(())
    } else {
        Err(wc_status::REM_ACCESS_ERR)
    }
}

/// Reads `len` bytes at `addr` of the MR `rkey` names (an RDMA READ's responder side), after the
/// checks of [`remote`] with `REMOTE_READ`; zero-length as [`remote_write`]. Errors:
/// `REM_ACCESS_ERR` (also for memory that is gone); `REM_INV_REQ_ERR` for a length past `MAX_MSG_SZ` (IBTA: Invalid Request).
pub fn remote_read(core: &Backend, pd: u32, rkey: u32, addr: u64, len: u32) -> Result<Vec<u8>, u32> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if len > crate::limits::MAX_MSG_SZ {
        return Err(wc_status::REM_INV_REQ_ERR);
    }
    let mr = remote(core, pd, rkey, addr, u64::from(len), access::REMOTE_READ)?;
    let mut buf = vec![0u8; len as usize];
    if mr.read(&core.mem, addr, &mut buf) {
        Ok(buf)
    } else {
        Err(wc_status::REM_ACCESS_ERR)
    }
}

/// Executes the atomic `op` on the 8 bytes at `addr` of the MR `rkey` names (the responder side of
/// COMPARE SWAP and FETCH ADD, IBTA 9.4.5) and returns the value they held before, after the
/// checks of [`remote`] with `REMOTE_ATOMIC`. The operation is one atomic step on the memory
/// ([`crate::mem::GuestMemory::atomic_u64`]). Errors: `REM_ACCESS_ERR` (bad R_Key, PD, access or bounds, or
/// memory that is gone or no longer writable);
/// `REM_INV_REQ_ERR` for 8 bytes not 8-byte aligned (IBTA C9-28 misaligned atomic; Linux rxe's
/// `RESPST_ERR_MISALIGNED_ATOMIC`, NAK Invalid Request), nothing changed.
pub fn remote_atomic(core: &Backend, pd: u32, rkey: u32, addr: u64, op: crate::mem::Atomic64) -> Result<u64, u32> {
    let mr = remote(core, pd, rkey, addr, 8, access::REMOTE_ATOMIC)?;
    let iova = mr.atomic_iova(addr).filter(|_| addr & 7 == 0).ok_or(wc_status::REM_INV_REQ_ERR)?;
    core.mem.atomic_u64(iova, op).map_err(|_| wc_status::REM_ACCESS_ERR)
}

/// Scatters `data` at byte `offset` of the message `sges` describe (an RDMA READ response at the
/// requester; needs `LOCAL_WRITE`). Errors: `LOC_PROT_ERR` for a bad SGE or memory that is gone
/// (as [`scatter`]), `LOC_LEN_ERR` if
/// `offset + data.len()` passes the SGEs' total.
pub fn scatter_at(core: &Backend, pd: u32, sges: &[Sge], offset: u32, data: &[u8]) -> Result<(), u32> {
    let checked = check(core, pd, sges, access::LOCAL_WRITE)?;
    let room: u64 = checked.iter().map(|c| c.len as u64).sum();
    if u64::from(offset) + data.len() as u64 > room {
        return Err(wc_status::LOC_LEN_ERR);
    }
    let (mut skip, mut at) = (offset as usize, 0usize);
    let mut pieces = Pieces::new();
    for c in &checked {
        if at == data.len() {
            break;
        }
        if skip >= c.len {
            skip -= c.len;
            continue;
        }
        let n = (c.len - skip).min(data.len() - at);
        if !c.mr.pieces(c.addr + skip as u64, n, &mut pieces) {
            return Err(wc_status::LOC_PROT_ERR);
        }
        (skip, at) = (0, at + n);
    }
    core.mem.write_pieces(&pieces, data).map_err(|_| wc_status::LOC_PROT_ERR)
}
