//! DMA buffers: RAII ownership of memory the platform allocated, reached only by device address
//! through the platform's copy and atomic-word accessors (`docs/decisions.md`, decision 4).
//! Every access is bounds-checked against the buffer before it reaches the platform.

use crate::error::from_platform;
use crate::platform::{DmaWindow, Iova, Platform};
use ib_core::{Error, Result};
use pvrdma_abi::PAGE_SIZE;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes held by live [`DmaBuf`]s of every device in this process.
static OUTSTANDING: AtomicU64 = AtomicU64::new(0);

/// Bytes of DMA memory the driver holds now: allocated by a [`DmaBuf`] and not yet freed, over
/// every device of the process (whole pages). A leak check compares it with a baseline taken
/// when no other device allocates meanwhile; 0 once every device is gone.
pub fn outstanding_bytes() -> u64 {
    OUTSTANDING.load(Ordering::Relaxed)
}

/// One allocation of zeroed, page-aligned DMA memory, freed on drop (unless abandoned).
pub struct DmaBuf {
    platform: Arc<dyn Platform>,
    iova: Iova,
    len: u64,
    /// The memory resolved once at allocation, where the backend can (the model).
    window: Option<Arc<dyn DmaWindow>>,
    /// Freed on drop, unless [`Abandon::abandon`]ed.
    free_on_drop: bool,
}

/// Memory the device may still write (its DESTROY was refused or never answered, or it named a
/// live handle): given up without being freed, so no later allocation can meet the device's
/// writes. The allocation stays for the platform's life (and counted); the platform itself is
/// not kept alive by it.
pub trait Abandon {
    /// Gives the memory up without freeing it (in place: the owner may still be dropped).
    fn abandon(&mut self);
}

impl Abandon for DmaBuf {
    fn abandon(&mut self) {
        self.free_on_drop = false;
    }
}

impl<A: Abandon, B: Abandon> Abandon for (A, B) {
    fn abandon(&mut self) {
        self.0.abandon();
        self.1.abandon();
    }
}

impl DmaBuf {
    /// Allocates `len` bytes (rounded up to whole 4 KiB pages, at least one page).
    ///
    /// Errors: [`Error::Device`] when the platform is out of DMA memory.
    pub fn new(platform: &Arc<dyn Platform>, len: u64) -> Result<Self> {
        let len = len.max(1).div_ceil(PAGE_SIZE as u64) * PAGE_SIZE as u64;
        let iova = platform.dma_alloc(len).map_err(from_platform)?;
        let window = platform.dma_window(iova).filter(|w| w.size() >= len);
        OUTSTANDING.fetch_add(len, Ordering::Relaxed);
        Ok(Self { platform: platform.clone(), iova, len, window, free_on_drop: true })
    }

    /// Allocates `pages` whole pages.
    pub fn pages(platform: &Arc<dyn Platform>, pages: usize) -> Result<Self> {
        Self::new(platform, (pages.max(1) * PAGE_SIZE) as u64)
    }

    /// The memory resolved at allocation, if the backend could (the model).
    pub fn window(&self) -> Option<&Arc<dyn DmaWindow>> {
        self.window.as_ref()
    }

    /// Device address of the first byte.
    pub fn iova(&self) -> Iova {
        self.iova
    }

    /// Length in bytes (a multiple of the page size).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always `false`: a buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of 4 KiB pages.
    pub fn num_pages(&self) -> usize {
        (self.len / PAGE_SIZE as u64) as usize
    }

    /// Device address of page `i`, or `None` past the end.
    pub fn page_iova(&self, i: usize) -> Option<Iova> {
        (i < self.num_pages()).then(|| self.iova + (i * PAGE_SIZE) as u64)
    }

    /// Copies `buf.len()` bytes at byte `offset` into `buf`.
    ///
    /// Errors: [`Error::InvalidArgument`] outside the buffer; [`Error::Device`] on a fault.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.at(offset, buf.len() as u64)?;
        match &self.window {
            Some(w) => {
                w.read(offset, buf);
                Ok(())
            }
            None => self.platform.dma_read(at, buf).map_err(from_platform),
        }
    }

    /// Copies `data` to byte `offset`.
    ///
    /// Errors: [`Error::InvalidArgument`] outside the buffer; [`Error::Device`] on a fault.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.at(offset, data.len() as u64)?;
        match &self.window {
            Some(w) => {
                w.write(offset, data);
                Ok(())
            }
            None => self.platform.dma_write(at, data).map_err(from_platform),
        }
    }

    /// Loads the little-endian u32 at byte `offset` with acquire ordering.
    pub fn load_u32(&self, offset: u64) -> Result<u32> {
        let at = self.word_at(offset)?;
        match &self.window {
            Some(w) => Ok(w.load_u32(offset)),
            None => self.platform.dma_load_u32(at).map_err(from_platform),
        }
    }

    /// Stores the little-endian u32 at byte `offset` with release ordering.
    pub fn store_u32(&self, offset: u64, value: u32) -> Result<()> {
        let at = self.word_at(offset)?;
        match &self.window {
            Some(w) => {
                w.store_u32(offset, value);
                Ok(())
            }
            None => self.platform.dma_store_u32(at, value).map_err(from_platform),
        }
    }

    /// Zeroes `len` bytes at `offset`, a page at a time (never a buffer of `len` bytes).
    ///
    /// Errors: [`Error::InvalidArgument`] outside the buffer (checked before anything is
    /// written); [`Error::Device`] on a fault.
    pub fn zero(&self, offset: u64, len: u64) -> Result<()> {
        self.at(offset, len)?;
        const ZEROS: [u8; PAGE_SIZE] = [0; PAGE_SIZE];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(PAGE_SIZE as u64);
            self.write(offset + done, &ZEROS[..n as usize])?;
            done += n;
        }
        Ok(())
    }

    /// As [`DmaBuf::at`] for a 32-bit word, which must be 4-byte aligned.
    fn word_at(&self, offset: u64) -> Result<Iova> {
        if offset & 3 != 0 {
            return Err(Error::InvalidArgument("DMA word access not 4-byte aligned"));
        }
        self.at(offset, 4)
    }

    fn at(&self, offset: u64, len: u64) -> Result<Iova> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.iova + offset),
            _ => Err(Error::InvalidArgument("DMA access outside its buffer")),
        }
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        if self.free_on_drop {
            self.platform.dma_free(self.iova);
            OUTSTANDING.fetch_sub(self.len, Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DmaBuf({:#x}+{:#x})", self.iova, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::sim::SimPlatform;

    #[test]
    fn zero_is_bounded_by_the_buffer_and_chunked() {
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(pvrdma_sim::SimConfig::default()));
        let b = DmaBuf::pages(&p, 3).unwrap();
        b.write(0, &[0xa5; 3 * PAGE_SIZE]).unwrap();
        b.zero(100, 2 * PAGE_SIZE as u64).unwrap();
        let mut got = vec![0u8; 3 * PAGE_SIZE];
        b.read(0, &mut got).unwrap();
        assert!(got[..100].iter().all(|&x| x == 0xa5));
        assert!(got[100..100 + 2 * PAGE_SIZE].iter().all(|&x| x == 0));
        assert!(got[100 + 2 * PAGE_SIZE..].iter().all(|&x| x == 0xa5));
        for (off, len) in [(0, u64::MAX), (1, u64::MAX), (0, 1 << 40), (u64::MAX, 1)] {
            assert!(b.zero(off, len).is_err(), "{off} {len}");
        }
    }
}
