//! The VFIO backend: a real pvrdma PCI function (15ad:0820) bound to `vfio-pci`, driven through
//! `pci-driver` 0.1.4.
//!
//! What [`VfioPlatform::open`] does, in order:
//! 1. resolves the device (`0000:00:05.0`, `00:05.0`, or a sysfs directory such as
//!    `/sys/bus/pci/devices/0000:00:05.0`) and opens it in a VFIO container of its own;
//! 2. checks vendor and device ID in config space (`15ad:0820`), checks that BAR1 and BAR2 are
//!    memory BARs and reads BAR2's bus address (its page frame number is the kernel UAR pfn);
//! 3. enables memory space and bus mastering;
//! 4. maps BAR1 (registers: 32-bit reads and writes) and BAR2 (UAR pages: 32-bit writes only);
//! 5. enables the three MSI-X vectors, each signalling an eventfd.
//!
//! **Registers and UAR** (`MmioRegion`): accesses are single 32-bit little-endian volatile
//! accesses through `pci-driver`'s mapped region. The marker type says whether a BAR may be read
//! (BAR2 has no read method). A write is preceded by a release fence and a read followed by an
//! acquire fence (Linux `writel`/`readl` ordering), so DMA-memory stores issued before a doorbell
//! reach memory before the device sees the doorbell. If VFIO does not allow mapping a BAR (a BAR
//! smaller than a page on an old kernel, for example) the region falls back to `pread`/`pwrite`
//! on the VFIO device file, which `vfio-pci` turns into the same 32-bit accesses. A failed
//! register read returns all-ones (the driver's "device gone" value); failed writes are counted
//! ([`VfioPlatform::mmio_faults`]) and logged.
//!
//! **DMA memory** (`docs/decisions.md`, decision 4): each allocation is fresh anonymous memory
//! (`mmap`, page-aligned, zeroed, `MADV_DONTFORK`) mapped into the IOMMU read/write at an IOVA
//! from a bump allocator (`IovaAllocator`) over the IOMMU's valid ranges. IOVAs start at 4 GiB
//! when the IOMMU allows it (as the model's do, so device addresses always need both halves of
//! every 64-bit address field), are never reused, and are separated by one unmapped alignment unit
//! so that a device overrun faults in the IOMMU instead of landing in a neighbour. A table from
//! IOVA to mapping (`DmaTable`) resolves every access, bounds-checked against one mapping: an
//! access outside every mapping, or one that crosses from one mapping into another, is
//! [`PlatformError::BadDma`]. Host memory is only ever touched through `AtomicU32` words: copies
//! are relaxed word loads/stores (a compare-exchange merges a partial word), and the two word
//! accessors are acquire loads / release stores. No Rust reference to plain bytes is ever formed
//! over memory the device writes. Freeing unmaps the IOVA range from the IOMMU before the memory
//! goes back to the kernel; if the IOMMU unmap fails the memory is leaked on purpose, because the
//! device could still write to it.
//!
//! **Interrupts**: `pci-driver` enables MSI-X vectors with one eventfd each
//! (`VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER`), which is exactly what is needed.
//! [`Platform::wait_vector`] polls the vector's eventfd with `poll(2)`, bounded by the timeout, and
//! reads it, returning the eventfd counter (interrupts since the last read); 0 on timeout or for a
//! vector other than 0..3. The eventfds are non-blocking, so two threads waiting on one vector
//! cannot block forever in `read` (the loser keeps polling until its deadline).
//!
//! **What this backend does not do** (the closest correct thing, where `pci-driver` 0.1.4 lacks
//! an API):
//! - No MSI-X masking per vector: VFIO only masks INTx and `pci-driver` has no mask call. The
//!   driver masks through the device's own `REG_IMR`. There is no INTx or MSI fallback: pvrdma
//!   always has MSI-X, and `pci-driver` cannot unmask INTx after the first interrupt.
//! - No function reset at open or close: QEMU's pvrdma has no FLR and `VFIO_DEVICE_RESET` may fail;
//!   the driver resets the device through `REG_CTL`. On drop the backend clears bus mastering,
//!   disables MSI-X and unmaps all DMA memory.
//! - IOMMU failures lose their errno inside `pci-driver` (it rewraps the error as a message), so a
//!   failed IOMMU map is [`PlatformError::Io`] rather than [`PlatformError::NoMemory`]; the usual
//!   cause is `RLIMIT_MEMLOCK` (VFIO pins every mapped page). The VFIO limit on the number of
//!   mappings (`dma_avail`) is checked up front and reported as `NoMemory`.
//! - `pci-driver` reports VFIO's inclusive IOVA range ends as exclusive ends, which wastes one
//!   byte per range; the allocator works in alignment units, so it never notices.
//! - It cannot be exercised here (no VFIO device on the build machine). The pure parts —
//!   BDF parsing, BAR decoding, the IOVA allocator, the IOVA table, the host-memory accessors and
//!   the eventfd wait — are unit-tested in their files without hardware.
//!
//! The parts, one file each: `bdf` (PCI addresses, sysfs), `mmio` (BAR decoding and register/UAR
//! access), `iova` (the IOVA allocator and table), `host` (the host memory), `dma` (IOMMU mappings
//! and the DMA space), `irq` (the vector eventfds); this file opens the function and is the
//! [`Platform`].

