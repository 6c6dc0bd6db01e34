//! Issue 13 under attack: a hostile RoCE peer, hostile consumers and races against SRQs, UD,
//! atomics and RESIZE_CQ, through the verbs core, the pvrdma provider and the model. Each test
//! is a bug once found here, kept so it stays fixed.

use ib_core::{
    access, Cq, Error, Mr, Pd, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr, Sge, Srq, SrqAttr,
    SrqInitAttr, WcStatus,
};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::SimConfig;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use tests::fixture::{connect_roce, poll_n};

/// A fake RoCE peer: its socket (UDP 4791 of an address of its own) and the device's address.
struct Peer {
    sock: UdpSocket,
    to: SocketAddr,
}

impl Peer {
    fn new(dev_ip: IpAddr) -> Self {
        let sock = tests::fixture::peer_socket();
        Peer { sock, to: SocketAddr::new(dev_ip, pvrdma_sim::roce::ROCE_V2_UDP_PORT) }
    }

    fn ip(&self) -> IpAddr {
        self.sock.local_addr().expect("the peer's address").ip()
    }

    /// Sends one RC packet (`opcode`, `psn`) to QP `dest_qp` carrying `payload`.
    fn rc(&self, opcode: u8, dest_qp: u32, psn: u32, payload: &[u8]) {
        let bth = roce_wire::Bth { opcode, pkey: 0xffff, dest_qp, psn, ack_req: true, ..Default::default() };
        self.send(&roce_wire::Headers { bth, ..Default::default() }, payload);
    }

    /// Sends the packet `hdr` carrying `payload`.
    fn send(&self, hdr: &roce_wire::Headers, payload: &[u8]) {
        let mut out = Vec::new();
        let ip = roce_wire::IpContext::new(self.sock.local_addr().unwrap(), self.to);
        roce_wire::encode(hdr, payload, &ip, &mut out).expect("encode");
        self.sock.send_to(&out, self.to).expect("send");
    }
}

/// As `fixture::connect_roce`, with a local ACK timeout of seconds (IBTA 4.096 us * 2^20): the
/// forged answers come long before a retry gives up.
fn connect_slow(q: &Qp, remote: u32, dgid: [u8; 16], sgid_index: u8) {
    tests::fixture::connect_roce_with(q, remote, dgid, sgid_index, access::LOCAL_WRITE, 20);
}

/// A model on a RoCE address of its own, and that address.
fn roce_device() -> (ib_core::Device, hca::platform::sim::SimPlatform, IpAddr) {
    let (dev, sim) = tests::fixture::open_roce(RoceConfig::new(vec![]), SimConfig::default());
    let ip = tests::fixture::roce_addr(&sim);
    (dev, sim, ip)
}

fn srq_qp(pd: &Pd, cq: &Cq, srq: &Srq) -> Qp {
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 0, max_send_sge: 1, max_recv_sge: 0, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: Some(srq),
    };
    pd.create_qp(&attr).expect("create_qp on an SRQ")
}

fn post(srq: &Srq, mr: &Mr, wr_id: u64) -> ib_core::Result<()> {
    let sge = [Sge { addr: mr.addr(), length: 4096, lkey: mr.lkey() }];
    srq.post_recv(&RecvWr { wr_id, sg_list: &sge })
}

