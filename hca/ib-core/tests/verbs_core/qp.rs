//! QPs on the scripted provider: IBTA's transition table, every attribute of a modify reaching
//! the provider, the state read from the device, and IBTA's posting rules.

use crate::scripted::{open, script};
use ib_core::{AhAttr, Error, GlobalRoute, Mtu, QpAttr, QpAttrMask as M, QpCap, QpInitAttr};
use ib_core::{QpState, QpType, RecvWr, SendWr, Sge, WrOpcode};

fn qp_on(dev: &ib_core::Device) -> (ib_core::Qp, ib_core::Cq, ib_core::Pd) {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    (pd.create_qp(&attr).unwrap(), cq, pd)
}

#[test]
fn modify_checks_the_transition_and_mask_and_passes_every_attribute() {
    let dev = open();
    let (qp, _cq, _pd) = qp_on(&dev);
    let init = QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() };
    assert!(
        matches!(qp.modify_qp(&init, M::STATE | M::PORT), Err(Error::InvalidArgument(_))),
        "PKEY_INDEX and ACCESS_FLAGS are required"
    );
    assert_eq!(qp.modify_qp(&QpAttr { qp_state: QpState::Rts, ..init }, M::STATE), Err(Error::InvalidState));
    let bad_port = QpAttr { port_num: 2, ..init };
    let m = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    assert!(matches!(qp.modify_qp(&bad_port, m), Err(Error::InvalidArgument(_))));
    qp.modify_qp(&init, m).unwrap();
    let grh = GlobalRoute { dgid: [7; 16], sgid_index: 1, hop_limit: 3, traffic_class: 0x20, flow_label: 5 };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::MTU_512,
        dest_qp_num: 0x12_3456,
        rq_psn: 0xab_cdef,
        max_dest_rd_atomic: 2,
        min_rnr_timer: 9,
        ah_attr: AhAttr { grh, is_global: true, port_num: 1, ..Default::default() },
        ..Default::default()
    };
    let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    let no_gid = QpAttr { ah_attr: AhAttr { grh: GlobalRoute { sgid_index: 2, ..grh }, ..rtr.ah_attr }, ..rtr };
    assert!(matches!(qp.modify_qp(&no_gid, m), Err(Error::InvalidArgument(_))), "sgid_index beyond the GID table");
    let other_port = QpAttr { ah_attr: AhAttr { port_num: 0, ..rtr.ah_attr }, ..rtr };
    assert!(matches!(qp.modify_qp(&other_port, m), Err(Error::InvalidArgument(_))), "an AV's port 0 (ib_uverbs)");
    // Issue 21 §3: a PSN beyond 24 bits is masked, as Linux's `_ib_modify_qp` masks it.
    let beyond = QpAttr { rq_psn: 1 << 24 | rtr.rq_psn, ..rtr };
    qp.modify_qp(&beyond, m).unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 1,
        timeout: 20,
        retry_cnt: 3,
        rnr_retry: 6,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let m = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    let rnr = QpAttr { min_rnr_timer: 32, ..rts };
    assert!(
        matches!(qp.modify_qp(&rnr, m | M::MIN_RNR_TIMER), Err(Error::InvalidArgument(_))),
        "pvrdma_modify_qp: above 31"
    );
    qp.modify_qp(&rts, m).unwrap();
    let dev_qp = script(&dev).qps.lock().unwrap().iter().find(|q| q.num == qp.qpn()).unwrap().clone();
    let modifies = dev_qp.modifies.lock().unwrap().clone();
    assert_eq!(modifies.len(), 3, "the refused modifies never reached the device");
    assert_eq!(
        modifies[1],
        (rtr, M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER)
    );
    assert_eq!((modifies[2].0.timeout, modifies[2].0.retry_cnt, modifies[2].0.rnr_retry), (20, 3, 6));
    let q = qp.query_qp(M::ALL).unwrap();
    assert_eq!((q.qp_state, q.timeout, q.ah_attr.grh), (QpState::Rts, 20, grh), "read back from the device");
}

#[test]
fn posting_follows_ibta_and_the_state_is_the_devices() {
    let dev = open();
    let (qp, cq, pd) = qp_on(&dev);
    let mr = pd.alloc_mr(64, 0).unwrap();
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    let send = SendWr { wr_id: 1, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
    let recv = RecvWr { wr_id: 2, sg_list: &sge };
    assert_eq!((qp.post_send(&send), qp.post_recv(&recv)), (Err(Error::InvalidState), Err(Error::InvalidState)));
    qp.modify_to_init(1, 0).unwrap();
    assert_eq!((qp.post_send(&send), qp.post_recv(&recv)), (Err(Error::InvalidState), Ok(())));
    qp.modify_to_err().unwrap();
    assert_eq!((qp.post_send(&send), qp.post_recv(&recv)), (Ok(()), Ok(())), "ERR takes work requests (flushed)");
    assert_eq!(crate::scripted::scq(&cq).0.queued.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The device moves a QP on its own: the state read is the device's.
    let dev_qp = script(&dev).qps.lock().unwrap()[0].clone();
    *dev_qp.state.lock().unwrap() = QpState::Sqe;
    assert_eq!(qp.state(), Ok(QpState::Sqe));
    assert_eq!(qp.post_send(&send), Ok(()), "SQE takes work requests too");
}
