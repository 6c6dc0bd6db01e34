//! The RC QP state machine end to end (IBTA 10.3.1, Linux's `ib_modify_qp_is_ok` table): every
//! (current, next) pair is legal or refused with EINVAL by the core — and, bypassing the core,
//! by the device — a required attribute missing or an attribute the transition does not take is
//! EINVAL; moving to ERR flushes everything outstanding exactly once (ERR -> ERR flushes nothing
//! more, later posts are flushed one by one); SQD drains and resumes; QUERY_QP returns every
//! attribute as set.
use ib_core::{access, AhAttr, AsyncEventType, Device, Error, GlobalRoute, Mtu, Qp, QpAttr, QpAttrMask as M};
use ib_core::{QpState, QpType, RecvWr, SendWr, Sge, WcStatus, WrOpcode};
use pvrdma_abi::cmd::ModifyQp;
use std::time::Duration;
use tests::fixture::{gid, open, poll_n, pv, rc_qp, SETTLE, WAIT};
use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

const ALL: [QpState; 7] = [Reset, Init, Rtr, Rts, Sqd, Sqe, QpState::Err];

/// Values valid for every attribute an RC transition takes, towards `dest` at `dgid`.
fn full_attr(next: QpState, dest: u32, dgid: [u8; 16]) -> QpAttr {
    QpAttr {
        qp_state: next,
        path_mtu: Mtu::from_bytes(1024).unwrap(),
        dest_qp_num: dest,
        qp_access_flags: access::LOCAL_WRITE | access::REMOTE_WRITE,
        ah_attr: AhAttr {
            grh: GlobalRoute { dgid, sgid_index: 0, hop_limit: 64, ..Default::default() },
            is_global: true,
            port_num: 1,
            ..Default::default()
        },
        port_num: 1,
        max_dest_rd_atomic: 1,
        max_rd_atomic: 1,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..Default::default()
    }
}

/// The RC table: whether `cur -> next` is legal (IBTA 10.3.1; ERR and RESET from anywhere).
fn legal(cur: QpState, next: QpState) -> bool {
    matches!(next, Reset | QpState::Err)
        || matches!(
            (cur, next),
            (Reset, Init) | (Init, Init) | (Init, Rtr) | (Rtr, Rts) | (Rts, Rts) | (Rts, Sqd) | (Sqd, Sqd) | (Sqd, Rts)
        )
}

/// Brings a new QP to `state` through the legal path (SQE: unreachable for RC; `None`).
fn qp_in(dev: &Device, pd: &ib_core::Pd, cq: &ib_core::Cq, state: QpState) -> Option<Qp> {
    let q = rc_qp(pd, cq, cq);
    let path: &[QpState] = match state {
        Reset => &[],
        Init => &[Init],
        Rtr => &[Init, Rtr],
        Rts => &[Init, Rtr, Rts],
        Sqd => &[Init, Rtr, Rts, Sqd],
        QpState::Err => &[QpState::Err],
        Sqe => return None,
    };
    let mut cur = Reset;
    for &next in path {
        let mask = ib_core::qp_state::required(cur, next, QpType::Rc).unwrap();
        q.modify_qp(&full_attr(next, q.qpn(), gid(dev)), mask).unwrap();
        cur = next;
    }
    assert_eq!(q.state(), Ok(state));
    Some(q)
}

/// One raw MODIFY_QP of `qpn` to `next` with `mask`, past the core: the device's own answer.
fn raw_modify(dev: &Device, qpn: u32, next: QpState, mask: M) -> Result<(), Error> {
    let mut req = ModifyQp { qp_handle: qpn.into(), attr_mask: mask.0.into(), ..Default::default() };
    req.attrs.qp_state.set(next.raw());
    pv(dev).post_command(req).map(|_| ())
}

