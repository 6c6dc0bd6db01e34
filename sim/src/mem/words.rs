//! Word-level copies into and out of memory the map owns (its regions' `AtomicU32` words), and
//! the 64-bit view of two words for the device's atomics. No unsafe code but the one cast of
//! [`as_atomic_u64`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use zerocopy::little_endian::U32;
use zerocopy::FromBytes;

/// Two consecutive words as one 64-bit atomic, if they are 8-aligned in host memory on a
/// little-endian host (where the 64-bit value is the 8 bytes in the words' byte order).
///
/// Every access to these bytes is atomic (the map reaches its own memory only through atomics),
/// and all device atomics on an address use this same 64-bit view. A 64-bit atomic overlapping 32-bit ones is
/// mixed-size: x86-64 and AArch64 make it single-copy atomic for aligned accesses, while Rust's
/// memory model leaves racing mixed-size atomics undefined (`AtomicU64::from_ptr`'s docs), so a
/// 32-bit load of these words racing the 64-bit RMW relies on that hardware rule.
pub(super) fn as_atomic_u64(pair: &[AtomicU32]) -> Option<&AtomicU64> {
    let ptr = pair.as_ptr();
    let aligned = (ptr as usize) & (std::mem::align_of::<AtomicU64>() - 1) == 0;
    if pair.len() != 2 || !aligned || cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: `pair` is two consecutive `AtomicU32` (8 contiguous bytes of one slice), checked
    // aligned for `AtomicU64` and borrowed for the returned lifetime (memory the map owns, live
    // while borrowed); see above for the mixed-size accesses.
    let wide = unsafe { AtomicU64::from_ptr(ptr.cast_mut().cast::<u64>()) };
    Some(wide)
}

/// Copies `buf.len()` bytes at byte `off` of `words` into `buf`: one load per word touched,
/// whole words copied as words.
pub(super) fn read_words(words: &[AtomicU32], off: usize, buf: &mut [u8]) {
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
pub(super) fn write_words(words: &[AtomicU32], off: usize, data: &[u8]) {
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

/// Fills `len` bytes at byte `off` of `words` with zero, word by word in place.
pub(super) fn zero_words(words: &[AtomicU32], off: usize, len: usize) {
    let (start, end) = (off, off + len);
    let mut at = start;
    while at < end {
        let word = &words[at / 4];
        if at % 4 == 0 && end - at >= 4 {
            word.store(0, Ordering::Relaxed);
            at += 4;
        } else {
            let mask = !(0xffu32 << ((at % 4) * 8));
            word.fetch_and(mask, Ordering::Relaxed);
            at += 1;
        }
    }
}
