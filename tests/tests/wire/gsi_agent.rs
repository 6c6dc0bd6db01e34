//! The verbs core's GSI agent (QP1) between two devices of one process over their RoCE v2 ports,
//! each on a leased 127/8 address: MADs both ways, with where each came from (source GID and QP,
//! the local GID index it arrived at), one agent per port however often it is opened, QP1 the
//! kernel's and one per port. Datagrams a plain UDP socket sends to a port's QP1 — cut inside
//! their headers, of another P_Key, with a Q_Key other than the GSI's, longer than a MAD — are
//! dropped and counted, and the GSI answers the next good one; a datagram for QP1 of a device
//! without a GSI QP is dropped and counted. On the loopback port the agent hears its own MADs; a
//! full send queue answers `QueueFull` at once; a send the device fails restarts QP1. A burst of
//! more MADs than 64 (`cmtime -c 100`'s REQs) waits whole until it is read.

use ib_core::gsi::{GsiAddr, GsiAgent, GSI_QKEY, GSI_QPN, MAD_SIZE};
use ib_core::{gid_from_ip, Device, Error};
use pvrdma_abi::verbs::qp_state;
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::{SimConfig, SimStats};
use roce_wire::ud::{decode_ud, encode_ud, UdPacket, UD_SEND_ONLY};
use roce_wire::{Bth, IpContext};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

struct End {
    dev: Device,
    sim: hca::platform::sim::SimPlatform,
    /// GID index of the port's RoCE v2 address.
    sgid_index: u8,
}

impl End {
    fn new() -> End {
        let (dev, sim) = tests::fixture::open_roce(RoceConfig::new(vec![]), SimConfig::default());
        let want = gid_from_ip(tests::fixture::roce_addr(&sim));
        let sgid_index = (0..16u32).find(|&i| dev.query_gid(1, i).is_ok_and(|g| g == want)).expect("its GID") as u8;
        End { dev, sim, sgid_index }
    }

    fn ip(&self) -> IpAddr {
        tests::fixture::roce_addr(&self.sim)
    }

    fn stats(&self) -> SimStats {
        self.sim.device().stats()
    }

    /// The address of this end's QP1, sent to from local GID `sgid_index`.
    fn gsi_addr(&self, sgid_index: u8) -> GsiAddr {
        GsiAddr {
            gid: gid_from_ip(self.ip()),
            qpn: GSI_QPN,
            qkey: GSI_QKEY,
            sgid_index,
            hop_limit: 64,
            ..Default::default()
        }
    }
}

/// A MAD whose bytes say `tag`.
fn mad(tag: u8) -> [u8; MAD_SIZE] {
    std::array::from_fn(|i| tag ^ i as u8)
}

/// The next MAD `agent` receives, within [`WAIT`].
fn next(agent: &GsiAgent) -> (GsiAddr, Vec<u8>) {
    let mut buf = [0u8; MAD_SIZE];
    let mut got = None;
    let ok = ib_core::time::poll_until(WAIT, || match agent.recv(&mut buf) {
        Ok((from, n)) => {
            got = Some((from, buf[..n].to_vec()));
            true
        }
        Err(Error::WouldBlock) => false,
        Err(e) => panic!("recv: {e}"),
    });
    assert!(ok, "no MAD within {WAIT:?}");
    got.expect("a MAD")
}

/// Waits until `what` of `end`'s counters is `want`.
fn counted(end: &End, name: &str, want: u64, what: impl Fn(&SimStats) -> u64) {
    let ok = ib_core::time::poll_until(WAIT, || what(&end.stats()) == want);
    assert!(ok, "{name}: {} (want {want})", what(&end.stats()));
}

#[test]
fn mads_cross_between_the_gsi_agents_of_two_devices() {
    let (a, b) = (End::new(), End::new());
    let ga = GsiAgent::open(&a.dev, 1).expect("a's GSI agent");
    let gb = GsiAgent::open(&b.dev, 1).expect("b's GSI agent");
    let again = GsiAgent::open(&a.dev, 1).expect("a's GSI agent again");
    assert!(ga.same(&again) && !ga.same(&gb), "one agent per device port");
    drop(again);
    ga.send(&b.gsi_addr(a.sgid_index), &mad(1)).expect("send a -> b");
    let (from, got) = next(&gb);
    assert_eq!(got, mad(1));
    assert_eq!((from.gid, from.qpn, from.qkey), (gid_from_ip(a.ip()), GSI_QPN, GSI_QKEY));
    assert_eq!(from.sgid_index, b.sgid_index, "the local GID the MAD was sent to");
    assert_eq!(gb.recv(&mut [0u8; MAD_SIZE]), Err(Error::WouldBlock), "one MAD, taken once");
    // The answer goes back to where the MAD came from.
    gb.send(&GsiAddr { hop_limit: 64, ..from }, &mad(2)).expect("send b -> a");
    let (back, got) = next(&ga);
    assert_eq!((got, back.gid, back.qpn), (mad(2).to_vec(), gid_from_ip(b.ip()), GSI_QPN));
    // A short MAD is carried as it is; a MAD longer than 256 bytes or empty is refused.
    ga.send(&b.gsi_addr(a.sgid_index), &mad(3)[..24]).expect("a short MAD");
    assert_eq!(next(&gb).1, mad(3)[..24].to_vec());
    assert!(matches!(ga.send(&b.gsi_addr(a.sgid_index), &[0u8; MAD_SIZE + 1]), Err(Error::InvalidArgument(_))));
    assert!(matches!(ga.send(&b.gsi_addr(a.sgid_index), &[]), Err(Error::InvalidArgument(_))));
    assert!(matches!(ga.send(&b.gsi_addr(200), &mad(4)), Err(Error::InvalidArgument(_))), "no GID 200");
    assert_eq!(a.stats().ud_dropped_qkey + b.stats().ud_dropped_qkey, 0);
}

