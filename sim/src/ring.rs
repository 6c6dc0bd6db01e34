//! Device-side access to rings in guest memory (`abi::ring`).
//!
//! A ring is a ring-state page (two [`pvrdma_abi::ring::Ring`] index pairs, `tx` at byte 0 and
//! `rx` at byte 8) plus entry pages. Indices run over `0 .. 2 * elems`. The device never trusts an
//! index the driver wrote: every load is range-checked with the ABI helpers, and a bad index is
//! reported as [`RingFault`] for the caller to turn into an object error, never a panic.

use crate::mem::{GuestMemory, Span};
use pvrdma_abi::ring::{idx_inc, idx_mask, idx_slot, idx_valid, ring_count};
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

/// The entry pages of a ring: `elems` entries of `stride` bytes, packed from the first page,
/// each page resolved once when the ring is created (as QEMU maps a ring's pages at creation).
#[derive(Debug)]
pub struct RingPages {
    pages: Vec<u64>,
    spans: Vec<Span>,
    stride: u32,
    elems: u32,
}

impl RingPages {
    /// Entry pages for `elems` entries (a power of two) of `stride` bytes (a power of two of at
    /// most one page, so an entry never straddles pages). `None` if the geometry is invalid or
    /// `pages` cannot hold the entries. A page outside guest memory faults when it is used.
    pub fn new(mem: &GuestMemory, pages: Vec<u64>, stride: u32, elems: u32) -> Option<Self> {
        if !elems.is_power_of_two() || !stride.is_power_of_two() || stride as usize > PAGE_SIZE {
            return None;
        }
        let bytes = u64::from(elems).checked_mul(u64::from(stride))?;
        if bytes > pages.len() as u64 * PAGE {
            return None;
        }
        let used = bytes.div_ceil(PAGE) as usize;
        let spans = pages[..used].iter().map(|&p| mem.span(p, PAGE)).collect();
        Some(Self { pages, spans, stride, elems })
    }

    /// Host bytes its page lists take (charged to the device's host budget).
    pub fn host_bytes(&self) -> u64 {
        (self.pages.capacity() * size_of::<u64>() + self.spans.capacity() * size_of::<Span>()) as u64
    }

    /// Device address of entry `slot` (`0 .. elems`).
    pub fn slot_addr(&self, slot: u32) -> Option<u64> {
        let (page, off) = self.locate(slot)?;
        Some(self.pages[page] + off as u64)
    }

    /// (page, byte offset in it) of entry `slot`.
    fn locate(&self, slot: u32) -> Option<(usize, usize)> {
        if slot >= self.elems {
            return None;
        }
        let off = slot as usize * self.stride as usize;
        Some((off / PAGE_SIZE, off % PAGE_SIZE))
    }

    /// Copies `buf.len()` bytes at byte `at` of entry `slot` (within its stride).
    fn read(&self, mem: &GuestMemory, slot: u32, at: usize, buf: &mut [u8]) -> Result<(), RingFault> {
        let (page, off) = self.locate(slot).ok_or(RingFault)?;
        if at.checked_add(buf.len()).is_none_or(|end| end > self.stride as usize) {
            return Err(RingFault);
        }
        self.spans[page].read(mem, off + at, buf).map_err(|_| RingFault)
    }

    /// Writes `data` (at most one stride) into entry `slot`.
    fn write(&self, mem: &GuestMemory, slot: u32, data: &[u8]) -> Result<(), RingFault> {
        let (page, off) = self.locate(slot).ok_or(RingFault)?;
        let len = data.len().min(self.stride as usize);
        self.spans[page].write(mem, off, &data[..len]).map_err(|_| RingFault)
    }
}

/// A ring's two index words in its ring-state page, resolved once.
#[derive(Debug)]
struct Indices {
    state: Span,
    prod: usize,
    cons: usize,
}

