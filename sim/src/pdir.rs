//! Page directories as the device reads them (`abi::pdir`): a directory page of little-endian u64
//! table addresses, each table page a list of little-endian u64 data-page addresses; data page
//! `i` is `table[dir[i >> 9]][i & 0x1ff]`.
//!
//! Every address is resolved through [`GuestMemory`] with bounds checks, once, when the object is
//! created (as QEMU maps them at creation). Counts from the driver are never trusted: callers ask
//! only for the pages their object needs, and never more than [`PAGE_DIR_MAX_PAGES`].

use crate::errno::{CmdResult, Errno};
use crate::mem::GuestMemory;
use pvrdma_abi::pdir::{dir_index, table_index, PAGE_DIR_MAX_PAGES, PDIR_ENTRIES};
use pvrdma_abi::PAGE_SIZE;

const PAGE: u64 = PAGE_SIZE as u64;

/// Resolves data pages `first .. first + count` of the page directory at device address `dir`.
///
/// Errors: `EINVAL` if the range passes [`PAGE_DIR_MAX_PAGES`], an address is not page-aligned,
/// or the directory, a table, or a data page lies outside guest memory (QEMU 7.2 answers EINVAL
/// when it cannot map a page; `tests/tests/qemu_real.rs` `qemu_bad_dma_address` saw it).
pub fn resolve(mem: &GuestMemory, dir: u64, first: usize, count: usize) -> CmdResult<Vec<u64>> {
    let end = first.checked_add(count).ok_or(Errno::EINVAL)?;
    if end > PAGE_DIR_MAX_PAGES {
        return Err(Errno::EINVAL);
    }
    check_page(mem, dir)?;
    let mut pages = Vec::with_capacity(count);
    let mut i = first;
    while i < end {
        let table = mem.read_u64(dir + 8 * dir_index(i) as u64)?;
        check_page(mem, table)?;
        // The run of pages that this table holds.
        let lo = table_index(i);
        let hi = (lo + (end - i)).min(PDIR_ENTRIES);
        let mut raw = vec![0u8; (hi - lo) * 8];
        mem.read(table + 8 * lo as u64, &mut raw)?;
        for entry in raw.chunks_exact(8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(entry);
            let page = u64::from_le_bytes(b);
            check_page(mem, page)?;
            pages.push(page);
        }
        i += hi - lo;
    }
    Ok(pages)
}

/// Checks that `addr` is a page-aligned device address of a whole page of guest memory; `EINVAL`
/// otherwise, both ways, as QEMU 7.2 answers (it fails to DMA-map the page).
pub fn check_page(mem: &GuestMemory, addr: u64) -> CmdResult<()> {
    if addr & (PAGE - 1) != 0 || !mem.contains(addr, PAGE) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Pages needed for `bytes` bytes (rounded up), or `None` on overflow.
pub fn pages_for(bytes: u64) -> Option<u64> {
    bytes.checked_add(PAGE - 1).map(|b| b / PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_across_tables_and_rejects_bad_entries() {
        let mem = GuestMemory::new(16 << 20);
        let dir = mem.alloc(4096).unwrap();
        let t0 = mem.alloc(4096).unwrap();
        let t1 = mem.alloc(4096).unwrap();
        let data = mem.alloc(4096 * 2).unwrap();
        mem.write(dir, &t0.to_le_bytes()).unwrap();
        mem.write(dir + 8, &t1.to_le_bytes()).unwrap();
        mem.write(t0 + 8 * 511, &data.to_le_bytes()).unwrap();
        mem.write(t1, &(data + 4096).to_le_bytes()).unwrap();
        assert_eq!(resolve(&mem, dir, 511, 2).unwrap(), vec![data, data + 4096]);
        // Entry 0 of table 0 is zero: outside guest memory, EINVAL as on QEMU 7.2.
        assert_eq!(resolve(&mem, dir, 0, 1), Err(Errno::EINVAL));
        mem.write(t0, &(data + 8).to_le_bytes()).unwrap();
        assert_eq!(resolve(&mem, dir, 0, 1), Err(Errno::EINVAL));
        assert_eq!(resolve(&mem, dir + 8, 0, 1), Err(Errno::EINVAL));
        assert_eq!(resolve(&mem, 0, 0, 1), Err(Errno::EINVAL));
        assert_eq!(resolve(&mem, dir, PAGE_DIR_MAX_PAGES, 1), Err(Errno::EINVAL));
        assert_eq!(resolve(&mem, dir, usize::MAX, 2), Err(Errno::EINVAL));
        assert_eq!(resolve(&mem, dir, 3, 0).unwrap(), Vec::<u64>::new());
    }
}
