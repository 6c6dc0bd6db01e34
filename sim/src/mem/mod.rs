//! Guest memory: the one map from device address (IOVA) to memory that both sides reach.
//!
//! The driver allocates DMA memory here (through its platform backend) and the device resolves
//! every address the driver gives it here, bounds-checked: an address outside every region is an
//! error, never a panic. Nobody holds a Rust reference over memory the other side writes: data is
//! copied in and out, and ring indices and ownership words are 32-bit atomics with acquire/release
//! ordering (`../shared/design.md`, decision 4).
//!
//! A region is either memory the map owns ([`GuestMemory::alloc`]) or pages of the consumer's own
//! memory mapped in ([`GuestMemory::map_external`]: what an IOMMU does for a user-space MR, so an
//! MR can be registered over a buffer at its own address). The unsafe code of the model is here:
//! an external region is reached through a raw pointer, valid by the mapper's promise until it is
//! unmapped; every access holds the map's read lock, so unmapping (the write lock) waits for
//! accesses in flight, and none starts afterwards.
//!
//! # 8-byte atomics
//! The responder of an RDMA atomic (IBTA 9.4.5) reads, modifies and writes 8 bytes as one
//! operation ([`GuestMemory::atomic_u64`]). Where the 8 bytes are 8-aligned in host memory (always
//! for an external region, which is page-aligned, and for an owned region whose words the
//! allocator placed 8-aligned: in practice every one), that is one 64-bit atomic instruction on
//! the memory itself, so it is atomic against every other atomic of this device (other QPs, the
//! loopback port, the RoCE receive thread), of another device that mapped the same pages, and of
//! the CPU. Otherwise the device's atomics on that region take one lock of the map: still atomic
//! against each other, which is what `ATOMIC_HCA` promises. Which way an address goes depends only
//! on its region, so two atomics on one address never take different ways. The atomics are the
//! device's alone: the driver never reads-modifies-writes guest memory (the original value comes
//! back in the requester's SGE, written by the device), so a platform without shared memory
//! (qtest) needs nothing of this; and over qtest the device is QEMU 7.2's, which carries an
//! atomic WQE as a SEND anyway.
#![allow(unsafe_code)]

mod view;
mod words;
#[cfg(test)]
mod tests;

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;
pub use view::{Span, Window};
use view::SpanKind;
use words::{as_atomic_u64, read_words, write_words};

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

/// The words of a region.
enum Words {
    Owned(Arc<OwnedWords>),
    /// `count` words at `ptr`, the consumer's (see [`GuestMemory::map_external`]).
    External { ptr: std::ptr::NonNull<AtomicU32>, count: usize },
}

// SAFETY: an external region's memory is only reached as `AtomicU32` words, which may be shared
// and sent between threads; the pointer stays valid while the region is in the map (the
// mapper's promise), and the map's lock keeps accesses and the unmap apart.
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

