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
        if addr % PAGE_SIZE as u64 != 0 {
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

    /// The record of a ring the device produces into (CQ, event rings): `rx`.
    pub fn device_produced(&self, elems: u32) -> DeviceProduced {
        DeviceProduced { elems, prod: RX_PROD_TAIL, cons: RX_CONS_HEAD }
    }

    /// The send queue's record of a QP: `tx`.
    pub fn send_queue(&self, elems: u32) -> DriverProduced {
        DriverProduced { elems, prod: TX_PROD_TAIL, cons: TX_CONS_HEAD }
    }

    /// The receive queue's record of a QP, or an SRQ's: `rx`.
    pub fn recv_queue(&self, elems: u32) -> DriverProduced {
        DriverProduced { elems, prod: RX_PROD_TAIL, cons: RX_CONS_HEAD }
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
    /// Entries the device produced beyond the driver's consumer index `cons`: one acquire load
    /// of `prod_tail` (entries read after it are the device's), checked.
    pub fn pending<M: RecordMemory>(&self, mem: &M, cons: u32) -> Result<u32, RecordError<M::Error>> {
        let prod = mem.load_acquire(self.prod).map_err(RecordError::Memory)?;
        ring_count(prod, cons, self.elems).ok_or(RecordError::BadIndex { prod, cons, elems: self.elems })
    }

    /// Whether entries are queued, reading both indices from the page (for a reader that does
    /// not own the consumer index). A bad index counts as `true`: the owner's next read reports it.
    pub fn has_pending<M: RecordMemory>(&self, mem: &M) -> Result<bool, M::Error> {
        let prod = mem.load_acquire(self.prod)?;
        let cons = mem.load_acquire(self.cons)?;
        Ok(!matches!(ring_count(prod, cons, self.elems), Some(0)))
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
