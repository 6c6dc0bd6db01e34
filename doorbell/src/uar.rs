//! The UAR page table: page 0 for the kernel, one page per user context.

use parking_lot::Mutex;
use pvrdma_abi::uar::UAR_PAGE_SIZE;
use thiserror::Error;

/// UAR allocation failures.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UarError {
    /// Every page of BAR2 is in use.
    #[error("no free UAR page (all {0} in use)")]
    Exhausted(u32),
    /// The page was not allocated from this table, or was already released.
    #[error("UAR page {0} is not allocated")]
    NotAllocated(u32),
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

/// The UAR pages of one device: page 0 is reserved for the kernel at creation.
pub struct UarTable {
    base_pfn: u64,
    in_use: Mutex<Vec<bool>>,
}

impl UarTable {
    /// A table of `num_pages` pages (at least 1) for BAR2 starting at page frame `base_pfn`.
    pub fn new(base_pfn: u64, num_pages: u32) -> Self {
        let mut in_use = vec![false; num_pages.max(1) as usize];
        in_use[0] = true;
        Self { base_pfn, in_use: Mutex::new(in_use) }
    }

    /// The kernel's page (index 0), always allocated.
    pub fn kernel_page(&self) -> UarPage {
        self.page(0)
    }

    /// Allocates a page for a user context (lowest free index first).
    pub fn alloc(&self) -> Result<UarPage, UarError> {
        let mut in_use = self.in_use.lock();
        let n = in_use.len() as u32;
        let index = in_use.iter().position(|u| !u).ok_or(UarError::Exhausted(n))?;
        in_use[index] = true;
        Ok(self.page(index as u32))
    }

    /// Releases a user context's page. The kernel's page cannot be released.
    pub fn release(&self, page: UarPage) -> Result<(), UarError> {
        let mut in_use = self.in_use.lock();
        match in_use.get_mut(page.index as usize) {
            Some(slot) if *slot && page.index != 0 && page == self.page(page.index) => {
                *slot = false;
                Ok(())
            }
            _ => Err(UarError::NotAllocated(page.index)),
        }
    }

    /// Pages in use, the kernel's included.
    pub fn in_use(&self) -> usize {
        self.in_use.lock().iter().filter(|u| **u).count()
    }

    fn page(&self, index: u32) -> UarPage {
        UarPage { index, pfn: self.base_pfn + u64::from(index) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_page_is_reserved_and_user_pages_recycle() {
        let t = UarTable::new(0x1000, 3);
        assert_eq!(t.kernel_page().pfn(), 0x1000);
        let a = t.alloc().unwrap();
        let b = t.alloc().unwrap();
        assert_eq!((a.index(), b.index()), (1, 2));
        assert_eq!(t.alloc(), Err(UarError::Exhausted(3)));
        t.release(a).unwrap();
        assert_eq!(t.release(a), Err(UarError::NotAllocated(1)));
        assert_eq!(t.release(t.kernel_page()), Err(UarError::NotAllocated(0)));
        assert_eq!(t.alloc().unwrap().bar_offset(), 4096);
    }
}