use super::{Iova, Platform, PlatformError};
use bdf::resolve_device;
use dma::{DmaMapping, DmaSpace};
use iova::{choose_floor, IovaAllocator};
use mmio::{mem_bar_address, MmioBacking, MmioRegion, ReadWrite, WriteOnly};
use osdep::EventFd;
use pci_driver::backends::vfio::VfioPciDevice;
use pci_driver::device::PciDevice;
use pci_driver::regions::PciRegion;
use pvrdma_abi::regs::{bar, MAX_INTERRUPTS, REG_MACH};
use pvrdma_abi::{PCI_DEVICE_ID_VMWARE_PVRDMA, PCI_VENDOR_ID_VMWARE};
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Byte offset of BAR0 in config space.
const CFG_BAR0: u64 = 0x10;
/// UAR page size (the pfn's unit).
const UAR_PAGE_SHIFT: u32 = 12;

mod bdf;
// IOMMU mappings (VFIO_IOMMU_MAP_DMA of host memory).
mod dma;
// Anonymous memory for DMA (mmap, madvise), accessed as atomic words.
mod host;
mod iova;
mod irq;
mod mmio;

// ---------------------------------------------------------------------------------------------
// The platform

/// A pvrdma function bound to `vfio-pci`, as a [`Platform`].
pub struct VfioPlatform {
    name: String,
    pci_id: (u16, u16),
    regs: MmioRegion<ReadWrite>,
    uar: MmioRegion<WriteOnly>,
    uar_bus_addr: u64,
    dma: DmaSpace<DmaMapping>,
    vectors: Vec<EventFd>,
    mmio_faults: AtomicU64,
    dev: VfioPciDevice,
}

fn io_err(what: impl fmt::Display) -> impl FnOnce(io::Error) -> PlatformError {
    move |e| PlatformError::Io(format!("{what}: {e}"))
}