impl Region {
    fn words(&self) -> &[AtomicU32] {
        match &self.words {
            Words::Owned(w) => &w.words,
            Words::External { ptr, count } => {
                // Page-aligned at map time; live while the region is in the map, which the
                // caller's borrow of the map's read lock guarantees (`map_external`'s contract).
                // SAFETY: `count` aligned, live words at `ptr`; AtomicU32 accepts any bits.
                unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *count) }
            }
        }
    }
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
        let words = (0..size / 4).map(|_| AtomicU32::new(0)).collect();
        let used = self.used.clone();
        let words = Words::Owned(Arc::new(OwnedWords { live: AtomicBool::new(true), words, used }));
        self.regions.write().insert(iova, Region { words, len: size });
        Ok(iova)
    }

    /// Maps `len` bytes of the consumer's memory at `addr` (both page-aligned) into the device's
    /// address space and returns their device address; [`GuestMemory::free`] unmaps them. They
    /// count against no limit: the consumer owns them.
    ///
    /// # Safety
    /// `[addr, addr + len)` must be live, writable memory that stays allocated until the region
    /// is unmapped; the device reads and writes it (as 32-bit words) meanwhile.
    ///
    /// Errors: [`MemError::Misaligned`] for an address or length that is not page-aligned or a
    /// length of 0.
    pub unsafe fn map_external(&self, addr: usize, len: usize) -> Result<u64, MemError> {
        let ptr = std::ptr::NonNull::new(addr as *mut AtomicU32);
        let aligned = (addr | len) & (PAGE as usize - 1) == 0 && len > 0;
        let Some(ptr) = ptr.filter(|_| aligned) else {
            return Err(MemError::Misaligned(addr as u64));
        };
        let len = len as u64;
        let stride = len.checked_add(PAGE).ok_or(MemError::Exhausted { requested: len })?;
        let iova = self.next.fetch_add(stride, Ordering::Relaxed);
        let words = Words::External { ptr, count: len as usize / 4 };
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

    /// Copies `buf.len()` bytes at `iova` into `buf`, a word at a time.
    pub fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.with_region(iova, buf.len() as u64, |r, off| read_words(r.words(), off, buf))
    }

    /// Copies `data` to `iova`: whole words stored as words, partial words merged in place.
    pub fn write(&self, iova: u64, data: &[u8]) -> Result<(), MemError> {
        self.with_region(iova, data.len() as u64, |r, off| write_words(r.words(), off, data))
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
    /// before anything is written).
    pub fn zero(&self, iova: u64, len: u64) -> Result<(), MemError> {
        self.with_region(iova, len, |r, off| {
            let (start, end) = (off, off + len as usize);
            let mut at = start;
            while at < end {
                let word = &r.words()[at / 4];
                if at % 4 == 0 && end - at >= 4 {
                    word.store(0, Ordering::Relaxed);
                    at += 4;
                } else {
                    let mask = !(0xffu32 << ((at % 4) * 8));
                    word.fetch_and(mask, Ordering::Relaxed);
                    at += 1;
                }
            }
        })
    }

    /// Loads the 32-bit little-endian word at `iova` with acquire ordering.
    pub fn load_u32(&self, iova: u64) -> Result<u32, MemError> {
        self.word(iova, |w| w.load(Ordering::Acquire))
    }

    /// Stores the 32-bit little-endian word at `iova` with release ordering.
    pub fn store_u32(&self, iova: u64, v: u32) -> Result<(), MemError> {
        self.word(iova, |w| w.store(v, Ordering::Release))
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
    /// [`MemError::OutOfRange`] outside every region.
    pub fn atomic_u64(&self, iova: u64, op: Atomic64) -> Result<u64, MemError> {
        if iova & 7 != 0 {
            return Err(MemError::Misaligned(iova));
        }
        self.with_region(iova, 8, |r, off| {
            let pair = &r.words()[off / 4..off / 4 + 2];
            match as_atomic_u64(pair) {
                Some(a) => {
                    let old = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| Some(op.apply(v)));
                    old.unwrap_or_else(|v| v)
                }
                None => {
                    let _serial = self.atomic_fallback.lock();
                    let lo = u64::from(pair[0].load(Ordering::Acquire));
                    let old = lo | u64::from(pair[1].load(Ordering::Acquire)) << 32;
                    let new = op.apply(old);
                    pair[0].store(new as u32, Ordering::Release);
                    pair[1].store((new >> 32) as u32, Ordering::Release);
                    old
                }
            }
        })
    }

    fn word<T>(&self, iova: u64, f: impl FnOnce(&AtomicU32) -> T) -> Result<T, MemError> {
        if iova & 3 != 0 {
            return Err(MemError::Misaligned(iova));
        }
        self.with_region(iova, 4, |r, off| f(&r.words()[off / 4]))
    }

    fn with_region<T>(
        &self,
        iova: u64,
        len: u64,
        f: impl FnOnce(&Region, usize) -> T,
    ) -> Result<T, MemError> {
        let regions = self.regions.read();
        let bad = MemError::OutOfRange { iova, len };
        let (start, r) = regions.range(..=iova).next_back().ok_or(bad)?;
        let off = iova - start;
        let end = off.checked_add(len).ok_or(bad)?;
        if end > r.len {
            return Err(bad);
        }
        Ok(f(r, off as usize))
    }
}

