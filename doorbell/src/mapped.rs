//! BAR2 mapped into the address space (a kernel's `ioremap`, a VFIO `mmap`) as
//! `volatile-register` cells: the one place the card's `volatile-register` fits.
//!
//! It fits here, and only here, because a UAR page is write-only doorbells: the device never
//! writes it, and reading it has no side effect (QEMU 7.2 answers reads of BAR2 without acting),
//! so a Rust reference to the mapped block — which `volatile-register` needs, and which lets the
//! compiler read through it at will — cannot observe or cause anything. It does not fit the
//! registers of BAR1 (reads of `REG_ICR` clear interrupt causes), DMA memory the device writes
//! (design decision 4 rules out references to it), or backends that reach the BAR without a
//! mapping (`pread`/`pwrite` on a VFIO region, QEMU's qtest protocol): those stay behind
//! [`crate::UarMmio`] implementations of their own.
#![allow(unsafe_code)]

use crate::mmio::UarMmio;
use core::mem::{offset_of, size_of};
use pvrdma_abi::uar::{UAR_CQ_OFFSET, UAR_PAGE_SIZE, UAR_QP_OFFSET, UAR_SRQ_OFFSET};
use volatile_register::WO;

/// One 4 KiB UAR page as the device decodes it (`vmw_pvrdma-abi.h`).
#[repr(C)]
pub struct UarPageRegs {
    /// QP doorbell (offset 0).
    pub qp: WO<u32>,
    /// CQ doorbell (offset 4).
    pub cq: WO<u32>,
    /// SRQ doorbell (offset 8).
    pub srq: WO<u32>,
    _unused: [u32; 1021],
}
const _: () = assert!(size_of::<UarPageRegs>() == UAR_PAGE_SIZE as usize);
const _: () = assert!(offset_of!(UarPageRegs, qp) == UAR_QP_OFFSET as usize);
const _: () = assert!(offset_of!(UarPageRegs, cq) == UAR_CQ_OFFSET as usize);
const _: () = assert!(offset_of!(UarPageRegs, srq) == UAR_SRQ_OFFSET as usize);

/// A mapped BAR2: doorbell writes are volatile stores into the mapping. It is a raw
/// [`UarMmio`]: the barrier before each doorbell is [`crate::Doorbells`]' (one per doorbell), and
/// a write past the mapping, or at an offset of a page that holds no doorbell, is dropped (size
/// the [`crate::UarTable`] from the same BAR so that cannot happen).
pub struct MappedUar<'a> {
    pages: &'a [UarPageRegs],
}

// SAFETY: the cells are only ever written, each write one aligned 32-bit volatile store, which
// the hardware performs atomically whatever thread issues it; nothing is read back.
unsafe impl Sync for MappedUar<'_> {}
// SAFETY: as for `Sync`; the mapping is not tied to the thread that made it.
unsafe impl Send for MappedUar<'_> {}

impl<'a> MappedUar<'a> {
    /// The BAR2 mapping of `pages` 4 KiB pages at `base`.
    ///
    /// # Safety
    /// `base` must be 4-byte aligned and point to `pages * 4096` bytes of mapped, write-only
    /// doorbell space (a UAR BAR, or plain memory in a test) that stays mapped for `'a`, and
    /// nothing may create a `&mut` to it meanwhile. `'a` is the caller's promise, as with
    /// `slice::from_raw_parts`: a mapping that lives as long as the device is `'static`.
    pub unsafe fn new(base: *mut u8, pages: usize) -> Self {
        // SAFETY: the caller guarantees `pages` pages of mapped memory at `base` for `'a`;
        // `UarPageRegs` is 4 KiB of `repr(C)` 32-bit cells with no invalid bit patterns.
        let pages = unsafe { core::slice::from_raw_parts(base.cast::<UarPageRegs>(), pages) };
        Self { pages }
    }
}

impl UarMmio for MappedUar<'_> {
    /// A write past the mapping or at an offset that holds no doorbell is dropped.
    fn uar_write32(&self, offset: u64, value: u32) {
        let Some(page) = usize::try_from(offset / UAR_PAGE_SIZE).ok().and_then(|i| self.pages.get(i)) else {
            return;
        };
        let cell = match (offset % UAR_PAGE_SIZE) as u32 {
            UAR_QP_OFFSET => &page.qp,
            UAR_CQ_OFFSET => &page.cq,
            UAR_SRQ_OFFSET => &page.srq,
            _ => return,
        };
        // SAFETY: a volatile store into the mapped doorbell page `new`'s caller vouched for.
        unsafe { cell.write(value.to_le()) };
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;

    #[test]
    fn writes_land_at_the_doorbell_offsets() {
        let mut mem = vec![0u32; 2 * 1024];
        {
            // SAFETY: two pages of plain, aligned memory that outlive the mapping.
            let uar = unsafe { MappedUar::new(mem.as_mut_ptr().cast(), 2) };
            uar.uar_write32(4096 + 4, 0x4000_0007);
            uar.uar_write32(8, 0x4000_0001);
            uar.uar_write32(12, 0xdead); // no doorbell there
            uar.uar_write32(2 * 4096, 0xdead); // past the mapping
        }
        assert_eq!(mem[1024 + 1], 0x4000_0007u32.to_le());
        assert_eq!(mem[2], 0x4000_0001u32.to_le());
        assert_eq!(mem.iter().filter(|w| **w != 0).count(), 2);
    }
}
