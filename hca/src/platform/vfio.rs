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
//! **DMA memory** (`../shared/design.md`, decision 4): each allocation is fresh anonymous memory
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
//!   the eventfd wait — are unit-tested below without hardware.

use super::{words, Iova, Platform, PlatformError};
use parking_lot::{Mutex, RwLock};
use pci_driver::backends::vfio::{VfioContainer, VfioPciDevice};
use pci_driver::device::PciDevice;
use pci_driver::regions::{MappedOwningPciRegion, OwningPciRegion, PciRegion, Permissions};
use pvrdma_abi::regs::{bar, MAX_INTERRUPTS, REG_MACH};
use pvrdma_abi::{PCI_DEVICE_ID_VMWARE_PVRDMA, PCI_VENDOR_ID_VMWARE};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::marker::PhantomData;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where sysfs lists PCI functions.
const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// First IOVA tried when the IOMMU has room above it (the model's device addresses start here too).
const IOVA_FLOOR: u64 = 1 << 32;
/// How much IOVA space above [`IOVA_FLOOR`] makes it worth starting there.
const IOVA_FLOOR_MIN_SPACE: u64 = 1 << 30;
/// Byte offset of BAR0 in config space.
const CFG_BAR0: u64 = 0x10;
/// UAR page size (the pfn's unit).
const UAR_PAGE_SHIFT: u32 = 12;

// ---------------------------------------------------------------------------------------------
// PCI addresses

/// A PCI function address: domain, bus, device, function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bdf {
    /// PCI segment (domain).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0..=0x1f.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

/// Why a string is not a PCI function address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BdfError {
    /// The string is empty.
    #[error("empty PCI address")]
    Empty,
    /// Not of the form `[DDDD:]BB:DD.F`.
    #[error("PCI address {0:?} is not of the form [DDDD:]BB:DD.F")]
    Format(String),
    /// A field is not hexadecimal or has too many digits.
    #[error("PCI address field {field} {text:?} is not 1 to {max_digits} hex digits")]
    Field {
        /// Which field: `domain`, `bus`, `device` or `function`.
        field: &'static str,
        /// The text found there.
        text: String,
        /// The most hex digits the field may have.
        max_digits: usize,
    },
    /// Device number above 0x1f.
    #[error("PCI device number {0:#x} is above 0x1f")]
    Device(u8),
    /// Function number above 7.
    #[error("PCI function number {0} is above 7")]
    Function(u8),
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

fn hex_field(field: &'static str, text: &str, max_digits: usize) -> Result<u32, BdfError> {
    let bad = || BdfError::Field { field, text: text.to_owned(), max_digits };
    if text.is_empty() || text.len() > max_digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u32::from_str_radix(text, 16).map_err(|_| bad())
}

impl FromStr for Bdf {
    type Err = BdfError;

    /// Parses `DDDD:BB:DD.F` or `BB:DD.F` (domain 0), hexadecimal, surrounding blanks ignored.
    fn from_str(s: &str) -> Result<Self, BdfError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(BdfError::Empty);
        }
        let format = || BdfError::Format(s.to_owned());
        let parts: Vec<&str> = s.split(':').collect();
        let (domain, bus, devfn) = match parts.as_slice() {
            [bus, devfn] => ("0", *bus, *devfn),
            [domain, bus, devfn] => (*domain, *bus, *devfn),
            _ => return Err(format()),
        };
        let (dev, func) = devfn.split_once('.').ok_or_else(format)?;
        let domain = hex_field("domain", domain, 8)?;
        // Two hex digits fit in a u8.
        let bus = hex_field("bus", bus, 2)? as u8;
        let device = hex_field("device", dev, 2)? as u8;
        let function = hex_field("function", func, 1)? as u8;
        if device > 0x1f {
            return Err(BdfError::Device(device));
        }
        if function > 7 {
            return Err(BdfError::Function(function));
        }
        Ok(Bdf { domain, bus, device, function })
    }
}

/// The sysfs directory for `spec` (a BDF, or a path: anything with a `/`) and a name for reports.
fn resolve_device(spec: &str) -> Result<(PathBuf, String), BdfError> {
    if spec.contains('/') {
        let path = PathBuf::from(spec.trim());
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<Bdf>().ok())
            .map(|b| b.to_string())
            .unwrap_or_else(|| path.display().to_string());
        Ok((path, name))
    } else {
        let bdf: Bdf = spec.parse()?;
        Ok((Path::new(SYSFS_PCI_DEVICES).join(bdf.to_string()), bdf.to_string()))
    }
}

// ---------------------------------------------------------------------------------------------
// BARs

