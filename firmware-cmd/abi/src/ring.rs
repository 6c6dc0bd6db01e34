//! Ring state and index arithmetic (`pvrdma_ring.h`).
//!
//! Every ring's first page holds a [`RingState`]; entries start at page 1. An index runs over
//! `0 .. 2 * max_elems` (`max_elems` a power of two): the extra bit tells a full ring from an empty
//! one. Who produces into which half:
//! - CQ: the device produces into `rx`; the driver consumes (`rx.cons_head`).
//! - QP: the driver produces WQEs into `tx` (SQ) and `rx` (RQ); the device consumes both.
//! - Async-event and CQ-notification rings (in the DSR): the device produces into `rx`.

use crate::assert_layout;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// One producer/consumer pair (`struct pvrdma_ring`). Each word is read and written atomically.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct Ring {
    /// Producer index, written by the producer.
    pub prod_tail: U32,
    /// Consumer index, written by the consumer.
    pub cons_head: U32,
}
assert_layout!(Ring, 8, prod_tail = 0, cons_head = 4);

/// The ring-state page header (`struct pvrdma_ring_state`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct RingState {
    pub tx: Ring,
    pub rx: Ring,
}
assert_layout!(RingState, 16, tx = 0, rx = 8);

/// Byte offset of `tx.prod_tail` in the ring-state page.
pub const TX_PROD_TAIL: u64 = 0;
/// Byte offset of `tx.cons_head`.
pub const TX_CONS_HEAD: u64 = 4;
/// Byte offset of `rx.prod_tail`.
pub const RX_PROD_TAIL: u64 = 8;
/// Byte offset of `rx.cons_head`.
pub const RX_CONS_HEAD: u64 = 12;

/// The mask of a ring's indices, `2 * max_elems - 1` (all ones for `max_elems` = 2^31).
pub const fn idx_mask(max_elems: u32) -> u32 {
    (max_elems << 1).wrapping_sub(1)
}

/// Whether `idx` is a valid index of a ring of `max_elems` (a power of two) entries.
pub const fn idx_valid(idx: u32, max_elems: u32) -> bool {
    idx & !idx_mask(max_elems) == 0
}

/// The slot `idx` names, or `None` if the index is out of range (an untrusted value).
pub const fn idx_slot(idx: u32, max_elems: u32) -> Option<u32> {
    if idx_valid(idx, max_elems) {
        Some(idx & (max_elems - 1))
    } else {
        None
    }
}

/// The index after `idx`, wrapping at `2 * max_elems`.
pub const fn idx_inc(idx: u32, max_elems: u32) -> u32 {
    idx.wrapping_add(1) & idx_mask(max_elems)
}

/// Ring occupancy from a producer and a consumer index: `Some(n)` entries queued, or `None` if
/// either index is out of range or the distance exceeds `max_elems` (untrusted indices).
pub fn ring_count(prod: u32, cons: u32, max_elems: u32) -> Option<u32> {
    if !max_elems.is_power_of_two() || !idx_valid(prod, max_elems) || !idx_valid(cons, max_elems) {
        return None;
    }
    let n = prod.wrapping_sub(cons) & idx_mask(max_elems);
    (n <= max_elems).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_wrap_at_twice_the_size() {
        assert_eq!(idx_inc(7, 4), 0);
        assert_eq!(idx_inc(3, 4), 4);
        assert_eq!(idx_slot(5, 4), Some(1));
        assert_eq!(idx_slot(8, 4), None);
        assert_eq!(ring_count(4, 0, 4), Some(4));
        assert_eq!(ring_count(0, 4, 4), Some(4));
        assert_eq!(ring_count(1, 6, 4), Some(3));
        assert_eq!(ring_count(9, 0, 4), None);
        assert_eq!(ring_count(1, 0, 3), None);
        // The largest power of two: indices span all of u32, nothing overflows.
        let big = 1 << 31;
        assert_eq!(idx_inc(u32::MAX, big), 0);
        assert_eq!(ring_count(0, u32::MAX, big), Some(1));
        assert_eq!(ring_count(big + 1, 0, big), None);
    }
}
