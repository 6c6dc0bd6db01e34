//! The GSI agent's bookkeeping, apart from any device: which send slots are free, the received
//! MADs not yet taken (at most one per receive buffer), and the address handles per destination.

use super::{GsiAddr, MAD_SIZE};
use crate::attr::Gid;
use std::collections::VecDeque;

/// Send slots (indices into the send buffer), each free or in flight.
pub(super) struct Slots {
    free: Vec<u32>,
    count: u32,
}

impl Slots {
    /// `count` slots, all free.
    pub(super) fn new(count: u32) -> Self {
        Self { free: (0..count).rev().collect(), count }
    }

    /// A free slot, now in flight.
    pub(super) fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Slot `i` is free again (its send completed). A slot that is no slot, or already free (a
    /// completion the device made up), is ignored.
    pub(super) fn give(&mut self, i: u32) {
        if i < self.count && !self.free.contains(&i) {
            self.free.push(i);
        }
    }

    /// Slots in flight.
    pub(super) fn in_flight(&self) -> usize {
        self.count as usize - self.free.len()
    }

    /// Every slot free (the QP was reset: nothing is in flight).
    pub(super) fn reset(&mut self) {
        *self = Self::new(self.count);
    }
}

/// A received MAD not yet taken.
pub(super) struct Received {
    /// Where it came from.
    pub(super) from: GsiAddr,
    /// Its length (at most [`MAD_SIZE`]).
    pub(super) len: usize,
    /// Its bytes (the first `len`).
    pub(super) mad: [u8; MAD_SIZE],
}

/// The received MADs not yet taken, oldest first, at most `limit`.
pub(super) struct Backlog {
    queue: VecDeque<Received>,
    limit: usize,
}

impl Backlog {
    pub(super) fn new(limit: usize) -> Self {
        Self { queue: VecDeque::new(), limit }
    }

    /// Queues `r`; `false` (dropped) when `limit` wait already.
    pub(super) fn push(&mut self, r: Received) -> bool {
        if self.queue.len() >= self.limit {
            return false;
        }
        self.queue.push_back(r);
        true
    }

    pub(super) fn pop(&mut self) -> Option<Received> {
        self.queue.pop_front()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// What an address handle of the agent is for: the destination GID and the GRH fields a send
/// sets (source GID index, flow label, hop limit, traffic class).
pub(super) type AhKey = (Gid, u8, u32, u8, u8);

/// The address handles made so far, at most `limit`: the oldest goes to make room.
pub(super) struct AhCache<T> {
    entries: VecDeque<(AhKey, T)>,
    limit: usize,
}

impl<T> AhCache<T> {
    pub(super) fn new(limit: usize) -> Self {
        Self { entries: VecDeque::new(), limit }
    }

    /// The handle for `key`, made by `make` if there is none.
    pub(super) fn get_or_make<E>(&mut self, key: AhKey, make: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        let at = match self.entries.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let made = make()?;
                if self.entries.len() >= self.limit {
                    self.entries.pop_front();
                }
                self.entries.push_back((key, made));
                self.entries.len() - 1
            }
        };
        Ok(&self.entries[at].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_run_out_and_come_back_once() {
        let mut s = Slots::new(2);
        let (a, b) = (s.take().unwrap(), s.take().unwrap());
        assert_ne!(a, b);
        assert_eq!(s.take(), None, "both in flight");
        s.give(a);
        s.give(a);
        s.give(7);
        assert_eq!(s.take(), Some(a));
        assert_eq!(s.take(), None, "a slot given back twice, or no slot, frees nothing more");
        s.reset();
        assert!(s.take().is_some() && s.take().is_some() && s.take().is_none());
    }

    #[test]
    fn the_backlog_is_bounded() {
        let mut q = Backlog::new(1);
        let r = || Received { from: GsiAddr::default(), len: 1, mad: [0; MAD_SIZE] };
        assert!(q.push(r()));
        assert!(!q.push(r()), "full: dropped");
        assert!(q.pop().is_some() && q.pop().is_none() && q.is_empty());
    }

    #[test]
    fn the_ah_cache_keeps_one_per_destination_and_at_most_its_limit() {
        let mut c = AhCache::new(2);
        let key = |n: u8| ([n; 16], 1, 0, 64, 0);
        let mut made = 0;
        for n in [1, 1, 2, 1, 3, 1] {
            let got: Result<&u8, ()> = c.get_or_make(key(n), || {
                made += 1;
                Ok(n)
            });
            assert_eq!(*got.unwrap(), n);
        }
        assert_eq!(made, 4, "1, 2, 3, then 1 again once 3 pushed it out");
        assert_eq!(c.get_or_make::<()>(key(9), || Err(())), Err(()), "a refused handle is not cached");
    }
}
