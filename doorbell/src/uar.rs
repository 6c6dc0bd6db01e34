//! UAR pages (mthca's `mthca_uar.c`, Linux pvrdma's `pvrdma_uar_alloc`): page 0 of BAR2 is the
//! kernel's, every user context gets one page of its own, and a context reaches it only by
//! mapping offset 0, one page long (Linux's `pvrdma_mmap`).
//!
//! Allocation is O(1): a queue of released pages, then pages never used. How revocation keeps a
//! page out of circulation while writes through old mappings are in flight is in `page.rs`.

use crate::doorbells::Doorbells;
use crate::handle::{ContextId, Owner};
use crate::mmio::UarMmio;
use crate::page::{Lease, Shared, UarPage};
use alloc::sync::Arc;
use pvrdma_abi::uar::UAR_PAGE_SIZE;
use thiserror::Error;

/// UAR allocation and mapping failures.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UarError {
    /// Every user page is in use (or still being revoked): how many user pages the table has
    /// (the kernel's page not counted).
    #[error("no free UAR page (all {0} user pages in use)")]
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

/// Most pages a table manages (256 MiB of BAR2): a bigger size from a device or platform is a
/// fault, clamped here.
pub const MAX_UAR_PAGES: u32 = 1 << 16;

/// The UAR pages of one device, sized from its caps. Cheap to clone (shared).
#[derive(Clone)]
pub struct UarTable {
    shared: Arc<Shared>,
    mmio: Arc<dyn UarMmio>,
}

impl UarTable {
    /// A table of `num_pages` pages (page 0 the kernel's; at least 1, at most
    /// [`MAX_UAR_PAGES`], and no page frame past `u64::MAX`) of BAR2 at page frame `base_pfn`,
    /// rung through `mmio`. Pass the smaller of BAR2's pages and the device's `max_uar` cap.
    /// Memory grows with the pages used, not with `num_pages`.
    pub fn new(mmio: Arc<dyn UarMmio>, base_pfn: u64, num_pages: u32) -> Self {
        let fit = u32::try_from(u64::MAX - base_pfn).map_or(u32::MAX, |room| room.saturating_add(1));
        let n = num_pages.clamp(1, MAX_UAR_PAGES).min(fit.max(1));
        Self { shared: Arc::new(Shared::new(&mmio, base_pfn, n)), mmio }
    }

    /// The kernel's page (index 0), always allocated, never revoked.
    pub fn kernel_page(&self) -> UarPage {
        self.shared.page(0)
    }

    /// The kernel page's doorbells: they ring any object, kernel or user.
    pub fn kernel_doorbells(&self) -> Doorbells {
        Doorbells::kernel(self.mmio.clone(), self.kernel_page())
    }

    /// Allocates a page for a new user context, in O(1): the page released longest ago, else
    /// one never used.
    ///
    /// Errors: [`UarError::Exhausted`] when no page is free (pages whose revocation has not
    /// completed, and retired ones, are not free).
    pub fn alloc(&self) -> Result<ContextUar, UarError> {
        let lease = self.shared.take().ok_or(UarError::Exhausted(self.pages() - 1))?;
        Ok(ContextUar { lease, retired: false })
    }

    /// Pages in the table, the kernel's included.
    pub fn pages(&self) -> u32 {
        self.shared.pages()
    }

    /// Pages not free: the kernel's, the contexts', retired ones, and those whose revocation is
    /// incomplete.
    pub fn in_use(&self) -> u32 {
        self.shared.in_use()
    }
}

/// A user context's UAR page, held for as long as the context lives. Dropping it (after the
/// device forgot the context: DESTROY_UC) revokes every mapping and returns the page once no
/// doorbell write through a mapping is in flight.
pub struct ContextUar {
    lease: Arc<Lease>,
    retired: bool,
}

impl ContextUar {
    /// The page (its pfn goes into CREATE_UC).
    pub fn page(&self) -> UarPage {
        self.lease.page
    }

    /// The owner tag of the context's objects: unique to this allocation, across tables.
    pub fn owner(&self) -> Owner {
        Owner::Context(ContextId::new(self.lease.id))
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
        if !self.lease.is_live() {
            return Err(UarError::Revoked(self.page().index()));
        }
        Ok(Doorbells::user(self.lease.clone(), self.owner()))
    }

    /// Revokes every mapping now: no doorbell write through one starts after this returns (one
    /// already in flight finishes; the page is not reused until it has). The context keeps its
    /// page until dropped.
    pub fn revoke(&self) {
        self.lease.revoke();
    }

    /// Revokes every mapping and keeps the page out of circulation for good: for a page the
    /// device may still bind to this context (its DESTROY_UC failed, or its CREATE_UC failed
    /// after binding it), which a new context could neither register nor safely share.
    pub fn retire(&mut self) {
        self.lease.revoke();
        self.retired = true;
    }
}

impl Drop for ContextUar {
    fn drop(&mut self) {
        if !self.retired {
            self.lease.release();
        }
    }
}