/// The bus address of a memory BAR from its config-space dword `lo` and the next dword `hi`
/// (used only for a 64-bit BAR). `None` for an I/O BAR or a reserved memory type.
fn mem_bar_address(lo: u32, hi: u32) -> Option<u64> {
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
enum ReadWrite {}
/// Marker: a BAR the driver only writes (BAR2, the UAR pages).
enum WriteOnly {}

trait MmioAccess {
    const PERMISSIONS: Permissions;
}
impl MmioAccess for ReadWrite {
    const PERMISSIONS: Permissions = Permissions::ReadWrite;
}
impl MmioAccess for WriteOnly {
    const PERMISSIONS: Permissions = Permissions::Write;
}

enum MmioBacking {
    /// The BAR mapped into this process: volatile accesses.
    Mapped(MappedOwningPciRegion),
    /// `pread`/`pwrite` on the VFIO device file (BAR not mappable).
    Syscall(OwningPciRegion),
}

/// One BAR: 32-bit little-endian accesses, the fences of Linux `readl`/`writel`, reads only if
/// the access marker `A` allows them. `pci-driver`'s mapped region does the volatile accesses with
/// bounds and alignment checks, so this type needs no `unsafe` of its own.
struct MmioRegion<A> {
    backing: MmioBacking,
    len: u64,
    _access: PhantomData<fn() -> A>,
}

impl<A: MmioAccess> MmioRegion<A> {
    /// Maps BAR `index`, which must be at least `min_len` bytes long.
    fn open(dev: &VfioPciDevice, index: usize, min_len: u64) -> Result<Self, PlatformError> {
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

    fn region(&self) -> &dyn PciRegion {
        match &self.backing {
            MmioBacking::Mapped(m) => m,
            MmioBacking::Syscall(r) => r,
        }
    }

    /// Whether accesses are memory accesses (not system calls).
    fn is_mapped(&self) -> bool {
        matches!(self.backing, MmioBacking::Mapped(_))
    }

    /// Writes the 32-bit little-endian register at byte `offset`. Every memory store issued
    /// before the call (DMA memory included) is ordered before the device sees the write.
    fn write32(&self, offset: u64, value: u32) -> io::Result<()> {
        doorbell::barrier::io_wmb();
        self.region().write_le_u32(offset, value)
    }
}

impl MmioRegion<ReadWrite> {
    /// Reads the 32-bit little-endian register at byte `offset`; later memory loads (DMA memory
    /// included) are ordered after it.
    fn read32(&self, offset: u64) -> io::Result<u32> {
        let v = self.region().read_le_u32(offset);
        doorbell::barrier::io_rmb();
        v
    }
}

// ---------------------------------------------------------------------------------------------
// DMA memory: IOVA allocation and lookup (pure logic)

/// Rounds `x` up to `align` (a power of two); `None` on overflow.
fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// Where the allocator starts: [`IOVA_FLOOR`] if the IOMMU has a useful amount of space above it,
/// otherwise the bottom of the lowest valid range.
fn choose_floor(ranges: &[Range<u64>]) -> u64 {
    let room_above =
        ranges.iter().any(|r| r.end > IOVA_FLOOR && r.end - r.start.max(IOVA_FLOOR) >= IOVA_FLOOR_MIN_SPACE);
    if room_above {
        IOVA_FLOOR
    } else {
        0
    }
}

/// A bump allocator of device addresses inside the IOMMU's valid ranges. Allocations are whole
/// alignment units, aligned, never reused, with one unmapped unit after each (a guard).
#[derive(Debug)]
struct IovaAllocator {
    /// Sorted, non-overlapping, end-exclusive.
    ranges: Vec<Range<u64>>,
    /// Power of two, at least one page.
    align: u64,
    /// Lowest address the next allocation may use.
    next: u64,
}

impl IovaAllocator {
    /// An allocator over `ranges` (any order), in units of `align` (a power of two, raised to at
    /// least 4 KiB), handing out nothing below `floor`.
    fn new(ranges: &[Range<u64>], align: u64, floor: u64) -> Self {
        let align = align.max(4096).next_power_of_two();
        let mut ranges: Vec<Range<u64>> = ranges.iter().filter(|r| r.start < r.end).cloned().collect();
        ranges.sort_by_key(|r| r.start);
        Self { ranges, align, next: floor }
    }

    /// Bytes an allocation of `len` bytes occupies (at least one unit); `None` on overflow.
    fn size_for(&self, len: u64) -> Option<u64> {
        align_up(len.max(1), self.align)
    }

    /// The device address of `size` bytes (a multiple of the unit), or `None` if no valid range
    /// has room above the addresses already handed out.
    fn alloc(&mut self, size: u64) -> Option<u64> {
        if size == 0 || size & (self.align - 1) != 0 {
            return None;
        }
        for r in &self.ranges {
            if r.end <= self.next {
                continue;
            }
            let start = align_up(r.start.max(self.next), self.align)?;
            let end = start.checked_add(size)?;
            if end <= r.end {
                // The guard unit; saturating so that an allocation at the very top ends the space.
                self.next = end.saturating_add(self.align);
                return Some(start);
            }
        }
        None
    }
}

/// Something with a length in bytes, placed at an IOVA by a [`DmaTable`].
trait Extent {
    fn extent(&self) -> u64;
}

/// Map from IOVA to the mapping that starts there; resolves accesses with bounds checks.
struct DmaTable<M> {
    map: BTreeMap<u64, M>,
}

impl<M: Extent> DmaTable<M> {
    fn new() -> Self {
        Self { map: BTreeMap::new() }
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    /// Adds `m` at `iova`; gives it back if it would overlap a mapping or wrap the address space.
    fn insert(&mut self, iova: u64, m: M) -> Result<(), M> {
        let Some(end) = iova.checked_add(m.extent()) else {
            return Err(m);
        };
        let overlaps_prev =
            self.map.range(..=iova).next_back().is_some_and(|(s, p)| s.saturating_add(p.extent()) > iova);
        let overlaps_next = self.map.range(iova..).next().is_some_and(|(s, _)| *s < end);
        if overlaps_prev || overlaps_next || m.extent() == 0 {
            return Err(m);
        }
        self.map.insert(iova, m);
        Ok(())
    }

    /// Removes the mapping that starts exactly at `iova`.
    fn remove(&mut self, iova: u64) -> Option<M> {
        self.map.remove(&iova)
    }

    /// Removes every mapping.
    fn take_all(&mut self) -> BTreeMap<u64, M> {
        std::mem::take(&mut self.map)
    }

    /// The mapping holding all of `[iova, iova + len)` and the offset of `iova` in it.
    fn resolve(&self, iova: u64, len: u64) -> Result<(&M, usize), PlatformError> {
        let bad = || PlatformError::BadDma { iova, len };
        let (start, m) = self.map.range(..=iova).next_back().ok_or_else(bad)?;
        let off = iova - start;
        let end = off.checked_add(len).ok_or_else(bad)?;
        if end > m.extent() {
            return Err(bad());
        }
        let off = usize::try_from(off).map_err(|_| bad())?;
        Ok((m, off))
    }

    /// Like [`DmaTable::resolve`] for a 4-byte word, which must be 4-byte aligned.
    fn resolve_word(&self, iova: u64) -> Result<(&M, usize), PlatformError> {
        if iova & 3 != 0 {
            return Err(PlatformError::Misaligned(iova));
        }
        self.resolve(iova, 4)
    }
}

// ---------------------------------------------------------------------------------------------
// DMA memory: host side (the only unsafe code for memory)

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant; _SC_PAGESIZE is a valid name.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096)
}

/// Anonymous, zeroed host memory, aligned to the IOMMU's unit, owned by this value, accessed only
/// as `AtomicU32` words (never as `&[u8]`: the device writes it behind the compiler's back).
struct HostMemory {
    ptr: NonNull<AtomicU32>,
    len: usize,
    /// Never return the memory to the kernel (the IOMMU may still map it).
    leak: bool,
    /// Whether this process may write it (false for a consumer's pages registered for reading
    /// only, which may be read-only pages: a CPU store there would fault).
    writable: bool,
}

// SAFETY: HostMemory owns its mapping exclusively (no other value aliases it), and every access to
// the memory goes through `AtomicU32` words, which are safe to share and send between threads.
unsafe impl Send for HostMemory {}
// SAFETY: as above: `&HostMemory` only permits atomic word accesses.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// `len` bytes (a non-zero multiple of `align`) aligned to `align` (a power of two; raised to
    /// the page size).
    fn new(len: usize, align: usize) -> io::Result<Self> {
        let page = page_size();
        let align = align.max(page);
        if len == 0 || !align.is_power_of_two() || len & (align - 1) != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad DMA allocation size"));
        }
        // mmap returns page-aligned memory; reserve enough to find an `align`-aligned start.
        let slack = align - page;
        let total = len
            .checked_add(slack)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "DMA allocation too large"))?;
        // SAFETY: a new private anonymous mapping with no address hint: it creates memory and
        // cannot affect any existing object.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let head = (align - (base as usize) % align) % align;
        let tail = slack - head;
        let start = base.cast::<u8>().wrapping_add(head);
        if head > 0 {
            // SAFETY: [base, base + head) is the unused front of the mapping created above;
            // nothing refers to it.
            unsafe { libc::munmap(base, head) };
        }
        if tail > 0 {
            // SAFETY: [start + len, start + len + tail) is the unused end of the same mapping;
            // nothing refers to it.
            unsafe { libc::munmap(start.wrapping_add(len).cast(), tail) };
        }
        // Best effort: a fork must not make the device's pages copy-on-write in this process.
        // SAFETY: madvise on [start, start + len), memory this function mapped; DONTFORK changes
        // no contents.
        unsafe { libc::madvise(start.cast(), len, libc::MADV_DONTFORK) };
        let ptr = NonNull::new(start.cast::<AtomicU32>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { ptr, len, leak: false, writable: true })
    }

    fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr().cast_const().cast()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn words(&self) -> &[AtomicU32] {
        // Invariants: `ptr` is page-aligned and [ptr, ptr + len) is a live read/write mapping
        // owned by `self`; `len` is a page multiple; this process touches it only as atomics.
        // SAFETY: AtomicU32 has u32's size and alignment, any bits are valid, and the borrow
        // cannot outlive `self` (device DMA is outside the abstract machine, like another process).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len / 4) }
    }

    /// Copies bytes at `off` into `buf` in memory order; `false` if out of bounds.
    fn read(&self, off: usize, buf: &mut [u8]) -> bool {
        words::copy_out(self.words(), off, buf)
    }

    /// Copies `data` to `off` in memory order; `false` if out of bounds or not writable.
    fn write(&self, off: usize, data: &[u8]) -> bool {
        self.writable && words::copy_in(self.words(), off, data)
    }

    /// Loads the little-endian word at `off` (4-byte aligned) with acquire ordering.
    fn load_u32(&self, off: usize) -> Option<u32> {
        words::word(self.words(), off).map(|w| u32::from_le(w.load(Ordering::Acquire)))
    }

    /// Stores the little-endian word at `off` (4-byte aligned) with release ordering; `false`
    /// if out of bounds or not writable.
    fn store_u32(&self, off: usize, value: u32) -> bool {
        let w = words::word(self.words(), off).filter(|_| self.writable);
        w.inspect(|w| w.store(value.to_le(), Ordering::Release)).is_some()
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        if self.leak {
            return;
        }
        // SAFETY: [ptr, ptr + len) is the mapping `new` created and this value owns; borrows of
        // it (`words`) cannot outlive `self`, and the IOMMU no longer maps it (DmaMapping unmaps
        // first, or sets `leak`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Extent for HostMemory {
    fn extent(&self) -> u64 {
        self.len as u64
    }
}

