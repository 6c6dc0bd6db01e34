//! Guest RAM mapped from QEMU's `memory-backend-file`, touched only as `AtomicU32` words (the
//! backend's only unsafe code).

use osdep::words;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

pub(super) struct SharedRam {
    pub(super) ptr: NonNull<AtomicU32>,
    pub(super) len: usize,
}

// SAFETY: SharedRam owns its mapping (nothing else in this process aliases it) and every access
// goes through `AtomicU32`, which is safe to share and send between threads.
unsafe impl Send for SharedRam {}
// SAFETY: as above: `&SharedRam` only permits atomic word accesses.
unsafe impl Sync for SharedRam {}

impl SharedRam {
    pub(super) fn open(path: &std::path::Path, len: u64) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let flen = file.metadata()?.len();
        if flen < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is {flen} bytes, guest RAM is {len}", path.display()),
            ));
        }
        let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "RAM too large"))?;
        if len == 0 || len % 4 != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad RAM size"));
        }
        // SAFETY: a new shared mapping of an open file with no address hint: it creates a mapping
        // and cannot affect any existing object. The file stays mapped after `file` is closed.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(base.cast::<AtomicU32>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { ptr, len })
    }

    pub(super) fn words(&self) -> &[AtomicU32] {
        // Invariants: `ptr` is page-aligned and [ptr, ptr + len) is a live read/write mapping
        // owned by `self`; `len` is a multiple of 4; this process touches it only as atomics.
        // SAFETY: AtomicU32 has u32's size and alignment, any bits are valid, and the borrow
        // cannot outlive `self` (QEMU writes from another process, outside the abstract machine).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len / 4) }
    }

    pub(super) fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        usize::try_from(off).is_ok_and(|off| words::copy_out(self.words(), off, buf))
    }

    pub(super) fn write(&self, off: u64, data: &[u8]) -> bool {
        usize::try_from(off).is_ok_and(|off| words::copy_in(self.words(), off, data))
    }

    pub(super) fn word(&self, off: u64) -> Option<&AtomicU32> {
        words::word(self.words(), usize::try_from(off).ok()?)
    }
}

impl Drop for SharedRam {
    fn drop(&mut self) {
        // SAFETY: [ptr, ptr + len) is the mapping `open` created and this value owns; borrows of
        // it (`words`) cannot outlive `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