impl VfioPlatform {
    /// Opens the pvrdma function `spec`: a BDF (`0000:00:05.0` or `00:05.0`) or its sysfs
    /// directory. The function must be bound to `vfio-pci`, its IOMMU group must contain nothing
    /// else that is open, and the process needs access to `/dev/vfio` and enough
    /// `RLIMIT_MEMLOCK` for all DMA memory.
    pub fn open(spec: &str) -> Result<Self, PlatformError> {
        let (path, bdf) = resolve_device(spec).map_err(|e| PlatformError::Io(e.to_string()))?;
        let dev = VfioPciDevice::open(&path).map_err(io_err(format!("VFIO open {}", path.display())))?;
        let cfg = dev.config();

        let vendor = cfg.vendor_id().read().map_err(io_err("config vendor ID"))?;
        let device = cfg.device_id().read().map_err(io_err("config device ID"))?;
        if (vendor, device) != (PCI_VENDOR_ID_VMWARE, PCI_DEVICE_ID_VMWARE_PVRDMA) {
            return Err(PlatformError::Io(format!(
                "{bdf} is {vendor:04x}:{device:04x}, not a pvrdma function \
                 ({PCI_VENDOR_ID_VMWARE:04x}:{PCI_DEVICE_ID_VMWARE_PVRDMA:04x})"
            )));
        }

        let bar_dword = |i: u64| cfg.read_le_u32(CFG_BAR0 + 4 * i).map_err(io_err(format!("config BAR dword {i}")));
        let reg_idx = u64::from(bar::REG);
        let uar_idx = u64::from(bar::UAR);
        let reg_lo = bar_dword(reg_idx)?;
        if mem_bar_address(reg_lo, 0).is_none() || (reg_lo >> 1) & 3 == 2 {
            // A 64-bit BAR1 would take BAR2's slot: not the pvrdma layout (32-bit BARs 0, 1, 2).
            return Err(PlatformError::Io(format!(
                "{bdf}: BAR{reg_idx} is not a 32-bit memory BAR (config {reg_lo:#010x})"
            )));
        }
        let uar_bus_addr = mem_bar_address(bar_dword(uar_idx)?, bar_dword(uar_idx + 1)?)
            .ok_or_else(|| PlatformError::Io(format!("{bdf}: BAR{uar_idx} is not a memory BAR")))?;
        if uar_bus_addr == 0 || uar_bus_addr & ((1 << UAR_PAGE_SHIFT) - 1) != 0 {
            return Err(PlatformError::Io(format!(
                "{bdf}: BAR{uar_idx} address {uar_bus_addr:#x} is unassigned or not page-aligned"
            )));
        }

        let cmd = cfg.command();
        cmd.memory_space_enable().write(true).map_err(io_err("enable memory space"))?;
        cmd.bus_master_enable().write(true).map_err(io_err("enable bus mastering"))?;

        let regs = MmioRegion::<ReadWrite>::open(&dev, bar::REG.into(), u64::from(REG_MACH) + 4)?;
        let uar = MmioRegion::<WriteOnly>::open(&dev, bar::UAR.into(), 1 << UAR_PAGE_SHIFT)?;

        let dma = {
            let iommu = dev.iommu();
            let ranges = iommu.valid_iova_ranges().to_vec();
            let allocator = IovaAllocator::new(&ranges, iommu.alignment() as u64, choose_floor(&ranges));
            DmaSpace::new(allocator, iommu.max_num_mappings() as usize)
        };

        let irqs = dev.interrupts();
        let msix = irqs.msi_x();
        let nvec = usize::from(MAX_INTERRUPTS);
        if msix.max() < nvec {
            return Err(PlatformError::Io(format!("{bdf}: {} MSI-X vectors, the device needs {nvec}", msix.max())));
        }
        let vectors =
            (0..nvec).map(|_| irq::vector_eventfd()).collect::<io::Result<Vec<_>>>().map_err(io_err("eventfd"))?;
        let fds: Vec<RawFd> = vectors.iter().map(EventFd::raw).collect();
        msix.enable(&fds).map_err(io_err("enable MSI-X"))?;

        tracing::info!(device = %bdf, uar_bus_addr, uar_len = uar.len, regs_mapped = regs.is_mapped(),
            uar_mapped = uar.is_mapped(), "pvrdma opened through VFIO");
        Ok(Self {
            name: format!("vfio:{bdf}"),
            pci_id: (vendor, device),
            regs,
            uar,
            uar_bus_addr,
            dma,
            vectors,
            mmio_faults: AtomicU64::new(0),
            dev,
        })
    }

    /// Register and UAR accesses that failed (a bad offset, or the VFIO file refusing I/O).
    pub fn mmio_faults(&self) -> u64 {
        self.mmio_faults.load(Ordering::Relaxed)
    }

    fn mmio_fault(&self, what: &str, offset: u64, e: &io::Error) {
        self.mmio_faults.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(offset, error = %e, "{what} failed");
    }
}

impl Drop for VfioPlatform {
    fn drop(&mut self) {
        // Stop DMA first, then interrupts, then take the memory away from the IOMMU.
        let _ = self.dev.config().command().bus_master_enable().write(false);
        let _ = self.dev.interrupts().msi_x().disable();
        self.dma.clear();
    }
}

impl Platform for VfioPlatform {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn pci_id(&self) -> (u16, u16) {
        self.pci_id
    }

    fn reg_read(&self, offset: u32) -> u32 {
        self.regs.read32(offset.into()).unwrap_or_else(|e| {
            self.mmio_fault("register read", offset.into(), &e);
            u32::MAX
        })
    }

