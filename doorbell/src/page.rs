//! The state of each user UAR page, shared by the table and every mapping of the page:
//!
//! | bits | meaning |
//! |---|---|
//! | 63..32 | generation: bumped each time the page returns to the free stack |
//! | 31 | `LIVE`: mappings may ring (cleared by revocation) |
//! | 30 | `HELD`: the context's `ContextUar` still exists |
//! | 29..0 | doorbell writes in flight through mappings |
//!
//! A write through a mapping enters (count + 1) only while its generation matches and `LIVE` is
//! set, and leaves after the MMIO write. Revocation clears `LIVE`, so no write starts after it;
//! the page goes back to the free stack only when it is neither live nor held and no write is in
//! flight — whichever of revocation, the context's release or the last write's exit gets there
//! does it, exactly once. A stale mapping's generation never matches again (2^32 reuses of one
//! page would wrap it).

use crate::mmio::UarMmio;
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use osdep::Mutex;
use pvrdma_abi::uar::UAR_PAGE_SIZE;

pub(crate) const LIVE: u64 = 1 << 31;
pub(crate) const HELD: u64 = 1 << 30;
const IN_FLIGHT: u64 = HELD - 1;
pub(crate) const GEN_SHIFT: u32 = 32;

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

/// What the table and the mappings of its pages share.
pub(crate) struct Shared {
    pub(crate) mmio: Arc<dyn UarMmio>,
    pub(crate) base_pfn: u64,
    /// One state word per page; index 0 (the kernel's) is never used.
    pub(crate) slots: Box<[AtomicU64]>,
    pub(crate) free: Mutex<Vec<u32>>,
}

impl Shared {
    pub(crate) fn page(&self, index: u32) -> UarPage {
        UarPage { index, pfn: self.base_pfn + u64::from(index) }
    }

    /// Applies `op` to page `index`'s state; the caller that makes the page idle frees it.
    pub(crate) fn update(&self, index: u32, op: impl Fn(u64) -> Option<u64>) -> Result<u64, u64> {
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

/// A context's mapping of its UAR page (what user space writes its doorbells through).
#[derive(Clone)]
pub(crate) struct UarMapping {
    pub(crate) shared: Arc<Shared>,
    pub(crate) page: UarPage,
    pub(crate) generation: u32,
}
