//! Work queue entries, scatter/gather entries and completion queue entries (`vmw_pvrdma-abi.h`).
//!
//! An SQ slot is [`SqWqeHdr`] followed by `num_sge` [`Sge`]s; an RQ slot is [`RqWqeHdr`] followed
//! by its SGEs. The slot stride is the power of two at or above the header plus `max_sge` SGEs
//! ([`sq_wqe_stride`], [`rq_wqe_stride`]). The SQ header's 48-byte `wr` field is one of the
//! per-opcode structs below ([`WrRdma`], [`WrAtomic`], [`WrUd`]) instead of a C union.

use crate::assert_layout;
use zerocopy::big_endian::U32 as Be32;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Scatter/gather entry (`struct pvrdma_sge`). Driver-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct Sge {
    /// Address in the MR's address space (its `start` plus offset).
    pub addr: U64,
    /// Bytes.
    pub length: U32,
    pub lkey: U32,
}
assert_layout!(Sge, 16, addr = 0, length = 8, lkey = 12);

/// Receive WQE header (`struct pvrdma_rq_wqe_hdr`). Driver-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct RqWqeHdr {
    pub wr_id: U64,
    pub num_sge: U32,
    pub total_len: U32,
}
assert_layout!(RqWqeHdr, 16, wr_id = 0, num_sge = 8, total_len = 12);

/// Send WQE header (`struct pvrdma_sq_wqe_hdr`). Driver-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct SqWqeHdr {
    pub wr_id: U64,
    pub num_sge: U32,
    pub total_len: U32,
    /// [`wr_opcode`] value.
    pub opcode: U32,
    /// [`crate::verbs::send_flags`] bits.
    pub send_flags: U32,
    /// Immediate data (big-endian, as on the wire) or the rkey to invalidate.
    pub ex: Be32,
    pub reserved: U32,
    /// One of [`WrRdma`], [`WrAtomic`], [`WrUd`], chosen by `opcode` and the QP type.
    pub wr: [u8; 48],
}
assert_layout!(
    SqWqeHdr,
    80,
    wr_id = 0,
    num_sge = 8,
    total_len = 12,
    opcode = 16,
    send_flags = 20,
    ex = 24,
    reserved = 28,
    wr = 32
);

impl Default for SqWqeHdr {
    fn default() -> Self {
        FromZeros::new_zeroed()
    }
}

/// `wr` of an RDMA WRITE or READ.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct WrRdma {
    pub remote_addr: U64,
    pub rkey: U32,
    pub reserved: [u8; 36],
}
assert_layout!(WrRdma, 48, remote_addr = 0, rkey = 8, reserved = 12);

/// `wr` of an atomic operation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct WrAtomic {
    pub remote_addr: U64,
    pub compare_add: U64,
    pub swap: U64,
    pub rkey: U32,
    pub reserved: [u8; 20],
}
assert_layout!(WrAtomic, 48, remote_addr = 0, compare_add = 8, swap = 16, rkey = 24);

/// Address vector (`struct pvrdma_av`) of a UD send.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct Av {
    pub port_pd: U32,
    pub sl_tclass_flowlabel: U32,
    pub dgid: [u8; 16],
    pub src_path_bits: u8,
    pub gid_index: u8,
    pub stat_rate: u8,
    pub hop_limit: u8,
    pub dmac: [u8; 6],
    pub reserved: [u8; 6],
}
assert_layout!(
    Av,
    40,
    port_pd = 0,
    sl_tclass_flowlabel = 4,
    dgid = 8,
    src_path_bits = 24,
    gid_index = 25,
    stat_rate = 26,
    hop_limit = 27,
    dmac = 28,
    reserved = 34
);

/// `wr` of a UD send.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct WrUd {
    pub remote_qpn: U32,
    pub remote_qkey: U32,
    pub av: Av,
}
assert_layout!(WrUd, 48, remote_qpn = 0, remote_qkey = 4, av = 8);

/// Completion queue entry (`struct pvrdma_cqe`). Device-written; never trusted by the driver.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct Cqe {
    pub wr_id: U64,
    /// The QP handle.
    pub qp: U64,
    /// [`wc_opcode`] value.
    pub opcode: U32,
    /// [`wc_status`] value.
    pub status: U32,
    pub byte_len: U32,
    /// Immediate data, big-endian.
    pub imm_data: Be32,
    pub src_qp: U32,
    /// [`wc_flags`] bits.
    pub wc_flags: U32,
    pub vendor_err: U32,
    pub pkey_index: U16,
    pub slid: U16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    pub port_num: u8,
    pub smac: [u8; 6],
    pub network_hdr_type: u8,
    pub reserved2: [u8; 6],
}
assert_layout!(
    Cqe,
    64,
    wr_id = 0,
    qp = 8,
    opcode = 16,
    status = 20,
    byte_len = 24,
    imm_data = 28,
    src_qp = 32,
    wc_flags = 36,
    vendor_err = 40,
    pkey_index = 44,
    slid = 46,
    sl = 48,
    dlid_path_bits = 49,
    port_num = 50,
    smac = 51,
    network_hdr_type = 57,
    reserved2 = 58
);

