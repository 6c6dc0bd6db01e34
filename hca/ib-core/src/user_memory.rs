//! The consumer's memory an MR registers: [`UserMemory`], a range of the program's own (made only
//! with the promise of its `unsafe` constructor), and [`UserBuffer`], a buffer for
//! [`crate::Pd::reg_buffer`]: page-aligned, zeroed, kept alive by every MR registered over it,
//! and reached only by copies through raw pointers (the device writes it behind the compiler's
//! back, as an `ibv_reg_mr` buffer in C). The allocation's unsafe code is here.

use crate::error::{Error, Result};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

/// Memory of the consumer's own to register (`ibv_reg_mr(pd, addr, length, access)`): the
/// address range is the MR's address space. Made only with the promise of [`UserMemory::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserMemory {
    addr: usize,
    len: usize,
}

impl UserMemory {
    /// Describes `len` bytes at `addr`.
    ///
    /// # Safety
    /// The range must be memory of this process that the consumer registers for the device and
    /// does not free and reuse for something else until the MR registered over it is
    /// deregistered (the device reads and writes it meanwhile, as it does an `ibv_reg_mr`
    /// buffer). The consumer accesses it knowing the device may write it concurrently (after a
    /// completion, the data is there). Nothing else is trusted: registration checks the pages
    /// are mapped with the access the MR needs, and the model reaches them only through copies
    /// the kernel makes, which fail instead of faulting on pages the program unmapped or
    /// protected after registration (the work request then completes in error,
    /// `docs/memory.md`); it writes only the bytes an operation names.
    pub unsafe fn new(addr: *mut u8, len: usize) -> Self {
        Self { addr: addr as usize, len }
    }

    /// The first byte's address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

const PAGE: usize = 4096;

/// A page-aligned buffer to register as an MR. Cheap to clone (clones share the memory).
#[derive(Clone)]
pub struct UserBuffer(Arc<Raw>);

struct Raw {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the memory is owned by `Raw` alone and only reached through `read`/`write`, which
// copy through raw pointers (no reference to the bytes is ever created), so sharing and sending
// the owner between threads is sound.
unsafe impl Send for Raw {}
// SAFETY: as above.
unsafe impl Sync for Raw {}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with `layout`, and this is its only owner; MRs
        // over it hold a clone of the `Arc`, so none is registered any more.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl UserBuffer {
    /// A zeroed buffer of `len` bytes (at least 1), page-aligned.
    ///
    /// Errors: [`Error::InvalidArgument`] for a size that cannot be laid out;
    /// [`Error::NoResources`] when out of memory.
    pub fn new(len: usize) -> Result<Self> {
        let layout = Layout::from_size_align(len.max(1), PAGE).map_err(|_| Error::InvalidArgument("buffer size"))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Error::NoResources("buffer allocation"))?;
        Ok(Self(Arc::new(Raw { ptr, layout })))
    }

    /// The first byte's address (what a peer's RDMA names, plus an offset).
    pub fn addr(&self) -> u64 {
        self.0.ptr.as_ptr() as u64
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.0.layout.size()
    }

    /// Whether the buffer is empty (never: it has at least one byte).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    ///
    /// Errors: [`Error::InvalidArgument`] outside the buffer.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len())?;
        // SAFETY: in bounds (checked); `buf` is a distinct Rust buffer; the source is read only
        // through this raw pointer.
        unsafe { std::ptr::copy_nonoverlapping(self.0.ptr.as_ptr().add(offset), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` to `offset`.
    ///
    /// Errors: [`Error::InvalidArgument`] outside the buffer.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        // SAFETY: in bounds (checked); `data` is a distinct Rust buffer; the destination is
        // written only through this raw pointer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.0.ptr.as_ptr().add(offset), data.len()) };
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::InvalidArgument("access outside the buffer")),
        }
    }

    /// The whole buffer as memory to register; the caller keeps `self` alive with the MR.
    pub(crate) fn memory(&self) -> UserMemory {
        // SAFETY: the MR registered over it holds a clone of this buffer, so the memory stays
        // allocated until the MR is gone.
        unsafe { UserMemory::new(self.0.ptr.as_ptr(), self.len()) }
    }
}

impl std::fmt::Debug for UserBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserBuffer({:#x}, {} bytes)", self.addr(), self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_bounded() {
        let b = UserBuffer::new(10_000).unwrap();
        assert_eq!(b.addr() % 4096, 0);
        let mut got = [1u8; 4];
        b.read(9_996, &mut got).unwrap();
        assert_eq!(got, [0; 4]);
        b.write(9_998, b"ok").unwrap();
        b.read(9_998, &mut got[..2]).unwrap();
        assert_eq!(&got[..2], b"ok");
        assert!(b.write(9_999, b"no").is_err());
        assert!(b.read(usize::MAX, &mut got).is_err());
    }
}
