//! `ibv_qp_attr` <-> the core's `QpAttr` (same field meanings and mask bits).

use crate::abi::{ibv_qp_attr, ibv_qp_cap};
use ib_core::{Mtu, QpAttr, QpAttrMask as M, QpCap, QpState};

/// The core's attributes of a modify with `mask`. `EINVAL` for a state value outside
/// `enum ibv_qp_state` in a field the mask names.
pub(crate) fn to_core(a: &ibv_qp_attr, mask: M) -> Result<QpAttr, i32> {
    let state = |on: bool, v: u32| if on { QpState::from_raw(v).ok_or(libc::EINVAL) } else { Ok(QpState::Reset) };
    Ok(QpAttr {
        qp_state: state(mask.contains(M::STATE), a.qp_state)?,
        cur_qp_state: state(mask.contains(M::CUR_STATE), a.cur_qp_state)?,
        path_mtu: Mtu(a.path_mtu),
        path_mig_state: a.path_mig_state,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        cap: QpCap::default(),
        ah_attr: crate::ah::from_ibv(&a.ah_attr),
        alt_ah_attr: crate::ah::from_ibv(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify,
        sq_draining: 0,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
    })
}

/// What `ibv_query_qp` writes: the device's answer, with `cap` the library's (as rdma-core's
/// pvrdma provider answers with the queue sizes it laid out).
pub(crate) fn from_core(a: &QpAttr, cap: ibv_qp_cap) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: a.qp_state.raw(),
        cur_qp_state: a.cur_qp_state.raw(),
        path_mtu: a.path_mtu.0,
        path_mig_state: a.path_mig_state,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        cap,
        ah_attr: crate::ah::to_ibv(&a.ah_attr),
        alt_ah_attr: crate::ah::to_ibv(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify,
        sq_draining: a.sq_draining,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        rate_limit: 0,
    }
}
