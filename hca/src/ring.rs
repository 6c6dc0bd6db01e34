//! Consumer side of a ring the device produces into (the `rx` half of a ring-state page):
//! the CQ rings, the async-event ring and the CQ-notification ring (`pvrdma_ring.h`).
//!
//! Page 0 of the ring's memory is the ring state, read and written through the doorbell crate's
//! typed record ([`doorbell::record`]); entries start at page 1. The device's producer index is
//! untrusted: it is loaded with acquire ordering and validated against the ring size before any
//! entry is read; a bad index is [`Error::DeviceFatal`] (design decision 7). The consumer index
//! is the driver's own copy; the device sees it through a release store.

use crate::dma::{Abandon, DmaBuf};
use crate::error::from_platform;
use crate::pdir::PagedBuf;
use crate::platform::{DmaWindow, Platform};
use doorbell::record::{DeviceProduced, RecordError, RecordMemory, RecordPage};
use doorbell::Owner;
use ib_core::{Error, Result};
use pvrdma_abi::ring::{idx_mask, idx_slot};
use pvrdma_abi::PAGE_SIZE;
use std::sync::Arc;

/// The words of one ring-state page, reached through the platform by device address.
#[derive(Clone)]
pub struct RecordWords {
    platform: Arc<dyn Platform>,
    page: RecordPage,
    /// Page 0 resolved once, where the backend can (then no lookup per index access).
    window: Option<Arc<dyn DmaWindow>>,
}

impl RecordWords {
    /// The record page at the start of `buf` (page 0 of an object's page list) of `owner`.
    ///
    /// Errors: [`Error::InvalidArgument`] if the buffer is not page-aligned.
    pub fn new(platform: &Arc<dyn Platform>, buf: &PagedBuf, owner: Owner) -> Result<Self> {
        let page = RecordPage::new::<()>(buf.data().iova(), owner)
            .map_err(|_| Error::InvalidArgument("ring-state page not page-aligned"))?;
        Ok(Self { platform: platform.clone(), page, window: buf.data().window().cloned() })
    }

    /// The record page.
    pub fn page(&self) -> RecordPage {
        self.page
    }
}

impl RecordMemory for RecordWords {
    type Error = Error;

    /// `offset` is a ring-state word's (within the first 16 bytes of the page).
    fn load_acquire(&self, offset: u64) -> Result<u32> {
        match &self.window {
            Some(w) => Ok(w.load_u32(offset)),
            None => self.platform.dma_load_u32(self.page.addr() + offset).map_err(from_platform),
        }
    }

    fn store_release(&self, offset: u64, value: u32) -> Result<()> {
        match &self.window {
            Some(w) => {
                w.store_u32(offset, value);
                Ok(())
            }
            None => self.platform.dma_store_u32(self.page.addr() + offset, value).map_err(from_platform),
        }
    }
}

/// A record failure as the driver reports it: a bad index is the device's fault.
pub fn record_error(e: RecordError<Error>) -> Error {
    match e {
        RecordError::Memory(e) => e,
        RecordError::BadIndex { prod, cons, elems } => {
            tracing::error!(prod, cons, elems, "ring index out of range");
            Error::DeviceFatal
        }
        RecordError::Misplaced(_) => Error::InvalidArgument("ring-state page not page-aligned"),
    }
}

/// A device-produced ring of `elems` entries of `entry_size` bytes.
pub struct DevRing {
    buf: PagedBuf,
    words: RecordWords,
    record: DeviceProduced,
    elems: u32,
    entry_size: u64,
    cons: u32,
    /// The entry pages since the ring was resized (`None`: page 1 .. of `buf`, which stays
    /// allocated with the ring-state page until the ring goes).
    resized: Option<DmaBuf>,
}

/// New entry pages of a [`DevRing`], listed in its page directory, waiting for the device's
/// answer; dropping it frees them (with the tables the directory listed before).
pub struct StagedResize {
    entries: DmaBuf,
    elems: u32,
    _old_tables: Vec<DmaBuf>,
}

impl Abandon for StagedResize {
    fn abandon(&mut self) {
        self.entries.abandon();
        self._old_tables.iter_mut().for_each(Abandon::abandon);
    }
}

/// Pages a ring of `elems` entries of `entry_size` bytes needs: the ring-state page plus entries.
pub fn ring_pages(elems: u32, entry_size: u64) -> usize {
    1 + (u64::from(elems) * entry_size).div_ceil(PAGE_SIZE as u64) as usize
}

impl Abandon for DevRing {
    fn abandon(&mut self) {
        self.buf.abandon();
        if let Some(entries) = &mut self.resized {
            entries.abandon();
        }
    }
}