/// A device that consumes an SRQ WQE and never completes it (here: the test moves the SRQ's
/// `cons_head` past one WQE, as a device that lost it would) must not fill the SRQ for good.
/// Before the fix the one WQE owed forever at the head of the driver's record stopped every
/// later retired entry from leaving it, and after twice the SRQ's depth in posts
/// `ibv_post_srq_recv` answered ENOMEM for good while the ring was empty.
#[test]
fn a_wqe_the_device_never_completes_does_not_fill_the_srq_for_good() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).expect("probe");
    let gid = tests::fixture::gid(&dev);
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let srq =
        pd.create_srq(&SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 }).unwrap();
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let b = srq_qp(&pd, &rcq, &srq);
    let sb = tests::fixture::rc_qp(&pd, &scq, &scq);
    tests::fixture::connect(&b, sb.qpn(), gid);
    tests::fixture::connect(&sb, b.qpn(), gid);
    for w in 0..4 {
        post(&srq, &mr, w).unwrap();
    }
    let page = srq.provider_srq::<hca::srq::Srq>().expect("a pvrdma SRQ").record_page();
    sim.device().mem().store_u32(page.addr() + pvrdma_abi::ring::RX_CONS_HEAD, 1).unwrap();
    post(&srq, &mr, 100).unwrap();
    // The ring stays full (four posted, one more than the device left): each SEND takes one
    // and the consumer posts one back.
    for k in 1..=40u32 {
        send_len(&sb, &scq, &mr, 8);
        let w = poll_n(&rcq, 1)[0];
        assert_eq!((w.status, w.qp_num), (WcStatus::Success, b.qpn()), "receive {k}");
        let r = post(&srq, &mr, 100 + u64::from(k));
        assert!(r.is_ok(), "repost {k} into the slot the receive freed: {r:?}");
    }
    assert!(matches!(post(&srq, &mr, 1000), Err(Error::QueueFull)), "the ring is full");
}

/// A response of the wrong kind to a pending atomic (an RDMA READ response at the atomic's PSN,
/// forged by the peer) is dropped and counted as malformed; the atomic then completes from its
/// ATOMIC Acknowledge. Before the fix the READ response was dropped without being counted.
#[test]
fn a_read_response_to_an_atomic_is_dropped_and_counted() {
    use roce_wire::opcode as op;
    let (dev, sim, ip) = roce_device();
    let peer = Peer::new(ip);
    let peer_ip = peer.ip();
    let sgid = (0..16u32).find(|&i| dev.query_gid(1, i).is_ok_and(|g| g == ib_core::gid_from_ip(ip))).unwrap() as u8;
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let qp = tests::fixture::rc_qp(&pd, &cq, &cq);
    connect_slow(&qp, 0x99, ib_core::gid_from_ip(peer_ip), sgid);
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    let opcode = ib_core::WrOpcode::AtomicFetchAdd { remote_addr: 0x1000, rkey: 7, add: 1 };
    qp.post_send(&ib_core::SendWr { wr_id: 5, sg_list: &sge, opcode, signaled: true, solicited: false }).unwrap();
    let mut req = [0u8; 256];
    peer.sock.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let (n, _) = peer.sock.recv_from(&mut req).expect("the atomic request");
    let psn = u32::from_be_bytes([0, req[9], req[10], req[11]]);
    assert_eq!(req[0], op::RC_FETCH_ADD, "{:02x?}", &req[..n]);
    let stats = || sim.device().stats();
    let before = stats().roce_rx_dropped_malformed;
    let bth = |opcode| roce_wire::Bth { opcode, pkey: 0xffff, dest_qp: qp.qpn(), psn, ..Default::default() };
    let aeth = Some(roce_wire::Aeth::ack(1, 0));
    peer.send(&roce_wire::Headers { bth: bth(op::RC_RDMA_READ_RESPONSE_ONLY), aeth, ..Default::default() }, &[0xee; 8]);
    let counted =
        ib_core::time::poll_until(std::time::Duration::from_secs(5), || stats().roce_rx_dropped_malformed > before);
    assert!(counted, "the READ response to an atomic is counted: {:?}", stats());
    let ack =
        roce_wire::Headers { bth: bth(op::RC_ATOMIC_ACKNOWLEDGE), aeth, atomic_ack: Some(41), ..Default::default() };
    peer.send(&ack, &[]);
    let w = poll_n(&cq, 1)[0];
    assert_eq!((w.wr_id, w.status), (5, WcStatus::Success));
    let mut orig = [0u8; 8];
    mr.read(0, &mut orig).unwrap();
    assert_eq!(u64::from_le_bytes(orig), 41);
}

