//! Round trips over the model's RoCE v2 port (two devices on two loopback addresses of their own,
//! UDP 4791, MTU 1024), busy polling (yielding between empty polls, as `hca pingpong` does: the
//! port's receive thread runs in this process), beside their limit: a bare UDP ping-pong between
//! two sockets on two loopback addresses carrying the same datagrams (one per MTU of payload,
//! each way), with nothing else (no ACKs, no ICRC, no device).

use crate::pair;
use crate::round_trip::{stack_round_trips, End};
use criterion::Criterion;
use ib_core::{access, QpCap, QpInitAttr, QpType};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::SimConfig;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use tests::fixture::connect_roce;

const MTU: usize = 1024;
const RX_DEPTH: u32 = 16;

/// One end per device (each on its own address), connected through GID index 1.
fn ends(size: u32) -> ([ib_core::Device; 2], End, End) {
    // Each on a 127/8 address its port holds (`netlease`).
    let open = || tests::fixture::open_roce(RoceConfig::new(vec![]), SimConfig::default()).0;
    let devs = [open(), open()];
    let cap =
        QpCap { max_send_wr: RX_DEPTH, max_recv_wr: RX_DEPTH, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let end = |dev: &ib_core::Device| {
        let pd = dev.alloc_pd().expect("a PD");
        let cq = dev.create_cq(2 * RX_DEPTH, None).expect("a CQ");
        let attr = QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        };
        let qp = pd.create_qp(&attr).expect("a QP");
        let mr = pd.alloc_mr(2 * (size as usize).max(4096), access::LOCAL_WRITE).expect("an MR");
        End { qp, cq, ch: None, mr, yields: true }
    };
    let (a, b) = (end(&devs[0]), end(&devs[1]));
    let gid = |dev: &ib_core::Device| dev.query_gid(1, 1).expect("the RoCE v2 GID");
    connect_roce(&a.qp, b.qp.qpn(), gid(&devs[1]), 1);
    connect_roce(&b.qp, a.qp.qpn(), gid(&devs[0]), 1);
    for e in [&a, &b] {
        for _ in 0..RX_DEPTH {
            e.post_recv(size);
        }
    }
    (devs, a, b)
}

/// `n` round trips of `size` bytes between two UDP sockets on 127/8 addresses of their own (ports
/// chosen by the system), each message cut into datagrams of at most [`MTU`] bytes; the initiator's time.
fn udp_round_trips(n: u64, size: usize) -> Duration {
    let (a, b) = (netlease::udp_v4(0), netlease::udp_v4(0));
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("a read timeout");
    }
    let (to_a, to_b) = (a.local_addr().expect("a's address"), b.local_addr().expect("b's address"));
    let start = Barrier::new(2);
    let side = |sock: &UdpSocket, peer: SocketAddr, initiator: bool| {
        let payload = vec![0x5au8; size];
        let mut buf = vec![0u8; MTU];
        let datagrams = size.div_ceil(MTU).max(1);
        let send = || {
            for chunk in payload.chunks(MTU) {
                sock.send_to(chunk, peer).expect("send_to");
            }
        };
        let recv = |buf: &mut [u8]| {
            for _ in 0..datagrams {
                sock.recv_from(buf).expect("a datagram within 5 s");
            }
        };
        start.wait();
        let t = Instant::now();
        for _ in 0..n {
            if initiator {
                send();
                recv(&mut buf);
            } else {
                recv(&mut buf);
                send();
            }
        }
        t.elapsed()
    };
    std::thread::scope(|s| {
        let peer = s.spawn(|| side(&b, to_a, false));
        let t = s.spawn(|| side(&a, to_b, true)).join().expect("the initiator");
        peer.join().expect("the peer thread");
        t
    })
}

pub fn roce_pairs(c: &mut Criterion) {
    for size in [64u32, 65536] {
        let (_devs, a, b) = ends(size);
        let name = if size == 64 { "roce_rt_64B" } else { "roce_rt_64KiB" };
        pair(
            c,
            name,
            (1, "round trip"),
            |n| stack_round_trips(&a, &b, n, size, false),
            |n| udp_round_trips(n, size as usize),
        );
    }
}
