//! UAR pages (mthca's `mthca_uar.c`, Linux pvrdma's `pvrdma_uar_alloc`): page 0 of BAR2 is the
//! kernel's, every user context gets one page of its own, and a context reaches it only by
//! mapping offset 0, one page long (Linux's `pvrdma_mmap`).
//!
//! Allocation is O(1): a stack of free page indices. Each page has one atomic state word:
//!
//! | bits | meaning |
//! |---|---|
//! | 63..32 | generation: bumped each time the page returns to the free stack |
//! | 31 | `LIVE`: mappings may ring (cleared by revocation) |
//! | 30 | `HELD`: the context's [`ContextUar`] still exists |
//! | 29..0 | doorbell writes in flight through mappings |
//!
//! A write through a mapping enters (count + 1) only while its generation matches and `LIVE` is
//! set, and leaves after the MMIO write. Revocation clears `LIVE`, so no write starts after it;
//! the page goes back to the free stack only when it is neither live nor held and no write is in
//! flight — whichever of revocation, the context's release or the last write's exit gets there
//! does it, exactly once. A stale mapping's generation never matches again (2^32 reuses of one
//! page would wrap it).

use crate::doorbells::{Doorbells, UarMmio};
use crate::handle::Owner;
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use osdep::Mutex;
use pvrdma_abi::uar::UAR_PAGE_SIZE;
use thiserror::Error;

const LIVE: u64 = 1 << 31;
const HELD: u64 = 1 << 30;
const IN_FLIGHT: u64 = HELD - 1;
const GEN_SHIFT: u32 = 32;

/// UAR allocation and mapping failures.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UarError {
    /// Every user page is in use (or still being revoked).
    #[error("no free UAR page (all {0} in use)")]
    Exhausted(u32),
    /// A mapping other than offset 0 and one page (Linux's `pvrdma_mmap` answers EINVAL).
    #[error("UAR mapping must be offset 0 and {UAR_PAGE_SIZE} bytes, not offset {offset:#x} length {len}")]
    BadMapping {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
    },
    /// The context's page was revoked.
    #[error("UAR page {0} was revoked")]
    Revoked(u32),
}

/// One UAR page: its index in BAR2 and its page frame number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UarPage {
    index: u32,
    pfn: u64,
}

impl UarPage {
    /// Index of the page within BAR2 (0 is the kernel's).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Page frame number (BAR2 address >> 12), what CREATE_UC and the DSR carry.
    pub fn pfn(&self) -> u64 {
        self.pfn
    }

    /// Byte offset of the page within BAR2.
    pub fn bar_offset(&self) -> u64 {
        u64::from(self.index) * UAR_PAGE_SIZE
    }
}

/// A user context's identity for doorbell ownership: its page and that page's generation, so a
/// context that reuses a page is another owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContextId {
    page: u32,
    generation: u32,
}

pub(crate) struct Shared {
    pub(crate) mmio: Arc<dyn UarMmio>,
    base_pfn: u64,
    /// One state word per page; index 0 (the kernel's) is never used.
    slots: Box<[AtomicU64]>,
    free: Mutex<Vec<u32>>,
}

impl Shared {
    fn page(&self, index: u32) -> UarPage {
        UarPage { index, pfn: self.base_pfn + u64::from(index) }
    }

    /// Applies `op` to page `index`'s state; the caller that makes the page idle frees it.
    fn update(&self, index: u32, op: impl Fn(u64) -> Option<u64>) -> Result<u64, u64> {
        let slot = &self.slots[index as usize];
        let prev = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, &op)?;
        let next = op(prev).unwrap_or(prev);
        if prev & (LIVE | HELD | IN_FLIGHT) != 0 && next & (LIVE | HELD | IN_FLIGHT) == 0 {
            slot.store(next.wrapping_add(1 << GEN_SHIFT), Ordering::Release);
            self.free.lock().push(index);
        }
        Ok(prev)
    }

    /// Enters a write through a mapping of `index` at `generation`: `false` if revoked.
    pub(crate) fn enter(&self, index: u32, generation: u32) -> bool {
        self.update(index, |s| {
            let ok = s >> GEN_SHIFT == u64::from(generation) && s & LIVE != 0 && s & IN_FLIGHT != IN_FLIGHT;
            ok.then_some(s + 1)
        })
        .is_ok()
    }

    /// Leaves a write entered with [`Shared::enter`].
    pub(crate) fn leave(&self, index: u32) {
        let _ = self.update(index, |s| Some(s - 1));
    }
}