#[test]
fn every_rc_transition_is_legal_or_refused_with_einval() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256, None).unwrap();
    let mut checked = 0;
    for cur in ALL {
        for next in ALL {
            let Some(q) = qp_in(&dev, &pd, &cq, cur) else { continue };
            let attr = full_attr(next, q.qpn(), gid(&dev));
            match ib_core::qp_state::required(cur, next, QpType::Rc) {
                Some(req) => {
                    assert!(legal(cur, next), "{cur:?} -> {next:?} is not in IBTA's table");
                    for bit in (0..21).map(|b| M(1 << b)).filter(|&b| req.contains(b) && b != M::STATE) {
                        let e = q.modify_qp(&attr, req.without(bit)).unwrap_err();
                        assert_eq!(e.errno(), libc::EINVAL, "{cur:?} -> {next:?} without {bit:?}");
                    }
                    let e = q.modify_qp(&attr, req | M::QKEY).unwrap_err();
                    assert_eq!(e.errno(), libc::EINVAL, "{cur:?} -> {next:?} with a Q_Key (UD's)");
                    assert_eq!(q.state(), Ok(cur), "refusals leave the state");
                    q.modify_qp(&attr, req).unwrap_or_else(|e| panic!("{cur:?} -> {next:?}: {e}"));
                    assert_eq!(q.state(), Ok(next));
                }
                None => {
                    assert!(!legal(cur, next), "{cur:?} -> {next:?} missing from the core's table");
                    let e = q.modify_qp(&attr, M::STATE).unwrap_err();
                    assert_eq!(e.errno(), libc::EINVAL, "{cur:?} -> {next:?}");
                    let raw = raw_modify(&dev, q.qpn(), next, M::STATE).unwrap_err();
                    assert_eq!(raw.errno(), libc::EINVAL, "the device itself refuses {cur:?} -> {next:?}");
                    assert_eq!(q.state(), Ok(cur));
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 6 * 7, "every reachable state against every target");
}

/// A peer whose receive queue is empty parks `a`'s sends (RNR, retried for ever): they stay in
/// flight until the peer posts or `a` leaves RTS.
fn stuck_pair(dev: &Device, pd: &ib_core::Pd, cq: &ib_core::Cq) -> (Qp, Qp, ib_core::Mr) {
    let (a, b) = (rc_qp(pd, cq, cq), rc_qp(pd, cq, cq));
    tests::fixture::connect(&a, b.qpn(), gid(dev));
    tests::fixture::connect(&b, a.qpn(), gid(dev));
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    (a, b, mr)
}

fn send(q: &Qp, mr: &ib_core::Mr, id: u64) -> ib_core::Result<()> {
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    q.post_send(&SendWr { wr_id: id, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false })
}

fn recv(q: &Qp, mr: &ib_core::Mr, id: u64) -> ib_core::Result<()> {
    let sge = [Sge { addr: mr.addr() + 64, length: 64, lkey: mr.lkey() }];
    q.post_recv(&RecvWr { wr_id: id, sg_list: &sge })
}

fn assert_quiet(cq: &ib_core::Cq) {
    std::thread::sleep(SETTLE);
    let mut wc = [ib_core::Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc), Ok(0), "a completion nobody owed: {:?}", &wc[..1]);
}

#[test]
fn err_flushes_everything_outstanding_exactly_once() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256, None).unwrap();
    let (a, _b, mr) = stuck_pair(&dev, &pd, &cq);
    for id in 0..4 {
        send(&a, &mr, id).unwrap();
        recv(&a, &mr, 100 + id).unwrap();
    }
    assert_quiet(&cq);
    a.modify_to_err().unwrap();
    let mut got: Vec<(u64, WcStatus)> = poll_n(&cq, 8).iter().map(|w| (w.wr_id, w.status)).collect();
    got.sort_by_key(|x| x.0);
    let want: Vec<(u64, WcStatus)> =
        [0, 1, 2, 3, 100, 101, 102, 103].iter().map(|&i| (i, WcStatus::WrFlushErr)).collect();
    assert_eq!(got, want, "each send (in flight) and receive once, flushed");
    assert_quiet(&cq);
    a.modify_to_err().unwrap();
    assert_quiet(&cq);
    let e = QpAttr { qp_state: QpState::Err, ..Default::default() };
    let claimed = a.modify_qp(&QpAttr { cur_qp_state: QpState::Err, ..e }, M::STATE | M::CUR_STATE);
    assert_eq!(claimed.unwrap_err().errno(), libc::EINVAL, "CUR_STATE outside RTR, RTS, SQD, SQE (Linux)");
    assert_quiet(&cq);
    send(&a, &mr, 7).unwrap();
    recv(&a, &mr, 8).unwrap();
    let mut later: Vec<u64> = poll_n(&cq, 2).iter().map(|w| w.wr_id).collect();
    later.sort();
    assert_eq!(later, [7, 8], "posts in ERR complete flushed, once each");
    assert_quiet(&cq);
    // RESET discards without completions, and the QP is usable again.
    a.modify_qp(&QpAttr { qp_state: Reset, ..Default::default() }, M::STATE).unwrap();
    assert_quiet(&cq);
}

