//! DMA memory as the device sees it: a host mapping in the IOMMU, and the space of one device (its
//! allocator, its table and the accessors).

use super::host::{page_size, HostMemory};
use super::iova::{DmaTable, Extent, IovaAllocator};
use crate::platform::{Iova, PlatformError};
use parking_lot::{Mutex, RwLock};
use pci_driver::backends::vfio::VfioContainer;
use pci_driver::regions::Permissions;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

pub(super) trait DmaBacking: Extent {
    fn host(&self) -> &HostMemory;
}

impl DmaBacking for HostMemory {
    fn host(&self) -> &HostMemory {
        self
    }
}

/// Host memory mapped into the IOMMU at `iova`, read/write for the device. Dropping it removes
/// the IOMMU mapping first and only then returns the memory to the kernel; if the removal fails
/// the memory is leaked, since the device could still reach it.
pub(super) struct DmaMapping {
    pub(super) mem: HostMemory,
    pub(super) container: Arc<VfioContainer>,
    pub(super) iova: u64,
}

impl DmaMapping {
    pub(super) fn new(container: Arc<VfioContainer>, iova: u64, len: usize) -> io::Result<Self> {
        let align = container.iommu().alignment();
        let mem = HostMemory::new(len, align)?;
        // Invariant: `mem` (len bytes, live, aligned to the IOMMU unit) moves into the DmaMapping,
        // whose Drop unmaps before freeing (and leaks if unmapping fails).
        // SAFETY: so the device never reaches memory that went back to the kernel.
        unsafe { container.iommu().map(iova, len, mem.as_ptr(), Permissions::ReadWrite)? };
        Ok(Self { mem, container, iova })
    }
}

impl DmaMapping {
    /// Maps `len` bytes of this process's memory at `addr` (aligned to the IOMMU's unit) at
    /// `iova`, for the device to read, and to write if `writable`
    /// (`VFIO_DMA_MAP_FLAG_READ` alone otherwise). The kernel pins the pages as it maps them,
    /// for writing when the mapping is writable, and refuses a page that is missing or lacks
    /// the protection with `EFAULT`, as `ib_umem_get` does. The memory stays the consumer's: it
    /// is never unmapped from the process here.
    ///
    /// # Safety
    /// `[addr, addr + len)` must stay live until this value is dropped (the IOMMU mapping goes
    /// first then).
    ///
    /// Errors: [`PlatformError::NotMapped`] for the kernel's `EFAULT`; others as an allocation's.
    pub(super) unsafe fn user(
        container: Arc<VfioContainer>,
        iova: u64,
        (addr, len, writable): (usize, usize, bool),
    ) -> Result<Self, PlatformError> {
        let align = container.iommu().alignment().max(page_size());
        if !align.is_power_of_two() || (addr | len) & (align - 1) != 0 || len == 0 {
            return Err(PlatformError::Misaligned(addr as u64));
        }
        // Page 0 is never this process's memory: the kernel's pin would refuse it too.
        let ptr = NonNull::new(addr as *mut AtomicU32).ok_or(PlatformError::NotMapped { addr, len, writable })?;
        let mem = HostMemory { ptr, len, leak: true, writable };
        let perms = if writable { Permissions::ReadWrite } else { Permissions::Read };
        // SAFETY: the caller keeps [addr, addr + len) live until this mapping is dropped, and
        // Drop unmaps the IOVA range before the consumer may free the memory.
        unsafe { container.iommu().map(iova, len, mem.as_ptr(), perms) }.map_err(|e| match e.raw_os_error() {
            Some(libc::EFAULT) => PlatformError::NotMapped { addr, len, writable },
            _ => io_to_platform(e, len as u64),
        })?;
        Ok(Self { mem, container, iova })
    }
}

impl Drop for DmaMapping {
    fn drop(&mut self) {
        if let Err(e) = self.container.iommu().unmap(self.iova, self.mem.len()) {
            tracing::warn!(iova = self.iova, len = self.mem.len(), error = %e,
                "IOMMU unmap failed; leaking the DMA memory");
            self.mem.leak = true;
        }
    }
}

