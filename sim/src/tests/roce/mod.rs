//! The RoCE v2 port through the mini-driver: devices on distinct loopback addresses (each test
//! its own `127.77.<test>.x`, so parallel tests never share a UDP socket) or one device talking
//! to itself over `::1` (each such test its own UDP port).

mod atomic;
mod errors;
mod faults;
mod forged;
mod hostile;
mod lifecycle;
mod many;
mod rdma;
mod send;
mod wire;

use super::minidrv::*;
use crate::roce::{ip_gid, LinkFaults, RoceConfig};
use crate::SimConfig;
use pvrdma_abi::cmd::CreateBind;
use pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
use pvrdma_abi::uar::UAR_QP_SEND;
use pvrdma_abi::verbs::{access, qp_attr_mask as m, qp_state, send_flags, QpAttr};
use pvrdma_abi::wqe::{wr_opcode, Cqe};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use zerocopy::little_endian::U32;
use zerocopy::FromZeros;

/// The GID index the tests bind the port's address at (index 0 is the RoCE v1 link-local GID).
pub const SGID: u32 = 1;
/// Bytes of each end's send and receive MRs.
pub const MR_LEN: u64 = 256 << 10;
/// The longest any test waits for one thing.
pub const LONG: Duration = Duration::from_secs(30);

/// `127.77.<test>.<host>`.
pub fn addr(test: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 77, test, host))
}

/// A device whose RoCE port binds `ip` (UDP `udp_port`), with GID 0 (RoCE v1) and GID
/// [`SGID`] = `ip` (RoCE v2) bound.
pub fn device(ip: IpAddr, udp_port: u16, faults: LinkFaults) -> Drv {
    device_with(ip, udp_port, faults, SimConfig::default())
}

/// [`device`] with the rest of the model's configuration from `base`.
pub fn device_with(ip: IpAddr, udp_port: u16, faults: LinkFaults, base: SimConfig) -> Drv {
    device_from(RoceConfig { udp_port, faults, ..RoceConfig::new(vec![ip]) }, base)
}

/// A device whose RoCE port is `roce` (its first address bound as GID [`SGID`], RoCE v2, after
/// GID 0, RoCE v1), the rest of the model's configuration from `base`.
pub fn device_from(roce: RoceConfig, base: SimConfig) -> Drv {
    let (ip, udp_port) = (roce.addrs[0], roce.udp_port);
    let mut d = Drv::new(SimConfig { roce: Some(roce), ..base });
    // A port someone else holds (another test, or a user's `hca pingpong --roce ::1`) says so
    // here, rather than as a message that never arrives.
    if let Some(e) = d.dev.roce_error() {
        panic!("the RoCE port cannot open {ip} UDP {udp_port}: {e} (is another process bound there?)");
    }
    d.bind_gid(0, GID0);
    bind_v2(&mut d, SGID, ip);
    d
}

/// Binds `ip` as a RoCE v2 GID at `index`.
pub fn bind_v2(d: &mut Drv, index: u32, ip: IpAddr) {
    let (mtu, vlan) = (U32::new(1024), U32::new(0xfff));
    let gid_type = GID_TYPE_FLAG_ROCE_V2;
    d.ok(CreateBind {
        index: U32::new(index),
        new_gid: ip_gid(ip),
        gid_type,
        mtu,
        vlan,
        ..Default::default()
    });
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
    End {
        pd,
        qp,
        cq,
        src,
        dst,
    }
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
        Self {
            mtu: 3,
            timeout: 1,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            sq_psn: 0xff_fff0,
            rq_psn: 0xff_fff0,
        }
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
    assert_eq!(
        d.modify(qp, m::STATE | m::PORT | m::PKEY_INDEX | m::ACCESS_FLAGS, a),
        0
    );
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

/// Two devices at `127.77.<test>.1` and `.2`, one QP each, connected with `o` (the second
/// end's PSNs mirrored), with `faults` on both links.
pub fn pair(test: u8, o: &Opts, faults: LinkFaults) -> (Drv, End, Drv, End) {
    let fb = LinkFaults {
        seed: faults.seed.wrapping_add(1),
        ..faults.clone()
    };
    pair_with(test, o, faults, fb)
}

/// [`pair`] with faults `fa` on the first device's link and `fb` on the second's.
pub fn pair_with(test: u8, o: &Opts, fa: LinkFaults, fb: LinkFaults) -> (Drv, End, Drv, End) {
    let (ia, ib) = (addr(test, 1), addr(test, 2));
    let mut a = device(ia, crate::roce::ROCE_V2_UDP_PORT, fa);
    let mut b = device(ib, crate::roce::ROCE_V2_UDP_PORT, fb);
    let (ea, eb) = (end(&mut a, 256), end(&mut b, 256));
    connect(&mut a, ea.qp.qpn, eb.qp.qpn, ib, o);
    let ob = Opts {
        sq_psn: o.rq_psn,
        rq_psn: o.sq_psn,
        ..*o
    };
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
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(31)
                .wrapping_add(tag.wrapping_mul(7)) as u8
        })
        .collect()
}