/// The UAR pages of one device, sized from its caps. Cheap to clone (shared).
#[derive(Clone)]
pub struct UarTable {
    shared: Arc<Shared>,
}

impl UarTable {
    /// A table of `num_pages` pages (page 0 the kernel's; at least 1) of BAR2 at page frame
    /// `base_pfn`, rung through `mmio`. Pass the smaller of BAR2's pages and the device's
    /// `max_uar` cap.
    pub fn new(mmio: Arc<dyn UarMmio>, base_pfn: u64, num_pages: u32) -> Self {
        let n = num_pages.max(1);
        let slots = (0..n).map(|_| AtomicU64::new(0)).collect();
        // Popped from the end: lowest index first on a fresh table.
        let free = Mutex::new((1..n).rev().collect());
        Self { shared: Arc::new(Shared { mmio, base_pfn, slots, free }) }
    }

    /// The kernel's page (index 0), always allocated, never revoked.
    pub fn kernel_page(&self) -> UarPage {
        self.shared.page(0)
    }

    /// The kernel page's doorbells: they ring any object, kernel or user.
    pub fn kernel_doorbells(&self) -> Doorbells {
        Doorbells::kernel(self.shared.mmio.clone(), self.kernel_page())
    }

    /// Allocates a page for a new user context, in O(1).
    ///
    /// Errors: [`UarError::Exhausted`] when no page is free (pages whose revocation has not
    /// completed are not free).
    pub fn alloc(&self) -> Result<ContextUar, UarError> {
        let index = self.shared.free.lock().pop().ok_or(UarError::Exhausted(self.pages()))?;
        let prev = self.shared.slots[index as usize].fetch_or(LIVE | HELD, Ordering::AcqRel);
        let generation = (prev >> GEN_SHIFT) as u32;
        Ok(ContextUar { shared: self.shared.clone(), page: self.shared.page(index), generation })
    }

    /// Pages in the table, the kernel's included.
    pub fn pages(&self) -> u32 {
        self.shared.slots.len() as u32
    }

    /// Pages not free: the kernel's, the contexts', and those whose revocation is incomplete.
    pub fn in_use(&self) -> usize {
        self.shared.slots.len() - self.shared.free.lock().len()
    }
}

/// A user context's UAR page, held for as long as the context lives. Dropping it (after the
/// device forgot the context: DESTROY_UC) revokes every mapping and returns the page once no
/// doorbell write through a mapping is in flight.
pub struct ContextUar {
    shared: Arc<Shared>,
    page: UarPage,
    generation: u32,
}

impl ContextUar {
    /// The page (its pfn goes into CREATE_UC).
    pub fn page(&self) -> UarPage {
        self.page
    }

    /// The owner tag of the context's objects.
    pub fn owner(&self) -> Owner {
        Owner::Context(ContextId { page: self.page.index, generation: self.generation })
    }

    /// Maps the context's page, as `mmap(fd, offset, len)` on Linux's pvrdma device file: only
    /// offset 0 and exactly one page are accepted (there is no way to name another context's
    /// page). The mapping's doorbells ring only this context's objects.
    ///
    /// Errors: [`UarError::BadMapping`] for any other offset or length; [`UarError::Revoked`]
    /// after [`ContextUar::revoke`].
    pub fn map(&self, offset: u64, len: u64) -> Result<Doorbells, UarError> {
        if offset != 0 || len != UAR_PAGE_SIZE {
            return Err(UarError::BadMapping { offset, len });
        }
        let state = self.shared.slots[self.page.index as usize].load(Ordering::Acquire);
        if state & LIVE == 0 {
            return Err(UarError::Revoked(self.page.index));
        }
        let mapping = UarMapping { shared: self.shared.clone(), page: self.page, generation: self.generation };
        Ok(Doorbells::user(mapping, self.owner()))
    }

    /// Revokes every mapping now: no doorbell write through one starts after this returns (one
    /// already in flight finishes; the page is not reused until it has). The context keeps its
    /// page until dropped.
    pub fn revoke(&self) {
        let _ = self.shared.update(self.page.index, |s| Some(s & !LIVE));
    }
}

impl Drop for ContextUar {
    fn drop(&mut self) {
        let _ = self.shared.update(self.page.index, |s| Some(s & !(LIVE | HELD)));
    }
}

/// A context's mapping of its UAR page (what user space writes its doorbells through).
#[derive(Clone)]
pub(crate) struct UarMapping {
    pub(crate) shared: Arc<Shared>,
    pub(crate) page: UarPage,
    pub(crate) generation: u32,
}
