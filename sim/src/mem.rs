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

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;
use zerocopy::little_endian::U32;
use zerocopy::FromBytes;

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
            Some(Region { words: Words::Owned(w), .. }) => Some(Window { words: w.clone() }),
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
        Span(direct.ok().flatten().unwrap_or(SpanKind::Mapped { iova, len }))
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

/// One region the model allocated, reached directly (see [`GuestMemory::window`]). Offsets are
/// bytes from the region's start; an access past its end panics, so callers bound them first.
#[derive(Clone)]
pub struct Window {
    words: Arc<OwnedWords>,
}

impl Window {
    /// Bytes in the region.
    pub fn len(&self) -> u64 {
        self.words.words.len() as u64 * 4
    }

    /// Whether the region is empty (never: regions are whole pages).
    pub fn is_empty(&self) -> bool {
        self.words.words.is_empty()
    }

    /// Copies `buf.len()` bytes at `off` into `buf`.
    pub fn read(&self, off: usize, buf: &mut [u8]) {
        read_words(&self.words.words, off, buf);
    }

    /// Copies `data` to `off`.
    pub fn write(&self, off: usize, data: &[u8]) {
        write_words(&self.words.words, off, data);
    }

    /// Loads the 32-bit word at `off` (4-byte aligned) with acquire ordering.
    pub fn load_u32(&self, off: usize) -> u32 {
        self.words.words[off / 4].load(Ordering::Acquire)
    }

    /// Stores the 32-bit word at `off` (4-byte aligned) with release ordering.
    pub fn store_u32(&self, off: usize, v: u32) {
        self.words.words[off / 4].store(v, Ordering::Release);
    }
}

/// A span of guest memory resolved once ([`GuestMemory::span`]). Offsets are bytes from its
/// start; an access past its end is an error.
#[derive(Clone, Debug)]
pub struct Span(SpanKind);

#[derive(Clone)]
enum SpanKind {
    /// In a region the model allocated, reached without the map.
    Direct {
        words: Arc<OwnedWords>,
        /// Byte offset of the span in the region.
        off: usize,
        len: usize,
    },
    /// Reached through the map at every access.
    Mapped { iova: u64, len: u64 },
}

impl std::fmt::Debug for SpanKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpanKind::Direct { off, len, .. } => write!(f, "Direct(+{off:#x}, {len})"),
            SpanKind::Mapped { iova, len } => write!(f, "Mapped({iova:#x}, {len})"),
        }
    }
}

impl Span {
    /// The words and byte offset of `[at, at + len)` of a direct span that is still allocated;
    /// `Ok(None)` for a mapped span.
    fn direct(&self, at: usize, len: usize) -> Result<Option<(&[AtomicU32], usize)>, MemError> {
        let SpanKind::Direct { words, off, len: span } = &self.0 else { return Ok(None) };
        let end = at.checked_add(len).filter(|&e| e <= *span);
        if end.is_none() || !words.live.load(Ordering::Acquire) {
            return Err(MemError::OutOfRange { iova: (off + at) as u64, len: len as u64 });
        }
        Ok(Some((&words.words, off + at)))
    }

    fn iova(&self, at: usize, len: usize) -> Result<u64, MemError> {
        let SpanKind::Mapped { iova, len: span } = &self.0 else {
            return Err(MemError::OutOfRange { iova: 0, len: len as u64 });
        };
        let bad = MemError::OutOfRange { iova: *iova, len: len as u64 };
        let end = (at as u64).checked_add(len as u64).ok_or(bad)?;
        if end > *span {
            return Err(bad);
        }
        Ok(iova + at as u64)
    }

    /// Copies `buf.len()` bytes at byte `at` of the span into `buf`.
    pub fn read(&self, mem: &GuestMemory, at: usize, buf: &mut [u8]) -> Result<(), MemError> {
        match self.direct(at, buf.len())? {
            Some((words, off)) => {
                read_words(words, off, buf);
                Ok(())
            }
            None => mem.read(self.iova(at, buf.len())?, buf),
        }
    }

    /// Copies `data` to byte `at` of the span.
    pub fn write(&self, mem: &GuestMemory, at: usize, data: &[u8]) -> Result<(), MemError> {
        match self.direct(at, data.len())? {
            Some((words, off)) => {
                write_words(words, off, data);
                Ok(())
            }
            None => mem.write(self.iova(at, data.len())?, data),
        }
    }

    /// Loads the word at byte `at` (4-byte aligned in guest memory) with acquire ordering.
    pub fn load_u32(&self, mem: &GuestMemory, at: usize) -> Result<u32, MemError> {
        match self.direct(at, 4)? {
            Some((words, off)) if off % 4 == 0 => Ok(words[off / 4].load(Ordering::Acquire)),
            Some((_, off)) => Err(MemError::Misaligned(off as u64)),
            None => mem.load_u32(self.iova(at, 4)?),
        }
    }

