//! Ring-state records: pvrdma's doorbell records. The device has no doorbell-record memory of
//! its own; what it reads instead of a register is the ring-state header (`struct
//! pvrdma_ring_state`: `tx` then `rx`, each `prod_tail`, `cons_head`) at the start of page 0 of
//! each CQ's, QP's and SRQ's own page list — the page QEMU maps for the object. A record is
//! therefore made from that page ([`RecordPage`]) and typed by who writes which index:
//!
//! | object | half | driver writes (release store) | device writes (driver: acquire load, untrusted) |
//! |---|---|---|---|
//! | CQ, async-event ring, CQ-notification ring | `rx` | `cons_head` after reading entries | `prod_tail` |
//! | QP send queue | `tx` | `prod_tail` after writing WQEs, before the doorbell | `cons_head` |
//! | QP receive queue, SRQ | `rx` | `prod_tail` after writing WQEs, before the doorbell | `cons_head` |
//!
//! Every index the device wrote is checked against the ring size before use
//! ([`RecordError::BadIndex`]). A record page belongs to one owner: a kernel object's page list
//! is the kernel's memory, a user context's object's is memory allocated for that context, each
//! page-aligned and never shared, so no page holds records of two owners.

use crate::handle::Owner;
use pvrdma_abi::ring::{ring_count, RX_CONS_HEAD, RX_PROD_TAIL, TX_CONS_HEAD, TX_PROD_TAIL};
use pvrdma_abi::PAGE_SIZE;
use thiserror::Error;

/// 32-bit little-endian word access to a record page, by byte offset within the page: acquire
/// loads and release stores (the platform's DMA accessors; never a Rust reference into memory
/// the device writes, design decision 4).
pub trait RecordMemory {
    /// The memory's access error.
    type Error;
    /// Loads the word at `offset` with acquire ordering.
    fn load_acquire(&self, offset: u64) -> Result<u32, Self::Error>;
    /// Stores `value` at `offset` with release ordering.
    fn store_release(&self, offset: u64, value: u32) -> Result<(), Self::Error>;
}

/// A record access failure.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordError<E> {
    /// The memory could not be reached.
    #[error("ring-state page unreachable")]
    Memory(E),
    /// An index the device wrote is out of range or too far ahead (the device is not trusted).
    #[error("ring index out of range: producer {prod}, consumer {cons}, {elems} entries")]
    BadIndex {
        /// Producer index.
        prod: u32,
        /// Consumer index.
        cons: u32,
        /// Ring entries.
        elems: u32,
    },
    /// The record page is not the page-aligned start of its page list.
    #[error("ring-state page at {0:#x} is not page-aligned")]
    Misplaced(u64),
}

/// Page 0 of one object's page list: where its ring-state record lives, and whose it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordPage {
    addr: u64,
    owner: Owner,
}

impl RecordPage {
    /// The record page at device address `addr` (page 0 of the object's page list) of an object
    /// of `owner`.
    ///
    /// Errors: [`RecordError::Misplaced`] unless `addr` is page-aligned.
    pub fn new<E>(addr: u64, owner: Owner) -> Result<Self, RecordError<E>> {
        if addr & (PAGE_SIZE as u64 - 1) != 0 {
            return Err(RecordError::Misplaced(addr));
        }
        Ok(Self { addr, owner })
    }

    /// Device address of the page.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Whose object's record this is.
    pub fn owner(&self) -> Owner {
        self.owner
    }
}

/// The record of a ring the device produces into: the device writes `prod_tail`, the driver
/// `cons_head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProduced {
    elems: u32,
    prod: u64,
    cons: u64,
}

impl DeviceProduced {
    /// The record of a ring of `elems` entries the device produces into (CQ, event rings): `rx`
    /// of its record page.
    pub fn new(elems: u32) -> Self {
        Self { elems, prod: RX_PROD_TAIL, cons: RX_CONS_HEAD }
    }

    /// Entries the device produced beyond the driver's consumer index `cons`: one acquire load
    /// of `prod_tail` (entries read after it are the device's), checked.
    pub fn pending<M: RecordMemory>(&self, mem: &M, cons: u32) -> Result<u32, RecordError<M::Error>> {
        let prod = mem.load_acquire(self.prod).map_err(RecordError::Memory)?;
        ring_count(prod, cons, self.elems).ok_or(RecordError::BadIndex { prod, cons, elems: self.elems })
    }

    /// Whether entries are queued, reading both indices from the page (for a reader that does
    /// not own the consumer index). Errors: [`RecordError::BadIndex`] for an index out of range
    /// (a reader unsure what the device meant counts it as queued: the owner's next read fails
    /// on it too).
    pub fn has_pending<M: RecordMemory>(&self, mem: &M) -> Result<bool, RecordError<M::Error>> {
        let prod = mem.load_acquire(self.prod).map_err(RecordError::Memory)?;
        let cons = mem.load_acquire(self.cons).map_err(RecordError::Memory)?;
        let n = ring_count(prod, cons, self.elems).ok_or(RecordError::BadIndex { prod, cons, elems: self.elems })?;
        Ok(n > 0)
    }

