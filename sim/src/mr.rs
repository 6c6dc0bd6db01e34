//! Memory regions (CREATE_MR / DESTROY_MR) and the SGE checks of the data path.
//!
//! An MR describes `length` bytes at virtual address `start` over the pages its page directory
//! lists. Like Linux's `ib_umem`, page 0 is the page that contains `start`: the MR's first byte
//! sits at offset `start & 0xfff` of page 0, so `start` need not be page-aligned. With
//! `ZERO_BASED` access, SGE addresses count from 0 instead of `start`.
//!
//! A DMA MR (`mr_flags::DMA`) gets keys but no memory: on QEMU 7.2 it carries no data, and here
//! every access through it fails with `LOC_PROT_ERR`.
//!
//! An MR over the consumer's own pages may lose them after registration (the program unmaps them
//! or changes their protection: `docs/memory.md`); guest memory then answers
//! [`crate::mem::MemError::Fault`] instead of faulting, and the access fails as one through a bad
//! key does: `LOC_PROT_ERR` for the local side (gather or scatter; Linux rxe's requester completes
//! a copy that failed with `EFAULT` so), `REM_ACCESS_ERR` for the responder of a WRITE, READ or
//! atomic (NAK Remote Access Error, as rxe answers a failed MR copy there).

use crate::budget::Charge;
use crate::device::Core;
use crate::errno::{CmdResult, Errno};
use crate::mem::GuestMemory;
use crate::pdir;
use pvrdma_abi::cmd::{CreateMr, CreateMrResp, DestroyMr, NoopResp};
use pvrdma_abi::verbs::{access, mr_flags};
use pvrdma_abi::wqe::{wc_status, Sge};
use pvrdma_abi::PAGE_SIZE;
use smallvec::SmallVec;
use std::sync::Arc;
use zerocopy::little_endian::U32;

const PAGE: u64 = PAGE_SIZE as u64;
/// The (device address, bytes) pieces of one access to guest memory, in buffer order.
type Pieces = SmallVec<[(u64, usize); 8]>;
/// `IBV_ACCESS_HUGETLB`: a hint.
const HUGETLB: u32 = 1 << 7;
/// `IBV_ACCESS_OPTIONAL_RANGE` (bits 20 to 29, relaxed ordering first): hints.
const OPTIONAL_RANGE: u32 = 0x3ff0_0000;
/// The access bits CREATE_MR takes: what Linux's `pvrdma_reg_user_mr` passes the device after
/// `ib_check_mr_access` (the program's flags as they are, never ON_DEMAND nor the FLUSH bits,
/// which that check refuses), and which QEMU 7.2 hands to its backend's `ibv_reg_mr` unchecked:
/// the four IBTA rights, MW_BIND (no memory windows exist to bind), ZERO_BASED, HUGETLB and the
/// optional hints. The model acts on the rights and ZERO_BASED; the rest change nothing.
const ACCESS_ALL: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND
    | access::ZERO_BASED
    | HUGETLB
    | OPTIONAL_RANGE;

/// A memory region.
#[derive(Debug)]
pub struct Mr {
    /// The PD it belongs to.
    pub pd: u32,
    /// Virtual address of its first byte.
    pub start: u64,
    /// Bytes.
    pub length: u64,
    /// `access` bits.
    pub access: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Pages backing it; `None` for a DMA MR.
    region: Option<Region>,
    _charge: Charge,
}

#[derive(Debug)]
struct Region {
    pages: Vec<u64>,
    first_off: u64,
}

impl Mr {
    fn base(&self) -> u64 {
        if self.access & access::ZERO_BASED != 0 {
            0
        } else {
            self.start
        }
    }

    /// Whether `[addr, addr + len)` lies inside the MR's address range.
    fn covers(&self, addr: u64, len: u64) -> bool {
        let base = self.base();
        let (Some(end), Some(mr_end)) = (addr.checked_add(len), base.checked_add(self.length)) else {
            return false;
        };
        addr >= base && end <= mr_end
    }

    /// Appends the device address and length of each page-bounded piece of `[addr, addr + len)`
    /// (already checked by [`Mr::covers`]) to `out`, a piece that continues the last one in
    /// device memory extending it; `false` without memory or past the page list.
    fn pieces(&self, addr: u64, len: usize, out: &mut Pieces) -> bool {
        let Some(r) = &self.region else { return false };
        let mut off = r.first_off + (addr - self.base());
        let mut done = 0usize;
        while done < len {
            let Some(page) = r.pages.get((off / PAGE) as usize) else {
                return false;
            };
            let n = ((PAGE - off % PAGE) as usize).min(len - done);
            let iova = page + off % PAGE;
            match out.last_mut() {
                Some((last, l)) if last.checked_add(*l as u64) == Some(iova) => *l += n,
                _ => out.push((iova, n)),
            }
            done += n;
            off += n as u64;
        }
        true
    }

    /// Copies `[addr, addr + buf.len())` into `buf` with one access to guest memory.
    fn read(&self, mem: &GuestMemory, addr: u64, buf: &mut [u8]) -> bool {
        let mut p = Pieces::new();
        self.pieces(addr, buf.len(), &mut p) && mem.read_pieces(&p, buf).is_ok()
    }

