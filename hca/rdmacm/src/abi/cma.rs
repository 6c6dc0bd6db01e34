//! The structures of `<rdma/rdma_cma.h>` and `<infiniband/sa.h>` (rdma-core 44, package
//! `librdmacm-dev`) that programs see, with their C names. The address unions of
//! `struct rdma_addr` are `sockaddr_storage` fields (a program reads them as `sockaddr_in`,
//! `sockaddr_in6`); the event's `param` union is [`rdma_cm_event_param`].

use ibverbs_abi::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_sa_path_rec, ibv_srq,
};
use std::mem::{offset_of, size_of};

/// `struct rdma_event_channel`: the program polls `fd`.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: i32,
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    /// Network order.
    pub pkey: u16,
}

/// `struct rdma_addr`: `src_addr`/`src_sin`/`src_sin6`/`src_storage` are [`rdma_addr::src`],
/// the `dst_*` union [`rdma_addr::dst`], `addr.ibaddr` [`rdma_addr::ibaddr`].
#[repr(C)]
pub struct rdma_addr {
    pub src: libc::sockaddr_storage,
    pub dst: libc::sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: i32,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut libc::c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: u32,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: u32,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const libc::c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const libc::c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: u32,
    pub status: i32,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: i32,
    pub ai_family: i32,
    pub ai_qp_type: i32,
    pub ai_port_space: i32,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut libc::c_char,
    pub ai_dst_canonname: *mut libc::c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut libc::c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut libc::c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

/// The ECE of librdmacm's private `struct cma_id_private` (`local_ece`/`remote_ece`): the
/// vendor ID and options `rdma_set_local_ece` takes.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

// enum rdma_cm_event_type
pub const RDMA_CM_EVENT_ADDR_RESOLVED: u32 = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: u32 = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: u32 = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: u32 = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: u32 = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: u32 = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: u32 = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: u32 = 7;
pub const RDMA_CM_EVENT_REJECTED: u32 = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: u32 = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: u32 = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: u32 = 11;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: u32 = 12;
pub const RDMA_CM_EVENT_MULTICAST_ERROR: u32 = 13;
pub const RDMA_CM_EVENT_ADDR_CHANGE: u32 = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: u32 = 15;

// enum rdma_port_space
pub const RDMA_PS_IPOIB: u32 = 0x0002;
pub const RDMA_PS_TCP: u32 = 0x0106;
pub const RDMA_PS_UDP: u32 = 0x0111;
pub const RDMA_PS_IB: u32 = 0x013F;

/// `RDMA_UDP_QKEY`.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// `RDMA_MAX_RESP_RES`, `RDMA_MAX_INIT_DEPTH`: "the device's maximum".
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

// rdma_addrinfo.ai_flags
pub const RAI_PASSIVE: i32 = 1;
pub const RAI_NUMERICHOST: i32 = 2;
pub const RAI_NOROUTE: i32 = 4;
pub const RAI_FAMILY: i32 = 8;

// rdma_set_option
pub const RDMA_OPTION_ID: i32 = 0;
pub const RDMA_OPTION_IB: i32 = 1;
pub const RDMA_OPTION_ID_TOS: i32 = 0;
pub const RDMA_OPTION_ID_REUSEADDR: i32 = 1;
pub const RDMA_OPTION_ID_AFONLY: i32 = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: i32 = 3;
pub const RDMA_OPTION_IB_PATH: i32 = 1;

const _: () = assert!(size_of::<rdma_event_channel>() == 4);
const _: () = assert!(size_of::<rdma_ib_addr>() == 40 && offset_of!(rdma_ib_addr, pkey) == 32);
const _: () = assert!(size_of::<rdma_addr>() == 296 && offset_of!(rdma_addr, dst) == 128);
const _: () = assert!(offset_of!(rdma_addr, ibaddr) == 256);
const _: () = assert!(size_of::<rdma_route>() == 312 && offset_of!(rdma_route, path_rec) == 296);
const _: () = assert!(offset_of!(rdma_route, num_paths) == 304);
const _: () = assert!(size_of::<rdma_cm_id>() == 416 && offset_of!(rdma_cm_id, route) == 32);
const _: () = assert!(offset_of!(rdma_cm_id, ps) == 344 && offset_of!(rdma_cm_id, port_num) == 348);
const _: () = assert!(offset_of!(rdma_cm_id, event) == 352 && offset_of!(rdma_cm_id, send_cq_channel) == 360);
const _: () = assert!(offset_of!(rdma_cm_id, pd) == 400 && offset_of!(rdma_cm_id, qp_type) == 408);
const _: () = assert!(size_of::<rdma_conn_param>() == 24 && offset_of!(rdma_conn_param, srq) == 14);
const _: () = assert!(offset_of!(rdma_conn_param, qp_num) == 16);
const _: () = assert!(size_of::<rdma_ud_param>() == 56 && offset_of!(rdma_ud_param, ah_attr) == 16);
const _: () = assert!(offset_of!(rdma_ud_param, qp_num) == 48 && offset_of!(rdma_ud_param, qkey) == 52);
const _: () = assert!(size_of::<rdma_cm_event>() == 80 && offset_of!(rdma_cm_event, event) == 16);
const _: () = assert!(offset_of!(rdma_cm_event, status) == 20 && offset_of!(rdma_cm_event, param) == 24);
const _: () = assert!(size_of::<rdma_addrinfo>() == 96 && offset_of!(rdma_addrinfo, ai_src_addr) == 24);
const _: () = assert!(offset_of!(rdma_addrinfo, ai_route_len) == 56 && offset_of!(rdma_addrinfo, ai_next) == 88);
const _: () = assert!(size_of::<rdma_cm_join_mc_attr_ex>() == 16 && offset_of!(rdma_cm_join_mc_attr_ex, addr) == 8);
const _: () = assert!(size_of::<ibv_sa_path_rec>() == 64 && offset_of!(ibv_sa_path_rec, sgid) == 16);
const _: () = assert!(offset_of!(ibv_sa_path_rec, flow_label) == 40 && offset_of!(ibv_sa_path_rec, hop_limit) == 44);
const _: () = assert!(offset_of!(ibv_sa_path_rec, reversible) == 48 && offset_of!(ibv_sa_path_rec, pkey) == 54);
const _: () = assert!(offset_of!(ibv_sa_path_rec, mtu) == 58 && offset_of!(ibv_sa_path_rec, preference) == 63);
