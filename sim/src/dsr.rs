//! The device shared region as the device loads it: the command and response slots, the two
//! device rings, the kernel's UAR pfn, and the capabilities the device writes back.

use crate::eq::EventRings;
use crate::mem::GuestMemory;
use crate::pdir;
use crate::ring::{Producer, RingPages};
use pvrdma_abi::cmd::SLOT_SIZE;
use pvrdma_abi::dsr::{DeviceCaps, Dsr, RingPageInfo, DEVICE_MODE_ROCE};
use pvrdma_abi::event::{Cqne, Eqe};
use pvrdma_abi::pdir::PDIR_ENTRIES;
use pvrdma_abi::{PAGE_SIZE, PCI_DEVICE_ID_VMWARE_PVRDMA, PCI_VENDOR_ID_VMWARE};
use thiserror::Error;
use zerocopy::big_endian::U64 as Be64;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, IntoBytes};

use crate::limits;

/// The MAC address the function has until the driver writes `MACL`/`MACH`.
pub const DEFAULT_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// Why `REG_DSRHIGH` left the device broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DsrError {
    /// The DSR itself is not in guest memory.
    #[error("the DSR at {0:#x} is outside guest memory")]
    Dsr(u64),
    /// A command or response slot is not a whole page of guest memory.
    #[error("a command or response slot is outside guest memory")]
    Slot,
    /// `uar_pfn` is not the pfn of BAR2's first page (the kernel's UAR page).
    #[error("uar_pfn {0:#x} is not BAR2's first page")]
    UarPfn(u64),
    /// A ring's page count, page directory or geometry is invalid.
    #[error("the {0} ring is invalid")]
    Ring(&'static str),
}

/// What the device keeps of a loaded DSR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsrInfo {
    /// Device address of the DSR.
    pub addr: u64,
    /// Device address of the command slot.
    pub cmd_slot: u64,
    /// Device address of the response slot.
    pub resp_slot: u64,
    /// The kernel's UAR pfn: user contexts own page `pfn - uar_pfn` of BAR2.
    pub uar_pfn: u64,
}

/// Loads the DSR at `addr`: maps both slots and both device rings. Does not write `caps`.
pub fn load(mem: &GuestMemory, addr: u64) -> Result<(DsrInfo, EventRings), DsrError> {
    let mut raw = [0u8; core::mem::size_of::<Dsr>()];
    mem.read(addr, &mut raw).map_err(|_| DsrError::Dsr(addr))?;
    let dsr = Dsr::read_from_bytes(&raw).map_err(|_| DsrError::Dsr(addr))?;
    let (cmd_slot, resp_slot) = (dsr.cmd_slot_dma.get(), dsr.resp_slot_dma.get());
    for slot in [cmd_slot, resp_slot] {
        if !mem.contains(slot, SLOT_SIZE as u64) {
            return Err(DsrError::Slot);
        }
    }
    let cq_ring =
        load_ring(mem, &dsr.cq_ring_pages, size_of::<Cqne>() as u32).ok_or(DsrError::Ring("CQ-notification"))?;
    let async_ring =
        load_ring(mem, &dsr.async_ring_pages, size_of::<Eqe>() as u32).ok_or(DsrError::Ring("async-event"))?;
    // The kernel's UAR page is BAR2's page 0; a user context owns page `pfn - uar_pfn`, so any
    // other value would hand the kernel's page to a context.
    if dsr.uar_pfn.get() != crate::limits::UAR_BASE_PFN {
        return Err(DsrError::UarPfn(dsr.uar_pfn.get()));
    }
    let info = DsrInfo { addr, cmd_slot, resp_slot, uar_pfn: dsr.uar_pfn.get() };
    Ok((info, EventRings::new(async_ring, cq_ring)))
}