#[test]
fn sqd_stops_new_sends_drains_the_ones_in_flight_and_resumes() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256, None).unwrap();
    let (a, b, mr) = stuck_pair(&dev, &pd, &cq);
    send(&a, &mr, 1).unwrap();
    std::thread::sleep(SETTLE);
    let sqd = QpAttr { qp_state: Sqd, en_sqd_async_notify: 1, ..Default::default() };
    a.modify_qp(&sqd, M::STATE | M::EN_SQD_ASYNC_NOTIFY).unwrap();
    let q = a.query_qp(M::STATE).unwrap();
    assert_eq!((q.qp_state, q.sq_draining), (Sqd, 1), "send 1 is still in flight");
    assert!(matches!(dev.get_async_event(SETTLE), Err(Error::Timeout)), "not drained yet");
    send(&a, &mr, 2).unwrap();
    recv(&b, &mr, 10).unwrap();
    recv(&b, &mr, 11).unwrap();
    let mut ids: Vec<u64> = poll_n(&cq, 2).iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, [1, 10], "send 1 finished in SQD; send 2, posted in SQD, did not start");
    let ev = dev.get_async_event(WAIT).expect("SQ_DRAINED");
    assert_eq!((ev.event_type, ev.qp().map(|q| q.qp_num())), (AsyncEventType::SqDrained, Some(a.qpn())));
    ev.ack();
    assert_eq!(a.query_qp(M::STATE).unwrap().sq_draining, 0);
    assert_quiet(&cq);
    // SQD -> SQD takes path attributes; SQD -> RTS resumes with send 2.
    let tweak = QpAttr { qp_state: Sqd, timeout: 16, ..Default::default() };
    a.modify_qp(&tweak, M::STATE | M::TIMEOUT).unwrap();
    a.modify_qp(&QpAttr { qp_state: Rts, ..Default::default() }, M::STATE).unwrap();
    let mut ids: Vec<u64> = poll_n(&cq, 2).iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, [2, 11]);
    assert_eq!(a.query_qp(M::TIMEOUT).unwrap().timeout, 16);
    // Without EN_SQD_ASYNC_NOTIFY a drain raises nothing.
    a.modify_qp(&QpAttr { qp_state: Sqd, ..Default::default() }, M::STATE).unwrap();
    assert!(matches!(dev.get_async_event(SETTLE), Err(Error::Timeout)));
}

#[test]
fn query_returns_every_attribute_as_set() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let q = rc_qp(&pd, &cq, &cq);
    let peer = rc_qp(&pd, &cq, &cq);
    let grh = GlobalRoute { dgid: gid(&dev), sgid_index: 0, hop_limit: 33, traffic_class: 0x20, flow_label: 0x1234 };
    let want = QpAttr {
        qp_state: Rts,
        cur_qp_state: Rts,
        path_mtu: Mtu::from_bytes(512).unwrap(),
        path_mig_state: 1,
        rq_psn: 0x12_3456,
        sq_psn: 0x65_4321,
        dest_qp_num: peer.qpn(),
        qp_access_flags: access::LOCAL_WRITE | access::REMOTE_READ,
        ah_attr: AhAttr { grh, is_global: true, port_num: 1, sl: 3, ..Default::default() },
        pkey_index: 0,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 9,
        port_num: 1,
        timeout: 18,
        retry_cnt: 5,
        rnr_retry: 6,
        alt_ah_attr: AhAttr {
            grh: GlobalRoute { hop_limit: 9, ..grh },
            is_global: true,
            port_num: 1,
            sl: 1,
            ..Default::default()
        },
        alt_pkey_index: 0,
        alt_port_num: 1,
        alt_timeout: 21,
        ..Default::default()
    };
    let init = QpAttr { qp_state: Init, ..want };
    q.modify_qp(&init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS).unwrap();
    let rtr = QpAttr { qp_state: Rtr, ..want };
    let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    // Linux's `_ib_modify_qp` bans alternate paths on RoCE (issue 21 §3): refused, nothing set.
    assert!(matches!(q.modify_qp(&rtr, m | M::ALT_PATH), Err(Error::InvalidArgument(_))), "an alternate path on RoCE");
    q.modify_qp(&rtr, m).unwrap();
    let m = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC | M::PATH_MIG_STATE;
    q.modify_qp(&want, m).unwrap();
    let got = q.query_qp(M(u32::MAX >> 11)).unwrap();
    let field = |name: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "QUERY_QP {name}");
    };
    field("qp_state", &got.qp_state, &want.qp_state);
    field("cur_qp_state", &got.cur_qp_state, &want.cur_qp_state);
    field("path_mtu", &got.path_mtu, &want.path_mtu);
    field("path_mig_state", &got.path_mig_state, &want.path_mig_state);
    field("rq_psn", &got.rq_psn, &want.rq_psn);
    field("sq_psn", &got.sq_psn, &want.sq_psn);
    field("dest_qp_num", &got.dest_qp_num, &want.dest_qp_num);
    field("qp_access_flags", &got.qp_access_flags, &want.qp_access_flags);
    field("pkey_index", &got.pkey_index, &want.pkey_index);
    field("ah_attr.grh", &got.ah_attr.grh, &want.ah_attr.grh);
    field("ah_attr.sl", &got.ah_attr.sl, &want.ah_attr.sl);
    field("ah_attr.port_num", &got.ah_attr.port_num, &want.ah_attr.port_num);
    field("ah_attr.is_global", &got.ah_attr.is_global, &want.ah_attr.is_global);
    field("max_rd_atomic", &got.max_rd_atomic, &want.max_rd_atomic);
    field("max_dest_rd_atomic", &got.max_dest_rd_atomic, &want.max_dest_rd_atomic);
    field("min_rnr_timer", &got.min_rnr_timer, &want.min_rnr_timer);
    field("port_num", &got.port_num, &want.port_num);
    field("timeout", &got.timeout, &want.timeout);
    field("retry_cnt", &got.retry_cnt, &want.retry_cnt);
    field("rnr_retry", &got.rnr_retry, &want.rnr_retry);
    field("sq_draining", &got.sq_draining, &0u8);
    field("alt_port_num", &got.alt_port_num, &0u8);
    field("alt_timeout", &got.alt_timeout, &0u8);
    let cap = tests::fixture::cap();
    field("cap.max_send_wr", &got.cap.max_send_wr, &cap.max_send_wr);
    field("cap.max_recv_wr", &got.cap.max_recv_wr, &cap.max_recv_wr);
    field("cap.max_send_sge", &got.cap.max_send_sge, &cap.max_send_sge);
    field("cap.max_recv_sge", &got.cap.max_recv_sge, &cap.max_recv_sge);
    // SQD with the notify bit: en_sqd_async_notify reads back.
    let sqd = QpAttr { qp_state: Sqd, en_sqd_async_notify: 1, ..Default::default() };
    q.modify_qp(&sqd, M::STATE | M::EN_SQD_ASYNC_NOTIFY).unwrap();
    let got = q.query_qp(M::STATE | M::EN_SQD_ASYNC_NOTIFY).unwrap();
    assert_eq!((got.qp_state, got.cur_qp_state, got.en_sqd_async_notify), (Sqd, Sqd, 1));
    if let Ok(ev) = dev.get_async_event(Duration::from_secs(2)) {
        ev.ack();
    }
}