/// Sends `len` bytes from `mr` on `q` and waits for its completion on `cq`.
fn send_len(q: &Qp, cq: &Cq, mr: &Mr, len: u32) {
    let sge = [Sge { addr: mr.addr(), length: len, lkey: mr.lkey() }];
    let wr =
        ib_core::SendWr { wr_id: 9, sg_list: &sge, opcode: ib_core::WrOpcode::Send, signaled: true, solicited: false };
    q.post_send(&wr).expect("post_send");
    assert_eq!(poll_n(cq, 1)[0].status, WcStatus::Success);
}

/// A QP of an SRQ completes a receive whose CQE is still queued when the QP is reset: the
/// driver removes that CQE (nothing posted before a reset comes back), and must retire the SRQ
/// WQE it completed. Before the fix the WQE stayed owed, and the next WQE posted with the same
/// `wr_id` (a buffer index, as consumers use it) had its successful completion matched to the
/// old, shorter WQE and reported as a local length error.
#[test]
fn an_srq_cqe_removed_by_a_reset_retires_its_wqe() {
    let dev = tests::fixture::open();
    let gid = tests::fixture::gid(&dev);
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let srq =
        pd.create_srq(&SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 }).unwrap();
    let (a, b) = (srq_qp(&pd, &rcq, &srq), srq_qp(&pd, &rcq, &srq));
    let (sa, sb) = (tests::fixture::rc_qp(&pd, &scq, &scq), tests::fixture::rc_qp(&pd, &scq, &scq));
    for (x, y) in [(&a, &sa), (&b, &sb)] {
        tests::fixture::connect(x, y.qpn(), gid);
        tests::fixture::connect(y, x.qpn(), gid);
    }
    let (smr, rmr) = (pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap(), pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap());
    let recv = |len: u32| {
        let sge = [Sge { addr: rmr.addr(), length: len, lkey: rmr.lkey() }];
        srq.post_recv(&RecvWr { wr_id: 7, sg_list: &sge }).expect("post_srq_recv");
    };
    recv(16);
    send_len(&sa, &scq, &smr, 16);
    // A's receive completed into `rcq`; reset A before polling it.
    a.modify_qp(&QpAttr { qp_state: QpState::Reset, ..Default::default() }, QpAttrMask::STATE).unwrap();
    recv(64);
    send_len(&sb, &scq, &smr, 64);
    let w = poll_n(&rcq, 1)[0];
    assert_eq!((w.qp_num, w.wr_id, w.status, w.byte_len), (b.qpn(), 7, WcStatus::Success, 64));
}

/// A QP of an SRQ holding a WQE for a message in progress (its first packet came) is reset: the
/// device completes that WQE with WR_FLUSH_ERR, which the driver's reset removes from the CQ
/// while retiring the WQE. Before the fix the device dropped it without a completion, the
/// driver kept it owed, and the next WQE posted with its `wr_id` had its successful, longer
/// completion matched to the lost WQE and reported as a local length error.
#[test]
fn a_held_srq_wqe_of_a_reset_qp_is_retired_not_lost() {
    use roce_wire::opcode as op;
    let (dev, _sim, ip) = roce_device();
    let peer = Peer::new(ip);
    let peer_ip = peer.ip();
    let sgid = (0..16u32).find(|&i| dev.query_gid(1, i).is_ok_and(|g| g == ib_core::gid_from_ip(ip))).unwrap() as u8;
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let srq =
        pd.create_srq(&SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 }).unwrap();
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let (a, b) = (srq_qp(&pd, &cq, &srq), srq_qp(&pd, &cq, &srq));
    for q in [&a, &b] {
        connect_roce(q, 0x99, ib_core::gid_from_ip(peer_ip), sgid);
    }
    let recv = |wr_id: u64, len: u32| {
        let sge = [Sge { addr: mr.addr(), length: len, lkey: mr.lkey() }];
        srq.post_recv(&RecvWr { wr_id, sg_list: &sge }).expect("post_srq_recv");
    };
    recv(7, 1024);
    recv(8, 4096);
    peer.rc(op::RC_SEND_FIRST, a.qpn(), 0, &[1; 1024]);
    peer.rc(op::RC_SEND_ONLY, b.qpn(), 0, b"b");
    let w = poll_n(&cq, 1)[0];
    assert_eq!((w.qp_num, w.wr_id, w.status), (b.qpn(), 8, WcStatus::Success), "A took 7, B 8");
    a.modify_qp(&QpAttr { qp_state: QpState::Reset, ..Default::default() }, QpAttrMask::STATE).unwrap();
    recv(7, 4096);
    peer.rc(op::RC_SEND_FIRST, b.qpn(), 1, &[2; 1024]);
    peer.rc(op::RC_SEND_LAST, b.qpn(), 2, &[3; 100]);
    let w = poll_n(&cq, 1)[0];
    assert_eq!((w.qp_num, w.wr_id, w.status, w.byte_len), (b.qpn(), 7, WcStatus::Success, 1124));
}

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