impl Indices {
    fn new(mem: &GuestMemory, state_page: u64, half: Half) -> Self {
        let (p, c) = half.offsets();
        Self { state: mem.span(state_page, 16), prod: p as usize, cons: c as usize }
    }

    fn load(&self, mem: &GuestMemory, at: usize) -> Result<u32, RingFault> {
        self.state.load_u32(mem, at).map_err(|_| RingFault)
    }

    fn store(&self, mem: &GuestMemory, at: usize, v: u32) -> Result<(), RingFault> {
        self.state.store_u32(mem, at, v).map_err(|_| RingFault)
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
    idx: Indices,
    prod: u32,
}

impl Producer {
    /// A producer over `entries` whose ring state is the page at `state_page`. Adopts the
    /// `prod_tail` found there (zero on a fresh ring); `None` if it is out of range or the page is
    /// not guest memory.
    pub fn new(mem: &GuestMemory, entries: RingPages, state_page: u64) -> Option<Self> {
        let idx = Indices::new(mem, state_page, Half::Rx);
        let prod = idx.load(mem, idx.prod).ok()?;
        if !idx_valid(prod, entries.elems) {
            return None;
        }
        Some(Self { entries, idx, prod })
    }

    /// Writes `entry` (at most one stride) into the next slot, then stores the new producer index
    /// with release ordering. Never overwrites an entry the driver has not consumed.
    pub fn push(&mut self, mem: &GuestMemory, entry: &[u8]) -> Push {
        let n = self.entries.elems;
        let Ok(cons) = self.idx.load(mem, self.idx.cons) else {
            return Push::Fault;
        };
        match ring_count(self.prod, cons, n) {
            None => return Push::Fault,
            Some(used) if used >= n => return Push::Full,
            Some(_) => {}
        }
        let Some(slot) = idx_slot(self.prod, n) else {
            return Push::Fault;
        };
        if self.entries.write(mem, slot, entry).is_err() {
            return Push::Fault;
        }
        let next = idx_inc(self.prod, n);
        if self.idx.store(mem, self.idx.prod, next).is_err() {
            return Push::Fault;
        }
        self.prod = next;
        Push::Written
    }
}

impl Producer {
    /// Entries queued (produced, not yet consumed), by the device's producer index and the
    /// driver's `cons_head`.
    pub fn queued(&self, mem: &GuestMemory) -> Result<u32, RingFault> {
        let cons = self.idx.load(mem, self.idx.cons)?;
        ring_count(self.prod, cons, self.entries.elems).ok_or(RingFault)
    }

    /// Moves to `entries` (same stride): copies the entries queued between the consumer and the
    /// producer, in order, to slots `0 ..` of the new pages, then rewrites the ring state
    /// (`cons_head` 0, `prod_tail` the count). Nothing changes on a fault or if the new ring
    /// cannot hold the queued entries (`Err`).
    pub fn move_to(&mut self, mem: &GuestMemory, entries: RingPages) -> Result<u32, RingFault> {
        let queued = self.queued(mem)?;
        if queued > entries.elems || entries.stride != self.entries.stride {
            return Err(RingFault);
        }
        let cons = self.idx.load(mem, self.idx.cons)?;
        let mut buf = vec![0u8; self.entries.stride as usize];
        for k in 0..queued {
            let idx = cons.wrapping_add(k) & idx_mask(self.entries.elems);
            let slot = idx_slot(idx, self.entries.elems).ok_or(RingFault)?;
            self.entries.read(mem, slot, 0, &mut buf)?;
            entries.write(mem, k, &buf)?;
        }
        let prod = queued;
        self.idx.store(mem, self.idx.cons, 0)?;
        self.idx.store(mem, self.idx.prod, prod)?;
        self.entries = entries;
        self.prod = prod;
        Ok(queued)
    }

