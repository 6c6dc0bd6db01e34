//! The RoCE v2 port through the mini-driver: devices on loopback addresses of their own (each
//! device's port tries fresh 127/8 addresses until it binds one, and holds it: `netlease`, so
//! parallel tests and concurrent runs never share a UDP socket) or, for IPv6, in a network
//! namespace of the test's own.

mod atomic;
mod errors;
mod faults;
mod forged;
mod lifecycle;
mod many;
mod rdma;
mod send;
mod untrusted_peer;
mod wire;

use crate::roce::path::ip_gid;
use crate::roce::{LinkFaults, RoceConfig};
use crate::testutil::minidrv::*;
use crate::{SimConfig, SimDevice};
use netlease::netns::Netns;
use pvrdma_abi::cmd::CreateBind;
use pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
use pvrdma_abi::uar::UAR_QP_SEND;
use pvrdma_abi::verbs::{access, qp_attr_mask as m, qp_state, send_flags, QpAttr};
use pvrdma_abi::wqe::{wr_opcode, Cqe};
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};
use zerocopy::little_endian::U32;
use zerocopy::FromZeros;

/// The GID index the tests bind the port's address at (index 0 is the RoCE v1 link-local GID).
pub const SGID: u32 = 1;
/// Bytes of each end's send and receive MRs.
pub const MR_LEN: u64 = 256 << 10;
/// The longest any test waits for one thing.
pub const LONG: Duration = Duration::from_secs(30);

/// The first address of `d`'s RoCE port (GID [`SGID`]).
pub fn ip(d: &Drv) -> IpAddr {
    d.dev.config().roce.as_ref().expect("a RoCE port").addrs[0]
}

/// A device whose RoCE port (UDP 4791) holds a 127/8 address of its own, with GID 0 (RoCE v1)
/// and GID [`SGID`] = that address (RoCE v2) bound.
pub fn device(faults: LinkFaults) -> Drv {
    device_with(faults, SimConfig::default())
}

/// [`device`] with the rest of the model's configuration from `base`.
pub fn device_with(faults: LinkFaults, base: SimConfig) -> Drv {
    device_from(RoceConfig { faults, ..RoceConfig::new(vec![]) }, base)
}

/// A device whose RoCE port is `roce` on a 127/8 address of its own: fresh addresses are tried
/// until the port binds one (another test or run holding it is skipped), and the port holds it.
/// The address is bound as GID [`SGID`], RoCE v2, after GID 0, RoCE v1; the rest of the model's
/// configuration comes from `base`.
pub fn device_from(roce: RoceConfig, base: SimConfig) -> Drv {
    let dev = netlease::v4("the RoCE port's address", |a| {
        let roce = RoceConfig { addrs: vec![IpAddr::V4(a)], ..roce.clone() };
        netlease::Attempt::of(SimDevice::try_new(SimConfig { roce: Some(roce), ..base.clone() }))
    });
    ready(Drv::new_on(dev))
}

/// A device whose RoCE port is `roce` at its own addresses (the first bound as GID [`SGID`]):
/// for addresses the test already held once, or those of its own network namespace.
pub fn device_at(roce: RoceConfig, base: SimConfig) -> Drv {
    let ip = roce.addrs[0];
    let dev = SimDevice::try_new(SimConfig { roce: Some(roce), ..base })
        .unwrap_or_else(|e| panic!("the RoCE port cannot open {ip}: {e}"));
    ready(Drv::new_on(dev))
}

/// A device for an IPv6 case ([`netlease::netns::own`]): in the test's own network namespace
/// at `::1`; over IPv4 instead, on a 127/8 address of its own.
pub fn device_for(net: Netns, roce: RoceConfig, base: SimConfig) -> Drv {
    match net {
        Netns::Own => {
            let addrs = vec![IpAddr::V6(netlease::netns::FIRST)];
            device_at(RoceConfig { addrs, ..roce }, base)
        }
        Netns::Host => device_from(roce, base),
    }
}

