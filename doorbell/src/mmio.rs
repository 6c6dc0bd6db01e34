//! The one thing doorbells need from the platform.

/// A 32-bit little-endian write into BAR2 at a byte offset: the one thing doorbells need from
/// the platform (a kernel's `writel` on the ioremapped BAR, VFIO, the model, qtest).
pub trait UarMmio: Send + Sync {
    /// Writes `value` at `offset` bytes into BAR2. On pvrdma the write has taken effect when this
    /// returns (an MMIO write traps to the device model before the vCPU goes on).
    fn uar_write32(&self, offset: u64, value: u32);
}