impl DevRing {
    /// Allocates a ring of `elems` (a power of two) entries and its page directory, for an
    /// object of `owner` (the kernel's for the event rings).
    ///
    /// Errors: [`Error::InvalidArgument`] if `elems` is not a power of two; platform faults.
    pub fn new(platform: &Arc<dyn Platform>, elems: u32, entry_size: u64, owner: Owner) -> Result<Self> {
        if !elems.is_power_of_two() || entry_size == 0 {
            return Err(Error::InvalidArgument("ring size must be a power of two"));
        }
        let buf = PagedBuf::new(platform, ring_pages(elems, entry_size))?;
        let words = RecordWords::new(platform, &buf, owner)?;
        let record = DeviceProduced::new(elems);
        Ok(Self { buf, words, record, elems, entry_size, cons: 0, resized: None })
    }

    /// The ring-state record and the words it lives in (for readers without the ring's lock).
    pub fn record(&self) -> (DeviceProduced, RecordWords) {
        (self.record, self.words.clone())
    }

    /// The ring's memory and page directory.
    pub fn buf(&self) -> &PagedBuf {
        &self.buf
    }

    /// Number of entries.
    pub fn elems(&self) -> u32 {
        self.elems
    }

    /// The driver's consumer index.
    #[cfg(test)]
    pub fn cons(&self) -> u32 {
        self.cons
    }

    /// Entries the device has produced and the driver not consumed.
    ///
    /// Errors: [`Error::DeviceFatal`] if the producer index is out of range or more than the ring
    /// size ahead of the consumer.
    pub fn pending(&self) -> Result<u32> {
        self.record.pending(&self.words, self.cons).map_err(record_error)
    }

    /// Copies the entry `k` places after the consumer index into `out` (`out.len()` bytes, at
    /// most the entry size).
    pub fn read(&self, k: u32, out: &mut [u8]) -> Result<()> {
        let at = self.entry_offset(self.cons.wrapping_add(k))?;
        let n = out.len().min(self.entry_size as usize);
        self.entries().read(at, &mut out[..n])
    }

    /// Copies the entries from `k` places after the consumer index into `out`, as many as fit
    /// (`out.len()` is a multiple of the entry size) and lie before the ring wraps, in one
    /// access; returns how many.
    pub fn read_run(&self, k: u32, out: &mut [u8]) -> Result<u32> {
        let idx = self.cons.wrapping_add(k) & idx_mask(self.elems);
        let slot = idx_slot(idx, self.elems).ok_or(Error::DeviceFatal)?;
        let fit = (out.len() as u64 / self.entry_size) as u32;
        let n = fit.min(self.elems - slot);
        let at = self.entry_offset(idx)?;
        self.entries().read(at, &mut out[..(u64::from(n) * self.entry_size) as usize])?;
        Ok(n)
    }

    /// Overwrites the entry `k` places after the consumer index (used to compact a CQ).
    pub fn write(&self, k: u32, data: &[u8]) -> Result<()> {
        let at = self.entry_offset(self.cons.wrapping_add(k))?;
        self.entries().write(at, &data[..data.len().min(self.entry_size as usize)])
    }

    /// Consumes `n` entries: advances the consumer index and publishes it (release).
    pub fn advance(&mut self, n: u32) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let mask = idx_mask(self.elems);
        self.cons = self.cons.wrapping_add(n) & mask;
        self.record.publish_cons(&self.words, self.cons)
    }

    /// RESIZE_CQ, driver side, before the command: allocates zeroed pages for `elems` entries (a
    /// power of two) and relists the ring's page directory in place as the ring-state page, then
    /// them. Nothing else changes until [`Self::commit_resize`]; [`Self::abort_resize`] relists the
    /// current pages.
    ///
    /// Errors: [`Error::InvalidArgument`] if `elems` is not a power of two; platform faults.
    pub fn stage_resize(&mut self, platform: &Arc<dyn Platform>, elems: u32) -> Result<StagedResize> {
        if !elems.is_power_of_two() {
            return Err(Error::InvalidArgument("ring size must be a power of two"));
        }
        let pages = ring_pages(elems, self.entry_size) - 1;
        let entries = DmaBuf::pages(platform, pages)?;
        let mut list = vec![self.buf.data().iova()];
        list.extend((0..pages).filter_map(|i| entries.page_iova(i)));
        let old_tables = self.buf.dir_mut().relist(platform, &list)?;
        Ok(StagedResize { entries, elems, _old_tables: old_tables })
    }

    /// The device took the new pages and moved the queued entries to slots `0 ..`, consumer
    /// index 0: the ring uses them from now on. Returns the old entry pages, freed by the caller
    /// (`None` for the ring's first pages, which share the ring-state page's allocation).
    pub fn commit_resize(&mut self, staged: StagedResize) -> Option<DmaBuf> {
        self.elems = staged.elems;
        self.record = DeviceProduced::new(staged.elems);
        self.cons = 0;
        self.resized.replace(staged.entries)
    }

    /// The device refused the resize: relists the pages the ring uses (the staged ones are freed).
    pub fn abort_resize(&mut self, platform: &Arc<dyn Platform>, staged: StagedResize) -> Result<()> {
        let mut list = vec![self.buf.data().iova()];
        match &self.resized {
            Some(e) => list.extend((0..e.num_pages()).filter_map(|i| e.page_iova(i))),
            None => list.extend((1..self.buf.num_pages()).filter_map(|i| self.buf.data().page_iova(i))),
        }
        self.buf.dir_mut().relist(platform, &list)?;
        drop(staged);
        Ok(())
    }

    fn entry_offset(&self, idx: u32) -> Result<u64> {
        let idx = idx & idx_mask(self.elems);
        let slot = idx_slot(idx, self.elems).ok_or(Error::DeviceFatal)?;
        let base = if self.resized.is_some() { 0 } else { PAGE_SIZE as u64 };
        Ok(base + u64::from(slot) * self.entry_size)
    }

    /// The buffer the entries live in (from [`Self::entry_offset`]'s base).
    fn entries(&self) -> &DmaBuf {
        self.resized.as_ref().unwrap_or(self.buf.data())
    }
}