    /// Stores the word at byte `at` (4-byte aligned in guest memory) with release ordering.
    pub fn store_u32(&self, mem: &GuestMemory, at: usize, v: u32) -> Result<(), MemError> {
        match self.direct(at, 4)? {
            Some((words, off)) if off % 4 == 0 => {
                words[off / 4].store(v, Ordering::Release);
                Ok(())
            }
            Some((_, off)) => Err(MemError::Misaligned(off as u64)),
            None => mem.store_u32(self.iova(at, 4)?, v),
        }
    }
}

/// Two consecutive words as one 64-bit atomic, if they are 8-aligned in host memory on a
/// little-endian host (where the 64-bit value is the 8 bytes in the words' byte order).
///
/// Every access to these bytes is atomic (the map reaches memory only through atomics; the
/// consumer's own accesses are outside Rust's model, as a DMA engine's are), and all device
/// atomics on an address use this same 64-bit view. A 64-bit atomic overlapping 32-bit ones is
/// mixed-size: x86-64 and AArch64 make it single-copy atomic for aligned accesses, while Rust's
/// memory model leaves racing mixed-size atomics undefined (`AtomicU64::from_ptr`'s docs), so a
/// 32-bit load of these words racing the 64-bit RMW relies on that hardware rule.
fn as_atomic_u64(pair: &[AtomicU32]) -> Option<&AtomicU64> {
    let ptr = pair.as_ptr();
    let aligned = (ptr as usize) & (std::mem::align_of::<AtomicU64>() - 1) == 0;
    if pair.len() != 2 || !aligned || cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: `pair` is two consecutive `AtomicU32` (8 contiguous bytes of one slice), checked
    // aligned for `AtomicU64` and borrowed for the returned lifetime, so the memory stays valid
    // (an external region stays mapped while the caller holds the map's read lock); see above
    // for the mixed-size accesses.
    let wide = unsafe { AtomicU64::from_ptr(ptr.cast_mut().cast::<u64>()) };
    Some(wide)
}

/// Copies `buf.len()` bytes at byte `off` of `words` into `buf`: one load per word touched,
/// whole words copied as words.
fn read_words(words: &[AtomicU32], off: usize, buf: &mut [u8]) {
    if off & 3 == 0 {
        // Whole words (a CQE, a WQE header): one load and one 4-byte store each.
        if let Ok(dst) = <[U32]>::mut_from_bytes(buf) {
            for (d, w) in dst.iter_mut().zip(&words[off / 4..]) {
                *d = U32::new(w.load(Ordering::Relaxed));
            }
            return;
        }
    }
    let head = ((4 - off % 4) % 4).min(buf.len());
    let (first, rest) = buf.split_at_mut(head);
    if head > 0 {
        let bytes = words[off / 4].load(Ordering::Relaxed).to_le_bytes();
        first.copy_from_slice(&bytes[off % 4..off % 4 + head]);
    }
    let (at, whole) = ((off + head) / 4, rest.len() / 4);
    let mut chunks = rest.chunks_exact_mut(4);
    for (c, w) in (&mut chunks).zip(&words[at..]) {
        c.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let bytes = words[at + whole].load(Ordering::Relaxed).to_le_bytes();
        let n = tail.len();
        tail.copy_from_slice(&bytes[..n]);
    }
}

/// Copies `data` to byte `off` of `words`: whole words stored as words, partial words merged.
fn write_words(words: &[AtomicU32], off: usize, data: &[u8]) {
    if off & 3 == 0 {
        if let Ok(src) = <[U32]>::ref_from_bytes(data) {
            for (s, w) in src.iter().zip(&words[off / 4..]) {
                w.store(s.get(), Ordering::Relaxed);
            }
            return;
        }
    }
    let head = ((4 - off % 4) % 4).min(data.len());
    let (first, rest) = data.split_at(head);
    if head > 0 {
        merge(&words[off / 4], off % 4, first);
    }
    let at = (off + head) / 4;
    let mut chunks = rest.chunks_exact(4);
    for (c, w) in (&mut chunks).zip(&words[at..]) {
        w.store(u32::from_le_bytes([c[0], c[1], c[2], c[3]]), Ordering::Relaxed);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        merge(&words[at + rest.len() / 4], 0, tail);
    }
}