    /// Number of entries.
    pub fn elems(&self) -> u32 {
        self.entries.elems
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
    idx: Indices,
}

impl Consumer {
    /// A consumer over `entries` using the `half` index pair of the ring-state page.
    pub fn new(mem: &GuestMemory, entries: RingPages, state_page: u64, half: Half) -> Self {
        Self { entries, idx: Indices::new(mem, state_page, half) }
    }

    /// The next posted entry, `None` if the ring is empty.
    pub fn next(&self, mem: &GuestMemory) -> Result<Option<Slot>, RingFault> {
        let n = self.entries.elems;
        let prod = self.idx.load(mem, self.idx.prod)?;
        let cons = self.idx.load(mem, self.idx.cons)?;
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

    /// Copies `buf.len()` bytes at byte `at` of the entry at `slot` (within one stride).
    pub fn read(&self, mem: &GuestMemory, slot: Slot, at: usize, buf: &mut [u8]) -> Result<(), RingFault> {
        let s = idx_slot(slot.idx, self.entries.elems).ok_or(RingFault)?;
        self.entries.read(mem, s, at, buf)
    }

    /// Marks `slot` consumed: stores the following index into `cons_head` with release ordering.
    pub fn consume(&self, mem: &GuestMemory, slot: Slot) -> Result<(), RingFault> {
        let next = idx_inc(slot.idx, self.entries.elems);
        self.idx.store(mem, self.idx.cons, next)
    }

    /// Number of entries.
    pub fn elems(&self) -> u32 {
        self.entries.elems
    }

    /// How many entries are posted (producer minus consumer).
    pub fn posted(&self, mem: &GuestMemory) -> Result<u32, RingFault> {
        let prod = self.idx.load(mem, self.idx.prod)?;
        let cons = self.idx.load(mem, self.idx.cons)?;
        ring_count(prod, cons, self.entries.elems).ok_or(RingFault)
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
        let pages = RingPages::new(&mem, vec![page], 4, 2).unwrap();
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
        assert!(RingPages::new(&mem, vec![page], 4, 3).is_none());
        assert!(RingPages::new(&mem, vec![page], 64, 128).is_none());
    }

    #[test]
    fn consumer_reads_indices_from_memory() {
        let mem = GuestMemory::new(1 << 20);
        let state = mem.alloc(4096).unwrap();
        let page = mem.alloc(4096).unwrap();
        let c = Consumer::new(&mem, RingPages::new(&mem, vec![page], 128, 4).unwrap(), state, Half::Tx);
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

    #[test]
    fn pages_resolved_at_creation_fault_once_freed() {
        let mem = GuestMemory::new(1 << 20);
        let (state, page) = (mem.alloc(4096).unwrap(), mem.alloc(4096).unwrap());
        let mut p = Producer::new(&mem, RingPages::new(&mem, vec![page], 64, 4).unwrap(), state).unwrap();
        assert_eq!(p.push(&mem, &[1; 64]), Push::Written);
        assert!(mem.free(page));
        assert_eq!(p.push(&mem, &[2; 64]), Push::Fault, "an entry page the driver freed");
        let (state2, page2) = (mem.alloc(4096).unwrap(), mem.alloc(4096).unwrap());
        let c = Consumer::new(&mem, RingPages::new(&mem, vec![page2], 64, 4).unwrap(), state2, Half::Rx);
        mem.store_u32(state2 + 8, 1).unwrap();
        let s = c.next(&mem).unwrap().unwrap();
        let mut b = [0u8; 8];
        assert_eq!(c.read(&mem, s, 60, &mut b), Err(RingFault), "a read past the stride");
        assert!(mem.free(state2));
        assert_eq!(c.next(&mem), Err(RingFault), "a ring-state page the driver freed");
        let never = Consumer::new(&mem, RingPages::new(&mem, vec![0x1000], 64, 4).unwrap(), 0x2000, Half::Tx);
        assert_eq!(never.next(&mem), Err(RingFault), "pages that were never guest memory");
    }
}
