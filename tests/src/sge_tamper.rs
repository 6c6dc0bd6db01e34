//! A platform wrapper that plays a hostile user: it passes every access through to the device
//! underneath (the model or QEMU over qtest), except that the send WQE header of one marked work
//! request reaches DMA memory with a `num_sge` the driver would never write. DMA buffers are not
//! resolved to windows, so every WQE write passes here.

use hca::platform::{Iova, Platform, PlatformError, VectorHandler};
use pvrdma_abi::wqe::SqWqeHdr;
use std::sync::Arc;
use std::time::Duration;
use zerocopy::{FromBytes, IntoBytes};

/// `inner`, with the send WQE whose `wr_id` is `wr_id` written with `num_sge` SGEs.
pub struct SgeTamper {
    /// The device underneath.
    pub inner: Arc<dyn Platform>,
    /// The marked work request.
    pub wr_id: u64,
    /// The `num_sge` its header is given.
    pub num_sge: u32,
}

impl SgeTamper {
    /// `data` with the marked header's `num_sge` replaced (a copy), or `None` for anything else.
    fn rewrite(&self, data: &[u8]) -> Option<Vec<u8>> {
        let mut hdr = SqWqeHdr::read_from_bytes(data).ok()?;
        (hdr.wr_id.get() == self.wr_id).then(|| {
            hdr.num_sge.set(self.num_sge);
            hdr.as_bytes().to_vec()
        })
    }
}

impl Platform for SgeTamper {
    fn name(&self) -> String {
        format!("{}+sge-tamper", self.inner.name())
    }
    fn pci_id(&self) -> (u16, u16) {
        self.inner.pci_id()
    }
    fn reg_read(&self, o: u32) -> u32 {
        self.inner.reg_read(o)
    }
    fn reg_write(&self, o: u32, v: u32) {
        self.inner.reg_write(o, v)
    }
    fn uar_write(&self, o: u64, v: u32) {
        self.inner.uar_write(o, v)
    }
    fn uar_base_pfn(&self) -> u64 {
        self.inner.uar_base_pfn()
    }
    fn uar_pages(&self) -> u32 {
        self.inner.uar_pages()
    }
    fn dma_alloc(&self, len: u64) -> Result<Iova, PlatformError> {
        self.inner.dma_alloc(len)
    }
    fn dma_free(&self, iova: Iova) {
        self.inner.dma_free(iova)
    }
    fn dma_read(&self, iova: Iova, buf: &mut [u8]) -> Result<(), PlatformError> {
        self.inner.dma_read(iova, buf)
    }
    fn dma_write(&self, iova: Iova, data: &[u8]) -> Result<(), PlatformError> {
        match self.rewrite(data) {
            Some(bad) => self.inner.dma_write(iova, &bad),
            None => self.inner.dma_write(iova, data),
        }
    }
    fn dma_load_u32(&self, iova: Iova) -> Result<u32, PlatformError> {
        self.inner.dma_load_u32(iova)
    }
    fn dma_store_u32(&self, iova: Iova, v: u32) -> Result<(), PlatformError> {
        self.inner.dma_store_u32(iova, v)
    }
    fn wait_vector(&self, v: u16, t: Duration) -> u32 {
        self.inner.wait_vector(v, t)
    }
    fn set_vector_handler(&self, v: u16, h: Option<VectorHandler>) -> bool {
        self.inner.set_vector_handler(v, h)
    }
    unsafe fn map_user(&self, addr: usize, len: usize, writable: bool) -> Result<Iova, PlatformError> {
        // SAFETY: the caller's promise is passed on unchanged.
        unsafe { self.inner.map_user(addr, len, writable) }
    }
    fn unmap_user(&self, iova: Iova) {
        self.inner.unmap_user(iova)
    }
}
