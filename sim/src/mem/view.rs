//! Guest memory resolved once: a region the model allocated ([`Window`]) and a span of the map
//! ([`Span`]), reached without a lookup per access where the memory is the model's own.

use super::{GuestMemory, MemError, OwnedWords};
use osdep::words::{read as read_words, write as write_words};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One region the model allocated, reached directly (see [`GuestMemory::window`]). Offsets are
/// bytes from the region's start; an access past its end panics, so callers bound them first.
#[derive(Clone)]
pub struct Window {
    words: Arc<OwnedWords>,
}

impl Window {
    pub(super) fn new(words: Arc<OwnedWords>) -> Self {
        Self { words }
    }

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
pub(super) enum SpanKind {
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
    pub(super) fn new(kind: SpanKind) -> Self {
        Self(kind)
    }

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
