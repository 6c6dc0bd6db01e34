//! Device-side access to rings in guest memory (`abi::ring`).
//!
//! A ring is a ring-state page (two [`pvrdma_abi::ring::Ring`] index pairs, `tx` at byte 0 and
//! `rx` at byte 8) plus entry pages. Indices run over `0 .. 2 * elems`. The device never trusts an
//! index the driver wrote: every load is range-checked with the ABI helpers, and a bad index is
//! reported as [`RingFault`] for the caller to turn into an object error, never a panic.

use crate::mem::GuestMemory;
use pvrdma_abi::ring::{idx_inc, idx_slot, idx_valid, ring_count};
use pvrdma_abi::PAGE_SIZE;

const PAGE: u64 = PAGE_SIZE as u64;

/// A ring index or entry the device cannot use: an index out of range, a producer/consumer
/// distance beyond the ring size, or an entry page that is no longer guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFault;

/// Which index pair of a ring-state page a ring uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    /// Bytes 0..8: a QP's send queue.
    Tx,
    /// Bytes 8..16: a QP's receive queue, and every device-produced ring.
    Rx,
}

impl Half {
    fn offsets(self) -> (u64, u64) {
        use pvrdma_abi::ring::*;
        match self {
            Half::Tx => (TX_PROD_TAIL, TX_CONS_HEAD),
            Half::Rx => (RX_PROD_TAIL, RX_CONS_HEAD),
        }
    }
}

/// The entry pages of a ring: `elems` entries of `stride` bytes, packed from the first page.
#[derive(Debug)]
pub struct RingPages {
    pages: Vec<u64>,
    stride: u32,
    elems: u32,
}

impl RingPages {
    /// Entry pages for `elems` entries (a power of two) of `stride` bytes (a power of two of at
    /// most one page, so an entry never straddles pages). `None` if the geometry is invalid or
    /// `pages` cannot hold the entries.
    pub fn new(pages: Vec<u64>, stride: u32, elems: u32) -> Option<Self> {
        if !elems.is_power_of_two() || !stride.is_power_of_two() || stride as usize > PAGE_SIZE {
            return None;
        }
        let bytes = u64::from(elems).checked_mul(u64::from(stride))?;
        if bytes > pages.len() as u64 * PAGE {
            return None;
        }
        Some(Self { pages, stride, elems })
    }

    /// Device address of entry `slot` (`0 .. elems`).
    pub fn slot_addr(&self, slot: u32) -> Option<u64> {
        if slot >= self.elems {
            return None;
        }
        let off = u64::from(slot) * u64::from(self.stride);
        let page = self.pages.get((off / PAGE) as usize)?;
        Some(page + off % PAGE)
    }
}

/// Outcome of [`Producer::push`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    /// The entry was written and the producer index published.
    Written,
    /// No free entry: nothing was written.
    Full,
    /// The consumer index is out of range or the ring is no longer guest memory.
    Fault,
}

/// A ring the device produces into (`rx` half): a CQ, the async-event ring, the CQ-notification
/// ring. The device keeps its own producer index, so the driver scribbling on `prod_tail` cannot
/// make the device overwrite unconsumed entries.
#[derive(Debug)]
pub struct Producer {
    entries: RingPages,
    prod_at: u64,
    cons_at: u64,
    prod: u32,
}

impl Producer {
    /// A producer over `entries` whose ring state is the page at `state_page`. Adopts the
    /// `prod_tail` found there (zero on a fresh ring); `None` if it is out of range or the page is
    /// not guest memory.
    pub fn new(mem: &GuestMemory, entries: RingPages, state_page: u64) -> Option<Self> {
        let (p, c) = Half::Rx.offsets();
        let prod = mem.load_u32(state_page + p).ok()?;
        if !idx_valid(prod, entries.elems) {
            return None;
        }
        Some(Self { entries, prod_at: state_page + p, cons_at: state_page + c, prod })
    }

    /// Writes `entry` (at most one stride) into the next slot, then stores the new producer index
    /// with release ordering. Never overwrites an entry the driver has not consumed.
    pub fn push(&mut self, mem: &GuestMemory, entry: &[u8]) -> Push {
        let n = self.entries.elems;
        let Ok(cons) = mem.load_u32(self.cons_at) else {
            return Push::Fault;
        };
        match ring_count(self.prod, cons, n) {
            None => return Push::Fault,
            Some(used) if used >= n => return Push::Full,
            Some(_) => {}
        }
        let Some(addr) = idx_slot(self.prod, n).and_then(|s| self.entries.slot_addr(s)) else {
            return Push::Fault;
        };
        let len = entry.len().min(self.entries.stride as usize);
        if mem.write(addr, &entry[..len]).is_err() {
            return Push::Fault;
        }
        let next = idx_inc(self.prod, n);
        if mem.store_u32(self.prod_at, next).is_err() {
            return Push::Fault;
        }
        self.prod = next;
        Push::Written
    }
}

