//! The BARs: decoding a memory BAR's bus address, and 32-bit MMIO to the mapped registers (BAR1)
//! and UAR pages (BAR2).

use crate::platform::PlatformError;
use pci_driver::backends::vfio::VfioPciDevice;
use pci_driver::device::PciDevice;
use pci_driver::regions::{MappedOwningPciRegion, OwningPciRegion, PciRegion, Permissions};
use std::io::{self};
use std::marker::PhantomData;

/// The bus address of a memory BAR from its config-space dword `lo` and the next dword `hi`
/// (used only for a 64-bit BAR). `None` for an I/O BAR or a reserved memory type.
pub(super) fn mem_bar_address(lo: u32, hi: u32) -> Option<u64> {
    if lo & 1 != 0 {
        return None; // I/O space
    }
    let base = u64::from(lo & !0xf);
    match (lo >> 1) & 3 {
        0 | 1 => Some(base),                     // 32-bit (1: legacy below-1M)
        2 => Some(base | (u64::from(hi) << 32)), // 64-bit
        _ => None,                               // reserved
    }
}

/// Marker: a BAR the driver reads and writes (BAR1, the registers).
pub(super) enum ReadWrite {}
/// Marker: a BAR the driver only writes (BAR2, the UAR pages).
pub(super) enum WriteOnly {}

pub(super) trait MmioAccess {
    const PERMISSIONS: Permissions;
}
impl MmioAccess for ReadWrite {
    const PERMISSIONS: Permissions = Permissions::ReadWrite;
}
impl MmioAccess for WriteOnly {
    const PERMISSIONS: Permissions = Permissions::Write;
}

pub(super) enum MmioBacking {
    /// The BAR mapped into this process: volatile accesses.
    Mapped(MappedOwningPciRegion),
    /// `pread`/`pwrite` on the VFIO device file (BAR not mappable).
    Syscall(OwningPciRegion),
}

/// One BAR: 32-bit little-endian accesses, the fences of Linux `readl`/`writel`, reads only if
/// the access marker `A` allows them. `pci-driver`'s mapped region does the volatile accesses with
/// bounds and alignment checks, so this type needs no `unsafe` of its own.
pub(super) struct MmioRegion<A> {
    pub(super) backing: MmioBacking,
    pub(super) len: u64,
    pub(super) _access: PhantomData<fn() -> A>,
}

impl<A: MmioAccess> MmioRegion<A> {
    /// Maps BAR `index`, which must be at least `min_len` bytes long.
    pub(super) fn open(dev: &VfioPciDevice, index: usize, min_len: u64) -> Result<Self, PlatformError> {
        let bar = dev.bar(index).ok_or_else(|| PlatformError::Io(format!("BAR{index} is absent")))?;
        let len = bar.len();
        if len < min_len {
            return Err(PlatformError::Io(format!("BAR{index} is {len:#x} bytes, expected at least {min_len:#x}")));
        }
        let have = bar.permissions();
        let want = A::PERMISSIONS;
        if (want.can_read() && !have.can_read()) || (want.can_write() && !have.can_write()) {
            return Err(PlatformError::Io(format!("BAR{index} allows {have:?}, the driver needs {want:?}")));
        }
        let backing = if bar.is_mappable() {
            match bar.map(.., want) {
                Ok(m) => MmioBacking::Mapped(m),
                Err(e) => {
                    tracing::warn!(bar = index, error = %e, "BAR mmap failed; using pread/pwrite");
                    MmioBacking::Syscall(bar)
                }
            }
        } else {
            MmioBacking::Syscall(bar)
        };
        Ok(Self { backing, len, _access: PhantomData })
    }

    pub(super) fn region(&self) -> &dyn PciRegion {
        match &self.backing {
            MmioBacking::Mapped(m) => m,
            MmioBacking::Syscall(r) => r,
        }
    }

    /// Whether accesses are memory accesses (not system calls).
    pub(super) fn is_mapped(&self) -> bool {
        matches!(self.backing, MmioBacking::Mapped(_))
    }

    /// Writes the 32-bit little-endian register at byte `offset`. Every memory store issued
    /// before the call (DMA memory included) is ordered before the device sees the write.
    pub(super) fn write32(&self, offset: u64, value: u32) -> io::Result<()> {
        doorbell::barrier::io_wmb();
        self.region().write_le_u32(offset, value)
    }
}

impl MmioRegion<ReadWrite> {
    /// Reads the 32-bit little-endian register at byte `offset`; later memory loads (DMA memory
    /// included) are ordered after it.
    pub(super) fn read32(&self, offset: u64) -> io::Result<u32> {
        let v = self.region().read_le_u32(offset);
        doorbell::barrier::io_rmb();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_decoding() {
        assert_eq!(mem_bar_address(0xfe00_0000, 0x1234), Some(0xfe00_0000));
        assert_eq!(mem_bar_address(0xfe00_0008, 0), Some(0xfe00_0000)); // prefetchable 32-bit
        assert_eq!(mem_bar_address(0xc000_000c, 0x38), Some(0x38_c000_0000)); // 64-bit
        assert_eq!(mem_bar_address(0xc001, 0), None); // I/O BAR
        assert_eq!(mem_bar_address(0xc000_0006, 0), None); // reserved type
    }
}
