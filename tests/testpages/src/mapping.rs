//! The test's own pages: mmap(2), mprotect(2), munmap(2).

use crate::PAGE;

/// The address of `n` fresh read/write anonymous pages.
///
/// # Panics
/// If no mapping can be made at all.
pub fn fresh(n: usize) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0x2000_0000_0000);
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    loop {
        let hint = NEXT.fetch_add(1 << 20, Ordering::Relaxed);
        // SAFETY: a new private anonymous mapping that replaces nothing (MAP_FIXED_NOREPLACE
        // fails where anything is mapped) affects no existing memory.
        let p =
            unsafe { libc::mmap(hint as *mut libc::c_void, n * PAGE, rw, flags | libc::MAP_FIXED_NOREPLACE, -1, 0) };
        if p != libc::MAP_FAILED {
            return p as usize;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            // No room that far down (a smaller address space): anywhere will do.
            // SAFETY: a new private anonymous mapping with no address hint.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), n * PAGE, rw, flags, -1, 0) };
            assert_ne!(p, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
            return p as usize;
        }
    }
}

/// Sets the protection of `n` pages at `addr` (`PROT_*`), pages of the test's own [`fresh`]
/// mapping.
pub fn protect(addr: usize, n: usize, prot: i32) {
    // SAFETY: the test's own pages, which nothing holds a Rust reference to.
    assert_eq!(unsafe { libc::mprotect(addr as *mut libc::c_void, n * PAGE, prot) }, 0);
}

/// Unmaps `n` pages at `addr`, as [`protect`].
pub fn unmap(addr: usize, n: usize) {
    // SAFETY: as `protect`.
    assert_eq!(unsafe { libc::munmap(addr as *mut libc::c_void, n * PAGE) }, 0);
}