/// Host memory as the device sees it.
trait DmaBacking: Extent {
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
struct DmaMapping {
    mem: HostMemory,
    container: Arc<VfioContainer>,
    iova: u64,
}

impl DmaMapping {
    fn new(container: Arc<VfioContainer>, iova: u64, len: usize) -> io::Result<Self> {
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
    unsafe fn user(
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

fn io_to_platform(e: io::Error, len: u64) -> PlatformError {
    let out_of_memory =
        e.kind() == io::ErrorKind::OutOfMemory || matches!(e.raw_os_error(), Some(libc::ENOMEM) | Some(libc::ENOSPC));
    if out_of_memory {
        PlatformError::NoMemory(len)
    } else {
        PlatformError::Io(format!("DMA allocation of {len} bytes: {e}"))
    }
}

/// All DMA memory of one device: the IOVA allocator, the IOVA table and the accessors.
struct DmaSpace<M> {
    table: RwLock<DmaTable<M>>,
    iovas: Mutex<IovaAllocator>,
    max_mappings: usize,
}

impl<M: DmaBacking> DmaSpace<M> {
    fn new(allocator: IovaAllocator, max_mappings: usize) -> Self {
        Self { table: RwLock::new(DmaTable::new()), iovas: Mutex::new(allocator), max_mappings }
    }

    /// Allocates `len` bytes: picks the IOVA, then `make(iova, size)` builds the mapping.
    fn alloc(&self, len: u64, make: impl FnOnce(u64, usize) -> io::Result<M>) -> Result<Iova, PlatformError> {
        self.alloc_with(len, |iova, size| make(iova, size).map_err(|e| io_to_platform(e, len)))
    }

    /// [`DmaSpace::alloc`] with a `make` that answers in the platform's own terms.
    fn alloc_with(
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
    fn free(&self, iova: u64) -> bool {
        let m = self.table.write().remove(iova);
        // Dropped outside the lock: the IOMMU unmap and munmap do not block accessors.
        m.is_some()
    }

    /// Frees every mapping.
    fn clear(&self) {
        let all = self.table.write().take_all();
        drop(all);
    }

    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), PlatformError> {
        let t = self.table.read();
        let (m, off) = t.resolve(iova, buf.len() as u64)?;
        if m.host().read(off, buf) {
            Ok(())
        } else {
            Err(PlatformError::BadDma { iova, len: buf.len() as u64 })
        }
    }

    fn write(&self, iova: u64, data: &[u8]) -> Result<(), PlatformError> {
        let t = self.table.read();
        let (m, off) = t.resolve(iova, data.len() as u64)?;
        if m.host().write(off, data) {
            Ok(())
        } else {
            Err(PlatformError::BadDma { iova, len: data.len() as u64 })
        }
    }

    fn load_u32(&self, iova: u64) -> Result<u32, PlatformError> {
        let t = self.table.read();
        let (m, off) = t.resolve_word(iova)?;
        m.host().load_u32(off).ok_or(PlatformError::BadDma { iova, len: 4 })
    }

    fn store_u32(&self, iova: u64, value: u32) -> Result<(), PlatformError> {
        let t = self.table.read();
        let (m, off) = t.resolve_word(iova)?;
        if m.host().store_u32(off, value) {
            Ok(())
        } else {
            Err(PlatformError::BadDma { iova, len: 4 })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Interrupts

/// A non-blocking eventfd: one MSI-X vector's interrupt counter.
struct EventFd {
    file: File,
}

impl EventFd {
    fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is open, and nothing else owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { file: File::from(owned) })
    }

    fn raw(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Adds `n` to the counter (what the kernel does per interrupt); for tests.
    #[cfg(test)]
    fn signal(&self, n: u64) -> io::Result<()> {
        use std::io::Write as _;
        (&self.file).write_all(&n.to_ne_bytes())
    }

    /// Waits up to `timeout` for the counter to become non-zero, then takes it (resetting it to
    /// zero). Returns 0 on timeout.
    fn wait(&self, timeout: Duration) -> io::Result<u64> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let remaining = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            // Round up, so a short timeout does not turn into a busy loop of zero-length polls.
            let ms = remaining.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd { fd: self.raw(), events: libc::POLLIN, revents: 0 };
            // SAFETY: `pfd` is one valid pollfd that lives across the call; nfds is 1.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if r > 0 {
                let mut b = [0u8; 8];
                match (&self.file).read(&mut b) {
                    Ok(8) => return Ok(u64::from_ne_bytes(b)),
                    Ok(_) => return Err(io::Error::new(io::ErrorKind::InvalidData, "short eventfd read")),
                    // Another waiter took the count between poll and read: keep waiting.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(0);
            }
        }
    }
}

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
        let vectors = (0..nvec).map(|_| EventFd::new()).collect::<io::Result<Vec<_>>>().map_err(io_err("eventfd"))?;
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
        match efd.wait(timeout) {
            Ok(n) => u32::try_from(n).unwrap_or(u32::MAX),
            Err(e) => {
                tracing::warn!(vector, error = %e, "waiting for an MSI-X eventfd failed");
                0
            }
        }
    }
}

#[cfg(test)]
// Slices of one IOVA range are what the IOMMU reports; they are not meant as `Vec`s of a range.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    // --- BDF parsing -----------------------------------------------------------------------

