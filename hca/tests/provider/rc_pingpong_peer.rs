//! `hca pingpong --roce` against a peer that behaves as the unmodified `ibv_rc_pingpong -c`
//! does (rdma-core `libibverbs/examples/rc_pingpong.c`), written here from that program's
//! behaviour rather than from this tool's code: one buffer for sends and receives (so it echoes
//! what it received last), filled with 0x7b; as client with `-c` it zeroes the first byte of
//! each page before its first send; as server with `-c` it checks, at the end, that the first
//! byte of each page it last received is zero; connection data over TCP as `"%04x:%06x:%06x:%s"`
//! plus its NUL (52 bytes), the server connecting its QP before replying, the client answering
//! `"done"`. The peer runs in this test on its own model with a RoCE port on its own address; the
//! tool runs as a separate process, on an address (and, as server, a TCP port) of its own too.
//! The real program meets the tool in the VM stage.

use ib_core::{access, gid_from_ip, AhAttr, Cq, Device, GlobalRoute, Mr, Mtu, Pd, Qp, QpAttr};
use ib_core::{QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, UserBuffer};
use ib_core::{Wc, WcStatus, WrOpcode};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::SimConfig;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

const SIZE: usize = 8192;
const PAGE: usize = 4096;
const ITERS: u32 = 20;
const RX_DEPTH: u32 = 8;
const LIMIT: Duration = Duration::from_secs(30);

/// One `ibv_rc_pingpong` end: its objects, the one buffer, its PSN.
struct Peer {
    qp: Qp,
    cq: Cq,
    mr: Mr,
    buf: UserBuffer,
    psn: u32,
    gid: [u8; 16],
    _pd: Pd,
    _dev: Device,
    sim: hca::platform::sim::SimPlatform,
}

impl Peer {
    /// On a RoCE address of its own: fresh ones tried until the model's port binds one.
    fn new() -> Self {
        let (dev, sim) = netlease::v4("the peer's RoCE address", |a| {
            let cfg = SimConfig { roce: Some(RoceConfig::new(vec![a.into()])), ..SimConfig::default() };
            netlease::Attempt::of(hca::open_sim(cfg))
        });
        let pd = dev.alloc_pd().unwrap();
        let buf = UserBuffer::new(SIZE).unwrap();
        buf.write(0, &[0x7b; SIZE]).unwrap();
        let mr = pd.reg_buffer(&buf, access::LOCAL_WRITE).unwrap();
        let cq = dev.create_cq(RX_DEPTH + 1, None).unwrap();
        let cap = QpCap { max_send_wr: 1, max_recv_wr: RX_DEPTH, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let attr = QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        };
        let qp = pd.create_qp(&attr).unwrap();
        qp.modify_to_init(1, 0).unwrap();
        let gid = gid_from_ip(Self::ip_of(&sim));
        let peer = Self { qp, cq, mr, buf, psn: 0x12_3456, gid, _pd: pd, _dev: dev, sim };
        for _ in 0..RX_DEPTH {
            peer.post_recv();
        }
        peer
    }

    fn ip_of(sim: &hca::platform::sim::SimPlatform) -> IpAddr {
        sim.device().config().roce.as_ref().expect("a RoCE port").addrs[0]
    }

    fn ip(&self) -> IpAddr {
        Self::ip_of(&self.sim)
    }

    fn sge(&self) -> [Sge; 1] {
        [Sge { addr: self.mr.addr(), length: SIZE as u32, lkey: self.mr.lkey() }]
    }

