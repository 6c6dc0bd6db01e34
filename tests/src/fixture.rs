//! Shared set-up for the end-to-end tests against the in-process model: open a device, connect
//! two RC QPs, post and poll with bounded waits, and reach the pvrdma provider behind a device.

use doorbell::{ArmEncoding, CqHandle, DoorbellOp, Doorbells, Owner, UarPage};
use hca::{DriverStats, Pvrdma, Ucontext};
use ib_core::{
    access, AsyncEvent, AsyncEventType, CompChannel, Context, Cq, Device, Mr, Pd, Qp, QpCap, QpInitAttr, QpType,
    RecvWr, SendWr, Sge, Wc, WrOpcode,
};
use std::time::{Duration, Instant};

/// Bound on anything the model should do at once.
pub const WAIT: Duration = Duration::from_secs(5);
/// Longer than the driver's ring-service interval: after this, an event that was going to be
/// delivered has been.
pub const SETTLE: Duration = Duration::from_millis(200);

/// Opens a model with the default (IBTA) profile.
pub fn open() -> Device {
    open_with(pvrdma_sim::SimConfig::default())
}

/// Opens a model configured by `cfg`.
pub fn open_with(cfg: pvrdma_sim::SimConfig) -> Device {
    let (dev, _sim) = hca::open_sim(cfg).expect("probe of the model");
    dev
}

/// Opens a model whose RoCE port is `roce` on a 127/8 address of its own (UDP 4791), the rest of
/// its configuration from `cfg`: fresh addresses are tried until the port binds one, and the
/// port holds it (`netlease`: never an address another test, or another run, holds).
pub fn open_roce(
    roce: pvrdma_sim::roce::RoceConfig,
    cfg: pvrdma_sim::SimConfig,
) -> (Device, hca::platform::sim::SimPlatform) {
    netlease::v4("the model's RoCE address", |a| {
        let roce = pvrdma_sim::roce::RoceConfig { addrs: vec![a.into()], ..roce.clone() };
        netlease::Attempt::of(hca::open_sim(pvrdma_sim::SimConfig { roce: Some(roce), ..cfg.clone() }))
    })
}

/// The first address of the RoCE port of the model behind `sim`.
pub fn roce_addr(sim: &hca::platform::sim::SimPlatform) -> std::net::IpAddr {
    sim.device().config().roce.as_ref().expect("a RoCE port").addrs[0]
}

/// A UDP socket at 4791 of a 127/8 address of its own: a fake RoCE peer the test drives.
pub fn peer_socket() -> std::net::UdpSocket {
    netlease::udp_v4(pvrdma_sim::roce::ROCE_V2_UDP_PORT)
}

/// The pvrdma provider's device behind `dev`.
pub fn pv(dev: &Device) -> &Pvrdma {
    hca::pvrdma(dev).expect("a pvrdma device")
}

/// The driver's counters of `dev`.
pub fn stats(dev: &Device) -> DriverStats {
    pv(dev).stats()
}

/// The typed doorbells of a user context's mapping of its own UAR page.
pub fn doorbells(ctx: &Context) -> &Doorbells {
    ctx.provider_context::<Ucontext>().expect("a pvrdma user context").doorbells()
}

/// A user context's UAR page.
pub fn uar_page(ctx: &Context) -> UarPage {
    ctx.provider_context::<Ucontext>().expect("a pvrdma user context").uar_page()
}

/// The owner tag of a user context's objects.
pub fn uar_owner(ctx: &Context) -> Owner {
    ctx.provider_context::<Ucontext>().expect("a pvrdma user context").owner()
}

/// The typed doorbell handle of a CQ.
pub fn cq_handle(cq: &Cq) -> CqHandle {
    cq.provider_cq::<hca::cq::Cq>().expect("a pvrdma CQ").doorbell_handle()
}

/// Writes the doorbell `op` of object `handle` on UAR `page`, encoded as `enc`, straight to BAR2:
/// what a hostile or foreign user would write, bypassing the driver's ownership check (for
/// tests of the device's own checks and of its arm encoding).
pub fn raw_doorbell(dev: &Device, page: UarPage, op: DoorbellOp, handle: u32, enc: ArmEncoding) {
    let w = op.encode(handle, enc).expect("an operation the encoding expresses");
    pv(dev).raw_uar_write(page.bar_offset() + u64::from(w.offset), w.value);
}

/// What an async event says, as a value to compare: its type and the CQ, QP or SRQ handle, or
/// the port, it names (`None` for a device event).
pub fn ev(e: &AsyncEvent) -> (AsyncEventType, Option<u32>) {
    let cq = e.cq().map(|c| c.handle());
    let what = cq.or_else(|| e.qp().map(|q| q.qp_num())).or_else(|| e.srq().map(|s| s.handle()));
    let what = what.or_else(|| e.port().map(u32::from));
    (e.event_type, what)
}

/// The GID bound at index 0 of port 1.
pub fn gid(dev: &Device) -> [u8; 16] {
    dev.query_gid(1, 0).expect("GID 0")
}

/// Polls `cq` until `n` completions arrived or [`WAIT`] passed.
pub fn poll_n(cq: &Cq, n: usize) -> Vec<Wc> {
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    let mut buf = [Wc::default(); 16];
    while out.len() < n && Instant::now() < deadline {
        let k = cq.poll(&mut buf).expect("poll");
        out.extend_from_slice(&buf[..k]);
        if k == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert_eq!(out.len(), n, "completions on CQ {}", cq.handle());
    out
}

/// Two connected RC QPs (loopback through the device's one port), each with its own MR.
pub struct Pair {
    pub a: Qp,
    pub b: Qp,
    pub mr_a: Mr,
    pub mr_b: Mr,
}

/// QP sizes used by the tests.
pub fn cap() -> QpCap {
    QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 }
}

