//! DMA memory, pure logic: the IOVA allocator over the IOMMU's ranges and the table from IOVA to
//! mapping.

use crate::platform::PlatformError;
use std::collections::BTreeMap;
use std::ops::Range;

/// First IOVA tried when the IOMMU has room above it (the model's device addresses start here too).
pub(super) const IOVA_FLOOR: u64 = 1 << 32;
/// How much IOVA space above [`IOVA_FLOOR`] makes it worth starting there.
const IOVA_FLOOR_MIN_SPACE: u64 = 1 << 30;

/// Rounds `x` up to `align` (a power of two); `None` on overflow.
pub(super) fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// Where the allocator starts: [`IOVA_FLOOR`] if the IOMMU has a useful amount of space above it,
/// otherwise the bottom of the lowest valid range.
pub(super) fn choose_floor(ranges: &[Range<u64>]) -> u64 {
    let room_above =
        ranges.iter().any(|r| r.end > IOVA_FLOOR && r.end - r.start.max(IOVA_FLOOR) >= IOVA_FLOOR_MIN_SPACE);
    if room_above {
        IOVA_FLOOR
    } else {
        0
    }
}

/// A bump allocator of device addresses inside the IOMMU's valid ranges. Allocations are whole
/// alignment units, aligned, never reused, with one unmapped unit after each (a guard).
#[derive(Debug)]
pub(super) struct IovaAllocator {
    /// Sorted, non-overlapping, end-exclusive.
    pub(super) ranges: Vec<Range<u64>>,
    /// Power of two, at least one page.
    pub(super) align: u64,
    /// Lowest address the next allocation may use.
    pub(super) next: u64,
}

impl IovaAllocator {
    /// An allocator over `ranges` (any order), in units of `align` (a power of two, raised to at
    /// least 4 KiB), handing out nothing below `floor`.
    pub(super) fn new(ranges: &[Range<u64>], align: u64, floor: u64) -> Self {
        let align = align.max(4096).next_power_of_two();
        let mut ranges: Vec<Range<u64>> = ranges.iter().filter(|r| r.start < r.end).cloned().collect();
        ranges.sort_by_key(|r| r.start);
        Self { ranges, align, next: floor }
    }

    /// Bytes an allocation of `len` bytes occupies (at least one unit); `None` on overflow.
    pub(super) fn size_for(&self, len: u64) -> Option<u64> {
        align_up(len.max(1), self.align)
    }

    /// The device address of `size` bytes (a multiple of the unit), or `None` if no valid range
    /// has room above the addresses already handed out.
    pub(super) fn alloc(&mut self, size: u64) -> Option<u64> {
        if size == 0 || size & (self.align - 1) != 0 {
            return None;
        }
        for r in &self.ranges {
            if r.end <= self.next {
                continue;
            }
            let start = align_up(r.start.max(self.next), self.align)?;
            let end = start.checked_add(size)?;
            if end <= r.end {
                // The guard unit; saturating so that an allocation at the very top ends the space.
                self.next = end.saturating_add(self.align);
                return Some(start);
            }
        }
        None
    }
}

/// Something with a length in bytes, placed at an IOVA by a [`DmaTable`].
pub(super) trait Extent {
    fn extent(&self) -> u64;
}

/// Map from IOVA to the mapping that starts there; resolves accesses with bounds checks.
pub(super) struct DmaTable<M> {
    pub(super) map: BTreeMap<u64, M>,
}

impl<M: Extent> DmaTable<M> {
    pub(super) fn new() -> Self {
        Self { map: BTreeMap::new() }
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Adds `m` at `iova`; gives it back if it would overlap a mapping or wrap the address space.
    pub(super) fn insert(&mut self, iova: u64, m: M) -> Result<(), M> {
        let Some(end) = iova.checked_add(m.extent()) else {
            return Err(m);
        };
        let overlaps_prev =
            self.map.range(..=iova).next_back().is_some_and(|(s, p)| s.saturating_add(p.extent()) > iova);
        let overlaps_next = self.map.range(iova..).next().is_some_and(|(s, _)| *s < end);
        if overlaps_prev || overlaps_next || m.extent() == 0 {
            return Err(m);
        }
        self.map.insert(iova, m);
        Ok(())
    }

    /// Removes the mapping that starts exactly at `iova`.
    pub(super) fn remove(&mut self, iova: u64) -> Option<M> {
        self.map.remove(&iova)
    }

    /// Removes every mapping.
    pub(super) fn take_all(&mut self) -> BTreeMap<u64, M> {
        std::mem::take(&mut self.map)
    }

    /// The mapping holding all of `[iova, iova + len)` and the offset of `iova` in it.
    pub(super) fn resolve(&self, iova: u64, len: u64) -> Result<(&M, usize), PlatformError> {
        let bad = || PlatformError::BadDma { iova, len };
        let (start, m) = self.map.range(..=iova).next_back().ok_or_else(bad)?;
        let off = iova - start;
        let end = off.checked_add(len).ok_or_else(bad)?;
        if end > m.extent() {
            return Err(bad());
        }
        let off = usize::try_from(off).map_err(|_| bad())?;
        Ok((m, off))
    }

    /// Like [`DmaTable::resolve`] for a 4-byte word, which must be 4-byte aligned.
    pub(super) fn resolve_word(&self, iova: u64) -> Result<(&M, usize), PlatformError> {
        if iova & 3 != 0 {
            return Err(PlatformError::Misaligned(iova));
        }
        self.resolve(iova, 4)
    }
}

#[cfg(test)]
// Slices of one IOVA range are what the IOMMU reports; they are not meant as `Vec`s of a range.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::platform::vfio::tests::{bad, PAGE};

