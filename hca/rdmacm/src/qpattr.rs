//! A connection's QP attributes for each state, as the kernel gives them to librdmacm's
//! `rdma_init_qp_attr` (Linux `drivers/infiniband/core/cma.c` `cma_ib_init_qp_attr`, and
//! `cm.c` `ib_cm_init_qp_attr` once a CM ID exists), and the moves librdmacm makes with them
//! (`ucma_init_conn_qp`, `ucma_modify_qp_rtr`, `ucma_modify_qp_rts`, `ucma_init_ud_qp`,
//! `ucma_modify_qp_err` in `librdmacm/cma.c`).
//!
//! The PSNs go the kernel's way: the Starting PSN an end puts in its REQ or REP is the one its
//! own receive queue expects, and the peer's is the one its send queue starts at (Linux `cm.c`:
//! `ib_send_cm_req` and `ib_send_cm_rep` keep their own Starting PSN as `rq_psn`,
//! `cm_req_handler` and `cm_rep_handler` the peer's as `sq_psn`; `cm_init_qp_rtr_attr` and
//! `cm_init_qp_rts_attr` give those two). An end that used its own PSN to send would be answered
//! by a kernel peer with a PSN sequence error NAK on its first packet, and nothing else.

use crate::abi::*;
use crate::devices::PORT;
use crate::sys::{errno, ibv_modify_qp};
use crate::world::IdState;

/// What the kernel's CM uses as a RoCE path's packet lifetime (`CMA_IBOE_PACKET_LIFETIME`);
/// the QP's local ACK timeout is one more (`cm_init_av_by_path`).
pub const PACKET_LIFETIME: u8 = 16;

/// The attributes and mask for moving a QP of `s` to `state` (`rdma_init_qp_attr`); `EINVAL`
/// for a state the id cannot give yet (RTR/RTS before the peer is known).
pub fn init_attr(s: &IdState, qp_type: u32, state: u32) -> Result<(ibv_qp_attr, i32), i32> {
    let mut a = ibv_qp_attr { qp_state: state, ..Default::default() };
    let ud = qp_type == IBV_QPT_UD;
    let mask = match state {
        IBV_QPS_INIT => {
            a.port_num = PORT;
            a.pkey_index = 0;
            if ud {
                a.qkey = RDMA_UDP_QKEY;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
            } else {
                if s.cm.is_some() {
                    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                    if s.responder_resources > 0 {
                        a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
                    }
                }
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
            }
        }
        IBV_QPS_RTR if ud => IBV_QP_STATE,
        IBV_QPS_RTR => {
            let path = s.path.as_ref().filter(|_| s.cm.is_some()).ok_or(libc::EINVAL)?;
            a.path_mtu = u32::from(path.mtu);
            a.dest_qp_num = s.remote.qpn;
            a.rq_psn = s.psn;
            a.max_dest_rd_atomic = s.responder_resources;
            a.min_rnr_timer = 0;
            a.ah_attr = ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: ibv_gid { raw: path.dgid },
                    flow_label: path.flow_label,
                    sgid_index: path.sgid_index,
                    hop_limit: path.hop_limit,
                    traffic_class: path.traffic_class,
                },
                sl: path.sl,
                is_global: 1,
                port_num: PORT,
                ..Default::default()
            };
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER
        }
        IBV_QPS_RTS if ud => {
            a.sq_psn = 0;
            IBV_QP_STATE | IBV_QP_SQ_PSN
        }
        IBV_QPS_RTS => {
            if s.cm.is_none() {
                return Err(libc::EINVAL);
            }
            a.sq_psn = s.remote.psn;
            a.timeout = s.ack_timeout.unwrap_or(PACKET_LIFETIME + 1);
            a.retry_cnt = s.retry_count;
            a.rnr_retry = s.rnr_retry_count;
            a.max_rd_atomic = s.initiator_depth;
            IBV_QP_STATE
                | IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC
        }
        IBV_QPS_ERR | IBV_QPS_RESET => IBV_QP_STATE,
        _ => return Err(libc::EINVAL),
    };
    Ok((a, mask))
}

/// Moves `qp` to `state` with the id's attributes.
pub fn modify(qp: *mut ibv_qp, s: &IdState, qp_type: u32, state: u32) -> Result<(), i32> {
    if qp.is_null() {
        return Ok(());
    }
    let (mut a, mask) = init_attr(s, qp_type, state)?;
    // SAFETY: `qp` is the id's QP (made by rdma_create_qp through libibverbs), `a` a whole attr.
    match unsafe { ibv_modify_qp(qp, &mut a, mask) } {
        0 => Ok(()),
        e if e > 0 => Err(e),
        _ => Err(errno()),
    }
}

/// A connected QP's RTR then RTS (`ucma_modify_qp_rtr`, which first refreshes INIT with the
/// access the connection allows, and `ucma_modify_qp_rts`).
pub fn to_rts(qp: *mut ibv_qp, s: &IdState, qp_type: u32) -> Result<(), i32> {
    if qp_type == IBV_QPT_UD {
        return Ok(());
    }
    modify(qp, s, qp_type, IBV_QPS_INIT)?;
    modify(qp, s, qp_type, IBV_QPS_RTR)?;
    modify(qp, s, qp_type, IBV_QPS_RTS)
}