/// Writes a work queue element (a QP's or an SRQ's) at `slot`: its header, then its SGEs (at most the queue's `max_sge`, which its
/// stride holds), straight into the ring: nothing allocated per work request.
pub(crate) fn write_wqe(buf: &DmaBuf, slot: u64, hdr: &[u8], sg: &[ib_core::Sge]) -> Result<()> {
    buf.write(slot, hdr)?;
    let mut at = slot + hdr.len() as u64;
    for s in sg {
        let mut e = pvrdma_abi::wqe::Sge::default();
        e.addr.set(s.addr);
        e.length.set(s.length);
        e.lkey.set(s.lkey);
        buf.write(at, zerocopy::IntoBytes::as_bytes(&e))?;
        at += zerocopy::IntoBytes::as_bytes(&e).len() as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::sim::SimPlatform;
    use pvrdma_abi::ring::{RX_CONS_HEAD, RX_PROD_TAIL};
    use pvrdma_sim::SimConfig;

    fn ring(elems: u32) -> DevRing {
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(SimConfig::default()));
        DevRing::new(&p, elems, 4, Owner::Kernel).unwrap()
    }

    fn produce(r: &DevRing, prod: u32) {
        r.buf.data().store_u32(RX_PROD_TAIL, prod).unwrap();
    }

    #[test]
    fn geometry() {
        assert_eq!(ring_pages(1024, 4), 2);
        assert_eq!(ring_pages(512, 8), 2);
        assert_eq!(ring_pages(65, 64), 3);
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(SimConfig::default()));
        assert!(DevRing::new(&p, 3, 4, Owner::Kernel).is_err());
    }

    #[test]
    fn consumes_and_wraps() {
        let mut r = ring(4);
        for (i, v) in [10u32, 11, 12, 13].iter().enumerate() {
            r.buf.data().write(4096 + 4 * i as u64, &v.to_le_bytes()).unwrap();
        }
        produce(&r, 3);
        assert_eq!(r.pending().unwrap(), 3);
        let mut b = [0u8; 4];
        r.read(2, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 12);
        r.advance(3).unwrap();
        assert_eq!(r.buf.data().load_u32(RX_CONS_HEAD).unwrap(), 3);
        produce(&r, 7);
        assert_eq!(r.pending().unwrap(), 4);
        r.read(1, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 10); // index 4 is slot 0
        r.advance(4).unwrap();
        assert_eq!(r.cons(), 7);
    }

    #[test]
    fn hostile_producer_indices_are_fatal() {
        let r = ring(4);
        produce(&r, 8); // out of range for 2 * 4
        assert_eq!(r.pending(), Err(Error::DeviceFatal));
        produce(&r, 0xffff_ffff);
        assert_eq!(r.pending(), Err(Error::DeviceFatal));
        let mut r = ring(4);
        r.advance(1).unwrap();
        produce(&r, 6); // 5 ahead of the consumer: more than the ring holds
        assert_eq!(r.pending(), Err(Error::DeviceFatal));
        produce(&r, 5);
        assert_eq!(r.pending(), Ok(4));
    }

    #[test]
    fn a_wqe_is_its_header_then_its_sges() {
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(SimConfig::default()));
        let buf = DmaBuf::pages(&p, 1).unwrap();
        let sg =
            [ib_core::Sge { addr: 0x1122, length: 7, lkey: 9 }, ib_core::Sge { addr: 0x3344, length: 8, lkey: 10 }];
        write_wqe(&buf, 128, &[0xab; 80], &sg).unwrap();
        let mut got = [0u8; 112];
        buf.read(128, &mut got).unwrap();
        assert!(got[..80].iter().all(|&b| b == 0xab));
        assert_eq!(u64::from_le_bytes(got[80..88].try_into().unwrap()), 0x1122);
        assert_eq!(u32::from_le_bytes(got[88..92].try_into().unwrap()), 7);
        assert_eq!(u32::from_le_bytes(got[92..96].try_into().unwrap()), 9);
        assert_eq!(u64::from_le_bytes(got[96..104].try_into().unwrap()), 0x3344);
        assert_eq!(u32::from_le_bytes(got[108..112].try_into().unwrap()), 10);
    }
}