    fn post_recv(&self) {
        self.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &self.sge() }).unwrap();
    }

    fn post_send(&self) {
        let wr = SendWr { wr_id: 2, sg_list: &self.sge(), opcode: WrOpcode::Send, signaled: true, solicited: false };
        self.qp.post_send(&wr).unwrap();
    }

    /// `"%04x:%06x:%06x:%s"` and its NUL.
    fn msg(&self) -> [u8; 52] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", 0, self.qp.qpn(), self.psn);
        let mut m = [0u8; 52];
        m[..51].copy_from_slice(text.as_bytes());
        m
    }

    /// `pp_connect_ctx` towards the peer's message.
    fn connect(&self, msg: &[u8; 52]) {
        assert_eq!(msg[51], 0, "the message ends with its NUL");
        let text = std::str::from_utf8(&msg[..51]).unwrap();
        let f: Vec<&str> = text.split(':').collect();
        let hex = |s: &str| u32::from_str_radix(s, 16).unwrap();
        let mut dgid = [0u8; 16];
        for (i, b) in dgid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).unwrap();
        }
        let grh = GlobalRoute { dgid, sgid_index: 1, hop_limit: 1, ..Default::default() };
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Mtu::MTU_1024,
            dest_qp_num: hex(f[1]),
            rq_psn: hex(f[2]),
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: AhAttr { grh, is_global: true, port_num: 1, ..Default::default() },
            ..Default::default()
        };
        let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        self.qp.modify_qp(&rtr, m).unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: self.psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.qp
            .modify_qp(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC)
            .unwrap();
    }

    /// The main loop of `rc_pingpong.c`, busy polling, bounded.
    fn run(&self, client: bool) {
        let (mut scnt, mut rcnt, mut routs) = (0, 0, RX_DEPTH);
        let mut pending = 1u64;
        if client {
            self.post_send();
            pending |= 2;
        }
        let start = Instant::now();
        let mut wc = [Wc::default(); 2];
        while rcnt < ITERS || scnt < ITERS {
            assert!(start.elapsed() < LIMIT, "the peer stalled at {scnt} sent, {rcnt} received");
            let n = self.cq.poll(&mut wc).unwrap();
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::Success, "wr_id {}", w.wr_id);
                if w.wr_id == 2 {
                    scnt += 1;
                } else {
                    routs -= 1;
                    if routs <= 1 {
                        for _ in routs..RX_DEPTH {
                            self.post_recv();
                        }
                        routs = RX_DEPTH;
                    }
                    rcnt += 1;
                }
                pending &= !w.wr_id;
                if scnt < ITERS && pending == 0 {
                    self.post_send();
                    pending = 3;
                }
            }
        }
    }

    /// `-c`'s check on the server: the first byte of each page is zero.
    fn pages_valid(&self) -> bool {
        let mut b = vec![0u8; SIZE];
        self.buf.read(0, &mut b).unwrap();
        b.iter().step_by(PAGE).all(|&x| x == 0)
    }
}

/// The test as the TCP server: a listener on a port the kernel picks, held by the test.
fn listener() -> TcpListener {
    TcpListener::bind(("127.0.0.1", 0)).unwrap()
}

/// The tool as `pingpong -p PORT -s SIZE -n ITERS` (then `extra`) on a RoCE address of its own
/// (`fresh`), recorded in `ip`.
fn tool_args(f: &mut netlease::Fresh, ip: &mut Option<IpAddr>, port: u16, extra: &[&str]) -> Vec<String> {
    let a = IpAddr::from(f.v4());
    *ip = Some(a);
    let (p, s, n) = (port.to_string(), SIZE.to_string(), ITERS.to_string());
    let head = ["--roce", &a.to_string(), "pingpong", "-p", &p, "-s", &s, "-n", &n].map(String::from);
    head.into_iter().chain(extra.iter().map(|x| x.to_string())).collect()
}

/// Waits for the tool at most [`LIMIT`], killing it then; whether it succeeded, and its output.
fn finish(child: crate::tool::Tool) -> (bool, String) {
    match child.finish(LIMIT) {
        Some((code, out, err)) => (code == 0, format!("{out}{err}")),
        None => (false, format!("the tool did not end within {LIMIT:?} (killed)")),
    }
}

#[test]
fn the_tool_as_client_passes_ibv_rc_pingpong_c_servers_check() {
    let peer = Peer::new();
    let listener = listener();
    let port = listener.local_addr().unwrap().port();
    let mut ip = None;
    let (child, mut sock) =
        crate::tool::connect_held(&listener, LIMIT, |f| tool_args(f, &mut ip, port, &["127.0.0.1"]));
    sock.set_read_timeout(Some(LIMIT)).unwrap();
    let mut msg = [0u8; 52];
    sock.read_exact(&mut msg).unwrap();
    peer.connect(&msg);
    sock.write_all(&peer.msg()).unwrap();
    let mut done = [0u8; 5];
    sock.read_exact(&mut done).unwrap();
    assert_eq!(&done, b"done\0");
    peer.run(false);
    let (ok, out) = finish(child);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("payload verified: {ITERS} messages of {SIZE} bytes")), "{out}");
    assert!(peer.pages_valid(), "ibv_rc_pingpong -c would print \"invalid data in page\"");
}

