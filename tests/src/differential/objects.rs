//! Bring-up, the objects and their limits, QP attributes, and a command with a DMA address outside
//! guest memory, on each side.

use super::{Difference, Side, Target};
use crate::fixture::{cap, pair, pv, rc_qp, stats};
use crate::qemu::backend_gid;
use doorbell::ArmEncoding;
use ib_core::{access, AhAttr, Error, GlobalRoute, Mtu};
use ib_core::{PortState, QpAttr, QpAttrMask as M, QpState};
use ib_core::{WcStatus, WrOpcode};
use pvrdma_abi::regs::REG_VERSION;
use pvrdma_abi::uar::UAR_HANDLE_MASK;

/// Bring-up: version 17, DSR load and caps (by rule), activation, the arm encoding the self-test
/// found, QUERY_PORT, QUERY_PKEY, the GID, and one command interrupt per command, counted by the
/// driver.
pub fn bring_up(t: &Target) {
    let dev = &t.dev;
    let irq0 = stats(dev).interrupts[0];
    let expected = if t.side.differs(Difference::IbtaArming) { ArmEncoding::Qemu72 } else { ArmEncoding::Ibta };
    assert_eq!(pv(dev).arm_encoding(), expected, "{:?}: the probe's self-test", t.side);
    assert_eq!(t.platform.reg_read(REG_VERSION), pvrdma_abi::PVRDMA_ROCEV1_VERSION);
    let a = dev.query_device();
    // By rule: every count at least 1 and within what the ABI can address (24-bit handles).
    let handles = UAR_HANDLE_MASK + 1;
    for (name, v) in [
        ("max_qp", a.max_qp),
        ("max_qp_wr", a.max_qp_wr),
        ("max_sge", a.max_sge),
        ("max_cq", a.max_cq),
        ("max_cqe", a.max_cqe),
        ("max_mr", a.max_mr),
        ("max_pd", a.max_pd),
        ("gid_tbl_len", a.gid_tbl_len),
    ] {
        assert!((1..=handles).contains(&v), "{:?}: caps.{name} = {v}", t.side);
    }
    assert_eq!(a.phys_port_cnt, 1);
    assert!(a.max_mr_size >= 4096, "{:?}: max_mr_size {}", t.side, a.max_mr_size);
    assert!(a.max_pkeys >= 1);
    // The driver sizes by these caps: past them it refuses before the device sees anything.
    let too_many = a.max_cqe.saturating_mul(2);
    assert!(matches!(dev.create_cq(too_many, None), Err(Error::InvalidArgument(_))));
    let port = dev.query_port(1).unwrap();
    if t.side.differs(Difference::PortStateFollowsFunction0) {
        assert_eq!(port.state, PortState::Down, "{:?}: no driver activated the vmxnet3", t.side);
    } else {
        assert_eq!(port.state, PortState::Active, "{:?}", t.side);
    }
    assert!(
        port.active_mtu >= 256 && port.active_mtu <= port.max_mtu && port.max_mtu <= 4096,
        "{:?}: {port:?}",
        t.side
    );
    assert!(port.gid_tbl_len >= 1 && port.pkey_tbl_len >= 1, "{:?}: {port:?}", t.side);
    assert!(matches!(dev.query_port(2), Err(Error::InvalidArgument(_))));
    assert_eq!(dev.query_pkey(1, 0).unwrap(), 0xffff);
    assert_eq!(dev.query_gid(1, 0).unwrap(), backend_gid());
    // This body posted QUERY_PORT and QUERY_PKEY (the refusals above never reach the device):
    // one interrupt each (the real device raises vector 0 per command, failed ones too).
    assert_eq!(stats(dev).interrupts[0] - irq0, 2, "{:?}: {:?}", t.side, stats(dev));
    assert!(!dev.is_fatal());
}

