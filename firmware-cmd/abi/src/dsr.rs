//! The device shared region (DSR): one page the driver allocates and hands to the device through
//! `REG_DSRLOW`/`REG_DSRHIGH` (`struct pvrdma_device_shared_region`, `#pragma pack(1)` in Linux).
//! Not in the uapi header; checked against the real QEMU 7.2 device.

use crate::assert_layout;
use zerocopy::big_endian::U64 as Be64;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Guest OS information (`struct pvrdma_gos_info`). Driver-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct GosInfo {
    /// Bit field: `gos_bits:2` (1 = 32-bit, 2 = 64-bit), `gos_type:4` (1 = Linux), `gos_ver:16`,
    /// `gos_misc:10`.
    pub bits: U32,
    /// Padding to 8 bytes.
    pub pad: U32,
}
assert_layout!(GosInfo, 8, bits = 0, pad = 4);

impl GosInfo {
    /// A 64-bit Linux guest, as the Linux driver reports itself.
    pub fn linux_64() -> Self {
        let gos_bits = 2u32; // PVRDMA_GOS_BITS_64
        let gos_type = 1u32 << 2; // PVRDMA_GOS_TYPE_LINUX
        Self { bits: U32::new(gos_bits | gos_type), pad: U32::ZERO }
    }
}

/// Device capabilities (`struct pvrdma_device_caps`). Device-written when the DSR is loaded.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct DeviceCaps {
    pub fw_ver: U64,
    /// Node GUID, big-endian as on the wire.
    pub node_guid: Be64,
    /// System image GUID, big-endian.
    pub sys_image_guid: Be64,
    pub max_mr_size: U64,
    pub page_size_cap: U64,
    pub atomic_arg_sizes: U64,
    pub ex_comp_mask: U32,
    pub device_cap_flags2: U32,
    pub max_fa_bit_boundary: U32,
    pub log_max_atomic_inline_arg: U32,
    pub vendor_id: U32,
    pub vendor_part_id: U32,
    pub hw_ver: U32,
    pub max_qp: U32,
    pub max_qp_wr: U32,
    pub device_cap_flags: U32,
    pub max_sge: U32,
    pub max_sge_rd: U32,
    pub max_cq: U32,
    pub max_cqe: U32,
    pub max_mr: U32,
    pub max_pd: U32,
    pub max_qp_rd_atom: U32,
    pub max_ee_rd_atom: U32,
    pub max_res_rd_atom: U32,
    pub max_qp_init_rd_atom: U32,
    pub max_ee_init_rd_atom: U32,
    pub max_ee: U32,
    pub max_rdd: U32,
    pub max_mw: U32,
    pub max_raw_ipv6_qp: U32,
    pub max_raw_ethy_qp: U32,
    pub max_mcast_grp: U32,
    pub max_mcast_qp_attach: U32,
    pub max_total_mcast_qp_attach: U32,
    pub max_ah: U32,
    pub max_fmr: U32,
    pub max_map_per_fmr: U32,
    pub max_srq: U32,
    pub max_srq_wr: U32,
    pub max_srq_sge: U32,
    pub max_uar: U32,
    pub gid_tbl_len: U32,
    pub max_pkeys: U16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    /// `PVRDMA_DEVICE_MODE_*`: 0 RoCE, 1 iWARP, 2 IB.
    pub mode: u8,
    pub atomic_ops: u8,
    pub bmme_flags: u8,
    /// `PVRDMA_GID_TYPE_FLAG_*`: bit 0 RoCE v1, bit 1 RoCE v2.
    pub gid_types: u8,
    /// QEMU's header names these 4 bytes `max_fast_reg_page_list_len`; Linux's reserves them.
    pub max_fast_reg_page_list_len: U32,
}
assert_layout!(
    DeviceCaps,
    208,
    fw_ver = 0,
    node_guid = 8,
    sys_image_guid = 16,
    max_mr_size = 24,
    page_size_cap = 32,
    atomic_arg_sizes = 40,
    ex_comp_mask = 48,
    device_cap_flags2 = 52,
    max_fa_bit_boundary = 56,
    log_max_atomic_inline_arg = 60,
    vendor_id = 64,
    vendor_part_id = 68,
    hw_ver = 72,
    max_qp = 76,
    max_qp_wr = 80,
    device_cap_flags = 84,
    max_sge = 88,
    max_sge_rd = 92,
    max_cq = 96,
    max_cqe = 100,
    max_mr = 104,
    max_pd = 108,
    max_qp_rd_atom = 112,
    max_ee_rd_atom = 116,
    max_res_rd_atom = 120,
    max_qp_init_rd_atom = 124,
    max_ee_init_rd_atom = 128,
    max_ee = 132,
    max_rdd = 136,
    max_mw = 140,
    max_raw_ipv6_qp = 144,
    max_raw_ethy_qp = 148,
    max_mcast_grp = 152,
    max_mcast_qp_attach = 156,
    max_total_mcast_qp_attach = 160,
    max_ah = 164,
    max_fmr = 168,
    max_map_per_fmr = 172,
    max_srq = 176,
    max_srq_wr = 180,
    max_srq_sge = 184,
    max_uar = 188,
    gid_tbl_len = 192,
    max_pkeys = 196,
    local_ca_ack_delay = 198,
    phys_port_cnt = 199,
    mode = 200,
    atomic_ops = 201,
    bmme_flags = 202,
    gid_types = 203,
    max_fast_reg_page_list_len = 204
);

