//! Packets a fake RoCE v2 peer forges towards a model's port: a READ response answering an
//! atomic is dropped and counted. (Found under attack in issue 13.)

use ib_core::{access, Qp, Sge, WcStatus};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::SimConfig;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use tests::fixture::poll_n;

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