    /// Copies `data` to `[addr, addr + data.len())` with one access to guest memory.
    fn write(&self, mem: &GuestMemory, addr: u64, data: &[u8]) -> bool {
        let mut p = Pieces::new();
        self.pieces(addr, data.len(), &mut p) && mem.write_pieces(&p, data).is_ok()
    }

    /// The device address of the 8 bytes at `addr` (already checked by [`Mr::covers`]) if they
    /// lie 8-aligned in one page, as Linux rxe's `rxe_mr_do_atomic_op` demands of the page
    /// offset; `None` otherwise (or without memory).
    fn atomic_iova(&self, addr: u64) -> Option<u64> {
        let r = self.region.as_ref()?;
        let off = r.first_off.checked_add(addr - self.base())?;
        let page = r.pages.get((off / PAGE) as usize)?;
        (off & 7 == 0).then_some(page + off % PAGE)
    }
}

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
pub fn create(core: &Core, req: &CreateMr) -> CmdResult<CreateMrResp> {
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
        if length == 0 || length > crate::dsr::limits::MAX_MR_SIZE {
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
pub fn destroy(core: &Core, req: &DestroyMr) -> CmdResult<NoopResp> {
    let mut objs = core.objects.lock();
    let mr = objs.mrs.remove(req.mr_handle.get()).ok_or(Errno::EINVAL)?;
    objs.lkeys.remove(&mr.lkey);
    objs.rkeys.remove(&mr.rkey);
    Ok(NoopResp::default())
}

/// One checked SGE: the MR it names and the range within it.
struct Checked {
    mr: Arc<Mr>,
    addr: u64,
    len: usize,
}

/// Checks every non-empty SGE: the lkey exists, the MR is in `pd`, the range lies inside the MR,
/// the MR has memory, and it grants `need` access bits. Failure: `LOC_PROT_ERR`.
fn check(core: &Core, pd: u32, sges: &[Sge], need: u32) -> Result<SmallVec<[Checked; 4]>, u32> {
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
pub fn gather(core: &Core, pd: u32, sges: &[Sge]) -> Result<Vec<u8>, u32> {
    let checked = check(core, pd, sges, 0)?;
    let total: u64 = checked.iter().map(|c| c.len as u64).sum();
    if total > u64::from(crate::dsr::limits::MAX_MSG_SZ) {
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
pub fn scatter(core: &Core, pd: u32, sges: &[Sge], payload: &[u8]) -> Result<(), u32> {
    scatter_at(core, pd, sges, 0, payload)
}

/// The MR an incoming RDMA request names by `rkey`, checked as a responder checks the RETH
/// (IBTA 9.4.3, 9.4.4; Linux rxe's `check_rkey`): the rkey names a live MR of the responder
/// QP's PD `pd` that has memory and grants `need` (`REMOTE_WRITE` or `REMOTE_READ`), and
/// `[addr, addr + len)` lies inside it (overflow-safe). Failure: `REM_ACCESS_ERR`, the status
/// the requester completes with (NAK Remote Access Error).
pub(crate) fn remote(core: &Core, pd: u32, rkey: u32, addr: u64, len: u64, need: u32) -> Result<Arc<Mr>, u32> {
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
pub fn remote_write(core: &Core, pd: u32, rkey: u32, addr: u64, data: &[u8]) -> Result<(), u32> {
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
pub fn remote_read(core: &Core, pd: u32, rkey: u32, addr: u64, len: u32) -> Result<Vec<u8>, u32> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if len > crate::dsr::limits::MAX_MSG_SZ {
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
/// ([`GuestMemory::atomic_u64`]). Errors: `REM_ACCESS_ERR` (bad R_Key, PD, access or bounds, or
/// memory that is gone or no longer writable);
/// `REM_INV_REQ_ERR` for 8 bytes not 8-byte aligned (IBTA C9-28 misaligned atomic; Linux rxe's
/// `RESPST_ERR_MISALIGNED_ATOMIC`, NAK Invalid Request), nothing changed.
pub fn remote_atomic(core: &Core, pd: u32, rkey: u32, addr: u64, op: crate::mem::Atomic64) -> Result<u64, u32> {
    let mr = remote(core, pd, rkey, addr, 8, access::REMOTE_ATOMIC)?;
    let iova = mr.atomic_iova(addr).filter(|_| addr & 7 == 0).ok_or(wc_status::REM_INV_REQ_ERR)?;
    core.mem.atomic_u64(iova, op).map_err(|_| wc_status::REM_ACCESS_ERR)
}

/// Scatters `data` at byte `offset` of the message `sges` describe (an RDMA READ response at the
/// requester; needs `LOCAL_WRITE`). Errors: `LOC_PROT_ERR` for a bad SGE or memory that is gone
/// (as [`scatter`]), `LOC_LEN_ERR` if
/// `offset + data.len()` passes the SGEs' total.
pub fn scatter_at(core: &Core, pd: u32, sges: &[Sge], offset: u32, data: &[u8]) -> Result<(), u32> {
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