/// A fake RoCE peer on UDP 4791 of an address of its own, sending to `to`'s QP1.
struct Peer {
    sock: UdpSocket,
    to: SocketAddr,
}

impl Peer {
    fn new(to: IpAddr) -> Peer {
        let sock = tests::fixture::peer_socket();
        sock.set_read_timeout(Some(WAIT)).expect("a read timeout");
        Peer { sock, to: SocketAddr::new(to, pvrdma_sim::roce::ROCE_V2_UDP_PORT) }
    }

    /// A UD SEND Only to QP1 with `pkey` and `qkey`, carrying `payload`.
    fn datagram(&self, pkey: u16, qkey: u32, payload: &[u8]) -> Vec<u8> {
        let bth = Bth { opcode: UD_SEND_ONLY, pkey, dest_qp: GSI_QPN, ..Bth::default() };
        let p = UdPacket { bth, qkey, src_qp: GSI_QPN, imm: None, payload };
        let mut out = Vec::new();
        encode_ud(&p, &IpContext::new(self.sock.local_addr().unwrap(), self.to), &mut out).expect("encode");
        out
    }

    fn send(&self, bytes: &[u8]) {
        self.sock.send_to(bytes, self.to).expect("send");
    }
}

#[test]
fn datagrams_to_qp1_it_cannot_take_are_dropped_and_counted() {
    let b = End::new();
    let gb = GsiAgent::open(&b.dev, 1).expect("the GSI agent");
    let peer = Peer::new(b.ip());
    let s0 = b.stats();
    let good = peer.datagram(0xffff, GSI_QKEY, &mad(7));
    peer.send(&good[..16]);
    counted(&b, "cut inside its headers", s0.roce_rx_dropped_malformed + 1, |s| s.roce_rx_dropped_malformed);
    peer.send(&peer.datagram(0x7fff, GSI_QKEY, &mad(7)));
    counted(&b, "another P_Key", s0.roce_rx_dropped_pkey + 1, |s| s.roce_rx_dropped_pkey);
    peer.send(&peer.datagram(0xffff, 0x1234, &mad(7)));
    counted(&b, "a Q_Key other than the GSI's", s0.ud_dropped_qkey + 1, |s| s.ud_dropped_qkey);
    peer.send(&peer.datagram(0xffff, GSI_QKEY, &[7u8; 2 * MAD_SIZE]));
    counted(&b, "longer than a MAD", s0.ud_dropped_oversize + 1, |s| s.ud_dropped_oversize);
    assert_eq!(gb.recv(&mut [0u8; MAD_SIZE]), Err(Error::WouldBlock), "none of them reached the agent");
    // The GSI still takes a good MAD, and its answer reaches the peer's QP1.
    peer.send(&good);
    let (from, got) = next(&gb);
    let peer_ip = peer.sock.local_addr().unwrap().ip();
    assert_eq!((got, from.gid, from.qpn), (mad(7).to_vec(), gid_from_ip(peer_ip), GSI_QPN));
    gb.send(&GsiAddr { hop_limit: 64, ..from }, &mad(8)).expect("the answer");
    let mut buf = [0u8; 2048];
    let (n, _) = peer.sock.recv_from(&mut buf).expect("the answer arrives");
    let p = decode_ud(&buf[..n], None).expect("a UD datagram");
    assert_eq!((p.bth.dest_qp, p.src_qp, p.qkey, p.payload), (GSI_QPN, GSI_QPN, GSI_QKEY, &mad(8)[..]));
    assert_eq!(gb.dropped(), 0, "the agent itself dropped nothing");
}

#[test]
fn a_datagram_for_qp1_of_a_device_without_a_gsi_qp_is_dropped_and_counted() {
    let b = End::new();
    let peer = Peer::new(b.ip());
    let before = b.stats().ud_dropped_qp;
    peer.send(&peer.datagram(0xffff, GSI_QKEY, &mad(9)));
    counted(&b, "no QP1", before + 1, |s| s.ud_dropped_qp);
    // Once the agent opens, QP1 takes MADs.
    let gb = GsiAgent::open(&b.dev, 1).expect("the GSI agent");
    peer.send(&peer.datagram(0xffff, GSI_QKEY, &mad(9)));
    assert_eq!(next(&gb).1, mad(9).to_vec());
}

