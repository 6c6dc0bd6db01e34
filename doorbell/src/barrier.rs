//! The device-visible barriers of the stack; no other crate fences for a device.
//!
//! Rust's `fence(Release)` orders memory for other CPUs (the inner-shareable domain); a device
//! that reads DMA memory after seeing an MMIO write needs the outer-shareable domain on arm64,
//! which only `dmb osh*` gives. So:
//!
//! | barrier | x86-64 | arm64 | Linux |
//! |---|---|---|---|
//! | [`io_wmb`]: DMA-memory stores before a later MMIO write | compiler barrier (TSO keeps stores in order, uncached MMIO writes included) | `dmb oshst` | `__iowmb()` inside `writel()` |
//! | [`io_rmb`]: an MMIO read before later DMA-memory loads | compiler barrier | `dmb oshld` | `__iormb()` inside `readl()` |
//!
//! A write-combining BAR mapping would need `sfence` on x86-64 too (Linux's `wmb()`); no backend
//! maps BAR2 write-combining. Other architectures get Rust's fence, which is at least a compiler
//! barrier: add theirs here before trusting them.
#![allow(unsafe_code)]

/// Orders every earlier store to DMA memory (ring entries, ring-state indices) before the next
/// MMIO write (a doorbell, `REG_REQUEST`).
#[inline]
pub fn io_wmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshst` is a barrier instruction: it touches no memory or register the
    // compiler tracks, and without `nomem` the asm block is also a compiler memory barrier.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "aarch64"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
}

/// Orders the last MMIO read (a register, a response flag) before later loads from DMA memory.
#[inline]
pub fn io_rmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `io_wmb`: a barrier instruction, and a compiler memory barrier.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "aarch64"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
}
