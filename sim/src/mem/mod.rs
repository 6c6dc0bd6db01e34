//! Guest memory: the one map from device address (IOVA) to memory that both sides reach.
//!
//! The driver allocates DMA memory here (through its platform backend) and the device resolves
//! every address the driver gives it here, bounds-checked: an address outside every region is an
//! error, never a panic. Nobody holds a Rust reference over memory the other side writes: data is
//! copied in and out, and ring indices and ownership words are 32-bit atomics with acquire/release
//! ordering (`docs/decisions.md`, decision 4).
//!
//! A region is either memory the map owns ([`GuestMemory::alloc`]: the rings, `alloc_mr`), reached
//! directly as `AtomicU32` words, or pages of the consumer's own memory mapped in
//! ([`GuestMemory::map_external`]: what an IOMMU does for a user-space MR, so an MR can be
//! registered over a buffer at its own address). The consumer's pages are never dereferenced:
//! the program may unmap them or change their protection at any time, which user space cannot
//! prevent, so every access to them is a copy the kernel makes and fails instead of faulting
//! (`mem/user.rs`, `docs/memory.md`): the device sees [`MemError::Fault`] and completes the work
//! request in error. Registration checks the pages as Linux's pinning does ([`MemError::NotMapped`]).
//! Every access holds the map's read lock, so unmapping (the write lock) waits for accesses in
//! flight, and none starts afterwards.
//!
//! # 8-byte atomics
//! The responder of an RDMA atomic (IBTA 9.4.5) reads, modifies and writes 8 bytes as one
//! operation ([`GuestMemory::atomic_u64`]). On memory the map owns whose 8 bytes are 8-aligned in
//! host memory (the allocator places its words 8-aligned: in practice every one), that is one
//! 64-bit atomic instruction on the memory itself; otherwise the device's atomics on that region
//! take one lock of the map. On the consumer's pages there is no fault-safe 64-bit atomic from
//! user space: the read, the operation and the write take one lock of the whole process
//! (`Access::atomic_u64` in `mem/user.rs`). Each way is atomic against every other device atomic on the
//! same bytes (other QPs, the loopback port, the RoCE receive thread, another device of the
//! process that mapped the same pages), which is what the device's `ATOMIC_HCA` promises
//! (`ibv_query_device(3)`: atomic between the HCA's own operations; Linux rxe reports the same),
//! not against the CPU's own atomics. Which way an address goes depends only on its region, so two
//! atomics on one address never take different ways. The atomics are the device's alone: the
//! driver never reads-modifies-writes guest memory (the original value comes back in the
//! requester's SGE, written by the device), so a platform without shared memory (qtest) needs
//! nothing of this; and over qtest the device is QEMU 7.2's, which carries an atomic WQE as a SEND
//! anyway.

// The tests map memory of their own (and fork) to check the fault-safe accesses.
#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod tests;
mod user;
mod view;
mod words;

use osdep::words::{read as read_words, write as write_words, zero as zero_words};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;
use user::{Access, Piece, Pieces};
use view::SpanKind;
pub use view::{Span, Window};
use words::as_atomic_u64;
use zerocopy::FromZeros;

/// Device addresses start here, so that 0 and small values are never valid.
pub const IOVA_BASE: u64 = 0x1_0000_0000;
const PAGE: u64 = 4096;

/// A failed guest-memory access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum MemError {
    /// `[iova, iova + len)` is not inside one allocated region.
    #[error("device address {iova:#x}+{len} is outside guest memory")]
    OutOfRange { iova: u64, len: u64 },
    /// An atomic access at an address that is not 4-byte aligned.
    #[error("device address {0:#x} is not 4-byte aligned")]
    Misaligned(u64),
    /// The allocation would exceed the memory limit.
    #[error("guest memory exhausted: {requested} bytes requested")]
    Exhausted { requested: u64 },
    /// `[iova, iova + len)` lies in the consumer's mapped pages, and a page of it is no longer
    /// mapped with the protection the access needs (the program unmapped it or changed its
    /// protection after registration), or the access writes pages mapped for reading only.
    #[error("device address {iova:#x}+{len}: the consumer's memory there is gone or protected")]
    Fault { iova: u64, len: u64 },
    /// Registration ([`GuestMemory::map_external`]): a page of `[addr, addr + len)` is not
    /// mapped in this process, or not writable when `writable`, or not readable otherwise
    /// (Linux's `ib_umem_get` fails the same pin with `EFAULT`).
    #[error("{addr:#x}+{len} is not mapped {} in this process", if *.writable { "writable" } else { "readable" })]
    NotMapped { addr: u64, len: u64, writable: bool },
    /// The process has no fault-safe way to reach its own memory (`mem/user.rs`'s detection found
    /// none), so the consumer's memory cannot be mapped.
    #[error("no fault-safe access to this process's memory: {0}")]
    Unsupported(&'static str),
}