/// Stores `bytes` (at most the rest of the word) at byte `skip` of `word`, keeping its other bytes.
fn merge(word: &AtomicU32, skip: usize, bytes: &[u8]) {
    let (mut mask, mut v) = (0u32, 0u32);
    for (k, b) in bytes.iter().enumerate() {
        let shift = (skip + k) * 8;
        mask |= 0xff << shift;
        v |= u32::from(*b) << shift;
    }
    let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| Some((w & !mask) | v));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_bounds_and_atomics() {
        let m = GuestMemory::new(1 << 20);
        let a = m.alloc(10).unwrap();
        assert_eq!(a % 4096, 0);
        m.write(a + 3, b"hello pvrdma").unwrap();
        let mut b = [0u8; 12];
        m.read(a + 3, &mut b).unwrap();
        assert_eq!(&b, b"hello pvrdma");
        m.store_u32(a + 4096 - 4, 7).unwrap();
        assert_eq!(m.load_u32(a + 4096 - 4).unwrap(), 7);
        assert_eq!(m.load_u32(a + 4096), Err(MemError::OutOfRange { iova: a + 4096, len: 4 }));
        assert!(m.read(a + 4000, &mut [0u8; 200]).is_err());
        assert!(m.read(0, &mut [0u8; 1]).is_err());
        assert!(m.read(u64::MAX - 1, &mut [0u8; 4]).is_err());
        assert_eq!(m.load_u32(a + 2), Err(MemError::Misaligned(a + 2)));
        assert!(m.free(a));
        assert!(m.read(a, &mut [0u8; 1]).is_err());
        assert!(matches!(m.alloc(2 << 20), Err(MemError::Exhausted { .. })));
    }

    #[test]
    fn every_alignment_and_length_round_trips() {
        let m = GuestMemory::new(1 << 20);
        let a = m.alloc(64).unwrap();
        let pattern: Vec<u8> = (1..=40u8).collect();
        for start in 0..8u64 {
            for len in 0..=24usize {
                m.write(a, &[0xee; 64]).unwrap();
                m.write(a + start, &pattern[..len]).unwrap();
                let mut all = [0u8; 64];
                m.read(a, &mut all).unwrap();
                let s = start as usize;
                assert!(all[..s].iter().all(|&b| b == 0xee), "before {start}+{len}");
                assert_eq!(&all[s..s + len], &pattern[..len], "{start}+{len}");
                assert!(all[s + len..].iter().all(|&b| b == 0xee), "after {start}+{len}");
                let mut part = vec![0u8; len];
                m.read(a + start, &mut part).unwrap();
                assert_eq!(part, &pattern[..len]);
            }
        }
        // Empty accesses at the very end of a region are in bounds and touch nothing.
        m.write(a + 4096, &[]).unwrap();
        m.read(a + 4096, &mut []).unwrap();
        let w = m.window(a).unwrap();
        w.write(4096, &[]);
        w.read(4093, &mut [0u8; 3]);
    }

    #[test]
    fn absurd_sizes_are_refused_without_panicking() {
        // Page rounding that would wrap is refused even without a limit.
        let unlimited = GuestMemory::new(u64::MAX);
        for len in [u64::MAX, u64::MAX - 4094] {
            assert!(matches!(unlimited.alloc(len), Err(MemError::Exhausted { .. })), "{len:#x}");
        }
        let m = GuestMemory::new(1 << 20);
        for len in [u64::MAX, u64::MAX - 4094, 1 << 63, (1 << 20) + 1] {
            assert!(matches!(m.alloc(len), Err(MemError::Exhausted { .. })), "{len:#x}");
        }
        assert_eq!((unlimited.used(), m.used()), (0, 0));
        let a = m.alloc(3 * PAGE).unwrap();
        m.write(a, &[0xa5; 3 * PAGE as usize]).unwrap();
        m.zero(a + 3, 2 * PAGE).unwrap();
        let mut b = vec![0u8; 3 * PAGE as usize];
        m.read(a, &mut b).unwrap();
        assert!(b[..3].iter().all(|&x| x == 0xa5));
        assert!(b[3..3 + 2 * PAGE as usize].iter().all(|&x| x == 0));
        assert!(b[3 + 2 * PAGE as usize..].iter().all(|&x| x == 0xa5));
        for (at, len) in [(a, u64::MAX), (a + 1, u64::MAX), (a, 1 << 40), (u64::MAX, 1)] {
            assert!(m.zero(at, len).is_err());
        }
    }

    #[test]
    fn external_pages_are_the_consumers_memory_until_unmapped() {
        let m = GuestMemory::new(1 << 20);
        let layout = std::alloc::Layout::from_size_align(2 * PAGE as usize, PAGE as usize).unwrap();
        // SAFETY: a fresh allocation of the layout's size, freed below after the unmap.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!buf.is_null());
        // SAFETY: `buf` is two live, writable, page-aligned pages until `dealloc` below.
        let iova = unsafe { m.map_external(buf as usize, 2 * PAGE as usize) }.unwrap();
        m.write(iova + 4090, b"across").unwrap();
        // SAFETY: reading bytes of the live allocation; nothing writes it concurrently here.
        let seen = unsafe { std::slice::from_raw_parts(buf.add(4090), 6) }.to_vec();
        assert_eq!(seen, b"across");
        assert_eq!(m.used(), 0, "the consumer's pages are not the model's to count");
        assert!(m.read(iova + 2 * PAGE, &mut [0u8; 1]).is_err());
        assert!(m.free(iova));
        assert!(m.read(iova, &mut [0u8; 1]).is_err());
        // SAFETY: unmapped above: nothing reaches `buf` any more.
        unsafe { std::alloc::dealloc(buf, layout) };
        // SAFETY: never dereferenced: the arguments are refused first.
        assert!(unsafe { m.map_external(4097, 4096) }.is_err());
    }

    /// FETCH ADD and COMPARE SWAP on `iova` from `threads` threads at once: no update lost, each
    /// FETCH ADD saw a value of its own (in the low 32 bits: the CPU may add to the high ones).
    fn hammer(mem: &Arc<GuestMemory>, iova: u64, threads: u64, n: u64) {
        const LOW: u64 = 0xffff_ffff;
        let start = std::sync::Barrier::new(threads as usize);
        let seen: Vec<Vec<u64>> = std::thread::scope(|s| {
            let add = || {
                start.wait();
                (0..n).map(|_| mem.atomic_u64(iova, Atomic64::FetchAdd(1)).unwrap()).collect()
            };
            let hs: Vec<_> = (0..threads).map(|_| s.spawn(add)).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(mem.read_u64(iova).unwrap() & LOW, threads * n, "no update lost");
        let mut all: Vec<u64> = seen.into_iter().flatten().map(|v| v & LOW).collect();
        all.sort_unstable();
        assert!(all.iter().enumerate().all(|(i, &v)| v == i as u64), "each saw its own value");
        // COMPARE SWAP as a lock-free increment: every success is one increment.
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mut done = 0;
                    while done < n / 10 {
                        let v = mem.read_u64(iova).unwrap();
                        let op = Atomic64::CmpSwap { compare: v, swap: v + 1 };
                        done += u64::from(mem.atomic_u64(iova, op).unwrap() == v);
                    }
                });
            }
        });
        assert_eq!(mem.read_u64(iova).unwrap() & LOW, threads * n + threads * (n / 10));
    }

    #[test]
    fn eight_byte_atomics_hold_across_threads_on_owned_and_external_memory() {
        let mem = Arc::new(GuestMemory::new(1 << 20));
        let owned = mem.alloc(4096).unwrap();
        hammer(&mem, owned + 8, 4, 50_000);
        assert_eq!(mem.read_u64(owned).unwrap(), 0, "the neighbour is untouched");
        assert_eq!(mem.atomic_u64(owned + 4, Atomic64::FetchAdd(1)), Err(MemError::Misaligned(owned + 4)));
        assert!(mem.atomic_u64(owned + 4096, Atomic64::FetchAdd(1)).is_err());
        // A page of the test's own, mapped as a program's MR is; the CPU adds too, with its own
        // 64-bit atomic on the same word, while the device's threads do.
        let backing: Box<[AtomicU64]> = (0..1024).map(|_| AtomicU64::new(0)).collect();
        let page = (backing.as_ptr() as usize).next_multiple_of(4096);
        // SAFETY: `backing` (8 KiB) holds the page from `page` on and outlives the mapping,
        // which is unmapped below; it is reached only as atomics meanwhile.
        let ext = unsafe { mem.map_external(page, 4096) }.unwrap();
        let word = &backing[(page - backing.as_ptr() as usize) / 8 + 2];
        let done = AtomicBool::new(false);
        let cpu_adds = std::thread::scope(|s| {
            // The CPU adds to the high half for as long as the device works on the word.
            let cpu = s.spawn(|| {
                let mut adds = 0u64;
                while !done.load(Ordering::Acquire) {
                    word.fetch_add(1 << 32, Ordering::AcqRel);
                    adds += 1;
                }
                adds
            });
            s.spawn(|| hammer(&mem, ext + 24, 2, 20_000));
            hammer(&mem, ext + 16, 2, 100_000);
            done.store(true, Ordering::Release);
            cpu.join().unwrap()
        });
        assert_eq!(word.load(Ordering::Acquire) & 0xffff_ffff, 200_000 + 20_000);
        assert_eq!(word.load(Ordering::Acquire) >> 32, cpu_adds, "the CPU's adds are all there");
        assert!(mem.free(ext));
    }
}