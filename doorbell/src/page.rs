//! UAR page bookkeeping shared by the table, each context's page and every mapping of it.
//!
//! Each allocation of a page is a [`Lease`] of its own, with one atomic state word:
//!
//! | bits | meaning |
//! |---|---|
//! | 31 | `LIVE`: mappings may ring (cleared by revocation) |
//! | 30 | `HELD`: the context's `ContextUar` still exists (never cleared once retired) |
//! | 29..0 | doorbell writes in flight through mappings |
//!
//! A write through a mapping enters (count + 1) only while `LIVE` is set, and leaves after the
//! MMIO write (also if the write panics). Revocation clears `LIVE`, so no write starts after it;
//! the page goes back to the free queue only when the lease is neither live nor held and no
//! write is in flight — whichever of revocation, the context's release or the last write's exit
//! gets there does it, exactly once. A mapping holds its own lease, never the page's next one,
//! so a stale mapping can never ring again, however often the page is reused (no generation
//! counter to wrap). Pages are reused first-in, first-out.

use crate::mmio::UarMmio;
use alloc::collections::VecDeque;
use alloc::sync::{Arc, Weak};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use osdep::Mutex;
use pvrdma_abi::uar::UAR_PAGE_SIZE;

const LIVE: u32 = 1 << 31;
const HELD: u32 = 1 << 30;
const IN_FLIGHT: u32 = HELD - 1;

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

/// The free pages of a table.
struct Free {
    /// Released pages, oldest first.
    queue: VecDeque<u32>,
    /// Pages from here to the end were never handed out (so a large table costs nothing until
    /// its pages are used).
    fresh: u32,
}

/// What the table and its leases share. BAR2 is held weakly: a mapping revoked and never
/// dropped keeps the free queue alive, not the device behind BAR2.
pub(crate) struct Shared {
    mmio: Weak<dyn UarMmio>,
    base_pfn: u64,
    pages: u32,
    free: Mutex<Free>,
}

/// Every context id ever given, across tables: an owner is never mistaken for another.
static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Shared {
    pub(crate) fn new(mmio: &Arc<dyn UarMmio>, base_pfn: u64, pages: u32) -> Self {
        let free = Mutex::new(Free { queue: VecDeque::new(), fresh: 1 });
        Self { mmio: Arc::downgrade(mmio), base_pfn, pages, free }
    }

    pub(crate) fn pages(&self) -> u32 {
        self.pages
    }

    pub(crate) fn page(&self, index: u32) -> UarPage {
        UarPage { index, pfn: self.base_pfn.wrapping_add(u64::from(index)) }
    }

    /// Takes a free page (the oldest released, else one never used), in O(1).
    pub(crate) fn take(self: &Arc<Self>) -> Option<Arc<Lease>> {
        let index = {
            let mut f = self.free.lock();
            match f.queue.pop_front() {
                Some(i) => i,
                None if f.fresh < self.pages => {
                    f.fresh += 1;
                    f.fresh - 1
                }
                None => return None,
            }
        };
        let id = NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed);
        Some(Arc::new(Lease { shared: self.clone(), page: self.page(index), id, state: AtomicU32::new(LIVE | HELD) }))
    }

    /// Pages not free: the kernel's, the contexts', retired ones and those whose revocation is
    /// incomplete.
    pub(crate) fn in_use(&self) -> u32 {
        let f = self.free.lock();
        f.fresh - f.queue.len() as u32
    }
}

/// One allocation of a user page: the context's hold on it and its mappings' right to ring.
pub(crate) struct Lease {
    shared: Arc<Shared>,
    pub(crate) page: UarPage,
    /// The owner id of the context's objects.
    pub(crate) id: u64,
    state: AtomicU32,
}

impl Lease {
    /// BAR2, while its table lives.
    pub(crate) fn mmio(&self) -> Option<Arc<dyn UarMmio>> {
        self.shared.mmio.upgrade()
    }

    pub(crate) fn is_live(&self) -> bool {
        self.state.load(Ordering::Acquire) & LIVE != 0
    }

    /// Applies `op` to the state; the caller that makes the lease idle frees the page.
    fn update(&self, op: impl Fn(u32) -> Option<u32>) -> bool {
        let Ok(prev) = self.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, &op) else {
            return false;
        };
        let next = op(prev).unwrap_or(prev);
        if prev != 0 && next == 0 {
            self.shared.free.lock().queue.push_back(self.page.index);
        }
        true
    }

    /// Enters a write through a mapping; `None` once revoked. The guard leaves on drop.
    pub(crate) fn enter(&self) -> Option<WriteGuard<'_>> {
        let entered = self.update(|s| (s & LIVE != 0 && s & IN_FLIGHT != IN_FLIGHT).then_some(s + 1));
        entered.then(|| WriteGuard(self))
    }

    /// Clears `LIVE`: no write enters after this.
    pub(crate) fn revoke(&self) {
        self.update(|s| Some(s & !LIVE));
    }

    /// The context let go: clears `LIVE` and `HELD`.
    pub(crate) fn release(&self) {
        self.update(|s| Some(s & !(LIVE | HELD)));
    }
}

/// A write in flight through a mapping; leaving happens on drop, a panicking write included.
pub(crate) struct WriteGuard<'a>(&'a Lease);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.0.update(|s| Some(s - 1));
    }
}
