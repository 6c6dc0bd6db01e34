//! Devices and their attributes: `struct ibv_device`, `ibv_device_attr`, `ibv_device_attr_ex`,
//! `ibv_port_attr`, `ibv_gid_entry`, with the enums they carry.

use super::{ibv_gid, IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX};
use memoffset::offset_of;
use std::mem::size_of;

/// `struct _ibv_device_ops`: two unused slots (libibverbs keeps them for old binaries).
#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: Option<unsafe extern "C" fn()>,
    pub _dummy2: Option<unsafe extern "C" fn()>,
}

/// `struct ibv_device`: what `ibv_get_device_list` hands out. `name` is the device's name
/// (`vmw_pvrdma0`); the paths are where its sysfs files would be (`ibv_read_sysfs_file` answers
/// for them).
#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: i32,
    pub transport_type: i32,
    pub name: [u8; IBV_SYSFS_NAME_MAX],
    pub dev_name: [u8; IBV_SYSFS_NAME_MAX],
    pub dev_path: [u8; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [u8; IBV_SYSFS_PATH_MAX],
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [u8; 64],
    /// Big-endian.
    pub node_guid: u64,
    /// Big-endian.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub device_cap_flags: u32,
    pub max_sge: i32,
    pub max_sge_rd: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_pd: i32,
    pub max_qp_rd_atom: i32,
    pub max_ee_rd_atom: i32,
    pub max_res_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub max_ee_init_rd_atom: i32,
    pub atomic_cap: u32,
    pub max_ee: i32,
    pub max_rdd: i32,
    pub max_mw: i32,
    pub max_raw_ipv6_qp: i32,
    pub max_raw_ethy_qp: i32,
    pub max_mcast_grp: i32,
    pub max_mcast_qp_attach: i32,
    pub max_total_mcast_qp_attach: i32,
    pub max_ah: i32,
    pub max_fmr: i32,
    pub max_map_per_fmr: i32,
    pub max_srq: i32,
    pub max_srq_wr: i32,
    pub max_srq_sge: i32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex`. The capability structs (ODP, TSO, RSS, packet pacing, tag
/// matching, CQ moderation, DM, PCI atomics) are none of pvrdma's: the library zeroes them, so
/// they stay opaque here.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// `odp_caps` (on-demand paging).
    pub odp_caps: [u64; 3],
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    /// The device's capability flags in full (`device_cap_flags` is their low 32 bits).
    pub device_cap_flags_ex: u64,
    /// `tso_caps` ... `pci_atomic_caps`.
    pub caps: [u64; 13],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr` (rdma-core 44: with `flags` and `port_cap_flags2`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: i32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct _compat_ibv_port_attr`: what the exported `ibv_query_port` writes (the header's inline
/// `ibv_query_port` zeroes a whole `ibv_port_attr` first): `ibv_port_attr` up to `link_layer`.
pub const COMPAT_PORT_ATTR_LEN: usize = offset_of!(ibv_port_attr, flags);

/// `struct ibv_gid_entry` (`ibv_query_gid_ex`, `ibv_query_gid_table`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

// enum ibv_node_type, enum ibv_transport_type
pub const IBV_NODE_CA: i32 = 1;
pub const IBV_TRANSPORT_IB: i32 = 0;
// enum ibv_link_layer
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
// enum ibv_gid_type (ibv_query_gid_type) and ibv_gid_entry's gid_type
pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

const _: () = assert!(size_of::<ibv_device>() == 664 && offset_of!(ibv_device, name) == 24);
const _: () = assert!(offset_of!(ibv_device, ibdev_path) == 408);
const _: () = assert!(size_of::<ibv_device_attr>() == 232);
const _: () = assert!(offset_of!(ibv_device_attr, max_pkeys) == 224);
const _: () = assert!(size_of::<ibv_device_attr_ex>() == 400);
const _: () = assert!(offset_of!(ibv_device_attr_ex, comp_mask) == 232);
const _: () = assert!(offset_of!(ibv_device_attr_ex, phys_port_cnt_ex) == 396);
const _: () = assert!(size_of::<ibv_port_attr>() == 52 && COMPAT_PORT_ATTR_LEN == 47);
const _: () = assert!(size_of::<ibv_gid_entry>() == 32);
