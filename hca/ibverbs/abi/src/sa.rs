//! `<infiniband/sa.h>`: the path record librdmacm's routes carry and `ibv_copy_path_rec_*`
//! marshal.

use crate::ibv_gid;
use std::mem::size_of;

/// `struct ibv_sa_path_rec`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: i32,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: i32,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

const _: () = assert!(size_of::<ibv_sa_path_rec>() == 64);