    #[test]
    fn allocator_rounds_aligns_and_leaves_guards() {
        let mut a = IovaAllocator::new(&[0x1000..0x10_0000], 4096, 0);
        assert_eq!(a.size_for(0), Some(PAGE));
        assert_eq!(a.size_for(1), Some(PAGE));
        assert_eq!(a.size_for(4097), Some(2 * PAGE));
        assert_eq!(a.size_for(u64::MAX), None);
        let x = a.alloc(PAGE).unwrap();
        let y = a.alloc(2 * PAGE).unwrap();
        assert_eq!(x, 0x1000);
        assert_eq!(y, x + 2 * PAGE, "one guard page between allocations");
        assert_eq!(a.alloc(0), None);
        assert_eq!(a.alloc(100), None, "sizes are whole units");
    }

    #[test]
    fn allocator_uses_larger_units_and_respects_floor() {
        let mut a = IovaAllocator::new(&[0..1 << 40], 1 << 16, 1 << 32);
        assert_eq!(a.size_for(1), Some(1 << 16));
        let x = a.alloc(1 << 16).unwrap();
        assert_eq!(x, 1 << 32);
        assert_eq!(a.alloc(1 << 16).unwrap(), x + (2 << 16));
        // An alignment below a page is raised to a page.
        assert_eq!(IovaAllocator::new(&[0..1 << 20], 512, 0).align, 4096);
    }

    #[test]
    fn allocator_skips_ranges_too_small_and_runs_out() {
        // Unsorted input; a hole (the MSI window) between the ranges.
        let ranges = [0xfef0_0000..0xff00_0000, 0x1000..0x4000];
        let mut a = IovaAllocator::new(&ranges, 4096, 0);
        assert_eq!(a.alloc(2 * PAGE), Some(0x1000));
        // 0x3000..0x4000 is left but the guard takes it: next comes from the second range.
        assert_eq!(a.alloc(PAGE), Some(0xfef0_0000));
        // Too big for what is left: fails without moving the cursor.
        assert_eq!(a.alloc(1 << 20), None);
        assert_eq!(a.alloc(PAGE), Some(0xfef0_2000));
    }

    #[test]
    fn allocator_survives_the_top_of_the_address_space() {
        let top = u64::MAX - (u64::MAX % PAGE);
        let mut a = IovaAllocator::new(&[top - 4 * PAGE..u64::MAX], 4096, 0);
        assert_eq!(a.alloc(2 * PAGE), Some(top - 4 * PAGE));
        assert_eq!(a.alloc(PAGE), Some(top - PAGE));
        // The cursor saturated; nothing more, and no overflow panic.
        assert_eq!(a.alloc(PAGE), None);
        assert_eq!(a.alloc(u64::MAX - (u64::MAX % PAGE)), None);
        let mut b = IovaAllocator::new(&[0..u64::MAX], 4096, u64::MAX - 10);
        assert_eq!(b.alloc(PAGE), None);
    }

    #[test]
    fn floor_is_4g_only_with_room_above() {
        assert_eq!(choose_floor(&[0x1000..1 << 39]), IOVA_FLOOR);
        assert_eq!(choose_floor(&[0x1000..0xfee0_0000]), 0);
        assert_eq!(choose_floor(&[0x1000..IOVA_FLOOR + 4096]), 0);
        assert_eq!(choose_floor(&[]), 0);
    }

    // --- IOVA table ------------------------------------------------------------------------

    struct Fake(u64);
    impl Extent for Fake {
        fn extent(&self) -> u64 {
            self.0
        }
    }

    fn table() -> DmaTable<Fake> {
        let mut t = DmaTable::new();
        assert!(t.insert(0x10_000, Fake(0x2000)).is_ok());
        assert!(t.insert(0x12_000, Fake(0x1000)).is_ok()); // adjacent: allowed, distinct
        assert!(t.insert(0x20_000, Fake(0x1000)).is_ok());
        t
    }