/// Bytes of one SQ slot for `max_sge` SGEs: the next power of two at or above header plus SGEs
/// (Linux `roundup_pow_of_two`). `None` if that does not fit in 32 bits (an absurd `max_sge`,
/// which both sides must refuse rather than wrap to a zero stride).
pub const fn sq_wqe_stride(max_sge: u32) -> Option<u32> {
    wqe_stride(core::mem::size_of::<SqWqeHdr>() as u32, max_sge)
}

/// Bytes of one RQ slot for `max_sge` SGEs; `None` if that does not fit in 32 bits.
pub const fn rq_wqe_stride(max_sge: u32) -> Option<u32> {
    wqe_stride(core::mem::size_of::<RqWqeHdr>() as u32, max_sge)
}

/// `roundup_pow_of_two(hdr + max_sge * sizeof(Sge))` with checked arithmetic.
const fn wqe_stride(hdr: u32, max_sge: u32) -> Option<u32> {
    let sges = match max_sge.checked_mul(core::mem::size_of::<Sge>() as u32) {
        Some(b) => b,
        None => return None,
    };
    match hdr.checked_add(sges) {
        Some(b) => b.checked_next_power_of_two(),
        None => None,
    }
}

/// `enum pvrdma_wr_opcode`.
pub mod wr_opcode {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    pub const LSO: u32 = 7;
    pub const SEND_WITH_INV: u32 = 8;
    pub const RDMA_READ_WITH_INV: u32 = 9;
    pub const LOCAL_INV: u32 = 10;
    pub const FAST_REG_MR: u32 = 11;
    pub const MASKED_ATOMIC_CMP_AND_SWP: u32 = 12;
    pub const MASKED_ATOMIC_FETCH_AND_ADD: u32 = 13;
    pub const BIND_MW: u32 = 14;
    pub const REG_SIG_MR: u32 = 15;
    pub const ERROR: u32 = 16;
}

/// `enum pvrdma_wc_status`.
pub mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_EEC_OP_ERR: u32 = 3;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const LOC_RDD_VIOL_ERR: u32 = 14;
    pub const REM_INV_RD_REQ_ERR: u32 = 15;
    pub const REM_ABORT_ERR: u32 = 16;
    pub const INV_EECN_ERR: u32 = 17;
    pub const INV_EEC_STATE_ERR: u32 = 18;
    pub const FATAL_ERR: u32 = 19;
    pub const RESP_TIMEOUT_ERR: u32 = 20;
    pub const GENERAL_ERR: u32 = 21;
}

/// `enum pvrdma_wc_opcode`.
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const BIND_MW: u32 = 5;
    pub const LSO: u32 = 6;
    pub const LOCAL_INV: u32 = 7;
    pub const FAST_REG_MR: u32 = 8;
    pub const MASKED_COMP_SWAP: u32 = 9;
    pub const MASKED_FETCH_ADD: u32 = 10;
    pub const RECV: u32 = 1 << 7;
    pub const RECV_RDMA_WITH_IMM: u32 = (1 << 7) + 1;
}

/// `enum pvrdma_wc_flags` bits.
pub mod wc_flags {
    pub const GRH: u32 = 1 << 0;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const WITH_INVALIDATE: u32 = 1 << 2;
    pub const IP_CSUM_OK: u32 = 1 << 3;
    pub const WITH_SMAC: u32 = 1 << 4;
    pub const WITH_VLAN: u32 = 1 << 5;
    pub const WITH_NETWORK_HDR_TYPE: u32 = 1 << 6;
}

/// `enum pvrdma_network_type`.
pub mod network_type {
    pub const IB: u8 = 0;
    pub const ROCE_V1: u8 = 0;
    pub const IPV4: u8 = 1;
    pub const IPV6: u8 = 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_round_up_and_refuse_absurd_sge_counts() {
        assert_eq!(sq_wqe_stride(1), Some(128));
        assert_eq!(sq_wqe_stride(4), Some(256));
        assert_eq!(rq_wqe_stride(1), Some(32));
        assert_eq!(rq_wqe_stride(4), Some(128));
        // 80 + 16 * n wraps, or rounds up past 2^31: never a zero stride.
        for n in [u32::MAX, u32::MAX / 16, 1 << 28, (1 << 27) + 1] {
            assert_eq!(sq_wqe_stride(n), None, "{n}");
        }
        assert_eq!(rq_wqe_stride(u32::MAX), None);
    }
}