impl Extent for DmaMapping {
    fn extent(&self) -> u64 {
        self.mem.len() as u64
    }
}

impl DmaBacking for DmaMapping {
    fn host(&self) -> &HostMemory {
        &self.mem
    }
}

pub(super) fn io_to_platform(e: io::Error, len: u64) -> PlatformError {
    let out_of_memory =
        e.kind() == io::ErrorKind::OutOfMemory || matches!(e.raw_os_error(), Some(libc::ENOMEM) | Some(libc::ENOSPC));
    if out_of_memory {
        PlatformError::NoMemory(len)
    } else {
        PlatformError::Io(format!("DMA allocation of {len} bytes: {e}"))
    }
}

/// All DMA memory of one device: the IOVA allocator, the IOVA table and the accessors.
pub(super) struct DmaSpace<M> {
    pub(super) table: RwLock<DmaTable<M>>,
    pub(super) iovas: Mutex<IovaAllocator>,
    pub(super) max_mappings: usize,
}

impl<M: DmaBacking> DmaSpace<M> {
    pub(super) fn new(allocator: IovaAllocator, max_mappings: usize) -> Self {
        Self { table: RwLock::new(DmaTable::new()), iovas: Mutex::new(allocator), max_mappings }
    }

    /// Allocates `len` bytes: picks the IOVA, then `make(iova, size)` builds the mapping.
    pub(super) fn alloc(
        &self,
        len: u64,
        make: impl FnOnce(u64, usize) -> io::Result<M>,
    ) -> Result<Iova, PlatformError> {
        self.alloc_with(len, |iova, size| make(iova, size).map_err(|e| io_to_platform(e, len)))
    }

    /// [`DmaSpace::alloc`] with a `make` that answers in the platform's own terms.
    pub(super) fn alloc_with(
        &self,
        len: u64,
        make: impl FnOnce(u64, usize) -> Result<M, PlatformError>,
    ) -> Result<Iova, PlatformError> {
        let no_memory = || PlatformError::NoMemory(len);
        if self.table.read().len() >= self.max_mappings {
            return Err(no_memory());
        }
        let (iova, size) = {
            let mut a = self.iovas.lock();
            let size = a.size_for(len).ok_or_else(no_memory)?;
            (a.alloc(size).ok_or_else(no_memory)?, size)
        };
        let size = usize::try_from(size).map_err(|_| no_memory())?;
        let m = make(iova, size)?;
        self.table
            .write()
            .insert(iova, m)
            .map_err(|_| PlatformError::Io(format!("IOVA {iova:#x} handed out twice")))?;
        Ok(iova)
    }

    /// Frees the mapping that starts at `iova`; `false` if there is none.
    pub(super) fn free(&self, iova: u64) -> bool {
        let m = self.table.write().remove(iova);
        // Dropped outside the lock: the IOMMU unmap and munmap do not block accessors.
        m.is_some()
    }

    /// Frees every mapping.
    pub(super) fn clear(&self) {
        let all = self.table.write().take_all();
        drop(all);
    }

    pub(super) fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), PlatformError> {
        let t = self.table.read();
        let (m, off) = t.resolve(iova, buf.len() as u64)?;
        if m.host().read(off, buf) {
            Ok(())
        } else {
            Err(PlatformError::BadDma { iova, len: buf.len() as u64 })
        }
    }

    pub(super) fn write(&self, iova: u64, data: &[u8]) -> Result<(), PlatformError> {
        let t = self.table.read();
        let (m, off) = t.resolve(iova, data.len() as u64)?;
        if m.host().write(off, data) {
            Ok(())
        } else {
            Err(PlatformError::BadDma { iova, len: data.len() as u64 })
        }
    }

    pub(super) fn load_u32(&self, iova: u64) -> Result<u32, PlatformError> {
        let t = self.table.read();
        let (m, off) = t.resolve_word(iova)?;
        m.host().load_u32(off).ok_or(PlatformError::BadDma { iova, len: 4 })
    }

    pub(super) fn store_u32(&self, iova: u64, value: u32) -> Result<(), PlatformError> {
        let t = self.table.read();
        let (m, off) = t.resolve_word(iova)?;
        if m.host().store_u32(off, value) {
            Ok(())
        } else {
            Err(PlatformError::BadDma { iova, len: 4 })
        }
    }
}

