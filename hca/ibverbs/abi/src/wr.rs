//! Work requests and completions: `struct ibv_sge`, `ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`, with
//! the `enum ibv_wr_opcode`, `ibv_send_flags`, `ibv_wc_opcode` and `ibv_wc_flags` values.

use super::qp::ibv_ah;
use memoffset::offset_of;
use std::mem::size_of;

/// `struct ibv_sge` (16 bytes: `addr`, `length`, `lkey`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `struct ibv_send_wr`: read by `ibv_post_send` (the program writes it). `imm_data` is
/// big-endian (the C union with `invalidate_rkey`); `qp_type` (XRC) and the trailing
/// `bind_mw`/`tso` union are opaque here.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: i32,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: u32,
    pub bind_mw: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: i32,
}

/// `struct ibv_wc`: written by `ibv_poll_cq`. `imm_data` is big-endian (C union with
/// `invalidated_rkey`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const IBV_WR_SEND: u32 = 2;
pub const IBV_WR_SEND_WITH_IMM: u32 = 3;
pub const IBV_WR_RDMA_READ: u32 = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;

// enum ibv_send_flags
pub const IBV_SEND_FENCE: u32 = 1 << 0;
pub const IBV_SEND_SIGNALED: u32 = 1 << 1;
pub const IBV_SEND_SOLICITED: u32 = 1 << 2;
pub const IBV_SEND_INLINE: u32 = 1 << 3;
pub const IBV_SEND_IP_CSUM: u32 = 1 << 4;

// enum ibv_wc_opcode
pub const IBV_WC_SEND: u32 = 0;
pub const IBV_WC_RDMA_WRITE: u32 = 1;
pub const IBV_WC_RDMA_READ: u32 = 2;
pub const IBV_WC_COMP_SWAP: u32 = 3;
pub const IBV_WC_FETCH_ADD: u32 = 4;
pub const IBV_WC_BIND_MW: u32 = 5;
pub const IBV_WC_LOCAL_INV: u32 = 6;
pub const IBV_WC_TSO: u32 = 7;
pub const IBV_WC_RECV: u32 = 1 << 7;
pub const IBV_WC_RECV_RDMA_WITH_IMM: u32 = (1 << 7) + 1;

// enum ibv_wc_flags
pub const IBV_WC_GRH: u32 = 1 << 0;
pub const IBV_WC_WITH_IMM: u32 = 1 << 1;

const _: () = assert!(size_of::<ibv_sge>() == 16);
const _: () = assert!(size_of::<ibv_send_wr>() == 128);
const _: () = assert!(offset_of!(ibv_send_wr, wr) == 40 && offset_of!(ibv_send_wr, qp_type) == 72);
const _: () = assert!(offset_of!(ibv_send_wr, bind_mw) == 80);
const _: () = assert!(size_of::<ibv_recv_wr>() == 32);
const _: () = assert!(size_of::<ibv_wc>() == 48 && offset_of!(ibv_wc, wc_flags) == 36);
