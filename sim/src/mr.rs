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
use crate::mem::GuestMemory;
use pvrdma_abi::verbs::access;
use pvrdma_abi::PAGE_SIZE;
use smallvec::SmallVec;

pub(crate) const PAGE: u64 = PAGE_SIZE as u64;
/// The (device address, bytes) pieces of one access to guest memory, in buffer order.
pub(crate) type Pieces = SmallVec<[(u64, usize); 8]>;
/// `IBV_ACCESS_HUGETLB`: a hint.
pub(crate) const HUGETLB: u32 = 1 << 7;
/// `IBV_ACCESS_OPTIONAL_RANGE` (bits 20 to 29, relaxed ordering first): hints.
pub(crate) const OPTIONAL_RANGE: u32 = 0x3ff0_0000;
/// The access bits CREATE_MR takes: what Linux's `pvrdma_reg_user_mr` passes the device after
/// `ib_check_mr_access` (the program's flags as they are, never ON_DEMAND nor the FLUSH bits,
/// which that check refuses), and which QEMU 7.2 hands to its backend's `ibv_reg_mr` unchecked:
/// the four IBTA rights, MW_BIND (no memory windows exist to bind), ZERO_BASED, HUGETLB and the
/// optional hints. The model acts on the rights and ZERO_BASED; the rest change nothing.
pub(crate) const ACCESS_ALL: u32 = access::LOCAL_WRITE
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
    pub(crate) region: Option<Region>,
    pub(crate) _charge: Charge,
}

#[derive(Debug)]
pub(crate) struct Region {
    pub(crate) pages: Vec<u64>,
    pub(crate) first_off: u64,
}

impl Mr {
    pub(crate) fn base(&self) -> u64 {
        if self.access & access::ZERO_BASED != 0 {
            0
        } else {
            self.start
        }
    }

    /// Whether `[addr, addr + len)` lies inside the MR's address range.
    pub(crate) fn covers(&self, addr: u64, len: u64) -> bool {
        let base = self.base();
        let (Some(end), Some(mr_end)) = (addr.checked_add(len), base.checked_add(self.length)) else {
            return false;
        };
        addr >= base && end <= mr_end
    }

    /// Appends the device address and length of each page-bounded piece of `[addr, addr + len)`
    /// (already checked by [`Mr::covers`]) to `out`, a piece that continues the last one in
    /// device memory extending it; `false` without memory or past the page list.
    pub(crate) fn pieces(&self, addr: u64, len: usize, out: &mut Pieces) -> bool {
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
    pub(crate) fn read(&self, mem: &GuestMemory, addr: u64, buf: &mut [u8]) -> bool {
        let mut p = Pieces::new();
        self.pieces(addr, buf.len(), &mut p) && mem.read_pieces(&p, buf).is_ok()
    }

    /// Copies `data` to `[addr, addr + data.len())` with one access to guest memory.
    pub(crate) fn write(&self, mem: &GuestMemory, addr: u64, data: &[u8]) -> bool {
        let mut p = Pieces::new();
        self.pieces(addr, data.len(), &mut p) && mem.write_pieces(&p, data).is_ok()
    }

    /// The device address of the 8 bytes at `addr` (already checked by [`Mr::covers`]) if they
    /// lie 8-aligned in one page, as Linux rxe's `rxe_mr_do_atomic_op` demands of the page
    /// offset; `None` otherwise (or without memory).
    pub(crate) fn atomic_iova(&self, addr: u64) -> Option<u64> {
        let r = self.region.as_ref()?;
        let off = r.first_off.checked_add(addr - self.base())?;
        let page = r.pages.get((off / PAGE) as usize)?;
        (off & 7 == 0).then_some(page + off % PAGE)
    }
}