/// Create and destroy PD, MR, CQ, QP and UC in any order; the device keeps working afterwards.
pub fn objects(t: &Target) {
    let dev = &t.dev;
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.alloc_mr(10_000, access::LOCAL_WRITE).unwrap();
    assert_eq!(mr.len(), 10_000);
    mr.write(9_990, b"0123456789").unwrap();
    let mut b = [0u8; 10];
    mr.read(9_990, &mut b).unwrap();
    assert_eq!(&b, b"0123456789");
    // An MR over this process's own memory: the model maps it; qtest reaches guest RAM only and
    // says so.
    let buf = ib_core::UserBuffer::new(4096).unwrap();
    match (t.side, pd.reg_buffer(&buf, access::LOCAL_WRITE)) {
        (Side::Qemu72, r) => assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}"),
        (_, r) => assert_eq!(r.unwrap().addr(), buf.addr()),
    }
    let cq = dev.create_cq(100, None).unwrap();
    assert_eq!(cq.cqe(), 128);
    let qp = rc_qp(&pd, &cq, &cq);
    assert_eq!(qp.state().unwrap(), ib_core::QpState::Reset);
    qp.modify_to_init(1, access::LOCAL_WRITE).unwrap();
    // The QP holds its CQ and PD: dropping them first is safe; the QP's drop destroys in order.
    drop(cq);
    drop(pd);
    drop(mr);
    drop(qp);
    // A user context: its own UAR page, PD, CQ and QP; a user PD cannot take a kernel CQ.
    let ctx = dev.alloc_ucontext().unwrap();
    let page = ctx.provider_context::<hca::Ucontext>().unwrap().uar_page();
    assert!(page.index() >= 1);
    let upd = ctx.alloc_pd().unwrap();
    let ucq = ctx.create_cq(8, None).unwrap();
    assert!(ucq.is_user());
    let uqp = rc_qp(&upd, &ucq, &ucq);
    let kcq = dev.create_cq(1, None).unwrap();
    let attr = ib_core::QpInitAttr {
        send_cq: &kcq,
        recv_cq: &ucq,
        cap: cap(),
        qp_type: ib_core::QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    assert!(matches!(upd.create_qp(&attr), Err(Error::InvalidArgument(_))));
    drop(ctx);
    drop(ucq);
    drop(upd);
    drop(uqp);
    drop(kcq);
    // Everything was destroyed without an error; the device still carries data.
    assert!(!dev.is_fatal());
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    t.one_message(&p, &cq, 1, false);
}

/// The full QP attribute interface through the device: every attribute a modify sets reaches it
/// (nothing hard-coded by the driver), QUERY_QP reads the state and attributes back from it, and
/// IBTA's posting rules: work requests posted to a QP in ERR are taken and complete with
/// `WR_FLUSH_ERR` and their `wr_id`.
pub fn qp_attributes(t: &Target) {
    let dev = &t.dev;
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(32, None).unwrap();
    let (a, b) = (rc_qp(&pd, &cq, &cq), rc_qp(&pd, &cq, &cq));
    let gid = dev.query_gid(1, 0).unwrap();
    for (me, peer, (rq_psn, sq_psn)) in [(&a, &b, (0x111, 0x222)), (&b, &a, (0x222, 0x111))] {
        me.modify_to_init(1, access::LOCAL_WRITE).unwrap();
        let grh = GlobalRoute { dgid: gid, sgid_index: 0, hop_limit: 9, traffic_class: 0, flow_label: 0 };
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Mtu::MTU_512,
            dest_qp_num: peer.qpn(),
            rq_psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 14,
            ah_attr: AhAttr { grh, is_global: true, port_num: 1, ..Default::default() },
            ..Default::default()
        };
        let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        me.modify_qp(&rtr, m).unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn,
            timeout: 17,
            retry_cnt: 5,
            rnr_retry: 6,
            max_rd_atomic: 1,
            ..Default::default()
        };
        me.modify_qp(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC)
            .unwrap();
    }
    let q = a.query_qp(M::ALL).unwrap();
    let side = t.side;
    assert_eq!((q.qp_state, q.dest_qp_num), (QpState::Rts, b.qpn()), "{side:?}");
    assert_eq!((q.rq_psn, q.sq_psn), (0x111, 0x222), "{side:?}: PSNs read back");
    if side.differs(Difference::QueryQpLayout) {
        // QEMU's backend chose the MTU itself (its port's); it reads back as a valid code.
        assert!(q.path_mtu.bytes().is_some(), "{side:?}: {q:?}");
    } else {
        assert_eq!(q.path_mtu, Mtu::MTU_512, "{side:?}");
        assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry, q.min_rnr_timer), (17, 5, 6, 14), "{side:?}");
        assert_eq!((q.ah_attr.grh.hop_limit, q.ah_attr.grh.dgid), (9, gid), "{side:?}");
    }
    // The data path works with these attributes.
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let sge = |off: u64| [ib_core::Sge { addr: mr.addr() + off, length: 8, lkey: mr.lkey() }];
    b.post_recv(&ib_core::RecvWr { wr_id: 70, sg_list: &sge(0) }).unwrap();
    let out = sge(64);
    let send =
        |id| ib_core::SendWr { wr_id: id, sg_list: &out, opcode: WrOpcode::Send, signaled: true, solicited: false };
    a.post_send(&send(71)).unwrap();
    t.poll_n(&cq, 2);
    // ERR: the device flushes what is posted, work requests included that come after.
    b.post_recv(&ib_core::RecvWr { wr_id: 72, sg_list: &sge(0) }).unwrap();
    b.modify_to_err().unwrap();
    if side.differs(Difference::ErrStateNotPassedOn) {
        assert_eq!(b.state(), Ok(QpState::Rts), "{side:?}: QEMU's backend QP never left RTS");
        return;
    }
    assert_eq!(b.state(), Ok(QpState::Err), "{side:?}: QUERY_QP");
    b.post_recv(&ib_core::RecvWr { wr_id: 73, sg_list: &sge(0) }).unwrap();
    b.post_send(&send(74)).unwrap();
    let mut got: Vec<(u64, WcStatus)> = t.poll_n(&cq, 3).iter().map(|w| (w.wr_id, w.status)).collect();
    got.sort_by_key(|g| g.0);
    let flushed = WcStatus::WrFlushErr;
    assert_eq!(got, [(72, flushed), (73, flushed), (74, flushed)], "{side:?}");
    assert_eq!(a.state(), Ok(QpState::Rts), "{side:?}");
}