struct Region {
    words: Words,
    len: u64,
}

/// The words of a region the map owns, and whether the region is still allocated (a [`Span`]
/// resolved to them faults once it is not, as an access through the map would). The region
/// counts against the map's limit until the last holder lets go of its words, not only until it
/// is freed: a device object still holding a freed ring page keeps it charged, so a driver cannot
/// make the model hold more than `limit` by freeing what the device resolved.
struct OwnedWords {
    live: AtomicBool,
    words: Box<[AtomicU32]>,
    /// The map's count of bytes allocated, charged for these words until they drop.
    used: Arc<AtomicU64>,
}

impl Drop for OwnedWords {
    fn drop(&mut self) {
        self.used.fetch_sub(self.words.len() as u64 * 4, Ordering::Relaxed);
    }
}

/// The memory of a region.
enum Words {
    Owned(Arc<OwnedWords>),
    /// The consumer's pages at `addr` (see [`GuestMemory::map_external`]), reached only through
    /// `access`; writes fail unless they were mapped `writable` (as through a read-only IOMMU
    /// mapping).
    External {
        addr: usize,
        writable: bool,
        access: &'static Access,
    },
}

/// An 8-byte atomic operation on guest memory (IBTA 9.4.5); values in host (little-endian) order,
/// as Linux rxe keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Atomic64 {
    /// Writes `swap` if the 8 bytes equal `compare`.
    CmpSwap {
        /// The value compared with.
        compare: u64,
        /// The value written on a match.
        swap: u64,
    },
    /// Adds the value (wrapping, modulo 2^64).
    FetchAdd(u64),
}

impl Atomic64 {
    /// The value the operation leaves in place of `old`.
    pub fn apply(self, old: u64) -> u64 {
        match self {
            Self::CmpSwap { compare, swap } if old == compare => swap,
            Self::CmpSwap { .. } => old,
            Self::FetchAdd(add) => old.wrapping_add(add),
        }
    }
}

/// The guest-memory map of one device.
pub struct GuestMemory {
    /// Serializes the atomics on 8 bytes that are not 8-aligned in host memory (see the module
    /// docs).
    atomic_fallback: parking_lot::Mutex<()>,
    regions: RwLock<BTreeMap<u64, Region>>,
    next: AtomicU64,
    used: Arc<AtomicU64>,
    limit: u64,
}

impl GuestMemory {
    /// An empty map that allocates at most `limit` bytes in all.
    pub fn new(limit: u64) -> Self {
        Self {
            atomic_fallback: parking_lot::Mutex::new(()),
            regions: RwLock::new(BTreeMap::new()),
            next: AtomicU64::new(IOVA_BASE),
            used: Arc::new(AtomicU64::new(0)),
            limit,
        }
    }

