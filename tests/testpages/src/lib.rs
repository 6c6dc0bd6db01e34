//! Pages of a test's own: fresh anonymous memory it maps, then protects or unmaps under the code
//! it tests, as a program does to memory it registered (issue 21 §2). The pages are placed far
//! below where the kernel puts new mappings (it fills the highest hole that fits, under the top
//! of the address space), so a page a test unmaps stays a hole: no thread's stack or other
//! test's mapping refills it meanwhile. Addresses are plain numbers; nothing here makes a Rust
//! reference to the pages, which the code under test reads and writes behind the compiler.
#![deny(unsafe_code)]

// The mmap, mprotect and munmap calls.
#[allow(unsafe_code)]
mod mapping;

pub use mapping::{fresh, protect, unmap};

/// Bytes of a page.
pub const PAGE: usize = 4096;

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