/// A command whose DMA address is outside guest memory: the device refuses it (one command
/// interrupt, `REG_ERR` and the response's `err` set), stays usable, and the next commands succeed.
/// Returns the statuses of the refused CREATE_CQ and CREATE_MR.
pub fn bad_dma_address(t: &Target) -> (firmware_cmd::DeviceStatus, firmware_cmd::DeviceStatus) {
    use pvrdma_abi::cmd::{CreateCq, CreateMr};
    let dev = &t.dev;
    let status = |e: Error| {
        hca::device_status(&e).unwrap_or_else(|| panic!("{:?}: expected a device refusal, got {e:?}", t.side))
    };
    // Far above any guest RAM these targets have (the model's 1 GiB, QEMU's 128 MiB).
    let bad = 0xdead_b000u64 << 4;
    let irq0 = stats(dev).interrupts[0];
    let cq = CreateCq { pdir_dma: bad.into(), cqe: 16.into(), nchunks: 2.into(), ..Default::default() };
    let cq_status = status(pv(dev).post_command(cq).unwrap_err());
    assert_ne!(t.platform.reg_read(pvrdma_abi::regs::REG_ERR), 0, "{:?}: REG_ERR", t.side);
    let pd = dev.alloc_pd().unwrap();
    let mr = CreateMr {
        start: bad.into(),
        length: 4096u64.into(),
        pdir_dma: (bad + 0x1000).into(),
        pd_handle: pd.handle().into(),
        nchunks: 1.into(),
        ..Default::default()
    };
    let mr_status = status(pv(dev).post_command(mr).unwrap_err());
    // QEMU 7.2 answers EINVAL when it cannot map a page; so does the model.
    let einval = firmware_cmd::DeviceStatus::InvalidArgument;
    assert_eq!((cq_status, mr_status), (einval, einval), "{:?}", t.side);
    // Three commands, one of them good: three interrupts, failures included.
    assert_eq!(stats(dev).interrupts[0] - irq0, 3, "{:?}", t.side);
    assert!(!dev.is_fatal());
    let cq = dev.create_cq(8, None).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    t.one_message(&p, &cq, 1, false);
    (cq_status, mr_status)
}
