//! What becomes of an SRQ's WQEs the device consumes without completing, or that a QP's RESET
//! leaves behind: the driver's record retires them, so the SRQ never fills for good and no WQE
//! is lost. (Each test is a bug found under attack in issue 13 and kept so it stays fixed.)

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

/// Sends `len` bytes from `mr` on `q` and waits for its completion on `cq`.
fn send_len(q: &Qp, cq: &Cq, mr: &Mr, len: u32) {
    let sge = [Sge { addr: mr.addr(), length: len, lkey: mr.lkey() }];
    let wr =
        ib_core::SendWr { wr_id: 9, sg_list: &sge, opcode: ib_core::WrOpcode::Send, signaled: true, solicited: false };
    q.post_send(&wr).expect("post_send");
    assert_eq!(poll_n(cq, 1)[0].status, WcStatus::Success);
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
