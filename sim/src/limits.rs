//! The model's resource limits, reported in the DSR's `caps` and enforced by the commands.

/// Firmware version reported in `caps.fw_ver`.
pub const FW_VERSION: u64 = 0x0001_0000_000e;
/// QPs (QPNs 2 ..; 0 and 1 are SMI and GSI).
pub const MAX_QP: u32 = 1024;
/// Work requests per queue (a power of two).
pub const MAX_QP_WR: u32 = 1024;
/// SGEs per work request.
pub const MAX_SGE: u32 = 4;
/// CQs (131,072; handles travel in 24 bits). A CQ of one page of
/// CQEs costs the driver 16 KiB of guest memory (ring-state page, entry page, page directory
/// and table), so `mem_limit` bounds the count first: 65,536 such CQs take 1 GiB.
pub const MAX_CQ: u32 = 1 << 17;
/// Entries per CQ (a power of two).
pub const MAX_CQE: u32 = 4096;
/// MRs.
pub const MAX_MR: u32 = 4096;
/// PDs.
pub const MAX_PD: u32 = 1024;
/// RDMA READ and atomic operations one QP may have outstanding, as initiator and as
/// responder (`max_qp_init_rd_atom`, `max_qp_rd_atom`); MODIFY_QP refuses more. Reported and
/// enforced (16, as mlx4): a requester sends at most its `max_rd_atomic` (0 counting as 1)
/// READs and atomics before their responses; a RoCE responder remembers at least this many
/// of each to answer duplicates.
pub const MAX_QP_RD_ATOM: u32 = 16;
/// SRQs.
pub const MAX_SRQ: u32 = 1024;
/// Receive WQEs per SRQ (a power of two).
pub const MAX_SRQ_WR: u32 = MAX_QP_WR;
/// SGEs per SRQ receive WQE.
pub const MAX_SRQ_SGE: u32 = MAX_SGE;
/// Address handles: reported; pvrdma AHs are the driver's software objects (no command), so
/// the driver counts and enforces it (as Linux's `pvrdma_create_ah`).
pub const MAX_AH: u32 = 64;
/// Bytes one MR may span: what one page directory can describe (512 * 512 pages of 4 KiB).
pub const MAX_MR_SIZE: u64 = 1 << 30;
/// Entries of the port's GID table.
pub const GID_TBL_LEN: u32 = 16;
/// Entries of the port's P_Key table.
pub const PKEY_TBL_LEN: u16 = 1;
/// The GID types the port supports (`caps.gid_types`), `PVRDMA_GID_TYPE_FLAG_*` bits: RoCE
/// v1 (the link-local GID the driver binds at index 0) and RoCE v2 (the port's IP
/// addresses, which the RoCE v2 port sends from; issue 11).
pub const GID_TYPES: u8 = pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V1 | pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
/// The atomic operations the device executes (`caps.atomic_ops`): compare-and-swap and
/// fetch-and-add, atomic against every atomic of this device (`ATOMIC_HCA`).
pub const ATOMIC_OPS: u8 = pvrdma_abi::dsr::ATOMIC_OP_COMP_SWAP | pvrdma_abi::dsr::ATOMIC_OP_FETCH_ADD;
/// UAR pages of BAR2.
pub const MAX_UAR: u32 = (pvrdma_abi::uar::UAR_BAR_SIZE / pvrdma_abi::uar::UAR_PAGE_SIZE) as u32;
/// Largest message (bytes) QUERY_PORT reports and a send may carry (16 MiB: the model copies
/// each message). QEMU 7.2 reports 1024 but does not enforce it; the model reports what it
/// enforces.
pub const MAX_MSG_SZ: u32 = 1 << 24;
/// Most pages (ring-state page included) a DSR ring may have. The ring lives in one page
/// table (512 entries), and QEMU 7.2 refuses more than 511, so the model does too.
pub const MAX_DSR_RING_PAGES: u32 = 511;
/// Page frame number of BAR2 (the UAR pages) as the model places it: the kernel's UAR page (index
/// 0) has this pfn, page `i` has `UAR_BASE_PFN + i`.
pub const UAR_BASE_PFN: u64 = 0xfe000;