    #[test]
    fn bdf_parses_with_and_without_domain() {
        let b: Bdf = "0000:00:05.0".parse().unwrap();
        assert_eq!(b, Bdf { domain: 0, bus: 0, device: 5, function: 0 });
        assert_eq!(b.to_string(), "0000:00:05.0");
        let b: Bdf = "af:1f.7".parse().unwrap();
        assert_eq!(b, Bdf { domain: 0, bus: 0xaf, device: 0x1f, function: 7 });
        let b: Bdf = " 10000:3B:00.1\n".parse().unwrap();
        assert_eq!(b, Bdf { domain: 0x10000, bus: 0x3b, device: 0, function: 1 });
        assert_eq!(b.to_string(), "10000:3b:00.1");
    }

    #[test]
    fn bdf_parse_errors() {
        assert_eq!("".parse::<Bdf>(), Err(BdfError::Empty));
        assert_eq!("  ".parse::<Bdf>(), Err(BdfError::Empty));
        assert!(matches!("0000:00:05".parse::<Bdf>(), Err(BdfError::Format(_))));
        assert!(matches!("05.0".parse::<Bdf>(), Err(BdfError::Format(_))));
        assert!(matches!("0:0:0:05.0".parse::<Bdf>(), Err(BdfError::Format(_))));
        assert!(matches!("0000:zz:05.0".parse::<Bdf>(), Err(BdfError::Field { field: "bus", .. })));
        assert!(matches!("0000:000:05.0".parse::<Bdf>(), Err(BdfError::Field { field: "bus", .. })));
        assert!(matches!("123456789:00:05.0".parse::<Bdf>(), Err(BdfError::Field { field: "domain", .. })));
        // from_str_radix would accept a sign; a BDF must not.
        assert!(matches!("+000:00:05.0".parse::<Bdf>(), Err(BdfError::Field { field: "domain", .. })));
        assert!(matches!("0000::05.0".parse::<Bdf>(), Err(BdfError::Field { field: "bus", .. })));
        assert!(matches!("0000:00:.0".parse::<Bdf>(), Err(BdfError::Field { field: "device", .. })));
        assert!(matches!("0000:00:05.".parse::<Bdf>(), Err(BdfError::Field { field: "function", .. })));
        assert!(matches!("0000:00:05.10".parse::<Bdf>(), Err(BdfError::Field { field: "function", .. })));
        assert_eq!("0000:00:20.0".parse::<Bdf>(), Err(BdfError::Device(0x20)));
        assert_eq!("0000:00:05.8".parse::<Bdf>(), Err(BdfError::Function(8)));
    }