fn ready(mut d: Drv) -> Drv {
    let ip = ip(&d);
    d.bind_gid(0, GID0);
    bind_v2(&mut d, SGID, ip);
    d
}

/// A UDP socket at 4791 of a 127/8 address of its own: a fake peer the test drives, or (never
/// read) a destination no one answers from, which no other test or run can be meanwhile.
pub fn peer_socket() -> UdpSocket {
    netlease::udp_v4(crate::roce::ROCE_V2_UDP_PORT)
}

/// Binds `ip` as a RoCE v2 GID at `index`.
pub fn bind_v2(d: &mut Drv, index: u32, ip: IpAddr) {
    let (mtu, vlan) = (U32::new(1024), U32::new(0xfff));
    let gid_type = GID_TYPE_FLAG_ROCE_V2;
    d.ok(CreateBind { index: U32::new(index), new_gid: ip_gid(ip), gid_type, mtu, vlan, ..Default::default() });
}

/// One end of a connection: a QP with one CQ for both queues and its MRs.
pub struct End {
    pub pd: u32,
    pub qp: TestQp,
    pub cq: TestCq,
    pub src: TestMr,
    pub dst: TestMr,
}

/// A QP (depth `wr`) with a CQ of 4096 entries, a send MR and a receive MR of [`MR_LEN`].
pub fn end(d: &mut Drv, wr: u32) -> End {
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 4096);
    let qp = d.create_qp(pd, cq.handle, cq.handle, wr);
    let rw = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    let src = d.create_mr(pd, 0x7000_0000_0000, MR_LEN, rw);
    let dst = d.create_mr(pd, 0x7100_0000_0000, MR_LEN, rw);
    End { pd, qp, cq, src, dst }
}

/// The transport attributes of a connection.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    /// `path_mtu` code (3: 1024 bytes).
    pub mtu: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub sq_psn: u32,
    pub rq_psn: u32,
}

impl Default for Opts {
    fn default() -> Self {
        // PSNs near the 24-bit wrap, so the tests cross it.
        Self { mtu: 3, timeout: 1, retry_cnt: 7, rnr_retry: 7, min_rnr_timer: 1, sq_psn: 0xff_fff0, rq_psn: 0xff_fff0 }
    }
}

impl Opts {
    /// The defaults with a local ACK timeout of about a second (18: 4.096 us * 2^18), for tests
    /// that count the packets, ACKs or retransmissions of a lossless link: a loaded machine's
    /// scheduling (two test runs at once on two cores) must not make them time out and resend.
    pub fn steady() -> Self {
        Self { timeout: 18, ..Self::default() }
    }
}

/// Connects QPs `x` and `y` of one device to each other through `ip` (`y` with `o`'s PSNs
/// swapped).
pub fn connect_both(d: &mut Drv, x: u32, y: u32, ip: IpAddr, o: &Opts) {
    connect(d, x, y, ip, o);
    connect(d, y, x, ip, &Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..*o });
}

/// RESET -> INIT -> RTR -> RTS towards QP `dest` at `dest_ip`, from GID [`SGID`].
pub fn connect(d: &mut Drv, qp: u32, dest: u32, dest_ip: IpAddr, o: &Opts) {
    init(d, qp);
    rtr_rts(d, qp, dest, dest_ip, o);
}

/// RESET -> INIT, with remote write and read access.
pub fn init(d: &mut Drv, qp: u32) {
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::INIT);
    a.port_num = 1;
    a.qp_access_flags = U32::new(access::REMOTE_WRITE | access::REMOTE_READ);
    assert_eq!(d.modify(qp, m::STATE | m::PORT | m::PKEY_INDEX | m::ACCESS_FLAGS, a), 0);
}

