//! The historical copies between the kernel's uverbs/SA structures and libibverbs's
//! (`ibv_copy_*_from_kern`, `ibv_copy_path_rec_to_kern`), which librdmacm imports: field by
//! field, as libibverbs copies them.

use crate::abi::{ibv_ah_attr, ibv_qp_attr, ibv_sa_path_rec};

/// `struct ib_uverbs_global_route` (`<rdma/ib_user_verbs.h>`).
#[repr(C)]
pub struct ib_uverbs_global_route {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr` (`<rdma/ib_user_verbs.h>`).
#[repr(C)]
pub struct ib_uverbs_ah_attr {
    /// Global route.
    pub grh: ib_uverbs_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether `grh` is used.
    pub is_global: u8,
    /// Port number.
    pub port_num: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr` (`<rdma/ib_user_verbs.h>`); fields as `ibv_qp_attr`'s.
#[repr(C)]
#[allow(missing_docs)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
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
    pub reserved: [u8; 5],
}

/// `struct ib_user_path_rec` (`<rdma/ib_user_sa.h>`); fields as `ibv_sa_path_rec`'s.
#[repr(C)]
#[allow(missing_docs)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

const _: () = {
    assert!(std::mem::size_of::<ib_uverbs_ah_attr>() == 32);
    assert!(std::mem::size_of::<ib_uverbs_qp_attr>() == 144);
    assert!(std::mem::size_of::<ib_user_path_rec>() == 64);
};

fn ah_from_kern(dst: &mut ibv_ah_attr, src: &ib_uverbs_ah_attr) {
    dst.grh.dgid.raw = src.grh.dgid;
    dst.grh.flow_label = src.grh.flow_label;
    dst.grh.sgid_index = src.grh.sgid_index;
    dst.grh.hop_limit = src.grh.hop_limit;
    dst.grh.traffic_class = src.grh.traffic_class;
    dst.dlid = src.dlid;
    dst.sl = src.sl;
    dst.src_path_bits = src.src_path_bits;
    dst.static_rate = src.static_rate;
    dst.is_global = src.is_global;
    dst.port_num = src.port_num;
}

/// `ibv_copy_ah_attr_from_kern(dst, src)`: the kernel's address vector into `ibv_ah_attr`.
/// NULL pointers are ignored.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *const ib_uverbs_ah_attr) {
    crate::ffi::guard_pure((), || {
        // SAFETY: the caller passes NULL or valid structures.
        if let (Some(d), Some(s)) = unsafe { (dst.as_mut(), src.as_ref()) } {
            ah_from_kern(d, s);
        }
    })
}

/// `ibv_copy_qp_attr_from_kern(dst, src)`: the kernel's QP attributes into `ibv_qp_attr`
/// (all but `qp_state`, which libibverbs leaves too). NULL pointers are ignored.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *const ib_uverbs_qp_attr) {
    crate::ffi::guard_pure((), || {
        // SAFETY: the caller passes NULL or valid structures.
        let (Some(d), Some(s)) = (unsafe { (dst.as_mut(), src.as_ref()) }) else { return };
        (d.cur_qp_state, d.path_mtu, d.path_mig_state, d.qkey) = (s.cur_qp_state, s.path_mtu, s.path_mig_state, s.qkey);
        (d.rq_psn, d.sq_psn, d.dest_qp_num, d.qp_access_flags) = (s.rq_psn, s.sq_psn, s.dest_qp_num, s.qp_access_flags);
        d.cap.max_send_wr = s.max_send_wr;
        d.cap.max_recv_wr = s.max_recv_wr;
        d.cap.max_send_sge = s.max_send_sge;
        d.cap.max_recv_sge = s.max_recv_sge;
        d.cap.max_inline_data = s.max_inline_data;
        ah_from_kern(&mut d.ah_attr, &s.ah_attr);
        ah_from_kern(&mut d.alt_ah_attr, &s.alt_ah_attr);
        (d.pkey_index, d.alt_pkey_index, d.en_sqd_async_notify, d.sq_draining) =
            (s.pkey_index, s.alt_pkey_index, s.en_sqd_async_notify, s.sq_draining);
        (d.max_rd_atomic, d.max_dest_rd_atomic, d.min_rnr_timer, d.port_num) =
            (s.max_rd_atomic, s.max_dest_rd_atomic, s.min_rnr_timer, s.port_num);
        (d.timeout, d.retry_cnt, d.rnr_retry, d.alt_port_num, d.alt_timeout) =
            (s.timeout, s.retry_cnt, s.rnr_retry, s.alt_port_num, s.alt_timeout);
    })
}

/// `ibv_copy_path_rec_from_kern(dst, src)`: the kernel's path record into `ibv_sa_path_rec`
/// (the `u32` fields narrowed as C assigns them). NULL pointers are ignored.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(dst: *mut ibv_sa_path_rec, src: *const ib_user_path_rec) {
    crate::ffi::guard_pure((), || {
        // SAFETY: the caller passes NULL or valid structures.
        let (Some(d), Some(s)) = (unsafe { (dst.as_mut(), src.as_ref()) }) else { return };
        (d.dgid.raw, d.sgid.raw, d.dlid, d.slid) = (s.dgid, s.sgid, s.dlid, s.slid);
        (d.raw_traffic, d.flow_label, d.reversible) = (s.raw_traffic as i32, s.flow_label, s.reversible as i32);
        (d.hop_limit, d.traffic_class, d.numb_path, d.pkey, d.sl) =
            (s.hop_limit, s.traffic_class, s.numb_path, s.pkey, s.sl);
        (d.mtu_selector, d.mtu, d.rate_selector, d.rate) = (s.mtu_selector, s.mtu as u8, s.rate_selector, s.rate);
        (d.packet_life_time_selector, d.packet_life_time, d.preference) =
            (s.packet_life_time_selector, s.packet_life_time, s.preference);
    })
}

/// `ibv_copy_path_rec_to_kern(dst, src)`: the reverse of [`ibv_copy_path_rec_from_kern`].
/// NULL pointers are ignored.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(dst: *mut ib_user_path_rec, src: *const ibv_sa_path_rec) {
    crate::ffi::guard_pure((), || {
        // SAFETY: the caller passes NULL or valid structures.
        let (Some(d), Some(s)) = (unsafe { (dst.as_mut(), src.as_ref()) }) else { return };
        (d.dgid, d.sgid, d.dlid, d.slid) = (s.dgid.raw, s.sgid.raw, s.dlid, s.slid);
        (d.raw_traffic, d.flow_label, d.reversible) = (s.raw_traffic as u32, s.flow_label, s.reversible as u32);
        (d.hop_limit, d.traffic_class, d.numb_path, d.pkey, d.sl) =
            (s.hop_limit, s.traffic_class, s.numb_path, s.pkey, s.sl);
        (d.mtu_selector, d.mtu, d.rate_selector, d.rate) = (s.mtu_selector, u32::from(s.mtu), s.rate_selector, s.rate);
        (d.packet_life_time_selector, d.packet_life_time, d.preference) =
            (s.packet_life_time_selector, s.packet_life_time, s.preference);
    })
}
