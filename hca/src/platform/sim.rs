//! The in-process backend: the device model of `pvrdma-sim`. DMA accessors compile down to copies
//! into the model's guest memory.

use super::{DmaWindow, Iova, Platform, PlatformError, VectorHandler};
use pvrdma_sim::mem::MemError;
use pvrdma_sim::{SimConfig, SimDevice, UAR_BASE_PFN};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The model as a platform.
#[derive(Clone)]
pub struct SimPlatform {
    dev: Arc<SimDevice>,
    /// The RoCE receive count at which [`SimPlatform::linger_roce`] last found the wire quiet
    /// (`u64::MAX`: never).
    quiet_at: Arc<AtomicU64>,
}

impl SimPlatform {
    /// A new model device configured by `cfg`.
    pub fn new(cfg: SimConfig) -> Self {
        Self::of(SimDevice::new(cfg))
    }

    fn of(dev: Arc<SimDevice>) -> Self {
        Self { dev, quiet_at: Arc::new(AtomicU64::new(u64::MAX)) }
    }

    /// [`SimPlatform::new`], failing if the model's RoCE port (`cfg.roce`) cannot open: a UDP
    /// address that cannot be bound (errno of the bind, e.g. `EADDRINUSE`) or a capture file
    /// that cannot be created; the model's [`pvrdma_sim::roce::RoceError`] is kept.
    pub fn try_new(cfg: SimConfig) -> ib_core::Result<Self> {
        SimDevice::try_new(cfg).map(Self::of).map_err(|e| {
            let errno = match &e {
                pvrdma_sim::roce::RoceError::Bind { source, .. } => source.raw_os_error(),
                pvrdma_sim::roce::RoceError::Pcap { source, .. } => source.raw_os_error(),
                pvrdma_sim::roce::RoceError::NoAddress => Some(libc::EINVAL),
            };
            ib_core::Error::Device(ib_core::DeviceError::new(errno.unwrap_or(libc::EIO), e))
        })
    }

    /// The model itself, for tests that inspect its counters or inject events.
    pub fn device(&self) -> &Arc<SimDevice> {
        &self.dev
    }

    /// Waits until the model's RoCE port has received nothing for `quiet`, at most `max` in all
    /// (at once without a RoCE port). A host's RoCE stack outlives one program; this model lives
    /// in the program's process, so before it goes (or a connected QP does) it keeps answering
    /// for a while: a peer whose last acknowledgement was lost resends and is acknowledged
    /// again, rather than retrying into a port that is gone and failing with "retry counter
    /// exceeded" after this end finished.
    pub fn linger_roce(&self, quiet: Duration, max: Duration) {
        if !self.dev.has_roce() {
            return;
        }
        let start = std::time::Instant::now();
        let mut seen = self.dev.stats().roce_rx_packets;
        if seen == self.quiet_at.load(Ordering::Acquire) {
            // Nothing arrived since the last linger found the wire quiet: it still is (a program
            // destroying many QPs waits once, not once per QP).
            return;
        }
        while start.elapsed() < max {
            std::thread::sleep(quiet);
            let now = self.dev.stats().roce_rx_packets;
            if now == seen {
                self.quiet_at.store(now, Ordering::Release);
                return;
            }
            seen = now;
        }
    }
}

/// A region of the model's guest memory, reached directly.
struct SimWindow(pvrdma_sim::mem::Window);

impl DmaWindow for SimWindow {
    fn size(&self) -> u64 {
        self.0.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) {
        self.0.read(offset as usize, buf);
    }
    fn write(&self, offset: u64, data: &[u8]) {
        self.0.write(offset as usize, data);
    }
    fn load_u32(&self, offset: u64) -> u32 {
        self.0.load_u32(offset as usize)
    }
    fn store_u32(&self, offset: u64, value: u32) {
        self.0.store_u32(offset as usize, value);
    }
}

fn map(e: MemError) -> PlatformError {
    match e {
        MemError::OutOfRange { iova, len } => PlatformError::BadDma { iova, len },
        MemError::Misaligned(a) => PlatformError::Misaligned(a),
        MemError::Exhausted { requested } => PlatformError::NoMemory(requested),
        // The consumer's memory went away under an MR: as an access outside DMA memory (EFAULT).
        MemError::Fault { iova, len } => PlatformError::BadDma { iova, len },
        MemError::NotMapped { addr, len, writable } => {
            PlatformError::NotMapped { addr: addr as usize, len: len as usize, writable }
        }
        MemError::Unsupported(what) => PlatformError::Unsupported(what),
    }
}

impl Platform for SimPlatform {
    fn shares_cpus(&self) -> bool {
        true
    }

    fn name(&self) -> String {
        "sim".into()
    }
    fn pci_id(&self) -> (u16, u16) {
        (pvrdma_abi::PCI_VENDOR_ID_VMWARE, pvrdma_abi::PCI_DEVICE_ID_VMWARE_PVRDMA)
    }
    fn reg_read(&self, offset: u32) -> u32 {
        self.dev.reg_read(offset)
    }
    fn reg_write(&self, offset: u32, value: u32) {
        self.dev.reg_write(offset, value)
    }
    fn uar_write(&self, offset: u64, value: u32) {
        self.dev.uar_write(offset, value)
    }
    fn uar_base_pfn(&self) -> u64 {
        UAR_BASE_PFN
    }
    fn uar_pages(&self) -> u32 {
        (pvrdma_abi::uar::UAR_BAR_SIZE / pvrdma_abi::uar::UAR_PAGE_SIZE) as u32
    }
    fn dma_alloc(&self, len: u64) -> Result<Iova, PlatformError> {
        self.dev.mem().alloc(len).map_err(map)
    }
    fn dma_free(&self, iova: Iova) {
        self.dev.mem().free(iova);
    }
    fn dma_window(&self, iova: Iova) -> Option<Arc<dyn DmaWindow>> {
        Some(Arc::new(SimWindow(self.dev.mem().window(iova)?)))
    }
    fn dma_read(&self, iova: Iova, buf: &mut [u8]) -> Result<(), PlatformError> {
        self.dev.mem().read(iova, buf).map_err(map)
    }
    fn dma_write(&self, iova: Iova, data: &[u8]) -> Result<(), PlatformError> {
        self.dev.mem().write(iova, data).map_err(map)
    }
    fn dma_load_u32(&self, iova: Iova) -> Result<u32, PlatformError> {
        self.dev.mem().load_u32(iova).map_err(map)
    }
    fn dma_store_u32(&self, iova: Iova, value: u32) -> Result<(), PlatformError> {
        self.dev.mem().store_u32(iova, value).map_err(map)
    }
    fn wait_vector(&self, vector: u16, timeout: Duration) -> u32 {
        self.dev.vectors().wait(vector, timeout)
    }
    fn set_vector_handler(&self, vector: u16, handler: Option<VectorHandler>) -> bool {
        self.dev.vectors().set_handler(vector, handler)
    }
    unsafe fn map_user(&self, addr: usize, len: usize, writable: bool) -> Result<Iova, PlatformError> {
        // SAFETY: the caller's promise (memory registered for the device, not reused until
        // `unmap_user`) is `map_external`'s contract.
        unsafe { self.dev.mem().map_external(addr, len, writable) }.map_err(map)
    }
    fn unmap_user(&self, iova: Iova) {
        self.dev.mem().free(iova);
    }
}
