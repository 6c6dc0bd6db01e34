//! The 64-bit view of two of the map's `AtomicU32` words for the device's atomics (the byte
//! copies over the words are `osdep::words`'s). No unsafe code but its one cast.

use std::sync::atomic::{AtomicU32, AtomicU64};

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