/// Creates an RC QP on `pd` over the given CQs.
pub fn rc_qp(pd: &Pd, scq: &Cq, rcq: &Cq) -> Qp {
    let attr = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        cap: cap(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    pd.create_qp(&attr).expect("create_qp")
}

/// Brings `q` to RTS towards `remote`.
pub fn connect(q: &Qp, remote: u32, gid: [u8; 16]) {
    q.modify_to_init(1, access::LOCAL_WRITE | access::REMOTE_WRITE).expect("INIT");
    q.modify_to_rtr(remote, gid, 0, 1024).expect("RTR");
    q.modify_to_rts(0).expect("RTS");
}

/// [`connect`], but a request nobody answers fails after one local ACK timeout of 10 ms
/// (`timeout` 1, the model's floor; `retry_cnt` 0), for tests whose peers go away under traffic
/// (a requester waits its retries out before `RETRY_EXC_ERR`, on either port: issue 21 §3).
pub fn connect_impatient(q: &Qp, remote: u32, gid: [u8; 16]) {
    use ib_core::{QpAttr, QpAttrMask as M, QpState};
    q.modify_to_init(1, access::LOCAL_WRITE | access::REMOTE_WRITE).expect("INIT");
    q.modify_to_rtr(remote, gid, 0, 1024).expect("RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 1,
        retry_cnt: 0,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    q.modify_qp(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC)
        .expect("RTS");
}

/// Brings `q` to RTS towards `remote` at `dgid` through the GID at `sgid_index` (on the model's
/// RoCE port: a RoCE v2 GID, index 1 for its first address), MTU 1024, PSNs from 0, the retry
/// counts and ACK timeout `ibv_rc_pingpong` uses but a 4 ms timeout (10: floored to 10 ms by the
/// model), with local write and remote write/read access.
pub fn connect_roce(q: &Qp, remote: u32, dgid: [u8; 16], sgid_index: u8) {
    let rw = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    connect_roce_with(q, remote, dgid, sgid_index, rw, 10);
}

/// [`connect_roce`] with the QP's remote `access` flags and local ACK `timeout` (IBTA
/// 9.7.6.1.3: 4.096 µs × 2^timeout) given.
pub fn connect_roce_with(q: &Qp, remote: u32, dgid: [u8; 16], sgid_index: u8, access: u32, timeout: u8) {
    use ib_core::{AhAttr, GlobalRoute, Mtu, QpAttr, QpAttrMask as M, QpState};
    q.modify_to_init(1, access).expect("INIT");
    let grh = GlobalRoute { dgid, sgid_index, hop_limit: 64, ..Default::default() };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::from_bytes(1024).expect("an IB MTU"),
        dest_qp_num: remote,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AhAttr { grh, is_global: true, port_num: 1, ..Default::default() },
        ..Default::default()
    };
    let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    q.modify_qp(&rtr, m).expect("RTR");
    let rts =
        QpAttr { qp_state: QpState::Rts, timeout, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1, ..Default::default() };
    q.modify_qp(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC)
        .expect("RTS");
}

/// Two QPs connected to each other: `a` completes into `scq_a`/`rcq_a`, `b` into `scq_b`/`rcq_b`.
pub fn pair(dev: &Device, pd: &Pd, a_cqs: (&Cq, &Cq), b_cqs: (&Cq, &Cq)) -> Pair {
    let a = rc_qp(pd, a_cqs.0, a_cqs.1);
    let b = rc_qp(pd, b_cqs.0, b_cqs.1);
    let gid = gid(dev);
    connect(&a, b.qpn(), gid);
    connect(&b, a.qpn(), gid);
    let mr_a = pd.alloc_mr(8192, access::LOCAL_WRITE).expect("alloc_mr");
    let mr_b = pd.alloc_mr(8192, access::LOCAL_WRITE).expect("alloc_mr");
    Pair { a, b, mr_a, mr_b }
}

impl Pair {
    /// Posts a receive of `len` bytes at `off` of `mr_b` on `b`.
    pub fn recv_b(&self, wr_id: u64, off: u64, len: u32) {
        let sge = [Sge { addr: self.mr_b.addr() + off, length: len, lkey: self.mr_b.lkey() }];
        self.b.post_recv(&RecvWr { wr_id, sg_list: &sge }).expect("post_recv");
    }

    /// Sends `data` (written at `off` of `mr_a`) from `a`.
    pub fn send_a(&self, wr_id: u64, off: usize, data: &[u8], opcode: WrOpcode, solicited: bool) {
        self.mr_a.write(off, data).expect("mr write");
        let sge = [Sge { addr: self.mr_a.addr() + off as u64, length: data.len() as u32, lkey: self.mr_a.lkey() }];
        let wr = SendWr { wr_id, sg_list: &sge, opcode, signaled: true, solicited };
        self.a.post_send(&wr).expect("post_send");
    }
}

/// Waits [`SETTLE`] and asserts `ch` has no event.
pub fn assert_no_event(ch: &CompChannel) {
    std::thread::sleep(SETTLE);
    assert_eq!(ch.try_get_cq_event(), None, "unexpected completion event");
}
