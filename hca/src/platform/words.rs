//! Byte copies over memory seen as 32-bit atomic words: how the VFIO and qtest backends reach DMA
//! memory that the device (or another process) writes concurrently, without a Rust reference to
//! its bytes. Whole words are plain atomic loads and stores; a partial word is merged with a
//! compare-exchange so the neighbouring bytes, which the device may be writing, are kept.

use std::sync::atomic::{AtomicU32, Ordering};

/// Copies `buf.len()` bytes starting at byte `off` of `words` into `buf`; `false` (nothing
/// copied) if the range is not inside `words`.
pub fn copy_out(words: &[AtomicU32], off: usize, buf: &mut [u8]) -> bool {
    if !in_bounds(words, off, buf.len()) {
        return false;
    }
    let (mut at, mut i) = (off, 0);
    while i < buf.len() {
        let k = at % 4;
        let n = (4 - k).min(buf.len() - i);
        let w = words[at / 4].load(Ordering::Relaxed).to_ne_bytes();
        buf[i..i + n].copy_from_slice(&w[k..k + n]);
        (at, i) = (at + n, i + n);
    }
    true
}

/// Copies `data` to byte `off` of `words`; `false` (nothing written) if out of bounds.
pub fn copy_in(words: &[AtomicU32], off: usize, data: &[u8]) -> bool {
    if !in_bounds(words, off, data.len()) {
        return false;
    }
    let (mut at, mut i) = (off, 0);
    while i < data.len() {
        let k = at % 4;
        let n = (4 - k).min(data.len() - i);
        let word = &words[at / 4];
        if n == 4 {
            let b = [data[i], data[i + 1], data[i + 2], data[i + 3]];
            word.store(u32::from_ne_bytes(b), Ordering::Relaxed);
        } else {
            let part = &data[i..i + n];
            let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                let mut b = w.to_ne_bytes();
                b[k..k + n].copy_from_slice(part);
                Some(u32::from_ne_bytes(b))
            });
        }
        (at, i) = (at + n, i + n);
    }
    true
}

/// The word at byte `off`, if `off` is 4-byte aligned and inside `words`.
pub fn word(words: &[AtomicU32], off: usize) -> Option<&AtomicU32> {
    (off & 3 == 0).then(|| words.get(off / 4)).flatten()
}

fn in_bounds(words: &[AtomicU32], off: usize, len: usize) -> bool {
    off.checked_add(len).is_some_and(|end| end <= words.len() * 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_copies_keep_neighbouring_bytes() {
        let w: Vec<AtomicU32> = (0..4).map(|_| AtomicU32::new(0xffff_ffff)).collect();
        assert!(copy_in(&w, 3, &[1, 2, 3, 4, 5, 6]));
        let mut b = [0u8; 10];
        assert!(copy_out(&w, 1, &mut b));
        assert_eq!(b, [0xff, 0xff, 1, 2, 3, 4, 5, 6, 0xff, 0xff]);
        assert!(!copy_out(&w, 15, &mut [0u8; 2]));
        assert!(!copy_in(&w, usize::MAX, &[1]));
        assert!(word(&w, 2).is_none() && word(&w, 16).is_none() && word(&w, 12).is_some());
    }
}