/// `PVRDMA_DEVICE_MODE_ROCE`.
pub const DEVICE_MODE_ROCE: u8 = 0;
/// `PVRDMA_GID_TYPE_FLAG_ROCE_V1`.
pub const GID_TYPE_FLAG_ROCE_V1: u8 = 1 << 0;
/// `PVRDMA_GID_TYPE_FLAG_ROCE_V2`.
pub const GID_TYPE_FLAG_ROCE_V2: u8 = 1 << 1;
/// `PVRDMA_ATOMIC_OP_COMP_SWAP` ([`DeviceCaps::atomic_ops`]).
pub const ATOMIC_OP_COMP_SWAP: u8 = 1 << 0;
/// `PVRDMA_ATOMIC_OP_FETCH_ADD` ([`DeviceCaps::atomic_ops`]).
pub const ATOMIC_OP_FETCH_ADD: u8 = 1 << 1;
/// `PVRDMA_BMME_FLAG_LOCAL_INV` ([`DeviceCaps::bmme_flags`]).
pub const BMME_FLAG_LOCAL_INV: u8 = 1 << 0;
/// `PVRDMA_BMME_FLAG_REMOTE_INV` ([`DeviceCaps::bmme_flags`]).
pub const BMME_FLAG_REMOTE_INV: u8 = 1 << 1;
/// `PVRDMA_BMME_FLAG_FAST_REG_WR` ([`DeviceCaps::bmme_flags`]).
pub const BMME_FLAG_FAST_REG_WR: u8 = 1 << 2;
/// `PVRDMA_BOARD_ID`: what Linux's driver reports as the device's `board_id`.
pub const BOARD_ID: u32 = 1;

/// A ring reached through a page directory (`struct pvrdma_ring_page_info`). Driver-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct RingPageInfo {
    /// Pages including the ring-state page (page 0).
    pub num_pages: U32,
    pub reserved: U32,
    /// Device address of the page directory.
    pub pdir_dma: U64,
}
assert_layout!(RingPageInfo, 16, num_pages = 0, reserved = 4, pdir_dma = 8);

/// The device shared region (`struct pvrdma_device_shared_region`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct Dsr {
    /// W: the driver's version; the device expects [`crate::PVRDMA_ROCEV1_VERSION`] or later.
    pub driver_version: U32,
    pub pad: U32,
    /// W: guest OS information.
    pub gos_info: GosInfo,
    /// W: device address of the command slot (one page).
    pub cmd_slot_dma: U64,
    /// W: device address of the response slot (one page).
    pub resp_slot_dma: U64,
    /// W: the async-event ring ([`crate::event::Eqe`] entries).
    pub async_ring_pages: RingPageInfo,
    /// W: the CQ-notification ring ([`crate::event::Cqne`] entries).
    pub cq_ring_pages: RingPageInfo,
    /// W: page frame number of the driver's UAR page (BAR2 address >> 12); QEMU reads it as a
    /// union of `u32 uar_pfn` and `u64 uar_pfn64`.
    pub uar_pfn: U64,
    /// R: filled in by the device when `REG_DSRHIGH` is written.
    pub caps: DeviceCaps,
}
assert_layout!(
    Dsr,
    280,
    driver_version = 0,
    pad = 4,
    gos_info = 8,
    cmd_slot_dma = 16,
    resp_slot_dma = 24,
    async_ring_pages = 32,
    cq_ring_pages = 48,
    uar_pfn = 64,
    caps = 72
);

/// Pages (including the ring-state page) the Linux driver gives each DSR ring.
pub const NUM_RING_PAGES: u32 = 4;
