//! Verbs attribute structures carried inside commands (`pvrdma_verbs.h`) and their constants.

use crate::assert_layout;
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// A 128-bit GID, network byte order.
pub type Gid = [u8; 16];

/// Port attributes (`struct pvrdma_port_attr`). Device-written by QUERY_PORT.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct PortAttr {
    /// [`port_state`] value.
    pub state: U32,
    /// [`mtu`] value.
    pub max_mtu: U32,
    /// [`mtu`] value.
    pub active_mtu: U32,
    pub gid_tbl_len: U32,
    pub port_cap_flags: U32,
    pub max_msg_sz: U32,
    pub bad_pkey_cntr: U32,
    pub qkey_viol_cntr: U32,
    pub pkey_tbl_len: U16,
    pub lid: U16,
    pub sm_lid: U16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub reserved: [u8; 2],
}
assert_layout!(
    PortAttr,
    48,
    state = 0,
    max_mtu = 4,
    active_mtu = 8,
    gid_tbl_len = 12,
    port_cap_flags = 16,
    max_msg_sz = 20,
    bad_pkey_cntr = 24,
    qkey_viol_cntr = 28,
    pkey_tbl_len = 32,
    lid = 34,
    sm_lid = 36,
    lmc = 38,
    max_vl_num = 39,
    sm_sl = 40,
    subnet_timeout = 41,
    init_type_reply = 42,
    active_width = 43,
    active_speed = 44,
    phys_state = 45,
    reserved = 46
);

/// `enum pvrdma_port_state`.
pub mod port_state {
    pub const NOP: u32 = 0;
    pub const DOWN: u32 = 1;
    pub const INIT: u32 = 2;
    pub const ARMED: u32 = 3;
    pub const ACTIVE: u32 = 4;
    pub const ACTIVE_DEFER: u32 = 5;
}

/// `enum pvrdma_mtu`: 1 = 256 bytes ... 5 = 4096 bytes.
pub mod mtu {
    pub const MTU_256: u32 = 1;
    pub const MTU_512: u32 = 2;
    pub const MTU_1024: u32 = 3;
    pub const MTU_2048: u32 = 4;
    pub const MTU_4096: u32 = 5;

    /// Bytes of an MTU code, or `None` for a code outside 1..=5.
    pub const fn bytes(code: u32) -> Option<u32> {
        match code {
            1..=5 => Some(128 << code),
            _ => None,
        }
    }
}

/// Global route (`struct pvrdma_global_route`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct GlobalRoute {
    pub dgid: Gid,
    pub flow_label: U32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}
assert_layout!(
    GlobalRoute,
    24,
    dgid = 0,
    flow_label = 16,
    sgid_index = 20,
    hop_limit = 21,
    traffic_class = 22,
    reserved = 23
);

/// Address handle attributes (`struct pvrdma_ah_attr`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct AhAttr {
    pub grh: GlobalRoute,
    pub dlid: U16,
    pub vlan_id: U16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    /// Bit 0: `PVRDMA_AH_GRH`.
    pub ah_flags: u8,
    pub port_num: u8,
    pub dmac: [u8; 6],
    pub reserved: u8,
}
assert_layout!(
    AhAttr,
    40,
    grh = 0,
    dlid = 24,
    vlan_id = 26,
    sl = 28,
    src_path_bits = 29,
    static_rate = 30,
    ah_flags = 31,
    port_num = 32,
    dmac = 33,
    reserved = 39
);

/// `PVRDMA_AH_GRH`.
pub const AH_GRH: u8 = 1;

/// QP capabilities (`struct pvrdma_qp_cap`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct QpCap {
    pub max_send_wr: U32,
    pub max_recv_wr: U32,
    pub max_send_sge: U32,
    pub max_recv_sge: U32,
    pub max_inline_data: U32,
    pub reserved: U32,
}
assert_layout!(
    QpCap,
    24,
    max_send_wr = 0,
    max_recv_wr = 4,
    max_send_sge = 8,
    max_recv_sge = 12,
    max_inline_data = 16,
    reserved = 20
);

