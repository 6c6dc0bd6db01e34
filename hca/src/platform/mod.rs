//! The platform interface: everything the driver needs from a device and nothing more — BAR1
//! register access, BAR2 (UAR) writes, DMA memory by device address, and interrupt vectors.
//! Backends: the in-process model (`sim::SimPlatform`, with the default feature `model`), QEMU's own device driven over its qtest
//! protocol ([`qtest::QtestPlatform`]), and VFIO ([`vfio`], on `pci-driver`).
//!
//! DMA memory is reached only through copy-in/copy-out accessors and 32-bit atomic words, never
//! through a Rust reference, so a backend whose memory is not mapped into this process (QEMU over
//! qtest) fits unchanged (`docs/decisions.md`, decision 4). A backend that can reach an
//! allocation directly hands back a [`DmaWindow`] on it, resolved once at allocation (the model
//! does), so hot paths make no lookup per access (decision 20); the others keep the by-address
//! accessors.

pub mod qtest;
// The unit tests of the other modules run on the model whatever the features (a dev-dependency).
#[cfg(any(feature = "model", test))]
pub mod sim;
#[cfg(target_os = "linux")]
pub mod vfio;

use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// A device address (IOVA) of DMA memory.
pub type Iova = u64;

/// A platform fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlatformError {
    /// A DMA access outside memory the platform allocated.
    #[error("DMA access at {iova:#x}+{len} is outside allocated memory")]
    BadDma {
        /// Start of the access.
        iova: Iova,
        /// Bytes accessed.
        len: u64,
    },
    /// An atomic DMA access that is not 4-byte aligned.
    #[error("DMA word access at {0:#x} is not aligned")]
    Misaligned(Iova),
    /// Out of DMA memory or IOMMU space.
    #[error("DMA allocation of {0} bytes failed")]
    NoMemory(u64),
    /// The backend failed (I/O on a VFIO device, a dead qtest connection).
    #[error("platform I/O error: {0}")]
    Io(String),
    /// The backend cannot do this (e.g. qtest cannot map host memory for the device).
    #[error("not supported by this platform: {0}")]
    Unsupported(&'static str),
    /// [`Platform::map_user`]: a page of `[addr, addr + len)` is not mapped in this process, or
    /// not writable when the mapping is `writable`, or not readable otherwise (the pin Linux's
    /// `ib_umem_get` makes fails the same way, with `EFAULT`).
    #[error("{addr:#x}+{len} is not mapped {} in this process", if *.writable { "writable" } else { "readable" })]
    NotMapped {
        /// Start of the range.
        addr: usize,
        /// Bytes.
        len: usize,
        /// Whether the mapping was for the device to write too.
        writable: bool,
    },
}

/// An interrupt handler a backend may run on the raising thread
/// ([`Platform::set_vector_handler`]).
pub type VectorHandler = Arc<dyn Fn() + Send + Sync>;

/// DMA memory resolved once, when it was allocated: the same accesses as the platform's
/// `dma_*` methods, by byte offset into one allocation, without a lookup per access (design
/// decision 20). Offsets are bounded by the caller ([`crate::dma::DmaBuf`] checks them first);
/// word offsets are 4-byte aligned.
pub trait DmaWindow: Send + Sync {
    /// Bytes the window covers (at least the allocation's length).
    fn size(&self) -> u64;
    /// Copies `buf.len()` bytes at `offset` into `buf`.
    fn read(&self, offset: u64, buf: &mut [u8]);
    /// Copies `data` to `offset`.
    fn write(&self, offset: u64, data: &[u8]);
    /// Loads the little-endian word at `offset` with acquire ordering.
    fn load_u32(&self, offset: u64) -> u32;
    /// Stores the little-endian word at `offset` with release ordering.
    fn store_u32(&self, offset: u64, value: u32);
}

