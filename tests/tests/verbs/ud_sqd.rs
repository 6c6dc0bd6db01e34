//! A UD QP in SQD: its send queue drains and it keeps receiving. (Found under attack in issue 13.)

use ib_core::{access, Cq, Pd, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr, Sge, WcStatus};
use tests::fixture::poll_n;

fn ud_qp(pd: &Pd, scq: &Cq, rcq: &Cq, qkey: u32) -> Qp {
    let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        cap,
        qp_type: QpType::Ud,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let q = pd.create_qp(&attr).expect("create a UD QP");
    q.modify_ud_to_rts(1, qkey, 0).expect("UD to RTS");
    q
}

/// A UD QP takes RTS -> SQD -> SQD -> RTS (IBTA 10.3.1 and Table 93's UD column, as the verbs
/// core and Linux's `ib_modify_qp_is_ok` allow) and keeps receiving in SQD; a send posted in
/// SQD leaves once the QP is back in RTS. Before the fix the device refused the move to SQD
/// (EINVAL) and a UD QP in SQD would have dropped every datagram.
#[test]
fn a_ud_qp_drains_its_send_queue_and_keeps_receiving_in_sqd() {
    const QKEY: u32 = 0x2222;
    let dev = tests::fixture::open();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let mr = pd.alloc_mr(8192, access::LOCAL_WRITE).unwrap();
    let (a, b) = (ud_qp(&pd, &scq, &rcq, QKEY), ud_qp(&pd, &scq, &rcq, QKEY));
    let grh = ib_core::GlobalRoute {
        dgid: tests::fixture::gid(&dev),
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    let ah = pd.create_ah(&ib_core::AhAttr { grh, is_global: true, port_num: 1, ..Default::default() }).unwrap();
    let sqd = QpAttr { qp_state: QpState::Sqd, ..Default::default() };
    b.modify_qp(&sqd, QpAttrMask::STATE).expect("UD RTS -> SQD");
    b.modify_qp(
        &QpAttr { qp_state: QpState::Sqd, qkey: QKEY, ..Default::default() },
        QpAttrMask::STATE | QpAttrMask::QKEY,
    )
    .expect("UD SQD -> SQD");
    for (q, at) in [(&a, 4096u64), (&b, 6144)] {
        let sge = [Sge { addr: mr.addr() + at, length: 1024, lkey: mr.lkey() }];
        q.post_recv(&RecvWr { wr_id: at, sg_list: &sge }).unwrap();
    }
    let send = |from: &Qp, to: &Qp| {
        let sge = [Sge { addr: mr.addr(), length: 32, lkey: mr.lkey() }];
        let opcode = ib_core::WrOpcode::UdSend { dest: ah.dest(to.qpn(), QKEY), imm: None };
        from.post_send(&ib_core::SendWr { wr_id: 1, sg_list: &sge, opcode, signaled: true, solicited: false }).unwrap();
    };
    send(&a, &b);
    let w = poll_n(&rcq, 1)[0];
    assert_eq!((w.qp_num, w.status, w.byte_len), (b.qpn(), WcStatus::Success, 40 + 32), "received in SQD");
    assert_eq!(poll_n(&scq, 1)[0].status, WcStatus::Success);
    send(&b, &a);
    std::thread::sleep(tests::fixture::SETTLE);
    let mut wc = [ib_core::Wc::default(); 2];
    assert_eq!(rcq.poll(&mut wc).unwrap(), 0, "a send posted in SQD waits");
    b.modify_qp(&QpAttr { qp_state: QpState::Rts, ..Default::default() }, QpAttrMask::STATE).expect("UD SQD -> RTS");
    let w = poll_n(&rcq, 1)[0];
    assert_eq!((w.qp_num, w.status), (a.qpn(), WcStatus::Success), "sent once back in RTS");
}
