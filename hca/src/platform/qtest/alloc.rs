//! DMA memory, pure logic: first-fit allocation of page-aligned guest-RAM ranges.

use super::PAGE;
use std::collections::BTreeMap;

#[derive(Debug)]
pub(super) struct DmaAlloc {
    /// Free ranges: start -> length.
    pub(super) free: BTreeMap<u64, u64>,
    /// Allocations: start -> length.
    pub(super) used: BTreeMap<u64, u64>,
}

impl DmaAlloc {
    pub(super) fn new(start: u64, end: u64) -> Self {
        let start = start.div_ceil(PAGE) * PAGE;
        let end = end / PAGE * PAGE;
        let mut free = BTreeMap::new();
        if end > start {
            free.insert(start, end - start);
        }
        Self { free, used: BTreeMap::new() }
    }

    pub(super) fn alloc(&mut self, len: u64) -> Option<(u64, u64)> {
        let size = len.max(1).checked_add(PAGE - 1)? / PAGE * PAGE;
        let (&start, &flen) = self.free.iter().find(|(_, l)| **l >= size)?;
        self.free.remove(&start);
        if flen > size {
            self.free.insert(start + size, flen - size);
        }
        self.used.insert(start, size);
        Some((start, size))
    }

    pub(super) fn free(&mut self, start: u64) -> bool {
        let Some(mut size) = self.used.remove(&start) else {
            return false;
        };
        let mut start = start;
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            if ps + pl == start {
                self.free.remove(&ps);
                start = ps;
                size += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + size)) {
            self.free.remove(&(start + size));
            size += nl;
        }
        self.free.insert(start, size);
        true
    }

    /// Whether `[iova, iova + len)` lies inside one allocation.
    pub(super) fn contains(&self, iova: u64, len: u64) -> bool {
        let Some(end) = iova.checked_add(len) else {
            return false;
        };
        self.used.range(..=iova).next_back().is_some_and(|(s, l)| end <= s + l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_first_fit_coalesces_and_bounds() {
        let mut a = DmaAlloc::new(0x1000, 0x6000);
        let (x, sx) = a.alloc(1).unwrap();
        let (y, _) = a.alloc(0x1001).unwrap();
        let (z, _) = a.alloc(0x1000).unwrap();
        assert_eq!((x, sx, y, z), (0x1000, 0x1000, 0x2000, 0x4000));
        assert!(a.alloc(0x2000).is_none());
        assert!(a.contains(0x2000, 0x2000));
        assert!(!a.contains(0x2000, 0x2001));
        assert!(!a.contains(0x5000, 4));
        assert!(a.free(y));
        assert!(!a.free(y));
        assert!(a.free(x));
        assert_eq!(a.alloc(0x3000).unwrap().0, 0x1000);
        assert!(!a.contains(u64::MAX - 1, 4));
    }
}