/// SQD on the RoCE port through a lossy link: the sends in flight when the QP enters SQD still
/// finish (the requester keeps retransmitting in SQD), SQ_DRAINED follows once, a send posted in
/// SQD waits for SQD -> RTS.
#[test]
fn sqd_drains_through_retransmissions_on_the_roce_port() {
    use pvrdma_sim::roce::{LinkFaults, RoceConfig};
    let faults = LinkFaults { loss: 0.2, seed: 5, ..Default::default() };
    let roce = RoceConfig { faults, ..RoceConfig::new(vec![]) };
    let (dev, _sim) = tests::fixture::open_roce(roce, Default::default());
    let dgid = dev.query_gid(1, 1).expect("the RoCE v2 GID");
    let pd = dev.alloc_pd().unwrap();
    let (cq_a, cq_b) = (dev.create_cq(64, None).unwrap(), dev.create_cq(64, None).unwrap());
    let (a, b) = (rc_qp(&pd, &cq_a, &cq_a), rc_qp(&pd, &cq_b, &cq_b));
    tests::fixture::connect_roce(&a, b.qpn(), dgid, 1);
    tests::fixture::connect_roce(&b, a.qpn(), dgid, 1);
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    for id in 0..8 {
        recv(&b, &mr, 100 + id).unwrap();
    }
    for id in 0..6 {
        send(&a, &mr, id).unwrap();
    }
    let sqd = QpAttr { qp_state: Sqd, en_sqd_async_notify: 1, ..Default::default() };
    a.modify_qp(&sqd, M::STATE | M::EN_SQD_ASYNC_NOTIFY).unwrap();
    send(&a, &mr, 6).unwrap();
    let mut done: Vec<u64> = poll_n(&cq_a, 6)
        .iter()
        .map(|w| {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            w.wr_id
        })
        .collect();
    done.sort();
    assert_eq!(done, [0, 1, 2, 3, 4, 5], "what was in flight finished in SQD");
    let ev = dev.get_async_event(WAIT).expect("SQ_DRAINED");
    assert_eq!(ev.event_type, AsyncEventType::SqDrained);
    ev.ack();
    std::thread::sleep(SETTLE);
    assert_eq!(cq_a.poll(&mut [ib_core::Wc::default(); 2]), Ok(0), "send 6 waits in SQD");
    a.modify_qp(&QpAttr { qp_state: Rts, ..Default::default() }, M::STATE).unwrap();
    assert_eq!(poll_n(&cq_a, 1)[0].wr_id, 6);
    assert_eq!(poll_n(&cq_b, 7).len(), 7, "each message received once");
}
