//! Page directories: a two-level lookup (directory page -> table page -> data page) that describes
//! every ring and MR to the device (`PVRDMA_PDIR_SHIFT` and friends in `pvrdma_dev_api.h`).
//! Each directory and table entry is a little-endian u64 device address.

/// Entries per directory or table page (4 KiB / 8).
pub const PDIR_ENTRIES: usize = 512;
/// Largest number of data pages one directory can describe (`PVRDMA_PAGE_DIR_MAX_PAGES`).
pub const PAGE_DIR_MAX_PAGES: usize = 512 * 512;

/// Index into the directory page of the table that holds data page `i`.
pub const fn dir_index(i: usize) -> usize {
    i >> 9
}

/// Index into its table page of data page `i`.
pub const fn table_index(i: usize) -> usize {
    i & 0x1ff
}