    /// Allocates `len` zeroed bytes (rounded up to whole pages) and returns their page-aligned
    /// device address. Addresses are never reused, so a stale address fails instead of aliasing.
    ///
    /// Errors: [`MemError::Exhausted`] past the limit, including a `len` whose page rounding
    /// does not fit in 64 bits (checked arithmetic throughout: never a wrapped size).
    pub fn alloc(&self, len: u64) -> Result<u64, MemError> {
        let exhausted = MemError::Exhausted { requested: len };
        let size = len.max(1).checked_next_multiple_of(PAGE).ok_or(exhausted)?;
        if size > self.limit {
            return Err(exhausted);
        }
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(size).filter(|&total| total <= self.limit)
            })
            .map_err(|_| exhausted)?;
        // One guard page between regions keeps an overrun from landing in a neighbour.
        let stride = size.checked_add(PAGE).ok_or(exhausted)?;
        let iova = self.next.fetch_add(stride, Ordering::Relaxed);
        // Zeroed by the allocator (calloc: fresh pages the kernel zeroes when first touched), not
        // word by word: a region's untouched pages cost neither time nor memory.
        let n = usize::try_from(size / 4).map_err(|_| exhausted)?;
        let words = <[AtomicU32]>::new_box_zeroed_with_elems(n).map_err(|_| exhausted)?;
        let used = self.used.clone();
        let words = Words::Owned(Arc::new(OwnedWords { live: AtomicBool::new(true), words, used }));
        self.regions.write().insert(iova, Region { words, len: size });
        Ok(iova)
    }

    /// Maps `len` bytes of the consumer's memory at `addr` (both page-aligned) into the device's
    /// address space and returns their device address; [`GuestMemory::free`] unmaps them. They
    /// count against no limit: the consumer owns them. Every page must be mapped writable now
    /// if `writable` (the pin-for-write decision of Linux's `ib_umem_get`), else readable; the
    /// device writes them only then. Afterwards the pages may go away or change protection at
    /// any time: an access then fails ([`MemError::Fault`]), never faults.
    ///
    /// # Safety
    /// While the region is mapped, `[addr, addr + len)` must hold nothing the device must not
    /// read or (if `writable`) write: memory the program registered for the device, not memory
    /// it freed and reused for something else.
    ///
    /// Errors: [`MemError::Misaligned`] for an address or length that is not page-aligned or a
    /// length of 0; [`MemError::NotMapped`] for a page missing or without the protection;
    /// [`MemError::Unsupported`] where the process has no fault-safe way to reach its memory.
    pub unsafe fn map_external(&self, addr: usize, len: usize, writable: bool) -> Result<u64, MemError> {
        if (addr | len) & (PAGE as usize - 1) != 0 || len == 0 {
            return Err(MemError::Misaligned(addr as u64));
        }
        let access = user::access().ok_or(MemError::Unsupported("process_vm_readv and /proc/self/mem are refused"))?;
        user::check_mapped(access, addr, len, writable).map_err(|_| MemError::NotMapped {
            addr: addr as u64,
            len: len as u64,
            writable,
        })?;
        let len = len as u64;
        let stride = len.checked_add(PAGE).ok_or(MemError::Exhausted { requested: len })?;
        let iova = self.next.fetch_add(stride, Ordering::Relaxed);
        let words = Words::External { addr, writable, access };
        self.regions.write().insert(iova, Region { words, len });
        Ok(iova)
    }

    /// Frees the region that starts at `iova`; `false` if there is none.
    pub fn free(&self, iova: u64) -> bool {
        match self.regions.write().remove(&iova) {
            Some(r) => {
                if let Words::Owned(w) = &r.words {
                    // Uncharged when the last holder drops the words (`OwnedWords`).
                    w.live.store(false, Ordering::Release);
                }
                true
            }
            None => false,
        }
    }

    /// Bytes allocated and not yet released: a freed region the device still holds (a ring page
    /// of a live object) stays counted until the object lets go of it.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Regions in the map now: allocations not yet freed and external mappings not yet unmapped
    /// (read-only, for leak checks).
    pub fn regions(&self) -> usize {
        self.regions.read().len()
    }

    /// Whether `[iova, iova + len)` lies inside one region.
    pub fn contains(&self, iova: u64, len: u64) -> bool {
        self.with_region(iova, len, |_, _| ()).is_ok()
    }

    /// Copies `buf.len()` bytes at `iova` into `buf`: a word at a time from memory the map
    /// owns, in one fault-safe copy from the consumer's.
    ///
    /// Errors: [`MemError::OutOfRange`] outside every region; [`MemError::Fault`] where the
    /// consumer's memory is gone.
    pub fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.read_pieces(&[(iova, buf.len())], buf)
    }

    /// Copies `data` to `iova`: whole words stored as words, partial words merged in place, in
    /// memory the map owns; one fault-safe copy into the consumer's.
    ///
    /// Errors: as [`GuestMemory::read`], and [`MemError::Fault`] for pages mapped read-only.
    pub fn write(&self, iova: u64, data: &[u8]) -> Result<(), MemError> {
        self.write_pieces(&[(iova, data.len())], data)
    }

    /// Copies the pieces `(iova, len)`, one after another, into `buf` (as long as their sum):
    /// the gather of an SGE list, under one lock, the consumer's pieces in one system call per
    /// `mem/user.rs`'s iovec limit. Errors: as [`GuestMemory::read`]; what was copied before a
    /// failure may have landed.
    pub fn read_pieces(&self, pieces: &[(u64, usize)], buf: &mut [u8]) -> Result<(), MemError> {
        let regions = self.regions.read();
        let mut ext = External::default();
        let mut at = 0usize;
        for &(iova, len) in pieces {
            let (r, off) = resolve(&regions, iova, len as u64)?;
            let dst = at.checked_add(len).and_then(|end| buf.get_mut(at..end));
            let dst = dst.ok_or(MemError::OutOfRange { iova, len: len as u64 })?;
            match &r.words {
                Words::Owned(w) => read_words(&w.words, off, dst),
                Words::External { addr, access, .. } => ext.push(access, iova, Piece { addr: addr + off, at, len }),
            }
            at += len;
        }
        ext.fault_if(|a, pieces| a.read(buf, pieces))
    }

    /// Copies `data` to the pieces `(iova, len)`, one after another (the scatter of an SGE list;
    /// see [`GuestMemory::read_pieces`]). Errors: as [`GuestMemory::write`]; a piece that
    /// cannot be written may leave earlier ones written.
    pub fn write_pieces(&self, pieces: &[(u64, usize)], data: &[u8]) -> Result<(), MemError> {
        let regions = self.regions.read();
        let mut ext = External::default();
        let mut at = 0usize;
        for &(iova, len) in pieces {
            let (r, off) = resolve(&regions, iova, len as u64)?;
            let src = at.checked_add(len).and_then(|end| data.get(at..end));
            let src = src.ok_or(MemError::OutOfRange { iova, len: len as u64 })?;
            match &r.words {
                Words::Owned(w) => write_words(&w.words, off, src),
                Words::External { writable: false, .. } => return Err(MemError::Fault { iova, len: len as u64 }),
                Words::External { addr, access, .. } => ext.push(access, iova, Piece { addr: addr + off, at, len }),
            }
            at += len;
        }
        ext.fault_if(|a, pieces| a.write(data, pieces))
    }

    /// The memory of the region the model allocated at `iova`, resolved once: its words reached
    /// without this map's lock or lookup (`None` for another address or a consumer's mapped
    /// pages). The words stay allocated while the window lives; after [`GuestMemory::free`] the
    /// device no longer sees them.
    pub fn window(&self, iova: u64) -> Option<Window> {
        match self.regions.read().get(&iova) {
            Some(Region { words: Words::Owned(w), .. }) => Some(Window::new(w.clone())),
            _ => None,
        }
    }

    /// `[iova, iova + len)` resolved once for the device (a ring's page, as QEMU maps ring pages
    /// when the ring is created): reached directly when it lies in a region the model
    /// allocated, through the map otherwise (a consumer's mapped pages, which may be unmapped at
    /// any time). Either way an access fails once the memory is freed or unmapped, as a lookup
    /// would. Never fails itself: a span outside guest memory faults on every access.
    pub fn span(&self, iova: u64, len: u64) -> Span {
        let direct = self.with_region(iova, len, |r, off| match &r.words {
            Words::Owned(w) => Some(SpanKind::Direct { words: w.clone(), off, len: len as usize }),
            Words::External { .. } => None,
        });
        Span::new(direct.ok().flatten().unwrap_or(SpanKind::Mapped { iova, len }))
    }

    /// Fills `len` bytes at `iova` with zero, word by word in place (no buffer of `len` bytes).
    ///
    /// Errors: [`MemError::OutOfRange`] unless the whole range lies inside one region (checked
    /// before anything is written); [`MemError::Fault`] as for [`GuestMemory::write`].
    pub fn zero(&self, iova: u64, len: u64) -> Result<(), MemError> {
        let fault = MemError::Fault { iova, len };
        self.with_region(iova, len, |r, off| match &r.words {
            Words::Owned(w) => {
                zero_words(&w.words, off, len as usize);
                Ok(())
            }
            Words::External { writable: false, .. } => Err(fault),
            Words::External { addr, access, .. } => access.zero(addr + off, len as usize).map_err(|_| fault),
        })?
    }

    /// Loads the 32-bit little-endian word at `iova` with acquire ordering (on the consumer's
    /// pages: a fault-safe copy of the 4 bytes, then an acquire fence).
    pub fn load_u32(&self, iova: u64) -> Result<u32, MemError> {
        if iova & 3 != 0 {
            return Err(MemError::Misaligned(iova));
        }
        let owned = self.with_region(iova, 4, |r, off| match &r.words {
            Words::Owned(w) => Some(w.words[off / 4].load(Ordering::Acquire)),
            Words::External { .. } => None,
        })?;
        if let Some(v) = owned {
            return Ok(v);
        }
        let mut b = [0u8; 4];
        self.read(iova, &mut b)?;
        std::sync::atomic::fence(Ordering::Acquire);
        Ok(u32::from_le_bytes(b))
    }

    /// Stores the 32-bit little-endian word at `iova` with release ordering (on the consumer's
    /// pages: a release fence, then a fault-safe copy of the 4 bytes).
    pub fn store_u32(&self, iova: u64, v: u32) -> Result<(), MemError> {
        if iova & 3 != 0 {
            return Err(MemError::Misaligned(iova));
        }
        let owned = self.with_region(iova, 4, |r, off| match &r.words {
            Words::Owned(w) => {
                w.words[off / 4].store(v, Ordering::Release);
                true
            }
            Words::External { .. } => false,
        })?;
        if !owned {
            std::sync::atomic::fence(Ordering::Release);
            self.write(iova, &v.to_le_bytes())?;
        }
        Ok(())
    }

    /// Reads a little-endian u64 (two words, not atomic as a whole).
    pub fn read_u64(&self, iova: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read(iova, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Applies `op` to the 8 bytes at `iova` as one atomic operation and returns the value they
    /// held before (see the module docs for how).
    ///
    /// Errors: [`MemError::Misaligned`] for an address that is not 8-byte aligned,
    /// [`MemError::OutOfRange`] outside every region, [`MemError::Fault`] where the consumer's
    /// memory is gone or cannot be written (nothing changed).
    pub fn atomic_u64(&self, iova: u64, op: Atomic64) -> Result<u64, MemError> {
        if iova & 7 != 0 {
            return Err(MemError::Misaligned(iova));
        }
        let fault = MemError::Fault { iova, len: 8 };
        self.with_region(iova, 8, |r, off| match &r.words {
            Words::Owned(w) => Ok(self.owned_atomic(&w.words[off / 4..off / 4 + 2], op)),
            Words::External { writable: false, .. } => Err(fault),
            Words::External { addr, access, .. } => access.atomic_u64(addr + off, op).map_err(|_| fault),
        })?
    }

    /// `op` on two words of memory the map owns (see the module docs).
    fn owned_atomic(&self, pair: &[AtomicU32], op: Atomic64) -> u64 {
        if let Some(a) = as_atomic_u64(pair) {
            let old = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| Some(op.apply(v)));
            return old.unwrap_or_else(|v| v);
        }
        let _serial = self.atomic_fallback.lock();
        let lo = u64::from(pair[0].load(Ordering::Acquire));
        let old = lo | u64::from(pair[1].load(Ordering::Acquire)) << 32;
        let new = op.apply(old);
        pair[0].store(new as u32, Ordering::Release);
        pair[1].store((new >> 32) as u32, Ordering::Release);
        old
    }

    fn with_region<T>(&self, iova: u64, len: u64, f: impl FnOnce(&Region, usize) -> T) -> Result<T, MemError> {
        let regions = self.regions.read();
        let (r, off) = resolve(&regions, iova, len)?;
        Ok(f(r, off))
    }
}

