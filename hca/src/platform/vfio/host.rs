//! DMA memory, host side: anonymous memory the device reaches through the IOMMU, touched only as
//! `AtomicU32` words (the only unsafe code of the backend for memory).

use super::iova::Extent;
use osdep::words;
use std::io::{self};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant; _SC_PAGESIZE is a valid name.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096)
}

/// Anonymous, zeroed host memory, aligned to the IOMMU's unit, owned by this value, accessed only
/// as `AtomicU32` words (never as `&[u8]`: the device writes it behind the compiler's back).
pub(super) struct HostMemory {
    pub(super) ptr: NonNull<AtomicU32>,
    pub(super) len: usize,
    /// Never return the memory to the kernel (the IOMMU may still map it).
    pub(super) leak: bool,
    /// Whether this process may write it (false for a consumer's pages registered for reading
    /// only, which may be read-only pages: a CPU store there would fault).
    pub(super) writable: bool,
}

// SAFETY: HostMemory owns its mapping exclusively (no other value aliases it), and every access to
// the memory goes through `AtomicU32` words, which are safe to share and send between threads.
unsafe impl Send for HostMemory {}
// SAFETY: as above: `&HostMemory` only permits atomic word accesses.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// `len` bytes (a non-zero multiple of `align`) aligned to `align` (a power of two; raised to
    /// the page size).
    pub(super) fn new(len: usize, align: usize) -> io::Result<Self> {
        let page = page_size();
        let align = align.max(page);
        if len == 0 || !align.is_power_of_two() || len & (align - 1) != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad DMA allocation size"));
        }
        // mmap returns page-aligned memory; reserve enough to find an `align`-aligned start.
        let slack = align - page;
        let total = len
            .checked_add(slack)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "DMA allocation too large"))?;
        // SAFETY: a new private anonymous mapping with no address hint: it creates memory and
        // cannot affect any existing object.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let head = (align - (base as usize) % align) % align;
        let tail = slack - head;
        let start = base.cast::<u8>().wrapping_add(head);
        if head > 0 {
            // SAFETY: [base, base + head) is the unused front of the mapping created above;
            // nothing refers to it.
            unsafe { libc::munmap(base, head) };
        }
        if tail > 0 {
            // SAFETY: [start + len, start + len + tail) is the unused end of the same mapping;
            // nothing refers to it.
            unsafe { libc::munmap(start.wrapping_add(len).cast(), tail) };
        }
        // Best effort: a fork must not make the device's pages copy-on-write in this process.
        // SAFETY: madvise on [start, start + len), memory this function mapped; DONTFORK changes
        // no contents.
        unsafe { libc::madvise(start.cast(), len, libc::MADV_DONTFORK) };
        let ptr = NonNull::new(start.cast::<AtomicU32>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { ptr, len, leak: false, writable: true })
    }

    pub(super) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr().cast_const().cast()
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn words(&self) -> &[AtomicU32] {
        // Invariants: `ptr` is page-aligned and [ptr, ptr + len) is a live read/write mapping
        // owned by `self`; `len` is a page multiple; this process touches it only as atomics.
        // SAFETY: AtomicU32 has u32's size and alignment, any bits are valid, and the borrow
        // cannot outlive `self` (device DMA is outside the abstract machine, like another process).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len / 4) }
    }

    /// Copies bytes at `off` into `buf` in memory order; `false` if out of bounds.
    pub(super) fn read(&self, off: usize, buf: &mut [u8]) -> bool {
        words::copy_out(self.words(), off, buf)
    }

    /// Copies `data` to `off` in memory order; `false` if out of bounds or not writable.
    pub(super) fn write(&self, off: usize, data: &[u8]) -> bool {
        self.writable && words::copy_in(self.words(), off, data)
    }

    /// Loads the little-endian word at `off` (4-byte aligned) with acquire ordering.
    pub(super) fn load_u32(&self, off: usize) -> Option<u32> {
        words::word(self.words(), off).map(|w| u32::from_le(w.load(Ordering::Acquire)))
    }

    /// Stores the little-endian word at `off` (4-byte aligned) with release ordering; `false`
    /// if out of bounds or not writable.
    pub(super) fn store_u32(&self, off: usize, value: u32) -> bool {
        let w = words::word(self.words(), off).filter(|_| self.writable);
        w.inspect(|w| w.store(value.to_le(), Ordering::Release)).is_some()
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        if self.leak {
            return;
        }
        // SAFETY: [ptr, ptr + len) is the mapping `new` created and this value owns; borrows of
        // it (`words`) cannot outlive `self`, and the IOMMU no longer maps it (DmaMapping unmaps
        // first, or sets `leak`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Extent for HostMemory {
    fn extent(&self) -> u64 {
        self.len as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_is_aligned_zeroed_and_copies_in_memory_order() {
        let page = page_size();
        let m = HostMemory::new(2 * page, page).unwrap();
        assert_eq!(m.as_ptr() as usize % page, 0);
        let mut z = vec![0xffu8; 2 * page];
        assert!(m.read(0, &mut z));
        assert!(z.iter().all(|&b| b == 0));
        // Unaligned head, whole words, unaligned tail.
        let data: Vec<u8> = (0..23u8).collect();
        assert!(m.write(page - 5, &data));
        let mut back = [0u8; 23];
        assert!(m.read(page - 5, &mut back));
        assert_eq!(&back[..], &data[..]);
        // Neighbouring bytes of the partial words are untouched.
        let mut edge = [0xaau8; 2];
        assert!(m.read(page - 6, &mut edge[..1]));
        assert!(m.read(page + 18, &mut edge[1..]));
        assert_eq!(edge, [0, 0]);
        // Words are little-endian in memory.
        assert!(m.store_u32(8, 0x0403_0201));
        let mut b = [0u8; 4];
        assert!(m.read(8, &mut b));
        assert_eq!(b, [1, 2, 3, 4]);
        assert_eq!(m.load_u32(8), Some(0x0403_0201));
        // Bounds and alignment.
        assert!(!m.read(2 * page - 1, &mut [0u8; 2]));
        assert!(!m.write(usize::MAX, &[0u8; 2]));
        assert_eq!(m.load_u32(2 * page), None);
        assert_eq!(m.load_u32(6), None);
        assert!(!m.store_u32(2, 0));
        assert!(HostMemory::new(0, page).is_err());
        assert!(HostMemory::new(page + 4, page).is_err());
    }

    #[test]
    fn host_memory_honours_a_large_alignment() {
        let align = page_size() * 16;
        for _ in 0..4 {
            let m = HostMemory::new(align, align).unwrap();
            assert_eq!(m.as_ptr() as usize % align, 0);
            assert!(m.store_u32(align - 4, 7));
            assert_eq!(m.load_u32(align - 4), Some(7));
        }
    }
}
