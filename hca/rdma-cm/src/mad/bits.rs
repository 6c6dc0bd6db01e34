//! Fields of a MAD at their IBTA positions. IBTA 12.6 gives every CM field as `Byte[Bit]` and a
//! width in bits (Linux's `include/rdma/ibta_vol1_c12.h` lists them the same way, offsets from
//! the end of the 24-byte MAD common header); bits are numbered from the most significant bit of
//! the byte, and every field is big-endian. A [`Field`] is such a position, counted from the
//! start of the MAD; [`get`] and [`set`] read and write it in a whole 256-byte MAD, so no access
//! can fall outside the buffer.

use crate::transport::MAD_SIZE;

/// The MAD common header's size (IBTA 13.4.3): CM fields are given from its end.
pub const HDR_LEN: usize = 24;

/// A whole MAD.
pub type MadBuf = [u8; MAD_SIZE];

/// A bit field: `width` bits (1..=64) starting at bit `bit` of the MAD (bit 0 is the most
/// significant bit of byte 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub bit: usize,
    pub width: usize,
}

impl Field {
    /// The field at `Byte[Bit]` of a CM attribute (offsets after the common header), `width`
    /// bits wide. Checked at compile time when used in a `const`: it must lie inside the MAD
    /// and inside one naturally aligned word of at most 64 bits, as every IBTA field does.
    pub const fn cm(byte: usize, bit: usize, width: usize) -> Field {
        let start = (HDR_LEN + byte) * 8 + bit;
        assert!(width >= 1 && width <= 64, "field width out of range");
        assert!(bit < 8, "bit offset out of range");
        assert!(start + width <= MAD_SIZE * 8, "field beyond the MAD");
        Field { bit: start, width }
    }
}

/// A byte string field: `len` bytes at byte `offset` of the MAD (GIDs, private data, ARI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes {
    pub offset: usize,
    pub len: usize,
}

impl Bytes {
    /// `len` bytes at `byte` of a CM attribute (after the common header); checked at compile
    /// time when used in a `const`.
    pub const fn cm(byte: usize, len: usize) -> Bytes {
        assert!(HDR_LEN + byte + len <= MAD_SIZE, "bytes beyond the MAD");
        Bytes { offset: HDR_LEN + byte, len }
    }

    /// The field's end (for the compile-time checks that the private data ends the MAD).
    pub const fn end(self) -> usize {
        self.offset + self.len
    }
}

fn mask(width: usize) -> u128 {
    (1u128 << width) - 1
}

/// The bytes a field spans and how far its value sits above the last one's bit 0.
fn span(f: Field) -> (usize, usize, usize) {
    let first = f.bit / 8;
    let last = (f.bit + f.width - 1) / 8;
    let shift = (last + 1) * 8 - (f.bit + f.width);
    (first, last, shift)
}

/// Reads field `f` of `b`.
pub fn get(b: &MadBuf, f: Field) -> u64 {
    let (first, last, shift) = span(f);
    let acc = b.get(first..=last).unwrap_or(&[]).iter().fold(0u128, |acc, &x| acc << 8 | u128::from(x));
    ((acc >> shift) & mask(f.width)) as u64
}

/// Writes `v` (its low `width` bits) into field `f` of `b`, leaving the bits around it alone.
pub fn set(b: &mut MadBuf, f: Field, v: u64) {
    let (first, last, shift) = span(f);
    let Some(bytes) = b.get_mut(first..=last) else { return };
    let mut acc = bytes.iter().fold(0u128, |acc, &x| acc << 8 | u128::from(x));
    let m = mask(f.width) << shift;
    acc = (acc & !m) | ((u128::from(v) << shift) & m);
    for (i, byte) in bytes.iter_mut().rev().enumerate() {
        *byte = (acc >> (8 * i)) as u8;
    }
}

/// The bytes of field `f` of `b`.
pub fn bytes(b: &MadBuf, f: Bytes) -> &[u8] {
    b.get(f.offset..f.offset + f.len).unwrap_or(&[])
}

/// Copies `src` into field `f` (at most the field's length; the rest of the field is zeroed).
pub fn set_bytes(b: &mut MadBuf, f: Bytes, src: &[u8]) {
    if let Some(dst) = b.get_mut(f.offset..f.offset + f.len) {
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        dst[n..].fill(0);
    }
}

/// A fixed-size array from field `f` (its length must be `N`; a shorter field is zero-padded).
pub fn array<const N: usize>(b: &MadBuf, f: Bytes) -> [u8; N] {
    let mut out = [0u8; N];
    let src = bytes(b, f);
    let n = src.len().min(N);
    out[..n].copy_from_slice(&src[..n]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_at_their_ibta_bits() {
        let mut b = [0u8; MAD_SIZE];
        // REQ Local QPN: byte 32, 24 bits; Responder Resources: byte 35, 8 bits.
        set(&mut b, Field::cm(32, 0, 24), 0xABCDEF);
        set(&mut b, Field::cm(35, 0, 8), 0x12);
        assert_eq!(&b[HDR_LEN + 32..HDR_LEN + 36], &[0xAB, 0xCD, 0xEF, 0x12]);
        // REQ Transport Service Type: byte 43 bits 5..6; flow control bit 7.
        set(&mut b, Field::cm(43, 0, 5), 0x1F);
        set(&mut b, Field::cm(43, 5, 2), 2);
        set(&mut b, Field::cm(43, 7, 1), 1);
        assert_eq!(b[HDR_LEN + 43], 0b1111_1101);
        assert_eq!(get(&b, Field::cm(43, 5, 2)), 2);
        assert_eq!(get(&b, Field::cm(32, 0, 24)), 0xABCDEF);
        set(&mut b, Field::cm(8, 0, 64), 0x0102_0304_0506_0708);
        assert_eq!(&b[HDR_LEN + 8..HDR_LEN + 16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(get(&b, Field::cm(8, 0, 64)), 0x0102_0304_0506_0708);
    }

    #[test]
    fn set_truncates_to_the_width() {
        let mut b = [0xFFu8; MAD_SIZE];
        set(&mut b, Field::cm(88, 0, 20), 0);
        assert_eq!(&b[HDR_LEN + 88..HDR_LEN + 92], &[0, 0, 0x0F, 0xFF]);
        set(&mut b, Field::cm(88, 0, 20), u64::MAX);
        assert_eq!(get(&b, Field::cm(88, 0, 20)), 0xFFFFF);
    }
}