/// A device that refuses every DESTROY_QP (the request's handle is rewritten to one it does not
/// know, so the QP stays on the device, attached to its SRQ).
struct RefuseDestroyQp;

use hca::platform::Platform as _;

impl tests::intercept::Hooks for RefuseDestroyQp {
    fn reg_write(&self, sim: &hca::platform::sim::SimPlatform, offset: u32, value: u32) {
        if offset == pvrdma_abi::regs::REG_REQUEST {
            let d = sim.device();
            let req = tests::rewrite::dsr(d).cmd_slot_dma.get();
            if d.mem().load_u32(req + 8).unwrap_or(0) == pvrdma_abi::cmd::opcode::DESTROY_QP {
                d.mem().store_u32(req + 16, 0x00ff_fff0).unwrap();
            }
        }
        sim.reg_write(offset, value);
    }
}

/// DESTROY_SRQ refused (EBUSY: a QP whose DESTROY_QP the device refused still uses the SRQ)
/// when the driver drops its SRQ: the device keeps the SRQ and may still take WQEs from its
/// ring and write its consumer index there, so the ring must stay allocated (abandoned), never
/// go back to the allocator for another object to meet those writes. Before the fix it was
/// freed.
#[test]
fn a_refused_destroy_srq_abandons_the_ring_instead_of_freeing_it() {
    let plat = std::sync::Arc::new(tests::intercept::Intercept {
        sim: hca::platform::sim::SimPlatform::new(SimConfig::default()),
        hooks: RefuseDestroyQp,
    });
    let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
    let dev = hca::probe(plat.clone(), opts).expect("probe");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let srq =
        pd.create_srq(&SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 }).unwrap();
    let qp = srq_qp(&pd, &cq, &srq);
    let page = srq.provider_srq::<hca::srq::Srq>().expect("a pvrdma SRQ").record_page();
    let mem = plat.sim.device().mem();
    drop(qp);
    drop(srq);
    assert_eq!(plat.sim.device().live_objects().srqs, 1, "the device kept the SRQ");
    assert!(mem.contains(page.addr(), 4096), "the ring the device may still write stays allocated");
}

/// Refuses DESTROY_QP and DESTROY_CQ (their handle, at offset 16 of both, is rewritten to one
/// that names nothing).
struct RefuseDestroyQpAndCq;

impl tests::intercept::Hooks for RefuseDestroyQpAndCq {
    fn reg_write(&self, sim: &hca::platform::sim::SimPlatform, offset: u32, value: u32) {
        use pvrdma_abi::cmd::opcode::{DESTROY_CQ, DESTROY_QP};
        if offset == pvrdma_abi::regs::REG_REQUEST {
            let d = sim.device();
            let req = tests::rewrite::dsr(d).cmd_slot_dma.get();
            if matches!(d.mem().load_u32(req + 8).unwrap_or(0), DESTROY_QP | DESTROY_CQ) {
                d.mem().store_u32(req + 16, 0x00ff_fff0).unwrap();
            }
        }
        sim.reg_write(offset, value);
    }
}