/// What a device-specific backend must provide. All methods are callable from any thread.
pub trait Platform: Send + Sync + 'static {
    /// A short name for reports (`"sim"`, `"vfio:0000:00:05.0"`).
    fn name(&self) -> String;
    /// The function's PCI vendor and device ID, as its config space says (the verbs core picks
    /// the provider by it).
    fn pci_id(&self) -> (u16, u16);
    /// Reads the 32-bit BAR1 register at byte `offset` (all-ones means the device is gone).
    fn reg_read(&self, offset: u32) -> u32;
    /// Writes the 32-bit BAR1 register at byte `offset`.
    fn reg_write(&self, offset: u32, value: u32);
    /// Writes 32 bits at byte `offset` of BAR2 (the UAR pages).
    fn uar_write(&self, offset: u64, value: u32);
    /// Page frame number of BAR2 (its bus address >> 12): the kernel's UAR pfn for the DSR.
    fn uar_base_pfn(&self) -> u64;
    /// Number of 4 KiB UAR pages in BAR2.
    fn uar_pages(&self) -> u32;
    /// Allocates `len` bytes (rounded up to pages) of zeroed, page-aligned DMA memory.
    fn dma_alloc(&self, len: u64) -> Result<Iova, PlatformError>;
    /// Frees memory returned by [`Platform::dma_alloc`].
    fn dma_free(&self, iova: Iova);
    /// The allocation at `iova` (from [`Platform::dma_alloc`]) resolved to its memory, where
    /// the backend can reach it directly (the model); `None` keeps every access on the `dma_*`
    /// methods (qtest, where memory may be reachable only through the protocol).
    fn dma_window(&self, iova: Iova) -> Option<Arc<dyn DmaWindow>> {
        let _ = iova;
        None
    }
    /// Copies `buf.len()` bytes of DMA memory at `iova` into `buf`.
    fn dma_read(&self, iova: Iova, buf: &mut [u8]) -> Result<(), PlatformError>;
    /// Copies `data` into DMA memory at `iova`.
    fn dma_write(&self, iova: Iova, data: &[u8]) -> Result<(), PlatformError>;
    /// Loads a 32-bit little-endian word of DMA memory with acquire ordering.
    fn dma_load_u32(&self, iova: Iova) -> Result<u32, PlatformError>;
    /// Stores a 32-bit little-endian word of DMA memory with release ordering.
    fn dma_store_u32(&self, iova: Iova, value: u32) -> Result<(), PlatformError>;
    /// Waits up to `timeout` for MSI-X `vector` and returns how many interrupts arrived since the
    /// last call (eventfd semantics); 0 on timeout.
    fn wait_vector(&self, vector: u16, timeout: Duration) -> u32;
    /// Whether the device runs on this host's CPUs beside the driver (the in-process model's
    /// threads, QEMU's process under qtest), so a consumer spinning on an empty CQ takes CPU
    /// time the device needs to produce the completion; hardware (VFIO) runs beside the CPUs.
    fn shares_cpus(&self) -> bool {
        false
    }
    /// Runs `handler` on the thread that raises MSI-X `vector`, as a CPU runs an interrupt
    /// handler, instead of waking a [`Platform::wait_vector`] waiter (`None` takes it back).
    /// Returns whether the backend can: the in-process model can; under qtest and VFIO an
    /// interrupt is an eventfd and the default says no. Interrupts the handler does not get (a
    /// masked vector, one raised from inside the handler) still reach `wait_vector`, so a driver
    /// keeps its vector thread either way.
    fn set_vector_handler(&self, _vector: u16, _handler: Option<VectorHandler>) -> bool {
        false
    }
    /// Maps `len` bytes of this process's memory at `addr` (both page-aligned) for the device
    /// (an IOMMU mapping under VFIO, the model's address space in process) and returns their
    /// device address; [`Platform::unmap_user`] takes the mapping away. Every page must be
    /// mapped writable if `writable` (the provider's pin-for-write decision,
    /// made from the MR's access flags), else readable; the device may write the pages only then. As Linux's
    /// `ib_umem_get`, nothing is trusted: the backend checks the pages (`docs/memory.md`).
    ///
    /// # Safety
    /// `[addr, addr + len)` must be memory the program registers for the device, which it does
    /// not free and reuse for something else until unmapped; the device reads (and, if
    /// `writable`, writes) it meanwhile. Pages that go away or change protection meanwhile make
    /// the model's accesses fail, not fault; under VFIO the kernel keeps them pinned.
    ///
    /// Errors: [`PlatformError::NotMapped`] for a page missing or without the protection;
    /// [`PlatformError::Unsupported`] where the device cannot reach this process's memory
    /// (qtest, or a process the model has no fault-safe access to); [`PlatformError::NoMemory`]
    /// when out of IOVA space.
    unsafe fn map_user(&self, addr: usize, len: usize, writable: bool) -> Result<Iova, PlatformError>;
    /// Removes a mapping made by [`Platform::map_user`].
    fn unmap_user(&self, iova: Iova);
}

/// The program's pages mapped for the device by [`map_user_memory`]: the whole pages holding the
/// registered range (`first`, `span` bytes, both page-aligned) and their device address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UserMapping {
    /// The first page's address.
    pub first: usize,
    /// Bytes of whole pages.
    pub span: usize,
    /// Their device address.
    pub iova: Iova,
}

/// Maps the whole pages holding `mem` for the device ([`Platform::map_user`]; writable if
/// `writable`), on the promise [`UserMemory`] carries: the program keeps the memory for the
/// device until the mapping goes ([`Platform::unmap_user`]). `None` for a range whose pages run
/// past the end of the address space.
pub(crate) fn map_user_memory(
    platform: &dyn Platform,
    mem: &ib_core::provider::UserMemory,
    writable: bool,
) -> Option<Result<UserMapping, PlatformError>> {
    let page = pvrdma_abi::PAGE_SIZE;
    let first = mem.addr() & !(page - 1);
    let end = mem.addr().checked_add(mem.len())?.checked_next_multiple_of(page)?;
    let span = end - first;
    // SAFETY: `UserMemory`'s contract (its `new` is unsafe): the program registers memory it keeps
    // for the device, and so the whole pages holding it, until the MR is deregistered, which
    // unmaps them first.
    let mapped = unsafe { platform.map_user(first, span, writable) };
    Some(mapped.map(|iova| UserMapping { first, span, iova }))
}
