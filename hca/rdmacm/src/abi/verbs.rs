//! The libibverbs structures (`<infiniband/verbs.h>`, rdma-core 44) this library reads or fills:
//! its own `#[repr(C)]` copies, because librdmacm.so.1 calls libibverbs.so.1 through its C
//! symbols and must not link a second verbs stack in (`ibverbs-compat`'s `abi` is that crate's).
//! Objects it only passes on (`ibv_context`, `ibv_cq`, `ibv_comp_channel`, `ibv_srq`) are opaque;
//! of `ibv_qp` and `ibv_pd` only the leading fields are declared. Sizes and offsets are asserted
//! below and checked against the header by the ABI test (`tests/abi`).

use std::mem::{offset_of, size_of};

/// `struct ibv_context` (opaque here: only its address is used).
#[repr(C)]
pub struct ibv_context {
    _opaque: [u8; 0],
}
/// `struct ibv_cq` (opaque).
#[repr(C)]
pub struct ibv_cq {
    _opaque: [u8; 0],
}
/// `struct ibv_comp_channel` (opaque).
#[repr(C)]
pub struct ibv_comp_channel {
    _opaque: [u8; 0],
}
/// `struct ibv_srq` (opaque).
#[repr(C)]
pub struct ibv_srq {
    _opaque: [u8; 0],
}
/// `struct ibv_xrcd` (opaque).
#[repr(C)]
pub struct ibv_xrcd {
    _opaque: [u8; 0],
}

/// `struct ibv_pd`: `context`, `handle`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// The leading fields of `struct ibv_qp` (the rest is libibverbs's).
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
}

/// `union ibv_gid` (16 bytes, network order; 8-byte aligned as the header's `__be64` view).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
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

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
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

/// `struct ibv_qp_init_attr`.
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

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
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
    pub xrcd: *mut ibv_xrcd,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut libc::c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut libc::c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut libc::c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_port_attr` (the fields this library reads are named; the rest is kept as bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: i32,
    pub rest: [u32; 9],
}

/// `struct ibv_gid_entry` (`ibv_query_gid_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_device_attr`, as bytes with the few fields read here at their offsets
/// ([`ibv_device_attr::max_qp_rd_atom`] and [`ibv_device_attr::max_qp_init_rd_atom`]).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub bytes: [u8; 232],
}

impl ibv_device_attr {
    /// `max_qp_rd_atom` (offset 144).
    pub fn max_qp_rd_atom(&self) -> i32 {
        self.int_at(144)
    }
    /// `max_qp_init_rd_atom` (offset 156).
    pub fn max_qp_init_rd_atom(&self) -> i32 {
        self.int_at(156)
    }
    fn int_at(&self, off: usize) -> i32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.bytes[off..off + 4]);
        i32::from_ne_bytes(b)
    }
}

/// `struct ibv_ece`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

// enum ibv_qp_type
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UC: u32 = 3;
pub const IBV_QPT_UD: u32 = 4;
// enum ibv_qp_state
pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_ERR: u32 = 6;
// enum ibv_qp_attr_mask
pub const IBV_QP_STATE: i32 = 1 << 0;
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
pub const IBV_QP_MIN_RNR_TIMER: i32 = 1 << 15;
pub const IBV_QP_SQ_PSN: i32 = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
pub const IBV_QP_DEST_QPN: i32 = 1 << 20;
// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
// enum ibv_qp_init_attr_mask
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
// enum ibv_srq_init_attr_mask
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
// enum ibv_gid_type (ibv_gid_entry.gid_type)
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
// enum ibv_event_type
pub const IBV_EVENT_COMM_EST: u32 = 4;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;

const _: () = assert!(size_of::<ibv_pd>() == 16 && offset_of!(ibv_qp, qp_num) == 52);
const _: () = assert!(offset_of!(ibv_qp, srq) == 40 && offset_of!(ibv_qp, qp_type) == 60);
const _: () = assert!(size_of::<ibv_gid>() == 16 && size_of::<ibv_global_route>() == 24);
const _: () = assert!(size_of::<ibv_ah_attr>() == 32 && offset_of!(ibv_ah_attr, port_num) == 30);
const _: () = assert!(size_of::<ibv_qp_attr>() == 144 && offset_of!(ibv_qp_attr, ah_attr) == 56);
const _: () = assert!(offset_of!(ibv_qp_attr, pkey_index) == 120 && offset_of!(ibv_qp_attr, rate_limit) == 136);
const _: () = assert!(offset_of!(ibv_qp_attr, max_rd_atomic) == 126 && offset_of!(ibv_qp_attr, timeout) == 130);
const _: () = assert!(size_of::<ibv_qp_init_attr>() == 64 && offset_of!(ibv_qp_init_attr, qp_type) == 52);
const _: () = assert!(size_of::<ibv_qp_init_attr_ex>() == 136 && offset_of!(ibv_qp_init_attr_ex, pd) == 64);
const _: () = assert!(offset_of!(ibv_qp_init_attr_ex, comp_mask) == 60);
const _: () = assert!(offset_of!(ibv_qp_init_attr_ex, rx_hash_conf) == 96);
const _: () = assert!(offset_of!(ibv_qp_init_attr_ex, send_ops_flags) == 128);
const _: () = assert!(size_of::<ibv_srq_init_attr>() == 24 && size_of::<ibv_srq_init_attr_ex>() == 64);
const _: () = assert!(offset_of!(ibv_srq_init_attr_ex, pd) == 32 && offset_of!(ibv_srq_init_attr_ex, cq) == 48);
const _: () = assert!(size_of::<ibv_port_attr>() == 52 && offset_of!(ibv_port_attr, active_mtu) == 8);
const _: () = assert!(size_of::<ibv_gid_entry>() == 32 && offset_of!(ibv_gid_entry, gid_type) == 24);
const _: () = assert!(size_of::<ibv_device_attr>() == 232 && size_of::<ibv_ece>() == 12);
