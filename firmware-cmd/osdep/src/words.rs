//! Byte copies over memory seen as 32-bit atomic words: how the device model's guest memory and
//! the VFIO and qtest backends' DMA memory are reached while the other side (the device, the
//! driver, another process) writes them concurrently, with no Rust reference to their bytes.
//! Whole words are plain relaxed loads and stores; a partial word is merged with a
//! compare-exchange, so its neighbouring bytes, which the other side may be writing, are kept.
//! Bytes are in memory order (the host's own byte order within a word).
//!
//! [`read`], [`write()`] and [`zero`] leave the bounds to the caller (they panic past the end);
//! [`copy_out`], [`copy_in`] and [`word`] check them.

use core::sync::atomic::{AtomicU32, Ordering};

/// Copies `buf.len()` bytes at byte `off` of `words` into `buf`: one load per word touched.
///
/// # Panics
/// If the range runs past the end of `words`.
pub fn read(words: &[AtomicU32], off: usize, buf: &mut [u8]) {
    let head = ((4 - off % 4) % 4).min(buf.len());
    let (first, rest) = buf.split_at_mut(head);
    if head > 0 {
        let bytes = words[off / 4].load(Ordering::Relaxed).to_ne_bytes();
        first.copy_from_slice(&bytes[off % 4..off % 4 + head]);
    }
    let at = (off + head) / 4;
    let whole = rest.len() / 4;
    let mut chunks = rest.chunks_exact_mut(4);
    for (c, w) in (&mut chunks).zip(&words[at..at + whole]) {
        c.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let bytes = words[at + whole].load(Ordering::Relaxed).to_ne_bytes();
        let n = tail.len();
        tail.copy_from_slice(&bytes[..n]);
    }
}

/// Copies `data` to byte `off` of `words`: whole words stored as words, partial words merged.
///
/// # Panics
/// If the range runs past the end of `words`.
pub fn write(words: &[AtomicU32], off: usize, data: &[u8]) {
    let head = ((4 - off % 4) % 4).min(data.len());
    let (first, rest) = data.split_at(head);
    if head > 0 {
        merge(&words[off / 4], off % 4, first);
    }
    let at = (off + head) / 4;
    let whole = rest.len() / 4;
    let mut chunks = rest.chunks_exact(4);
    for (c, w) in (&mut chunks).zip(&words[at..at + whole]) {
        w.store(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]), Ordering::Relaxed);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        merge(&words[at + whole], 0, tail);
    }
}

/// Fills `len` bytes at byte `off` of `words` with zero, in place.
///
/// # Panics
/// If the range runs past the end of `words`.
pub fn zero(words: &[AtomicU32], off: usize, len: usize) {
    let end = off + len;
    let mut at = off;
    while at < end {
        let k = at % 4;
        let n = (4 - k).min(end - at);
        if n == 4 {
            words[at / 4].store(0, Ordering::Relaxed);
        } else {
            merge(&words[at / 4], k, &[0; 4][..n]);
        }
        at += n;
    }
}

/// [`read`], or `false` (nothing copied) if the range is not inside `words`.
pub fn copy_out(words: &[AtomicU32], off: usize, buf: &mut [u8]) -> bool {
    let inside = in_bounds(words, off, buf.len());
    if inside {
        read(words, off, buf);
    }
    inside
}

/// [`write()`], or `false` (nothing written) if the range is not inside `words`.
pub fn copy_in(words: &[AtomicU32], off: usize, data: &[u8]) -> bool {
    let inside = in_bounds(words, off, data.len());
    if inside {
        write(words, off, data);
    }
    inside
}

/// The word at byte `off`, if `off` is 4-byte aligned and inside `words`.
pub fn word(words: &[AtomicU32], off: usize) -> Option<&AtomicU32> {
    if off & 3 == 0 {
        words.get(off / 4)
    } else {
        None
    }
}

/// Stores `bytes` (at most the rest of the word) at byte `skip` of `word`, keeping its other bytes.
fn merge(word: &AtomicU32, skip: usize, bytes: &[u8]) {
    let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
        let mut b = w.to_ne_bytes();
        b[skip..skip + bytes.len()].copy_from_slice(bytes);
        Some(u32::from_ne_bytes(b))
    });
}

fn in_bounds(words: &[AtomicU32], off: usize, len: usize) -> bool {
    off.checked_add(len).is_some_and(|end| end <= words.len() * 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ones() -> [AtomicU32; 4] {
        [0xffff_ffffu32; 4].map(AtomicU32::new)
    }

    #[test]
    fn unaligned_copies_keep_neighbouring_bytes() {
        let w = ones();
        assert!(copy_in(&w, 3, &[1, 2, 3, 4, 5, 6]));
        let mut b = [0u8; 10];
        assert!(copy_out(&w, 1, &mut b));
        assert_eq!(b, [0xff, 0xff, 1, 2, 3, 4, 5, 6, 0xff, 0xff]);
        assert!(!copy_out(&w, 15, &mut [0u8; 2]));
        assert!(!copy_in(&w, usize::MAX, &[1]));
        assert!(word(&w, 2).is_none() && word(&w, 16).is_none() && word(&w, 12).is_some());
    }

    #[test]
    fn every_offset_and_length_reads_back_what_was_written() {
        for off in 0..16 {
            for len in 0..=16 - off {
                let w = ones();
                let data: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
                write(&w, off, &data[..len]);
                let mut all = [0u8; 16];
                read(&w, 0, &mut all);
                for (i, b) in all.iter().enumerate() {
                    let want = if (off..off + len).contains(&i) { data[i - off] } else { 0xff };
                    assert_eq!(*b, want, "write at {off}+{len}, byte {i}");
                }
                zero(&w, off, len);
                read(&w, 0, &mut all);
                for (i, b) in all.iter().enumerate() {
                    let want = if (off..off + len).contains(&i) { 0 } else { 0xff };
                    assert_eq!(*b, want, "zero at {off}+{len}, byte {i}");
                }
            }
        }
    }
}
