//! A test platform: the model underneath, with hooks on the paths tests intercept (register reads
//! and writes, UAR writes, waits for a vector) and every other access passed straight through.
//! Unlike the model's own platform it runs no interrupt handler on the raising thread (every
//! interrupt reaches `wait_vector`, so a hook sees it) and, unless the hooks ask for it
//! ([`Hooks::direct_dma`]), resolves no DMA window (every access goes through the copy
//! accessors, as under qtest).

use hca::platform::sim::SimPlatform;
use hca::platform::{DmaWindow, Iova, Platform, PlatformError};
use std::sync::Arc;
use std::time::Duration;

/// What a test does on the intercepted paths; each default passes the access through.
pub trait Hooks: Send + Sync + 'static {
    /// A BAR1 register read.
    fn reg_read(&self, sim: &SimPlatform, offset: u32) -> u32 {
        sim.reg_read(offset)
    }
    /// A BAR1 register write.
    fn reg_write(&self, sim: &SimPlatform, offset: u32, value: u32) {
        sim.reg_write(offset, value)
    }
    /// A BAR2 (UAR) write.
    fn uar_write(&self, sim: &SimPlatform, offset: u64, value: u32) {
        sim.uar_write(offset, value)
    }
    /// A wait for MSI-X `vector`.
    fn wait_vector(&self, sim: &SimPlatform, vector: u16, timeout: Duration) -> u32 {
        sim.wait_vector(vector, timeout)
    }
    /// Whether DMA buffers are resolved to the model's memory once, as with the model's own
    /// platform (`false`: every access through the copy accessors).
    fn direct_dma(&self) -> bool {
        false
    }
}

/// The model behind `hooks`. Derefs to the hooks, so a test calls its own methods on it.
pub struct Intercept<H> {
    /// The model underneath.
    pub sim: SimPlatform,
    /// The test's hooks.
    pub hooks: H,
}

impl<H> std::ops::Deref for Intercept<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<H: Hooks> Platform for Intercept<H> {
    fn name(&self) -> String {
        "sim-intercepted".into()
    }
    fn pci_id(&self) -> (u16, u16) {
        self.sim.pci_id()
    }
    fn reg_read(&self, o: u32) -> u32 {
        self.hooks.reg_read(&self.sim, o)
    }
    fn reg_write(&self, o: u32, v: u32) {
        self.hooks.reg_write(&self.sim, o, v)
    }
    fn uar_write(&self, o: u64, v: u32) {
        self.hooks.uar_write(&self.sim, o, v)
    }
    fn uar_base_pfn(&self) -> u64 {
        self.sim.uar_base_pfn()
    }
    fn uar_pages(&self) -> u32 {
        self.sim.uar_pages()
    }
    fn dma_alloc(&self, len: u64) -> Result<Iova, PlatformError> {
        self.sim.dma_alloc(len)
    }
    fn dma_free(&self, iova: Iova) {
        self.sim.dma_free(iova)
    }
    fn dma_window(&self, iova: Iova) -> Option<Arc<dyn DmaWindow>> {
        self.hooks.direct_dma().then(|| self.sim.dma_window(iova)).flatten()
    }
    fn dma_read(&self, iova: Iova, buf: &mut [u8]) -> Result<(), PlatformError> {
        self.sim.dma_read(iova, buf)
    }
    fn dma_write(&self, iova: Iova, data: &[u8]) -> Result<(), PlatformError> {
        self.sim.dma_write(iova, data)
    }
    fn dma_load_u32(&self, iova: Iova) -> Result<u32, PlatformError> {
        self.sim.dma_load_u32(iova)
    }
    fn dma_store_u32(&self, iova: Iova, v: u32) -> Result<(), PlatformError> {
        self.sim.dma_store_u32(iova, v)
    }
    fn wait_vector(&self, v: u16, t: Duration) -> u32 {
        self.hooks.wait_vector(&self.sim, v, t)
    }
    unsafe fn map_user(&self, addr: usize, len: usize, writable: bool) -> Result<Iova, PlatformError> {
        // SAFETY: the caller's promise is passed on unchanged.
        unsafe { self.sim.map_user(addr, len, writable) }
    }
    fn unmap_user(&self, iova: Iova) {
        self.sim.unmap_user(iova)
    }
}