    #[test]
    fn table_resolves_inside_mappings() {
        let t = table();
        assert_eq!(t.resolve(0x10_000, 0x2000).map(|(_, o)| o), Ok(0));
        assert_eq!(t.resolve(0x11_ff0, 0x10).map(|(_, o)| o), Ok(0x1ff0));
        assert_eq!(t.resolve(0x12_000, 4).map(|(m, o)| (m.0, o)), Ok((0x1000, 0)));
        // Zero-length accesses inside or at the end of a mapping are fine.
        assert!(t.resolve(0x12_000, 0).is_ok());
        assert!(t.resolve(0x21_000, 0).is_ok());
    }

    #[test]
    fn table_rejects_bad_iovas() {
        let t = table();
        assert_eq!(t.resolve(0, 1).err(), Some(bad(0, 1)));
        assert_eq!(t.resolve(0xf_fff, 1).err(), Some(bad(0xf_fff, 1)));
        assert_eq!(t.resolve(0x13_000, 1).err(), Some(bad(0x13_000, 1)));
        assert_eq!(t.resolve(0x21_000, 1).err(), Some(bad(0x21_000, 1)));
        assert_eq!(t.resolve(u64::MAX, 1).err(), Some(bad(u64::MAX, 1)));
        assert_eq!(DmaTable::<Fake>::new().resolve(0x10_000, 1).err(), Some(bad(0x10_000, 1)));
    }

    #[test]
    fn table_rejects_ranges_crossing_mappings() {
        let t = table();
        // From the first mapping into the adjacent second one: not one mapping.
        assert_eq!(t.resolve(0x11_ffc, 8).err(), Some(bad(0x11_ffc, 8)));
        // Past the end into the gap.
        assert_eq!(t.resolve(0x20_ff0, 0x20).err(), Some(bad(0x20_ff0, 0x20)));
        // Starting in a gap and reaching into a mapping.
        assert_eq!(t.resolve(0x1f_ff0, 0x20).err(), Some(bad(0x1f_ff0, 0x20)));
    }

    #[test]
    fn table_rejects_overflowing_ranges() {
        let mut t = table();
        assert_eq!(t.resolve(0x10_000, u64::MAX).err(), Some(bad(0x10_000, u64::MAX)));
        assert_eq!(t.resolve(0x11_000, u64::MAX - 0x10).err(), Some(bad(0x11_000, u64::MAX - 0x10)));
        // A mapping at the top of the address space: an access past it must not wrap.
        let top = u64::MAX - 0x1fff;
        assert!(t.insert(top, Fake(0x1000)).is_ok());
        assert!(t.resolve(top, 0x1000).is_ok());
        assert_eq!(t.resolve(top + 0xffc, 8).err(), Some(bad(top + 0xffc, 8)));
        assert_eq!(t.resolve(u64::MAX - 3, 8).err(), Some(bad(u64::MAX - 3, 8)));
        assert_eq!(t.resolve(u64::MAX, u64::MAX).err(), Some(bad(u64::MAX, u64::MAX)));
        // A mapping whose (exclusive) end does not fit in 64 bits cannot be inserted.
        assert!(t.insert(u64::MAX - 0xfff, Fake(0x1000)).is_err());
        assert!(t.insert(u64::MAX - 0xfff, Fake(0x2000)).is_err());
    }

    #[test]
    fn table_rejects_misaligned_words() {
        let t = table();
        assert_eq!(t.resolve_word(0x10_002).err(), Some(PlatformError::Misaligned(0x10_002)));
        assert_eq!(t.resolve_word(0x10_001).err(), Some(PlatformError::Misaligned(0x10_001)));
        // Misalignment is reported even where nothing is mapped.
        assert_eq!(t.resolve_word(0x3).err(), Some(PlatformError::Misaligned(0x3)));
        assert_eq!(t.resolve_word(0x11_ffc).map(|(_, o)| o), Ok(0x1ffc));
        assert_eq!(t.resolve_word(0x12_ffc).map(|(_, o)| o), Ok(0xffc));
        assert_eq!(t.resolve_word(0x13_000).err(), Some(bad(0x13_000, 4)));
    }

    #[test]
    fn table_refuses_overlaps_and_removes_by_start() {
        let mut t = table();
        assert!(t.insert(0x11_000, Fake(0x1000)).is_err()); // inside the first
        assert!(t.insert(0xf_000, Fake(0x2000)).is_err()); // runs into the first
        assert!(t.insert(0x1f_000, Fake(0x1000)).is_ok()); // ends exactly at the third
        assert!(t.insert(0x30_000, Fake(0)).is_err());
        assert!(t.remove(0x10_004).is_none());
        assert!(t.remove(0x10_000).is_some());
        assert_eq!(t.resolve(0x10_000, 1).err(), Some(bad(0x10_000, 1)));
        assert_eq!(t.len(), 3);
    }
}