#[test]
fn the_tool_as_server_takes_ibv_rc_pingpong_c_clients_buffer() {
    let peer = Peer::new();
    // -c: the client zeroes the first byte of each page before its first send.
    for page in (0..SIZE).step_by(PAGE) {
        peer.buf.write(page, &[0]).unwrap();
    }
    // The tool listens on a port the test chose: connected to only once the tool itself listens.
    let mut ip = None;
    let (child, port) = crate::tool::serve_held(LIMIT, |f| {
        let port = f.port();
        (tool_args(f, &mut ip, port, &[]), port)
    });
    let mut sock = TcpStream::connect(("127.0.0.1", port)).expect("the tool listens");
    sock.set_read_timeout(Some(LIMIT)).unwrap();
    sock.write_all(&peer.msg()).unwrap();
    let mut msg = [0u8; 52];
    sock.read_exact(&mut msg).unwrap();
    sock.write_all(b"done\0").unwrap();
    peer.connect(&msg);
    peer.run(true);
    let (ok, out) = finish(child);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("payload verified: {ITERS} messages of {SIZE} bytes")), "{out}");
}

/// The peer's last packet again, as if the tool's acknowledgement of it had been lost: the tool
/// must answer it (its QP acknowledges the duplicate) before its QP goes. It once lingered only
/// after destroying the QP, and Linux rxe, which retries forever with retry_cnt 7, then never
/// finished (the VM stage's loss_pingpong_ours_client case).
#[test]
fn the_tool_answers_the_peers_resent_last_packet_before_its_qp_goes() {
    let peer = Peer::new();
    let listener = listener();
    let port = listener.local_addr().unwrap().port();
    let mut tool_ip = None;
    let (child, mut sock) =
        crate::tool::connect_held(&listener, LIMIT, |f| tool_args(f, &mut tool_ip, port, &["127.0.0.1"]));
    sock.set_read_timeout(Some(LIMIT)).unwrap();
    let tool_ip = tool_ip.expect("the tool's address");
    let mut msg = [0u8; 52];
    sock.read_exact(&mut msg).unwrap();
    let tool_qpn = u32::from_str_radix(std::str::from_utf8(&msg[5..11]).unwrap(), 16).unwrap();
    peer.connect(&msg);
    sock.write_all(&peer.msg()).unwrap();
    sock.read_exact(&mut [0u8; 5]).unwrap();
    peer.run(false);

    // The last packet of the peer's last SEND (8 packets of 1024 bytes each).
    let last_psn = (peer.psn + ITERS * (SIZE / 1024) as u32 - 1) & 0xff_ffff;
    let udp = UdpSocket::bind((peer.ip(), 0)).unwrap();
    let ip = roce_wire::IpContext::new(udp.local_addr().unwrap(), std::net::SocketAddr::new(tool_ip, 4791));
    let bth = roce_wire::Bth {
        opcode: roce_wire::opcode::RC_SEND_LAST,
        pkey: 0xffff,
        dest_qp: tool_qpn,
        ack_req: true,
        psn: last_psn,
        ..Default::default()
    };
    let mut pkt = Vec::new();
    roce_wire::encode(&roce_wire::Headers { bth, ..Default::default() }, &[0u8; 1024], &ip, &mut pkt).unwrap();
    let received = || peer.sim.device().stats().roce_rx_packets;
    let before = received();
    let start = Instant::now();
    let mut answered = false;
    while !answered && start.elapsed() < Duration::from_secs(2) {
        udp.send_to(&pkt, ip.dst).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        answered = received() > before;
    }
    let (ok, out) = finish(child);
    assert!(ok, "{out}");
    assert!(answered, "the tool never acknowledged the resent last packet (PSN {last_psn:#x})");
}