    fn reg_write(&self, offset: u32, value: u32) {
        if let Err(e) = self.regs.write32(offset.into(), value) {
            self.mmio_fault("register write", offset.into(), &e);
        }
    }

    /// A mapped BAR2 is written through `doorbell::MappedUar` (volatile stores into the
    /// `volatile-register` cells of its pages; writes at offsets that hold no doorbell are
    /// dropped); an unmapped one through `pwrite`.
    fn uar_write(&self, offset: u64, value: u32) {
        if let MmioBacking::Mapped(m) = &self.uar.backing {
            let pages = m.len() >> UAR_PAGE_SHIFT;
            // SAFETY: `m` maps BAR2 — write-only doorbell pages whose reads have no effect —
            // page-aligned by the mmap, for as long as `self` lives, beyond this call; nothing
            // makes a `&mut` to it.
            let uar = unsafe { doorbell::MappedUar::new(m.as_mut_ptr(), pages) };
            doorbell::UarMmio::uar_write32(&uar, offset, value);
            return;
        }
        if let Err(e) = self.uar.write32(offset, value) {
            self.mmio_fault("UAR write", offset, &e);
        }
    }

    fn uar_base_pfn(&self) -> u64 {
        self.uar_bus_addr >> UAR_PAGE_SHIFT
    }

    fn uar_pages(&self) -> u32 {
        u32::try_from(self.uar.len >> UAR_PAGE_SHIFT).unwrap_or(u32::MAX)
    }

    fn dma_alloc(&self, len: u64) -> Result<Iova, PlatformError> {
        let container = self.dev.container();
        self.dma.alloc(len, |iova, size| DmaMapping::new(Arc::clone(container), iova, size))
    }

    fn dma_free(&self, iova: Iova) {
        if !self.dma.free(iova) {
            tracing::warn!(iova, "dma_free of an address that starts no allocation");
        }
    }

    unsafe fn map_user(&self, addr: usize, len: usize, writable: bool) -> Result<Iova, PlatformError> {
        let container = self.dev.container();
        self.dma.alloc_with(len as u64, |iova, _size| {
            // SAFETY: the caller keeps the memory live until `unmap_user` drops the mapping.
            unsafe { DmaMapping::user(Arc::clone(container), iova, (addr, len, writable)) }
        })
    }

    fn unmap_user(&self, iova: Iova) {
        self.dma_free(iova);
    }

    fn dma_read(&self, iova: Iova, buf: &mut [u8]) -> Result<(), PlatformError> {
        self.dma.read(iova, buf)
    }

    fn dma_write(&self, iova: Iova, data: &[u8]) -> Result<(), PlatformError> {
        self.dma.write(iova, data)
    }

    fn dma_load_u32(&self, iova: Iova) -> Result<u32, PlatformError> {
        self.dma.load_u32(iova)
    }

    fn dma_store_u32(&self, iova: Iova, value: u32) -> Result<(), PlatformError> {
        self.dma.store_u32(iova, value)
    }

    fn wait_vector(&self, vector: u16, timeout: Duration) -> u32 {
        let Some(efd) = self.vectors.get(usize::from(vector)) else {
            return 0;
        };
        irq::wait(efd, vector, timeout)
    }
}

/// The platform as a whole, and what the tests of each part share.
#[cfg(test)]
mod tests {
    use super::{PlatformError, VfioPlatform};

    /// A page, as the tests count addresses.
    pub(super) const PAGE: u64 = 4096;

    /// The error of an access outside every mapping.
    pub(super) fn bad(iova: u64, len: u64) -> PlatformError {
        PlatformError::BadDma { iova, len }
    }

    #[test]
    fn open_fails_cleanly_without_a_device() {
        match VfioPlatform::open("0000:ff:1f.7") {
            Err(PlatformError::Io(msg)) => assert!(msg.contains("0000:ff:1f.7"), "{msg}"),
            Err(e) => panic!("unexpected error {e:?}"),
            Ok(_) => panic!("opened a device that does not exist"),
        }
        assert!(matches!(VfioPlatform::open("not-a-bdf"), Err(PlatformError::Io(_))));
    }
}