#[cfg(test)]
// Slices of one IOVA range are what the IOMMU reports; they are not meant as `Vec`s of a range.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::platform::vfio::iova::IOVA_FLOOR;
    use crate::platform::vfio::tests::{bad, PAGE};

    fn space() -> DmaSpace<HostMemory> {
        let page = page_size() as u64;
        DmaSpace::new(IovaAllocator::new(&[page..1 << 40], page, IOVA_FLOOR), 4)
    }

    fn host(_iova: u64, size: usize) -> io::Result<HostMemory> {
        HostMemory::new(size, page_size())
    }

    #[test]
    fn dma_space_round_trips_and_checks_every_access() {
        let s = space();
        let a = s.alloc(10, host).unwrap();
        let b = s.alloc(3 * PAGE, host).unwrap();
        assert_eq!(a, IOVA_FLOOR);
        assert!(b > a + PAGE, "guard between allocations");
        s.write(a + 3, b"hello pvrdma").unwrap();
        let mut buf = [0u8; 12];
        s.read(a + 3, &mut buf).unwrap();
        assert_eq!(&buf, b"hello pvrdma");
        s.store_u32(b + 3 * PAGE - 4, 0xdead_beef).unwrap();
        assert_eq!(s.load_u32(b + 3 * PAGE - 4), Ok(0xdead_beef));
        assert_eq!(s.load_u32(b + 3 * PAGE), Err(bad(b + 3 * PAGE, 4)));
        assert_eq!(s.load_u32(b + 2), Err(PlatformError::Misaligned(b + 2)));
        assert_eq!(s.store_u32(a + 1, 0), Err(PlatformError::Misaligned(a + 1)));
        assert_eq!(s.read(a + PAGE - 4, &mut [0u8; 8]), Err(bad(a + PAGE - 4, 8)));
        assert_eq!(s.write(0, &[1]), Err(bad(0, 1)));
        assert_eq!(s.read(u64::MAX - 1, &mut [0u8; 4]), Err(bad(u64::MAX - 1, 4)));
        assert!(s.free(a));
        assert!(!s.free(a));
        assert_eq!(s.read(a, &mut [0u8; 1]), Err(bad(a, 1)));
        // Freed addresses are not reused.
        let c = s.alloc(PAGE, host).unwrap();
        assert!(c > b);
        s.clear();
        assert_eq!(s.read(b, &mut [0u8; 1]), Err(bad(b, 1)));
    }

    #[test]
    fn dma_space_reports_exhaustion_and_failed_mappings() {
        let s = space();
        for _ in 0..4 {
            s.alloc(PAGE, host).unwrap();
        }
        assert_eq!(s.alloc(PAGE, host), Err(PlatformError::NoMemory(PAGE)), "mapping limit");
        let s = space();
        assert_eq!(s.alloc(u64::MAX, host), Err(PlatformError::NoMemory(u64::MAX)));
        assert_eq!(s.alloc(1 << 41, host), Err(PlatformError::NoMemory(1 << 41)), "no IOVA room");
        let enomem = |_: u64, _: usize| -> io::Result<HostMemory> { Err(io::Error::from_raw_os_error(libc::ENOMEM)) };
        assert_eq!(s.alloc(PAGE, enomem), Err(PlatformError::NoMemory(PAGE)));
        let eperm = |_: u64, _: usize| -> io::Result<HostMemory> { Err(io::Error::from_raw_os_error(libc::EPERM)) };
        assert!(matches!(s.alloc(PAGE, eperm), Err(PlatformError::Io(_))));
    }
}
