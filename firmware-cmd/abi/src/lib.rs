//! The pvrdma device ABI: the one contract the driver (`hca`) and the device model (`pvrdma-sim`)
//! share, as Linux's `vmw_pvrdma` and QEMU's `hw/rdma/vmw` share the pvrdma headers.
//!
//! Every structure that lives in DMA memory or a command slot is `#[repr(C)]`, uses zerocopy's
//! little-endian integer types (so it has alignment 1 and no implicit padding: every reserved byte is
//! spelled out), and carries a compile-time size assert plus an assert for every field offset.
//! The structures also found in `/usr/include/rdma/vmw_pvrdma-abi.h` are checked against that header
//! by `tests/tests/device/abi_header.rs`.
#![no_std]
#![forbid(unsafe_code)]

pub mod cmd;
pub mod dsr;
pub mod errno;
pub mod event;
pub mod pdir;
pub mod regs;
pub mod ring;
pub mod uar;
pub mod verbs;
pub mod wqe;

/// Asserts at compile time that `$t` is `$size` bytes and that each named field sits at its offset.
#[macro_export]
macro_rules! assert_layout {
    ($t:ty, $size:expr $(, $field:ident = $off:expr)* $(,)?) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $size);
        $(const _: () = assert!(core::mem::offset_of!($t, $field) == $off);)*
    };
}

/// PCI vendor ID of the device (VMware).
pub const PCI_VENDOR_ID_VMWARE: u16 = 0x15ad;
/// PCI device ID of the paravirtual RDMA function.
pub const PCI_DEVICE_ID_VMWARE_PVRDMA: u16 = 0x0820;
/// Device API version QEMU 7.2 reports in `REG_VERSION` (RoCE v1).
pub const PVRDMA_ROCEV1_VERSION: u32 = 17;
/// RoCE v2 device API version (Linux accepts 17 and 18).
pub const PVRDMA_ROCEV2_VERSION: u32 = 18;
/// Board ID the PCI function carries (subsystem device).
pub const PVRDMA_BOARD_ID: u32 = 1;
/// Page size of every ring, page directory, and UAR page: 4 KiB.
pub const PAGE_SIZE: usize = 4096;
/// Log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;
/// The P_Key QEMU answers for every index of QUERY_PKEY.
pub const PVRDMA_PKEY: u16 = 0xffff;
