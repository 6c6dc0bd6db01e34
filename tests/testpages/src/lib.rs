//! Pages of a test's own: fresh anonymous memory it maps, then protects or unmaps under the code
//! it tests, as a program does to memory it registered (issue 21 §2). The pages are placed far
//! below where the kernel puts new mappings (it fills the highest hole that fits, under the top
//! of the address space), so a page a test unmaps stays a hole: no thread's stack or other
//! test's mapping refills it meanwhile. Addresses are plain numbers; nothing here makes a Rust
//! reference to the pages, which the code under test reads and writes behind the compiler.

/// Bytes of a page.
pub const PAGE: usize = 4096;

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

/// The same pages as raw pointers, for tests that hand them to verbs as a program does.
pub mod ptr {
    /// [`super::fresh`], as a pointer.
    pub fn fresh(n: usize) -> *mut u8 {
        super::fresh(n) as *mut u8
    }

    /// [`super::protect`] at a pointer.
    pub fn protect(p: *mut u8, n: usize, prot: i32) {
        super::protect(p as usize, n, prot)
    }

    /// [`super::unmap`] at a pointer.
    pub fn unmap(p: *mut u8, n: usize) {
        super::unmap(p as usize, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_fresh_and_a_hole_stays_one() {
        let a = fresh(3);
        let b = fresh(1);
        assert_ne!(a, b);
        assert_eq!(a % PAGE, 0);
        unmap(a + PAGE, 1);
        let c = fresh(1);
        assert_ne!(c, a + PAGE, "the hole is not handed out again");
        protect(a, 1, libc::PROT_READ);
        unmap(a, 1);
        unmap(a + 2 * PAGE, 1);
        unmap(b, 1);
        unmap(c, 1);
    }
}
