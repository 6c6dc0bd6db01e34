//! `hca pingpong --roce` against a peer that behaves as the unmodified `ibv_rc_pingpong -c`
//! does (rdma-core `libibverbs/examples/rc_pingpong.c`), written here from that program's
//! behaviour rather than from this tool's code: one buffer for sends and receives (so it echoes
//! what it received last), filled with 0x7b; as client with `-c` it zeroes the first byte of
//! each page before its first send; as server with `-c` it checks, at the end, that the first
//! byte of each page it last received is zero; connection data over TCP as `"%04x:%06x:%06x:%s"`
//! plus its NUL (52 bytes), the server connecting its QP before replying, the client answering
//! `"done"`. The peer runs in this test on its own model with a RoCE port on its own address; the
//! tool runs as a separate process. The real program meets the tool in the VM stage.

use ib_core::{access, gid_from_ip, AhAttr, Cq, Device, GlobalRoute, Mr, Mtu, Pd, Qp, QpAttr};
use ib_core::{QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, UserBuffer};
use ib_core::{Wc, WcStatus, WrOpcode};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::SimConfig;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
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
    fn new(ip: &str) -> Self {
        let cfg = SimConfig { roce: Some(RoceConfig::new(vec![ip.parse().unwrap()])), ..SimConfig::default() };
        let (dev, sim) = hca::open_sim(cfg).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let buf = UserBuffer::new(SIZE).unwrap();
        buf.write(0, &[0x7b; SIZE]).unwrap();
        let mr = pd.reg_buffer(&buf, access::LOCAL_WRITE).unwrap();
        let cq = dev.create_cq(RX_DEPTH + 1, None).unwrap();
        let cap = QpCap { max_send_wr: 1, max_recv_wr: RX_DEPTH, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap, qp_type: QpType::Rc, sq_sig_all: false, qp_context: 0, srq: None };
        let qp = pd.create_qp(&attr).unwrap();
        qp.modify_to_init(1, 0).unwrap();
        let gid = gid_from_ip(ip.parse().unwrap());
        let peer = Self { qp, cq, mr, buf, psn: 0x12_3456, gid, _pd: pd, _dev: dev, sim };
        for _ in 0..RX_DEPTH {
            peer.post_recv();
        }
        peer
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
        let rts = QpAttr { qp_state: QpState::Rts, sq_psn: self.psn, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1, ..Default::default() };
        self.qp.modify_qp(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC).unwrap();
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

fn free_tcp_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port()
}

/// The first client of `listener`, waiting at most [`LIMIT`].
fn accept_bounded(listener: &TcpListener) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && start.elapsed() < LIMIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the tool never connected: {e}"),
        }
    };
    sock.set_nonblocking(false).unwrap();
    sock.set_read_timeout(Some(LIMIT)).unwrap();
    sock
}

fn tool(args: &[&str]) -> std::process::Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hca"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c.spawn().expect("spawn hca")
}

/// Waits for the tool at most [`LIMIT`], killing it then; its status and output.
fn finish(mut child: std::process::Child) -> (bool, String) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn the_tool_as_client_passes_ibv_rc_pingpong_c_servers_check() {
    let peer = Peer::new("127.88.0.51");
    let port = free_tcp_port();
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let (p, s, n) = (port.to_string(), SIZE.to_string(), ITERS.to_string());
    let args = ["--roce", "127.88.0.52", "pingpong", "-p", &p, "-s", &s, "-n", &n, "127.0.0.1"];
    let child = tool(&args);
    let mut sock = accept_bounded(&listener);
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
    let peer = Peer::new("127.88.0.53");
    // -c: the client zeroes the first byte of each page before its first send.
    for page in (0..SIZE).step_by(PAGE) {
        peer.buf.write(page, &[0]).unwrap();
    }
    let port = free_tcp_port();
    let (p, s, n) = (port.to_string(), SIZE.to_string(), ITERS.to_string());
    let child = tool(&["--roce", "127.88.0.54", "pingpong", "-p", &p, "-s", &s, "-n", &n]);
    let start = Instant::now();
    let mut sock = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < LIMIT => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("the tool never listened: {e}"),
        }
    };
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
    let (me, tool_ip) = ("127.88.0.55", "127.88.0.56");
    let peer = Peer::new(me);
    let port = free_tcp_port();
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let (p, s, n) = (port.to_string(), SIZE.to_string(), ITERS.to_string());
    let child = tool(&["--roce", tool_ip, "pingpong", "-p", &p, "-s", &s, "-n", &n, "127.0.0.1"]);
    let mut sock = accept_bounded(&listener);
    let mut msg = [0u8; 52];
    sock.read_exact(&mut msg).unwrap();
    let tool_qpn = u32::from_str_radix(std::str::from_utf8(&msg[5..11]).unwrap(), 16).unwrap();
    peer.connect(&msg);
    sock.write_all(&peer.msg()).unwrap();
    sock.read_exact(&mut [0u8; 5]).unwrap();
    peer.run(false);

    // The last packet of the peer's last SEND (8 packets of 1024 bytes each).
    let last_psn = (peer.psn + ITERS * (SIZE / 1024) as u32 - 1) & 0xff_ffff;
    let udp = UdpSocket::bind((me, 0)).unwrap();
    let ip = roce_wire::IpContext::new(udp.local_addr().unwrap(), format!("{tool_ip}:4791").parse().unwrap());
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
