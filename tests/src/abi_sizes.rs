//! The device structures that `/usr/include/rdma/vmw_pvrdma-abi.h` does not define, in one table:
//! the C name in the Linux driver's private headers (`pvrdma_dev_api.h`, `pvrdma_verbs.h`,
//! `pvrdma_ring.h`; QEMU copies the same definitions), the Rust type, its size in Rust and the
//! size those headers give. `tests/tests/device/abi_header.rs` checks the table; the real-device stage
//! can walk the same list against a running QEMU.

use core::mem::size_of;
use pvrdma_abi::{cmd, dsr, event, ring, verbs};

/// One structure without a uapi definition.
#[derive(Clone, Copy, Debug)]
pub struct HeaderlessStruct {
    /// The C struct, as `pvrdma_dev_api.h` (or `pvrdma_verbs.h`, `pvrdma_ring.h`) names it.
    pub c_name: &'static str,
    /// The Rust type's name (unqualified, as it appears in `assert_layout!`).
    pub rust_name: &'static str,
    /// `size_of` of the Rust type.
    pub rust_size: usize,
    /// The size the C definition has (x86-64, the driver's packing).
    pub c_size: usize,
}

macro_rules! row {
    ($c:literal, $m:ident :: $t:ident, $size:literal) => {
        HeaderlessStruct { c_name: $c, rust_name: stringify!($t), rust_size: size_of::<$m::$t>(), c_size: $size }
    };
}

/// Every device structure the uapi header lacks.
pub const HEADERLESS: &[HeaderlessStruct] = &[
    // Device shared region (pvrdma_dev_api.h).
    row!("pvrdma_gos_info", dsr::GosInfo, 8),
    row!("pvrdma_device_caps", dsr::DeviceCaps, 208),
    row!("pvrdma_ring_page_info", dsr::RingPageInfo, 16),
    row!("pvrdma_device_shared_region", dsr::Dsr, 280),
    // Command channel (pvrdma_dev_api.h).
    row!("pvrdma_cmd_hdr", cmd::CmdHdr, 16),
    row!("pvrdma_cmd_resp_hdr", cmd::RespHdr, 16),
    row!("pvrdma_cmd_resp_hdr (no payload)", cmd::NoopResp, 16),
    row!("pvrdma_cmd_query_port", cmd::QueryPort, 24),
    row!("pvrdma_cmd_query_port_resp", cmd::QueryPortResp, 64),
    row!("pvrdma_cmd_query_pkey", cmd::QueryPkey, 24),
    row!("pvrdma_cmd_query_pkey_resp", cmd::QueryPkeyResp, 24),
    row!("pvrdma_cmd_create_uc", cmd::CreateUc, 24),
    row!("pvrdma_cmd_create_uc_resp", cmd::CreateUcResp, 24),
    row!("pvrdma_cmd_destroy_uc", cmd::DestroyUc, 24),
    row!("pvrdma_cmd_create_pd", cmd::CreatePd, 24),
    row!("pvrdma_cmd_create_pd_resp", cmd::CreatePdResp, 24),
    row!("pvrdma_cmd_destroy_pd", cmd::DestroyPd, 24),
    row!("pvrdma_cmd_create_mr", cmd::CreateMr, 56),
    row!("pvrdma_cmd_create_mr_resp", cmd::CreateMrResp, 32),
    row!("pvrdma_cmd_destroy_mr", cmd::DestroyMr, 24),
    row!("pvrdma_cmd_create_cq", cmd::CreateCq, 40),
    row!("pvrdma_cmd_create_cq_resp", cmd::CreateCqResp, 24),
    row!("pvrdma_cmd_resize_cq", cmd::ResizeCq, 24),
    row!("pvrdma_cmd_resize_cq_resp", cmd::ResizeCqResp, 24),
    row!("pvrdma_cmd_destroy_cq", cmd::DestroyCq, 24),
    row!("pvrdma_cmd_create_qp", cmd::CreateQp, 80),
    row!("pvrdma_cmd_create_qp_resp", cmd::CreateQpResp, 40),
    row!("pvrdma_cmd_modify_qp", cmd::ModifyQp, 184),
    row!("pvrdma_cmd_query_qp", cmd::QueryQp, 24),
    row!("pvrdma_cmd_query_qp_resp", cmd::QueryQpResp, 176),
    row!("pvrdma_cmd_destroy_qp", cmd::DestroyQp, 24),
    row!("pvrdma_cmd_destroy_qp_resp", cmd::DestroyQpResp, 24),
    row!("pvrdma_cmd_create_bind", cmd::CreateBind, 48),
    row!("pvrdma_cmd_destroy_bind", cmd::DestroyBind, 40),
    row!("pvrdma_cmd_create_srq", cmd::CreateSrq, 56),
    row!("pvrdma_cmd_create_srq_resp", cmd::CreateSrqResp, 24),
    row!("pvrdma_cmd_modify_srq", cmd::ModifySrq, 40),
    row!("pvrdma_cmd_query_srq", cmd::QuerySrq, 24),
    row!("pvrdma_cmd_query_srq_resp", cmd::QuerySrqResp, 32),
    row!("pvrdma_cmd_destroy_srq", cmd::DestroySrq, 24),
    // Rings (pvrdma_ring.h) and their entries (pvrdma_dev_api.h).
    row!("pvrdma_ring", ring::Ring, 8),
    row!("pvrdma_ring_state", ring::RingState, 16),
    row!("pvrdma_eqe", event::Eqe, 8),
    row!("pvrdma_cqne", event::Cqne, 4),
    // Verbs attributes carried by commands (pvrdma_verbs.h).
    row!("pvrdma_port_attr", verbs::PortAttr, 48),
    row!("pvrdma_global_route", verbs::GlobalRoute, 24),
    row!("pvrdma_ah_attr", verbs::AhAttr, 40),
    row!("pvrdma_qp_cap", verbs::QpCap, 24),
    row!("pvrdma_qp_attr", verbs::QpAttr, 160),
    row!("pvrdma_srq_attr", verbs::SrqAttr, 16),
];