#[test]
fn the_gsi_qp_is_the_kernels_and_one_per_port() {
    let b = End::new();
    let _gb = GsiAgent::open(&b.dev, 1).expect("the GSI agent");
    let cq = b.dev.create_cq(8, None).unwrap();
    let cap = ib_core::QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr = |cq| ib_core::QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap,
        qp_type: ib_core::QpType::Gsi,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let second = b.dev.alloc_pd().unwrap().create_qp(&attr(&cq));
    assert_eq!(second.map(|q| q.qpn()).unwrap_err().errno(), libc::EBUSY, "QP1 exists: the device's EBUSY");
    let user = b.dev.alloc_ucontext().unwrap();
    let ucq = user.create_cq(8, None).unwrap();
    let refused = user.alloc_pd().unwrap().create_qp(&attr(&ucq));
    assert!(matches!(refused.map(|q| q.qpn()), Err(Error::InvalidArgument(_))), "not in a user context");
}

#[test]
fn on_the_loopback_port_the_gsi_agent_hears_its_own_mads() {
    let dev = tests::fixture::open();
    let agent = GsiAgent::open(&dev, 1).expect("the GSI agent");
    let gid0 = dev.query_gid(1, 0).expect("GID 0");
    let to = GsiAddr { gid: gid0, qpn: GSI_QPN, qkey: GSI_QKEY, sgid_index: 0, hop_limit: 64, ..Default::default() };
    agent.send(&to, &mad(5)).expect("send to its own QP1");
    let (from, got) = next(&agent);
    assert_eq!((got, from.gid, from.qpn, from.sgid_index), (mad(5).to_vec(), gid0, GSI_QPN, 0));
}

#[test]
fn a_burst_of_mads_nobody_reads_yet_all_arrive() {
    // 100 REQs at once, as `cmtime -c 100` sends them, while the CM is busy: with 64 receive
    // buffers QP1 dropped the rest, and each drop cost its requester a REQ timeout.
    const BURST: u32 = 100;
    const { assert!(BURST <= ib_core::gsi::RECV_BUFFERS) };
    let (a, b) = (End::new(), End::new());
    let (ga, gb) = (GsiAgent::open(&a.dev, 1).unwrap(), GsiAgent::open(&b.dev, 1).unwrap());
    for i in 0..BURST {
        let sent = ib_core::time::poll_until(WAIT, || ga.send(&b.gsi_addr(a.sgid_index), &mad(i as u8)).is_ok());
        assert!(sent, "send {i}");
    }
    counted(&b, "UD datagrams delivered", u64::from(BURST), |s| s.ud_delivered);
    assert_eq!(b.stats().ud_dropped_no_recv, 0, "none found QP1 without a receive buffer");
    for i in 0..BURST {
        assert_eq!(next(&gb).1, mad(i as u8).to_vec(), "MAD {i}, in order");
    }
}

#[test]
fn a_full_send_queue_is_an_error_not_a_wait() {
    // On the loopback port with a wire latency of 200 ms, each send stays in flight that long.
    let cfg = SimConfig { link_latency: Duration::from_millis(200), ..SimConfig::default() };
    let dev = tests::fixture::open_with(cfg);
    let agent = GsiAgent::open(&dev, 1).expect("the GSI agent");
    let to = GsiAddr { gid: dev.query_gid(1, 0).unwrap(), qpn: GSI_QPN, qkey: GSI_QKEY, ..Default::default() };
    let start = std::time::Instant::now();
    for i in 0..ib_core::gsi::SEND_SLOTS {
        agent.send(&to, &mad(i as u8)).unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    assert_eq!(agent.send(&to, &mad(0)), Err(Error::QueueFull), "every slot in flight");
    assert!(start.elapsed() < Duration::from_millis(200), "no send waited for the wire");
    // Once they have gone, there is room again.
    assert!(ib_core::time::poll_until(WAIT, || agent.send(&to, &mad(1)).is_ok()), "the slots come back");
}

#[test]
fn a_send_the_device_fails_restarts_qp1_and_the_agent_goes_on() {
    let (a, b) = (End::new(), End::new());
    let (ga, gb) = (GsiAgent::open(&a.dev, 1).unwrap(), GsiAgent::open(&b.dev, 1).unwrap());
    // A RoCE v1 GID, which the RoCE v2 port cannot send from: the send completes in error and
    // moves QP1 to ERR.
    let v1 = 5;
    a.dev.add_gid(1, v1, ib_core::gid_from_ip("fd00::5".parse().unwrap()), ib_core::GidType::RoceV1).unwrap();
    ga.send(&b.gsi_addr(v1 as u8), &mad(1)).expect("posted");
    let in_err = ib_core::time::poll_until(WAIT, || a.sim.device().qp_state(GSI_QPN) == Some(qp_state::ERR));
    assert!(in_err, "QP1 in ERR: {:?}", a.sim.device().qp_state(GSI_QPN));
    ga.send(&b.gsi_addr(a.sgid_index), &mad(2)).expect("sent after the restart");
    assert_eq!(next(&gb).1, mad(2).to_vec());
    assert_eq!(a.sim.device().qp_state(GSI_QPN), Some(qp_state::RTS), "QP1 back in RTS");
}