/// The region holding all of `[iova, iova + len)` and the range's offset in it.
fn resolve(regions: &BTreeMap<u64, Region>, iova: u64, len: u64) -> Result<(&Region, usize), MemError> {
    let bad = MemError::OutOfRange { iova, len };
    let (start, r) = regions.range(..=iova).next_back().ok_or(bad)?;
    let off = iova - start;
    let end = off.checked_add(len).ok_or(bad)?;
    if end > r.len {
        return Err(bad);
    }
    Ok((r, off as usize))
}

/// The consumer's pieces of one vectored access, copied together once every piece is resolved.
#[derive(Default)]
struct External {
    access: Option<&'static Access>,
    pieces: Pieces,
    /// The device address of the first piece and the bytes of all, for the error.
    iova: u64,
    len: u64,
}

impl External {
    fn push(&mut self, access: &'static Access, iova: u64, p: Piece) {
        if self.pieces.is_empty() {
            self.iova = iova;
        }
        self.access = Some(access);
        self.len += p.len as u64;
        self.pieces.push(p);
    }

    /// Runs `copy` on the pieces (nothing without any); its failure is [`MemError::Fault`].
    fn fault_if(self, copy: impl FnOnce(&Access, &[Piece]) -> Result<(), user::Fault>) -> Result<(), MemError> {
        match self.access {
            Some(a) => copy(a, self.pieces.as_slice()).map_err(|_| MemError::Fault { iova: self.iova, len: self.len }),
            None => Ok(()),
        }
    }
}
