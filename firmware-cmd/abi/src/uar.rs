//! UAR (BAR2) doorbell layout (`vmw_pvrdma-abi.h`): 4 KiB pages, 32-bit little-endian doorbells.

/// Bits 0..24 of a doorbell value carry the object handle.
pub const UAR_HANDLE_MASK: u32 = 0x00ff_ffff;
/// Offset of the QP doorbell within a UAR page.
pub const UAR_QP_OFFSET: u32 = 0;
/// QP doorbell: new send WQEs.
pub const UAR_QP_SEND: u32 = 1 << 30;
/// QP doorbell: new receive WQEs.
pub const UAR_QP_RECV: u32 = 1 << 31;
/// Offset of the CQ doorbell within a UAR page.
pub const UAR_CQ_OFFSET: u32 = 4;
/// CQ doorbell: arm for the next solicited completion.
pub const UAR_CQ_ARM_SOL: u32 = 1 << 29;
/// CQ doorbell: arm for the next completion.
pub const UAR_CQ_ARM: u32 = 1 << 30;
/// CQ doorbell: the consumer polled (QEMU polls its backend CQ on it).
pub const UAR_CQ_POLL: u32 = 1 << 31;
/// Offset of the SRQ doorbell within a UAR page.
pub const UAR_SRQ_OFFSET: u32 = 8;
/// SRQ doorbell: new receive WQEs.
pub const UAR_SRQ_RECV: u32 = 1 << 30;
/// Size of BAR2 on QEMU 7.2 (8 MiB: 2048 UAR pages).
pub const UAR_BAR_SIZE: u64 = 8 << 20;
/// Size of one UAR page.
pub const UAR_PAGE_SIZE: u64 = 4096;