/// An entry the device may consume: its index and device address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The ring index (`0 .. 2 * elems`) of the entry, the consumer index before consuming it.
    pub idx: u32,
    /// Device address of the entry.
    pub addr: u64,
}

/// A ring the driver produces into and the device consumes: a QP's SQ (`tx`) or RQ (`rx`). Both
/// indices are read from guest memory on every access, as QEMU does, so the driver may reset them
/// (QP to RESET) without telling the device.
#[derive(Debug)]
pub struct Consumer {
    entries: RingPages,
    prod_at: u64,
    cons_at: u64,
}

impl Consumer {
    /// A consumer over `entries` using the `half` index pair of the ring-state page.
    pub fn new(entries: RingPages, state_page: u64, half: Half) -> Self {
        let (p, c) = half.offsets();
        Self { entries, prod_at: state_page + p, cons_at: state_page + c }
    }

    /// The next posted entry, `None` if the ring is empty.
    pub fn next(&self, mem: &GuestMemory) -> Result<Option<Slot>, RingFault> {
        let n = self.entries.elems;
        let prod = mem.load_u32(self.prod_at).map_err(|_| RingFault)?;
        let cons = mem.load_u32(self.cons_at).map_err(|_| RingFault)?;
        match ring_count(prod, cons, n) {
            None => Err(RingFault),
            Some(0) => Ok(None),
            Some(_) => {
                let slot = idx_slot(cons, n).ok_or(RingFault)?;
                let addr = self.entries.slot_addr(slot).ok_or(RingFault)?;
                Ok(Some(Slot { idx: cons, addr }))
            }
        }
    }

    /// Copies the first `buf.len()` bytes (at most one stride) of the entry at `slot`.
    pub fn read(&self, mem: &GuestMemory, slot: Slot, buf: &mut [u8]) -> Result<(), RingFault> {
        if buf.len() > self.entries.stride as usize {
            return Err(RingFault);
        }
        mem.read(slot.addr, buf).map_err(|_| RingFault)
    }

    /// Marks `slot` consumed: stores the following index into `cons_head` with release ordering.
    pub fn consume(&self, mem: &GuestMemory, slot: Slot) -> Result<(), RingFault> {
        let next = idx_inc(slot.idx, self.entries.elems);
        mem.store_u32(self.cons_at, next).map_err(|_| RingFault)
    }

    /// Number of entries.
    pub fn elems(&self) -> u32 {
        self.entries.elems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_never_overwrites_and_faults_on_garbage() {
        let mem = GuestMemory::new(1 << 20);
        let state = mem.alloc(4096).unwrap();
        let page = mem.alloc(4096).unwrap();
        let pages = RingPages::new(vec![page], 4, 2).unwrap();
        let mut p = Producer::new(&mem, pages, state).unwrap();
        assert_eq!(p.push(&mem, &1u32.to_le_bytes()), Push::Written);
        assert_eq!(p.push(&mem, &2u32.to_le_bytes()), Push::Written);
        assert_eq!(p.push(&mem, &3u32.to_le_bytes()), Push::Full);
        assert_eq!(mem.load_u32(page).unwrap(), 1);
        assert_eq!(mem.load_u32(state + 8).unwrap(), 2);
        mem.store_u32(state + 12, 1).unwrap();
        assert_eq!(p.push(&mem, &3u32.to_le_bytes()), Push::Written);
        assert_eq!(mem.load_u32(page).unwrap(), 3);
        mem.store_u32(state + 12, 0xdead_beef).unwrap();
        assert_eq!(p.push(&mem, &4u32.to_le_bytes()), Push::Fault);
        assert!(RingPages::new(vec![page], 4, 3).is_none());
        assert!(RingPages::new(vec![page], 64, 128).is_none());
    }

    #[test]
    fn consumer_reads_indices_from_memory() {
        let mem = GuestMemory::new(1 << 20);
        let state = mem.alloc(4096).unwrap();
        let page = mem.alloc(4096).unwrap();
        let c = Consumer::new(RingPages::new(vec![page], 128, 4).unwrap(), state, Half::Tx);
        assert_eq!(c.next(&mem), Ok(None));
        mem.store_u32(state, 1).unwrap();
        let s = c.next(&mem).unwrap().unwrap();
        assert_eq!(s, Slot { idx: 0, addr: page });
        c.consume(&mem, s).unwrap();
        assert_eq!(c.next(&mem), Ok(None));
        mem.store_u32(state, 9).unwrap();
        assert_eq!(c.next(&mem), Err(RingFault));
        mem.store_u32(state, 6).unwrap();
        assert_eq!(c.next(&mem), Err(RingFault));
    }
}
