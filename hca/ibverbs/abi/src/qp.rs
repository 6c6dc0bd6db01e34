//! QPs: `struct ibv_qp`, `ibv_qp_ex` (the new post-send API), `ibv_qp_cap`, `ibv_qp_init_attr`,
//! `ibv_qp_init_attr_ex`, `ibv_qp_attr`, `ibv_ah_attr`, `ibv_global_route`, `ibv_ah`, `ibv_srq`.

use super::{ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_sge, pthread_cond_t, pthread_mutex_t};
use memoffset::offset_of;
use std::mem::size_of;

/// `struct ibv_srq`: written by the library at create; the header's inline `ibv_post_srq_recv`
/// calls through `context`.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut libc::c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_ah`: written by the library (`ibv_create_ah`).
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_qp`: written by the library; `state` follows a successful `ibv_modify_qp` or
/// `ibv_query_qp` naming `IBV_QP_STATE`, as libibverbs keeps it (a QP the device moves to ERR
/// on its own is seen by `ibv_query_qp`). The header's inline `ibv_post_send`/`ibv_post_recv`
/// call through `context`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut libc::c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_data_buf` (`wr_set_inline_data_list`).
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut libc::c_void,
    pub length: usize,
}

type QpEx = *mut ibv_qp_ex;

/// `struct ibv_qp_ex`: an `ibv_qp` followed by the new post-send API's state and functions
/// (`ibv_wr_start`, `ibv_wr_send`, ..., `ibv_wr_complete` are the header's inline calls of
/// these). The library fills the functions for the operations it carries; the others are NULL,
/// as a provider leaves what it does not support.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(QpEx, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(QpEx, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(QpEx, *mut libc::c_void, u32, *const libc::c_void)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(QpEx, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(QpEx, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(QpEx, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(QpEx, *mut libc::c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(QpEx, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(QpEx, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(QpEx, *mut libc::c_void, usize)>,
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(QpEx, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(QpEx, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(QpEx, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_complete: Option<unsafe extern "C" fn(QpEx) -> i32>,
    pub wr_abort: Option<unsafe extern "C" fn(QpEx)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(QpEx, u32, u64, *const libc::c_void)>,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (`ibv_create_qp`; the library writes the granted `cap` back).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut libc::c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: i32,
}

/// `struct ibv_qp_init_attr_ex` (`ibv_create_qp_ex`): `ibv_qp_init_attr` then the extended
/// fields; `rx_hash_conf` (RSS) is opaque here.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut libc::c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: i32,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut libc::c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut libc::c_void,
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr` (`ibv_modify_qp`, `ibv_query_qp`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

// enum ibv_qp_type
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UC: u32 = 3;
pub const IBV_QPT_UD: u32 = 4;
pub const IBV_QPT_RAW_PACKET: u32 = 8;
pub const IBV_QPT_XRC_SEND: u32 = 9;
pub const IBV_QPT_XRC_RECV: u32 = 10;
pub const IBV_QPT_DRIVER: u32 = 0xff;
// enum ibv_qp_init_attr_mask
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
/// `IBV_QP_INIT_ATTR_XRCD`.
pub const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
// enum ibv_qp_create_send_ops_flags
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;

const _: () = assert!(size_of::<ibv_qp>() == 160 && offset_of!(ibv_qp, mutex) == 64);
const _: () = assert!(offset_of!(ibv_qp, events_completed) == 152);
const _: () = assert!(size_of::<ibv_qp_ex>() == 352 && offset_of!(ibv_qp_ex, wr_start) == 320);
const _: () = assert!(size_of::<ibv_qp_init_attr>() == 64);
const _: () = assert!(size_of::<ibv_qp_init_attr_ex>() == 136);
const _: () = assert!(offset_of!(ibv_qp_init_attr_ex, source_qpn) == 120);
const _: () = assert!(offset_of!(ibv_qp_init_attr_ex, send_ops_flags) == 128);
const _: () = assert!(size_of::<ibv_global_route>() == 24 && size_of::<ibv_ah_attr>() == 32);
const _: () = assert!(size_of::<ibv_qp_attr>() == 144 && offset_of!(ibv_qp_attr, ah_attr) == 56);
const _: () = assert!(size_of::<ibv_srq>() == 128 && size_of::<ibv_ah>() == 24);

/// `enum ibv_qp_state` (the values `ibv_qp_attr::qp_state` and `ibv_qp::state` hold).
pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_SQD: u32 = 4;
pub const IBV_QPS_SQE: u32 = 5;
pub const IBV_QPS_ERR: u32 = 6;

/// `enum ibv_qp_attr_mask` (the `attr_mask` of `ibv_modify_qp`, an `int` there).
pub const IBV_QP_STATE: i32 = 1 << 0;
pub const IBV_QP_CUR_STATE: i32 = 1 << 1;
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: i32 = 1 << 2;
pub const IBV_QP_ACCESS_FLAGS: i32 = 1 << 3;
pub const IBV_QP_PKEY_INDEX: i32 = 1 << 4;
pub const IBV_QP_PORT: i32 = 1 << 5;
pub const IBV_QP_QKEY: i32 = 1 << 6;
pub const IBV_QP_AV: i32 = 1 << 7;
pub const IBV_QP_PATH_MTU: i32 = 1 << 8;
pub const IBV_QP_TIMEOUT: i32 = 1 << 9;
pub const IBV_QP_RETRY_CNT: i32 = 1 << 10;
pub const IBV_QP_RNR_RETRY: i32 = 1 << 11;
pub const IBV_QP_RQ_PSN: i32 = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: i32 = 1 << 13;
pub const IBV_QP_ALT_PATH: i32 = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: i32 = 1 << 15;
pub const IBV_QP_SQ_PSN: i32 = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
pub const IBV_QP_PATH_MIG_STATE: i32 = 1 << 18;
pub const IBV_QP_CAP: i32 = 1 << 19;
pub const IBV_QP_DEST_QPN: i32 = 1 << 20;

/// `struct ibv_ece` (enhanced connection establishment: `ibv_query_ece`, librdmacm's ECE calls).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}
const _: () = assert!(size_of::<ibv_ece>() == 12);