/// As for an SRQ: a QP or CQ whose DESTROY the device refused is still the device's, which may
/// read its WQEs and write its CQEs and ring state, so its rings stay allocated (abandoned).
/// Before the fix both were freed.
#[test]
fn refused_destroy_qp_and_cq_abandon_their_rings_instead_of_freeing_them() {
    let plat = std::sync::Arc::new(tests::intercept::Intercept {
        sim: hca::platform::sim::SimPlatform::new(SimConfig::default()),
        hooks: RefuseDestroyQpAndCq,
    });
    let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
    let dev = hca::probe(plat.clone(), opts).expect("probe");
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
    let qp = pd.create_qp(&attr).expect("create_qp");
    let qp_page = qp.provider_qp::<hca::qp::Qp>().expect("a pvrdma QP").record_page();
    let cq_page = cq.provider_cq::<hca::cq::Cq>().expect("a pvrdma CQ").record_page();
    let mem = plat.sim.device().mem();
    drop(qp);
    drop(cq);
    let live = plat.sim.device().live_objects();
    assert_eq!((live.qps, live.cqs), (1, 1), "the device kept both");
    assert!(mem.contains(qp_page.addr(), 4096), "the QP's rings the device may still use stay allocated");
    assert!(mem.contains(cq_page.addr(), 4096), "the CQ's ring the device may still write stays allocated");
}

/// A CREATE_CQ / CREATE_QP / CREATE_SRQ answered with a handle beyond 24 bits is refused and the
/// driver sends DESTROY for that handle, which names nothing: the device keeps the object it
/// made, and with it the ring, which it may still write (a CQ's CQEs and ring state, an SRQ's or
/// a QP's consumer index). So the ring stays allocated (abandoned), as after a refused DESTROY at
/// drop. Before the fix each create freed its ring.
#[test]
fn a_create_answered_beyond_24_bits_whose_destroy_is_refused_abandons_the_ring() {
    use pvrdma_abi::cmd::opcode;
    use tests::rewrite::Rewrite;
    for op in [opcode::CREATE_CQ, opcode::CREATE_QP, opcode::CREATE_SRQ] {
        let plat = std::sync::Arc::new(Rewrite::new(op, 16, move |h| h | 1 << 24));
        let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
        let dev = hca::probe(plat.clone(), opts).expect("probe");
        let pd = dev.alloc_pd().unwrap();
        let cq = (op != opcode::CREATE_CQ).then(|| dev.create_cq(16, None).unwrap());
        let mem = plat.sim.device().mem();
        let regions = mem.regions();
        let refused = match (op, &cq) {
            (opcode::CREATE_QP, Some(cq)) => {
                let cap =
                    QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
                let attr = QpInitAttr {
                    send_cq: cq,
                    recv_cq: cq,
                    cap,
                    qp_type: QpType::Rc,
                    sq_sig_all: false,
                    qp_context: 0,
                    srq: None,
                };
                pd.create_qp(&attr).err()
            }
            (opcode::CREATE_SRQ, _) => {
                let attr = SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 };
                pd.create_srq(&attr).err()
            }
            _ => dev.create_cq(16, None).err(),
        };
        assert!(matches!(refused, Some(Error::BadResponse(_))), "opcode {op}: {refused:?}");
        let live = plat.sim.device().live_objects();
        assert_eq!(live.cqs + live.qps + live.srqs, 1 + usize::from(cq.is_some()), "opcode {op}: the device kept it");
        assert!(mem.regions() > regions, "opcode {op}: the ring the device may still write stays allocated");
    }
}