    #[test]
    fn device_specs_resolve_to_sysfs() {
        let (p, n) = resolve_device("00:05.0").unwrap();
        assert_eq!(p, PathBuf::from("/sys/bus/pci/devices/0000:00:05.0"));
        assert_eq!(n, "0000:00:05.0");
        let (p, n) = resolve_device("/sys/bus/pci/devices/0000:00:05.0").unwrap();
        assert_eq!(p, PathBuf::from("/sys/bus/pci/devices/0000:00:05.0"));
        assert_eq!(n, "0000:00:05.0");
        let (_, n) = resolve_device("/sys/devices/pci0000:00/weird").unwrap();
        assert_eq!(n, "/sys/devices/pci0000:00/weird");
        assert!(resolve_device("nonsense").is_err());
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

    // --- BARs ------------------------------------------------------------------------------

    #[test]
    fn bar_decoding() {
        assert_eq!(mem_bar_address(0xfe00_0000, 0x1234), Some(0xfe00_0000));
        assert_eq!(mem_bar_address(0xfe00_0008, 0), Some(0xfe00_0000)); // prefetchable 32-bit
        assert_eq!(mem_bar_address(0xc000_000c, 0x38), Some(0x38_c000_0000)); // 64-bit
        assert_eq!(mem_bar_address(0xc001, 0), None); // I/O BAR
        assert_eq!(mem_bar_address(0xc000_0006, 0), None); // reserved type
    }

    // --- IOVA allocator --------------------------------------------------------------------

    #[test]
    fn allocator_rounds_aligns_and_leaves_guards() {
        let mut a = IovaAllocator::new(&[0x1000..0x10_0000], 4096, 0);
        assert_eq!(a.size_for(0), Some(PAGE));
        assert_eq!(a.size_for(1), Some(PAGE));
        assert_eq!(a.size_for(4097), Some(2 * PAGE));
        assert_eq!(a.size_for(u64::MAX), None);
        let x = a.alloc(PAGE).unwrap();
        let y = a.alloc(2 * PAGE).unwrap();
        assert_eq!(x, 0x1000);
        assert_eq!(y, x + 2 * PAGE, "one guard page between allocations");
        assert_eq!(a.alloc(0), None);
        assert_eq!(a.alloc(100), None, "sizes are whole units");
    }

    #[test]
    fn allocator_uses_larger_units_and_respects_floor() {
        let mut a = IovaAllocator::new(&[0..1 << 40], 1 << 16, 1 << 32);
        assert_eq!(a.size_for(1), Some(1 << 16));
        let x = a.alloc(1 << 16).unwrap();
        assert_eq!(x, 1 << 32);
        assert_eq!(a.alloc(1 << 16).unwrap(), x + (2 << 16));
        // An alignment below a page is raised to a page.
        assert_eq!(IovaAllocator::new(&[0..1 << 20], 512, 0).align, 4096);
    }

    #[test]
    fn allocator_skips_ranges_too_small_and_runs_out() {
        // Unsorted input; a hole (the MSI window) between the ranges.
        let ranges = [0xfef0_0000..0xff00_0000, 0x1000..0x4000];
        let mut a = IovaAllocator::new(&ranges, 4096, 0);
        assert_eq!(a.alloc(2 * PAGE), Some(0x1000));
        // 0x3000..0x4000 is left but the guard takes it: next comes from the second range.
        assert_eq!(a.alloc(PAGE), Some(0xfef0_0000));
        // Too big for what is left: fails without moving the cursor.
        assert_eq!(a.alloc(1 << 20), None);
        assert_eq!(a.alloc(PAGE), Some(0xfef0_2000));
    }

    #[test]
    fn allocator_survives_the_top_of_the_address_space() {
        let top = u64::MAX - (u64::MAX % PAGE);
        let mut a = IovaAllocator::new(&[top - 4 * PAGE..u64::MAX], 4096, 0);
        assert_eq!(a.alloc(2 * PAGE), Some(top - 4 * PAGE));
        assert_eq!(a.alloc(PAGE), Some(top - PAGE));
        // The cursor saturated; nothing more, and no overflow panic.
        assert_eq!(a.alloc(PAGE), None);
        assert_eq!(a.alloc(u64::MAX - (u64::MAX % PAGE)), None);
        let mut b = IovaAllocator::new(&[0..u64::MAX], 4096, u64::MAX - 10);
        assert_eq!(b.alloc(PAGE), None);
    }

    #[test]
    fn floor_is_4g_only_with_room_above() {
        assert_eq!(choose_floor(&[0x1000..1 << 39]), IOVA_FLOOR);
        assert_eq!(choose_floor(&[0x1000..0xfee0_0000]), 0);
        assert_eq!(choose_floor(&[0x1000..IOVA_FLOOR + 4096]), 0);
        assert_eq!(choose_floor(&[]), 0);
    }

    // --- IOVA table ------------------------------------------------------------------------

    struct Fake(u64);
    impl Extent for Fake {
        fn extent(&self) -> u64 {
            self.0
        }
    }

    fn table() -> DmaTable<Fake> {
        let mut t = DmaTable::new();
        assert!(t.insert(0x10_000, Fake(0x2000)).is_ok());
        assert!(t.insert(0x12_000, Fake(0x1000)).is_ok()); // adjacent: allowed, distinct
        assert!(t.insert(0x20_000, Fake(0x1000)).is_ok());
        t
    }

    fn bad(iova: u64, len: u64) -> PlatformError {
        PlatformError::BadDma { iova, len }
    }

    #[test]
    fn table_resolves_inside_mappings() {
        let t = table();
        assert_eq!(t.resolve(0x10_000, 0x2000).map(|(_, o)| o), Ok(0));
        assert_eq!(t.resolve(0x11_ff0, 0x10).map(|(_, o)| o), Ok(0x1ff0));
        assert_eq!(t.resolve(0x12_000, 4).map(|(m, o)| (m.0, o)), Ok((0x1000, 0)));
        // Zero-length accesses inside or at the end of a mapping are fine.
        assert!(t.resolve(0x12_000, 0).is_ok());
        assert!(t.resolve(0x21_000, 0).is_ok());
    }

    #[test]
    fn table_rejects_bad_iovas() {
        let t = table();
        assert_eq!(t.resolve(0, 1).err(), Some(bad(0, 1)));
        assert_eq!(t.resolve(0xf_fff, 1).err(), Some(bad(0xf_fff, 1)));
        assert_eq!(t.resolve(0x13_000, 1).err(), Some(bad(0x13_000, 1)));
        assert_eq!(t.resolve(0x21_000, 1).err(), Some(bad(0x21_000, 1)));
        assert_eq!(t.resolve(u64::MAX, 1).err(), Some(bad(u64::MAX, 1)));
        assert_eq!(DmaTable::<Fake>::new().resolve(0x10_000, 1).err(), Some(bad(0x10_000, 1)));
    }

    #[test]
    fn table_rejects_ranges_crossing_mappings() {
        let t = table();
        // From the first mapping into the adjacent second one: not one mapping.
        assert_eq!(t.resolve(0x11_ffc, 8).err(), Some(bad(0x11_ffc, 8)));
        // Past the end into the gap.
        assert_eq!(t.resolve(0x20_ff0, 0x20).err(), Some(bad(0x20_ff0, 0x20)));
        // Starting in a gap and reaching into a mapping.
        assert_eq!(t.resolve(0x1f_ff0, 0x20).err(), Some(bad(0x1f_ff0, 0x20)));
    }

    #[test]
    fn table_rejects_overflowing_ranges() {
        let mut t = table();
        assert_eq!(t.resolve(0x10_000, u64::MAX).err(), Some(bad(0x10_000, u64::MAX)));
        assert_eq!(t.resolve(0x11_000, u64::MAX - 0x10).err(), Some(bad(0x11_000, u64::MAX - 0x10)));
        // A mapping at the top of the address space: an access past it must not wrap.
        let top = u64::MAX - 0x1fff;
        assert!(t.insert(top, Fake(0x1000)).is_ok());
        assert!(t.resolve(top, 0x1000).is_ok());
        assert_eq!(t.resolve(top + 0xffc, 8).err(), Some(bad(top + 0xffc, 8)));
        assert_eq!(t.resolve(u64::MAX - 3, 8).err(), Some(bad(u64::MAX - 3, 8)));
        assert_eq!(t.resolve(u64::MAX, u64::MAX).err(), Some(bad(u64::MAX, u64::MAX)));
        // A mapping whose (exclusive) end does not fit in 64 bits cannot be inserted.
        assert!(t.insert(u64::MAX - 0xfff, Fake(0x1000)).is_err());
        assert!(t.insert(u64::MAX - 0xfff, Fake(0x2000)).is_err());
    }

    #[test]
    fn table_rejects_misaligned_words() {
        let t = table();
        assert_eq!(t.resolve_word(0x10_002).err(), Some(PlatformError::Misaligned(0x10_002)));
        assert_eq!(t.resolve_word(0x10_001).err(), Some(PlatformError::Misaligned(0x10_001)));
        // Misalignment is reported even where nothing is mapped.
        assert_eq!(t.resolve_word(0x3).err(), Some(PlatformError::Misaligned(0x3)));
        assert_eq!(t.resolve_word(0x11_ffc).map(|(_, o)| o), Ok(0x1ffc));
        assert_eq!(t.resolve_word(0x12_ffc).map(|(_, o)| o), Ok(0xffc));
        assert_eq!(t.resolve_word(0x13_000).err(), Some(bad(0x13_000, 4)));
    }

    #[test]
    fn table_refuses_overlaps_and_removes_by_start() {
        let mut t = table();
        assert!(t.insert(0x11_000, Fake(0x1000)).is_err()); // inside the first
        assert!(t.insert(0xf_000, Fake(0x2000)).is_err()); // runs into the first
        assert!(t.insert(0x1f_000, Fake(0x1000)).is_ok()); // ends exactly at the third
        assert!(t.insert(0x30_000, Fake(0)).is_err());
        assert!(t.remove(0x10_004).is_none());
        assert!(t.remove(0x10_000).is_some());
        assert_eq!(t.resolve(0x10_000, 1).err(), Some(bad(0x10_000, 1)));
        assert_eq!(t.len(), 3);
    }

    // --- Host memory and the whole DMA space (everything except the IOMMU ioctl) -----------

    #[test]
    fn host_memory_is_aligned_zeroed_and_copies_in_memory_order() {
        let page = page_size();
        let m = HostMemory::new(2 * page, page).unwrap();
        assert_eq!(m.as_ptr() as usize % page, 0);
        let mut z = vec![0xffu8; 2 * page];
        assert!(m.read(0, &mut z));
        assert!(z.iter().all(|&b| b == 0));
        // Unaligned head, whole words, unaligned tail.
        let data: Vec<u8> = (0..23u8).collect();
        assert!(m.write(page - 5, &data));
        let mut back = [0u8; 23];
        assert!(m.read(page - 5, &mut back));
        assert_eq!(&back[..], &data[..]);
        // Neighbouring bytes of the partial words are untouched.
        let mut edge = [0xaau8; 2];
        assert!(m.read(page - 6, &mut edge[..1]));
        assert!(m.read(page + 18, &mut edge[1..]));
        assert_eq!(edge, [0, 0]);
        // Words are little-endian in memory.
        assert!(m.store_u32(8, 0x0403_0201));
        let mut b = [0u8; 4];
        assert!(m.read(8, &mut b));
        assert_eq!(b, [1, 2, 3, 4]);
        assert_eq!(m.load_u32(8), Some(0x0403_0201));
        // Bounds and alignment.
        assert!(!m.read(2 * page - 1, &mut [0u8; 2]));
        assert!(!m.write(usize::MAX, &[0u8; 2]));
        assert_eq!(m.load_u32(2 * page), None);
        assert_eq!(m.load_u32(6), None);
        assert!(!m.store_u32(2, 0));
        assert!(HostMemory::new(0, page).is_err());
        assert!(HostMemory::new(page + 4, page).is_err());
    }

    #[test]
    fn host_memory_honours_a_large_alignment() {
        let align = page_size() * 16;
        for _ in 0..4 {
            let m = HostMemory::new(align, align).unwrap();
            assert_eq!(m.as_ptr() as usize % align, 0);
            assert!(m.store_u32(align - 4, 7));
            assert_eq!(m.load_u32(align - 4), Some(7));
        }
    }

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

    // --- Interrupt eventfds ----------------------------------------------------------------

    #[test]
    fn eventfd_wait_returns_the_counter_and_resets_it() {
        let e = EventFd::new().unwrap();
        e.signal(1).unwrap();
        e.signal(2).unwrap();
        assert_eq!(e.wait(Duration::from_secs(5)).unwrap(), 3);
        let t = Instant::now();
        assert_eq!(e.wait(Duration::from_millis(20)).unwrap(), 0);
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert_eq!(e.wait(Duration::ZERO).unwrap(), 0);
    }

    #[test]
    fn eventfd_wait_wakes_on_a_signal_from_another_thread() {
        let e = Arc::new(EventFd::new().unwrap());
        let e2 = Arc::clone(&e);
        let t = Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            e2.signal(1).unwrap();
        });
        assert_eq!(e.wait(Duration::from_secs(10)).unwrap(), 1);
        assert!(t.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
    }
}