/// A device ring: page 0 holds the ring state, entries from page 1; the element count,
/// `(num_pages - 1) * 4096 / entry_size`, must be a power of two.
fn load_ring(mem: &GuestMemory, info: &RingPageInfo, entry_size: u32) -> Option<Producer> {
    let n = info.num_pages.get();
    if !(2..=limits::MAX_DSR_RING_PAGES).contains(&n) {
        return None;
    }
    debug_assert!(n as usize <= PDIR_ENTRIES);
    let mut pages = pdir::resolve(mem, info.pdir_dma.get(), 0, n as usize).ok()?;
    let state = pages.remove(0);
    let elems = (n - 1) * PAGE_SIZE as u32 / entry_size;
    let entries = RingPages::new(mem, pages, entry_size, elems)?;
    Producer::new(mem, entries, state)
}

/// The node GUID of the function: the modified EUI-64 of its MAC (as QEMU derives it).
pub fn node_guid(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]])
}

/// The capabilities the device writes into the DSR's `caps`.
pub fn caps(mac: [u8; 6]) -> DeviceCaps {
    use limits::*;
    let guid = node_guid(mac);
    DeviceCaps {
        fw_ver: U64::new(FW_VERSION),
        node_guid: Be64::new(guid),
        sys_image_guid: Be64::new(guid),
        max_mr_size: U64::new(MAX_MR_SIZE),
        page_size_cap: U64::new(PAGE_SIZE as u64),
        vendor_id: U32::new(u32::from(PCI_VENDOR_ID_VMWARE)),
        vendor_part_id: U32::new(u32::from(PCI_DEVICE_ID_VMWARE_PVRDMA)),
        hw_ver: U32::new(1),
        max_qp: U32::new(MAX_QP),
        max_qp_wr: U32::new(MAX_QP_WR),
        max_sge: U32::new(MAX_SGE),
        max_sge_rd: U32::new(MAX_SGE),
        max_cq: U32::new(MAX_CQ),
        max_cqe: U32::new(MAX_CQE),
        max_mr: U32::new(MAX_MR),
        max_pd: U32::new(MAX_PD),
        max_ah: U32::new(MAX_AH),
        max_srq: U32::new(MAX_SRQ),
        max_srq_wr: U32::new(MAX_SRQ_WR),
        max_srq_sge: U32::new(MAX_SRQ_SGE),
        max_qp_rd_atom: U32::new(MAX_QP_RD_ATOM),
        max_qp_init_rd_atom: U32::new(MAX_QP_RD_ATOM),
        max_res_rd_atom: U32::new(MAX_QP_RD_ATOM * MAX_QP),
        max_uar: U32::new(MAX_UAR),
        gid_tbl_len: U32::new(GID_TBL_LEN),
        max_pkeys: U16::new(PKEY_TBL_LEN),
        phys_port_cnt: 1,
        mode: DEVICE_MODE_ROCE,
        gid_types: GID_TYPES,
        // COMPARE SWAP and FETCH ADD (Linux's `pvrdma_query_device` reports IB_ATOMIC_HCA for
        // either bit); no masked atomics. QEMU 7.2 leaves `atomic_ops` 0.
        atomic_ops: ATOMIC_OPS,
        ..DeviceCaps::default()
    }
}

/// [`caps`] as the device reports them under `profile`: QEMU 7.2 reports no atomic operations
/// (its DSR leaves `atomic_ops` 0, so Linux says `IB_ATOMIC_NONE`), and so does that profile. An
/// atomic WQE posted anyway is still executed as IBTA says (QEMU 7.2 would carry it to its
/// backend as a plain SEND of the 8-byte SGE, consuming a receive WQE at the peer and changing
/// no memory: not reproduced, as the profile keeps the data path IBTA's).
pub fn profile_caps(mac: [u8; 6], profile: crate::Profile) -> DeviceCaps {
    let mut c = caps(mac);
    if profile == crate::Profile::Qemu72 {
        c.atomic_ops = 0;
    }
    c
}

/// Writes `caps` into the DSR at `addr` (only the `caps` field; the driver's fields are kept).
pub fn write_caps(mem: &GuestMemory, addr: u64, caps: &DeviceCaps) -> bool {
    let off = core::mem::offset_of!(Dsr, caps) as u64;
    mem.write(addr + off, caps.as_bytes()).is_ok()
}