/// QP attributes (`struct pvrdma_qp_attr`), carried by MODIFY_QP and QUERY_QP.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct QpAttr {
    /// [`qp_state`] value.
    pub qp_state: U32,
    pub cur_qp_state: U32,
    /// [`mtu`] value.
    pub path_mtu: U32,
    pub path_mig_state: U32,
    pub qkey: U32,
    pub rq_psn: U32,
    pub sq_psn: U32,
    pub dest_qp_num: U32,
    /// [`access`] bits.
    pub qp_access_flags: U32,
    pub pkey_index: U16,
    pub alt_pkey_index: U16,
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
    pub reserved: [u8; 5],
    pub cap: QpCap,
    pub ah_attr: AhAttr,
    pub alt_ah_attr: AhAttr,
}
assert_layout!(
    QpAttr,
    160,
    qp_state = 0,
    cur_qp_state = 4,
    path_mtu = 8,
    path_mig_state = 12,
    qkey = 16,
    rq_psn = 20,
    sq_psn = 24,
    dest_qp_num = 28,
    qp_access_flags = 32,
    pkey_index = 36,
    alt_pkey_index = 38,
    en_sqd_async_notify = 40,
    sq_draining = 41,
    max_rd_atomic = 42,
    max_dest_rd_atomic = 43,
    min_rnr_timer = 44,
    port_num = 45,
    timeout = 46,
    retry_cnt = 47,
    rnr_retry = 48,
    alt_port_num = 49,
    alt_timeout = 50,
    reserved = 51,
    cap = 56,
    ah_attr = 80,
    alt_ah_attr = 120
);

/// SRQ attributes (`struct pvrdma_srq_attr`), carried by CREATE_SRQ, MODIFY_SRQ and QUERY_SRQ.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct SrqAttr {
    /// Receive WQEs the SRQ holds (a power of two on this device: the ring's size).
    pub max_wr: U32,
    /// SGEs per receive WQE.
    pub max_sge: U32,
    /// The limit: below this many posted WQEs the device raises SRQ_LIMIT_REACHED once
    /// (0: not armed).
    pub srq_limit: U32,
    pub reserved: U32,
}
assert_layout!(SrqAttr, 16, max_wr = 0, max_sge = 4, srq_limit = 8, reserved = 12);

/// `enum pvrdma_srq_attr_mask` bits of MODIFY_SRQ (as `enum ibv_srq_attr_mask`).
pub mod srq_attr_mask {
    /// Resize to `max_wr` (refused by Linux's vmw_pvrdma and by the device).
    pub const MAX_WR: u32 = 1 << 0;
    /// Set (arm) `srq_limit`.
    pub const LIMIT: u32 = 1 << 1;
}

/// `enum pvrdma_srq_type` (`srq_type` of CREATE_SRQ).
pub mod srq_type {
    /// A basic SRQ, the only type the device takes.
    pub const BASIC: u8 = 0;
    /// An XRC SRQ (not supported).
    pub const XRC: u8 = 1;
}

/// `enum pvrdma_qp_state`.
pub mod qp_state {
    pub const RESET: u32 = 0;
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
    pub const SQD: u32 = 4;
    pub const SQE: u32 = 5;
    pub const ERR: u32 = 6;
}

/// `enum pvrdma_qp_attr_mask` bits.
pub mod qp_attr_mask {
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const CAP: u32 = 1 << 19;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// `enum pvrdma_qp_type`.
pub mod qp_type {
    pub const SMI: u8 = 0;
    pub const GSI: u8 = 1;
    pub const RC: u8 = 2;
    pub const UC: u8 = 3;
    pub const UD: u8 = 4;
}

/// `enum pvrdma_access_flags` bits (MR and QP access).
pub mod access {
    pub const LOCAL_WRITE: u32 = 1 << 0;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    pub const MW_BIND: u32 = 1 << 4;
    pub const ZERO_BASED: u32 = 1 << 5;
}

/// `enum pvrdma_send_flags` bits of an SQ WQE.
pub mod send_flags {
    pub const FENCE: u32 = 1 << 0;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
    pub const IP_CSUM: u32 = 1 << 4;
}

/// MR flags of CREATE_MR (`PVRDMA_MR_FLAG_*`).
pub mod mr_flags {
    /// A DMA MR: no page directory (carries no data on the real device).
    pub const DMA: u32 = 1 << 0;
    /// A fast-register MR.
    pub const FRMR: u32 = 1 << 1;
}
