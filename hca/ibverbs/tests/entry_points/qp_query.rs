//! `ibv_query_qp` returns every attribute `ibv_modify_qp` set, and fills the `init_attr`
//! out-parameter as libibverbs does (the creation attributes: context, CQs, SRQ, granted caps,
//! type, sq_sig_all), on the default model device.

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;

const STATE: i32 = 1;
const EN_SQD: i32 = 1 << 2;
const INIT_MASK: i32 = STATE | 1 << 3 | 1 << 4 | 1 << 5;
const RTR_MASK: i32 = STATE | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20;
const RTS_MASK: i32 = STATE | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 16 | 1 << 18;
/// Every `ibv_qp_attr_mask` bit up to IBV_QP_DEST_QPN.
const ALL: i32 = (1 << 21) - 1;

#[test]
fn query_qp_returns_every_attribute_and_the_init_attr() {
    // SAFETY: the library's own entry points, each on objects made just before, freed at the end.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        assert!(!list.is_null() && !(*list).is_null(), "the default model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let (scq, rcq) =
            (ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0), ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0));
        assert!(!pd.is_null() && !scq.is_null() && !rcq.is_null());
        let mut gid = ibv_gid::default();
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        let cap = ibv_qp_cap { max_send_wr: 5, max_recv_wr: 9, max_send_sge: 2, max_recv_sge: 3, max_inline_data: 0 };
        let mut ia = ibv_qp_init_attr {
            qp_context: 0x5a as *mut libc::c_void,
            send_cq: scq,
            recv_cq: rcq,
            srq: null_mut(),
            cap,
            qp_type: IBV_QPT_RC,
            sq_sig_all: 1,
        };
        let qp = ibv_create_qp(pd, &mut ia);
        assert!(!qp.is_null());
        let granted = ia.cap;
        let peer = ibv_create_qp(pd, &mut ibv_qp_init_attr { cap, ..ia });
        let grh = ibv_global_route { dgid: gid, flow_label: 0x2345, sgid_index: 0, hop_limit: 17, traffic_class: 0x48 };
        let want = ibv_qp_attr {
            qp_state: 3,
            cur_qp_state: 3,
            path_mtu: 2,
            path_mig_state: 1,
            rq_psn: 0xab_cdef,
            sq_psn: 0x01_2345,
            dest_qp_num: (*peer).qp_num,
            qp_access_flags: 1 | 4,
            ah_attr: ibv_ah_attr { grh, sl: 5, is_global: 1, port_num: 1, ..Default::default() },
            pkey_index: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 7,
            port_num: 1,
            timeout: 19,
            retry_cnt: 4,
            rnr_retry: 3,
            ..Default::default()
        };
        assert_eq!(ibv_modify_qp(qp, &mut ibv_qp_attr { qp_state: 1, ..want }, INIT_MASK), 0);
        assert_eq!(ibv_modify_qp(qp, &mut ibv_qp_attr { qp_state: 2, ..want }, RTR_MASK), 0);
        assert_eq!(ibv_modify_qp(qp, &mut ibv_qp_attr { ..want }, RTS_MASK), 0);
        let mut got = ibv_qp_attr::default();
        let mut out = std::mem::zeroed::<ibv_qp_init_attr>();
        assert_eq!(ibv_query_qp(qp, &mut got, ALL, &mut out), 0);
        let pairs: [(&str, u64, u64); 25] = [
            ("qp_state", got.qp_state.into(), want.qp_state.into()),
            ("cur_qp_state", got.cur_qp_state.into(), want.cur_qp_state.into()),
            ("path_mtu", got.path_mtu.into(), want.path_mtu.into()),
            ("path_mig_state", got.path_mig_state.into(), want.path_mig_state.into()),
            ("rq_psn", got.rq_psn.into(), want.rq_psn.into()),
            ("sq_psn", got.sq_psn.into(), want.sq_psn.into()),
            ("dest_qp_num", got.dest_qp_num.into(), want.dest_qp_num.into()),
            ("qp_access_flags", got.qp_access_flags.into(), want.qp_access_flags.into()),
            ("pkey_index", got.pkey_index.into(), want.pkey_index.into()),
            ("ah_attr.sl", got.ah_attr.sl.into(), want.ah_attr.sl.into()),
            ("ah_attr.is_global", got.ah_attr.is_global.into(), 1),
            ("ah_attr.port_num", got.ah_attr.port_num.into(), 1),
            ("grh.flow_label", got.ah_attr.grh.flow_label.into(), grh.flow_label.into()),
            ("grh.hop_limit", got.ah_attr.grh.hop_limit.into(), grh.hop_limit.into()),
            ("grh.traffic_class", got.ah_attr.grh.traffic_class.into(), grh.traffic_class.into()),
            ("grh.sgid_index", got.ah_attr.grh.sgid_index.into(), 0),
            ("max_rd_atomic", got.max_rd_atomic.into(), want.max_rd_atomic.into()),
            ("max_dest_rd_atomic", got.max_dest_rd_atomic.into(), want.max_dest_rd_atomic.into()),
            ("min_rnr_timer", got.min_rnr_timer.into(), want.min_rnr_timer.into()),
            ("port_num", got.port_num.into(), 1),
            ("timeout", got.timeout.into(), want.timeout.into()),
            ("retry_cnt", got.retry_cnt.into(), want.retry_cnt.into()),
            ("rnr_retry", got.rnr_retry.into(), want.rnr_retry.into()),
            ("sq_draining", got.sq_draining.into(), 0),
            ("cap.max_send_wr", got.cap.max_send_wr.into(), granted.max_send_wr.into()),
        ];
        for (name, g, w) in pairs {
            assert_eq!(g, w, "ibv_query_qp {name}");
        }
        assert_eq!(got.ah_attr.grh.dgid.raw, gid.raw);
        assert_eq!(
            (got.cap.max_recv_wr, got.cap.max_send_sge, got.cap.max_recv_sge, got.cap.max_inline_data),
            (granted.max_recv_wr, granted.max_send_sge, granted.max_recv_sge, granted.max_inline_data)
        );
        assert_eq!((out.qp_context as usize, out.send_cq, out.recv_cq, out.srq), (0x5a, scq, rcq, null_mut()));
        assert_eq!((out.qp_type, out.sq_sig_all), (IBV_QPT_RC, 1));
        let oc = out.cap;
        assert_eq!(
            (oc.max_send_wr, oc.max_recv_wr, oc.max_send_sge, oc.max_recv_sge, oc.max_inline_data),
            (
                granted.max_send_wr,
                granted.max_recv_wr,
                granted.max_send_sge,
                granted.max_recv_sge,
                granted.max_inline_data
            )
        );
        assert_eq!((*qp).state, 3, "qp->state follows the query");
        // SQD with the notify bit, then back: both read back.
        let mut sqd = ibv_qp_attr { qp_state: 4, en_sqd_async_notify: 1, ..Default::default() };
        assert_eq!(ibv_modify_qp(qp, &mut sqd, STATE | EN_SQD), 0);
        let mut got = ibv_qp_attr::default();
        assert_eq!(ibv_query_qp(qp, &mut got, STATE | EN_SQD, &mut out), 0);
        assert_eq!((got.qp_state, got.en_sqd_async_notify, got.sq_draining, (*qp).state), (4, 1, 0, 4));
        let mut ev = std::mem::zeroed::<ibv_async_event>();
        assert_eq!(ibv_get_async_event(ctx, &mut ev), 0, "SQ_DRAINED");
        assert_eq!(ev.event_type, 5);
        ibv_ack_async_event(&mut ev);
        for q in [qp, peer] {
            assert_eq!(ibv_destroy_qp(q), 0);
        }
        assert_eq!(ibv_destroy_cq(scq), 0);
        assert_eq!(ibv_destroy_cq(rcq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