    /// Publishes the driver's consumer index (release: the entries were read before it).
    pub fn publish_cons<M: RecordMemory>(&self, mem: &M, cons: u32) -> Result<(), M::Error> {
        mem.store_release(self.cons, cons)
    }
}

/// The record of a work queue the driver produces into: the driver writes `prod_tail`, the
/// device `cons_head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverProduced {
    elems: u32,
    prod: u64,
    cons: u64,
}

impl DriverProduced {
    /// The send queue's record of a QP of `elems` slots: `tx` of its record page.
    pub fn send_queue(elems: u32) -> Self {
        Self { elems, prod: TX_PROD_TAIL, cons: TX_CONS_HEAD }
    }

    /// The receive queue's record of a QP, or an SRQ's: `rx` of its record page.
    pub fn recv_queue(elems: u32) -> Self {
        Self { elems, prod: RX_PROD_TAIL, cons: RX_CONS_HEAD }
    }

    /// Slots in use between the driver's producer index `prod` and the device's `cons_head`
    /// (acquire: the device finished with the slots before it), checked.
    pub fn in_use<M: RecordMemory>(&self, mem: &M, prod: u32) -> Result<u32, RecordError<M::Error>> {
        let cons = mem.load_acquire(self.cons).map_err(RecordError::Memory)?;
        ring_count(prod, cons, self.elems).ok_or(RecordError::BadIndex { prod, cons, elems: self.elems })
    }

    /// Publishes the driver's producer index (release: the WQEs were written before it). The
    /// doorbell that announces it comes after, with its own barrier.
    pub fn publish_prod<M: RecordMemory>(&self, mem: &M, prod: u32) -> Result<(), M::Error> {
        mem.store_release(self.prod, prod)
    }

    /// Sets both indices to 0 (after a move to RESET, as Linux's `pvrdma_reset_qp`).
    pub fn reset<M: RecordMemory>(&self, mem: &M) -> Result<(), M::Error> {
        mem.store_release(self.cons, 0)?;
        mem.store_release(self.prod, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU32, Ordering};

    /// A ring-state header in plain memory: four words.
    #[derive(Default)]
    struct Words([AtomicU32; 4]);

    impl RecordMemory for Words {
        type Error = ();
        fn load_acquire(&self, offset: u64) -> Result<u32, ()> {
            self.0.get(offset as usize / 4).map(|w| w.load(Ordering::Acquire)).ok_or(())
        }
        fn store_release(&self, offset: u64, value: u32) -> Result<(), ()> {
            self.0.get(offset as usize / 4).map(|w| w.store(value, Ordering::Release)).ok_or(())
        }
    }

    impl Words {
        fn get(&self, offset: u64) -> u32 {
            self.0[offset as usize / 4].load(Ordering::Relaxed)
        }
        fn set(&self, offset: u64, v: u32) {
            self.0[offset as usize / 4].store(v, Ordering::Relaxed);
        }
    }

    #[test]
    fn each_side_writes_its_own_index() {
        let m = Words::default();
        let (sq, rq, cq) = (DriverProduced::send_queue(4), DriverProduced::recv_queue(8), DeviceProduced::new(16));
        sq.publish_prod(&m, 3).unwrap();
        rq.publish_prod(&m, 5).unwrap();
        assert_eq!((m.get(TX_PROD_TAIL), m.get(RX_PROD_TAIL)), (3, 5), "the driver's producer indices");
        m.set(TX_CONS_HEAD, 1); // the device consumed one send WQE
        assert_eq!(sq.in_use(&m, 3), Ok(2));
        m.set(RX_PROD_TAIL, 4); // a CQ ring on its own page: the device produced 4
        assert_eq!(cq.pending(&m, 0), Ok(4));
        cq.publish_cons(&m, 4).unwrap();
        assert_eq!(m.get(RX_CONS_HEAD), 4);
        assert_eq!(cq.has_pending(&m), Ok(false));
        sq.reset(&m).unwrap();
        assert_eq!((m.get(TX_PROD_TAIL), m.get(TX_CONS_HEAD)), (0, 0));
    }

    #[test]
    fn device_indices_are_checked_and_pages_placed() {
        let m = Words::default();
        m.set(RX_PROD_TAIL, 40); // beyond 2 * 16
        let bad = RecordError::BadIndex { prod: 40, cons: 0, elems: 16 };
        assert_eq!(DeviceProduced::new(16).pending(&m, 0), Err(bad.clone()));
        assert_eq!(DeviceProduced::new(16).has_pending(&m), Err(bad), "a reader of both indices finds it too");
        m.set(TX_CONS_HEAD, 3); // 5 behind the producer: more than the ring holds
        assert!(matches!(DriverProduced::send_queue(4).in_use(&m, 0), Err(RecordError::BadIndex { .. })));
        assert_eq!(RecordPage::new::<()>(0x5008, Owner::Kernel), Err(RecordError::Misplaced(0x5008)));
    }
}