/// INIT -> RTR -> RTS towards QP `dest` at `dest_ip`, from GID [`SGID`].
pub fn rtr_rts(d: &mut Drv, qp: u32, dest: u32, dest_ip: IpAddr, o: &Opts) {
    let mut a = QpAttr::new_zeroed();
    a.port_num = 1;
    a.qp_access_flags = U32::new(access::REMOTE_WRITE | access::REMOTE_READ);
    a.qp_state = U32::new(qp_state::RTR);
    a.dest_qp_num = U32::new(dest);
    a.path_mtu = U32::new(o.mtu);
    a.ah_attr.grh.dgid = ip_gid(dest_ip);
    a.ah_attr.grh.sgid_index = SGID as u8;
    a.ah_attr.ah_flags = pvrdma_abi::verbs::AH_GRH;
    a.ah_attr.port_num = 1;
    a.rq_psn = U32::new(o.rq_psn);
    a.min_rnr_timer = o.min_rnr_timer;
    let mask = m::STATE | m::AV | m::DEST_QPN | m::PATH_MTU | m::RQ_PSN | m::MIN_RNR_TIMER;
    assert_eq!(d.modify(qp, mask, a), 0);
    a.qp_state = U32::new(qp_state::RTS);
    a.sq_psn = U32::new(o.sq_psn);
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    let mask = m::STATE | m::SQ_PSN | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY;
    assert_eq!(d.modify(qp, mask, a), 0);
}

/// Two devices on addresses of their own, one QP each, connected with `o` (the second end's
/// PSNs mirrored), with `faults` on both links.
pub fn pair(o: &Opts, faults: LinkFaults) -> (Drv, End, Drv, End) {
    let fb = LinkFaults { seed: faults.seed.wrapping_add(1), ..faults.clone() };
    pair_with(o, faults, fb)
}

/// [`pair`] with faults `fa` on the first device's link and `fb` on the second's.
pub fn pair_with(o: &Opts, fa: LinkFaults, fb: LinkFaults) -> (Drv, End, Drv, End) {
    join(device(fa), device(fb), o)
}

/// One QP on each of `a` and `b`, connected with `o` (`b`'s PSNs mirrored).
pub fn join(mut a: Drv, mut b: Drv, o: &Opts) -> (Drv, End, Drv, End) {
    let (ia, ib) = (ip(&a), ip(&b));
    let (ea, eb) = (end(&mut a, 256), end(&mut b, 256));
    connect(&mut a, ea.qp.qpn, eb.qp.qpn, ib, o);
    let ob = Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..*o };
    connect(&mut b, eb.qp.qpn, ea.qp.qpn, ia, &ob);
    (a, ea, b, eb)
}

/// Posts a signaled SEND (with immediate data if `imm`) of `data`, placed at `off` of the send
/// MR, and rings the doorbell.
pub fn send(d: &Drv, e: &End, wr_id: u64, data: &[u8], off: u64, imm: Option<u32>) {
    d.dev.mem().write(e.src.iova + off, data).unwrap();
    let sg = [sge(e.src.va + off, data.len() as u32, e.src.lkey)];
    let (op, imm) = match imm {
        Some(v) => (wr_opcode::SEND_WITH_IMM, v),
        None => (wr_opcode::SEND, 0),
    };
    d.post_send_wqe(&e.qp, wr_id, op, send_flags::SIGNALED, imm, &sg);
    d.qp_doorbell(&e.qp, UAR_QP_SEND);
}

/// Posts a receive of up to `len` bytes at `off` of the receive MR.
pub fn recv(d: &Drv, e: &End, wr_id: u64, off: u64, len: u32) {
    d.recv(&e.qp, wr_id, &[sge(e.dst.va + off, len, e.dst.lkey)]);
}

/// Bytes `off .. off + len` of the receive MR.
pub fn received(d: &Drv, e: &End, off: u64, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    d.dev.mem().read(e.dst.iova + off, &mut got).unwrap();
    got
}

/// Waits up to `limit` for `n` CQEs of `e`'s CQ.
pub fn wait(d: &Drv, e: &End, n: usize, limit: Duration) -> Vec<Cqe> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        match d.poll(&e.cq) {
            Some(c) => out.push(c),
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    out
}

/// A message of `len` bytes whose content depends on `tag`.
pub fn pattern(tag: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64).wrapping_mul(31).wrapping_add(tag.wrapping_mul(7)) as u8).collect()
}
