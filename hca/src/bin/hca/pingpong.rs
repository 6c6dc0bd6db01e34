//! `hca pingpong`: RC SEND/RECV ping-pong shaped like `ibv_rc_pingpong` (same options, same
//! result lines), checking every payload. Without `--roce` both ends are QPs of the built-in
//! model in this process: the client end sends first, each end sends its next message only when
//! its previous send has completed and the peer's message has arrived. With `--roce` this process
//! is one end (`remote.rs`): the server without a HOST argument, the client with one, the
//! connection data exchanged over TCP as `ibv_rc_pingpong` does. As `ibv_rc_pingpong`, each end
//! registers a buffer of its own memory (`ibv_reg_mr`) and connects through the GID at `-g` of
//! port `-i`.

use crate::args::{number, Failure as ToolFailure};
use crate::payload;
use crate::sys::{page_size, process_cpu_time};
use clap::Args;
use ib_core::{
    access, AhAttr, ArmKind, CompChannel, Cq, Device, GlobalRoute, Mr, Mtu, NotifyFlags, Pd, Qp, QpAttr,
    QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, UserBuffer, Wc, WcOpcode, WcStatus,
    WrOpcode,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Options, named as `ibv_rc_pingpong` names them; a repeated option keeps its last value
/// (getopt).
#[derive(Args, Clone)]
#[command(args_override_self = true)]
pub struct Opts {
    /// Use this IB device (default: the first device found).
    #[arg(short = 'd', long = "ib-dev")]
    pub(crate) ib_dev: Option<String>,
    /// Use this port of the device (at least 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = port)]
    pub(crate) ib_port: u8,
    /// Local port GID index (ibv_rc_pingpong needs it on RoCE). Default: 0; with --roce, the
    /// index of the port's first RoCE v2 GID (the first --roce address). A negative one,
    /// ibv_rc_pingpong's "none", cannot connect on RoCE.
    #[arg(short = 'g', long = "gid-idx", value_parser = gid_index, allow_negative_numbers = true)]
    pub(crate) gid_idx: Option<u32>,
    /// With --roce: listen on (server) or connect to (client) this TCP port for the connection
    /// data, as ibv_rc_pingpong.
    #[arg(short = 'p', long = "port", default_value_t = crate::exchange::DEFAULT_PORT, value_parser = number::<u16>)]
    pub(crate) port: u16,
    /// With --roce: the server to connect to (this process is then the client); without it,
    /// this process is the server and waits for a client.
    #[arg(value_name = "HOST")]
    pub(crate) host: Option<String>,
    /// Service level of the address vector.
    #[arg(short = 'l', long = "sl", default_value_t = 0, value_parser = number::<u8>)]
    pub(crate) sl: u8,
    /// Size of each message, in bytes (at most the port's max_msg_sz).
    #[arg(short = 's', long = "size", default_value_t = 4096, value_parser = number::<usize>)]
    pub(crate) size: usize,
    /// Number of exchanges (each end sends and receives this many messages).
    #[arg(short = 'n', long = "iters", default_value_t = 1000, value_parser = number::<u32>)]
    pub(crate) iters: u32,
    /// Number of receives to keep posted (at most the device's max_qp_wr).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500, value_parser = number::<u32>)]
    pub(crate) rx_depth: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096, at most the port's active MTU.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024, value_parser = number::<u32>)]
    pub(crate) mtu: u32,
    /// Sleep on CQ events instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub(crate) events: bool,
    /// Give up when no completion arrives for this many seconds (1 .. 3600).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) timeout_s: u64,
    /// Run both ends' threads on this CPU (as `taskset -c CPU`): a hand-off between them is
    /// then a context switch on one CPU rather than a wake-up of an idle second one (slow in a
    /// VM), so the figure counts the hand-offs themselves.
    #[arg(long = "pin", value_name = "CPU", value_parser = number::<usize>)]
    pub(crate) pin: Option<usize>,
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// How long one wait lasts before the abort flag is checked again.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// One end: its verbs objects and the message buffer (send half, then receive half), its own
/// memory registered as an MR.
pub(crate) struct End {
    pub(crate) qp: Qp,
    cq: Cq,
    mr: Mr,
    buf: UserBuffer,
    channel: Option<CompChannel>,
    pub(crate) psn: u32,
    /// Set by whichever end fails first, so the other stops waiting for a peer that is gone.
    abort: Arc<AtomicBool>,
    /// The peer is another process (maybe `ibv_rc_pingpong`): payloads as `payload.rs` says.
    remote: bool,
    _pd: Pd,
}

/// What one end measured.
#[derive(Default)]
pub(crate) struct EndReport {
    pub(crate) events: u64,
    pub(crate) verified: u64,
}

/// Why one end stopped.
pub(crate) struct Failure {
    pub(crate) msg: String,
    /// It stopped only because the other end had failed.
    peer_gone: bool,
}

impl From<String> for Failure {
    fn from(msg: String) -> Self {
        Self { msg, peer_gone: false }
    }
}

/// `-i`: a port number, at least 1 (`ibv_rc_pingpong` prints its usage below that).
fn port(s: &str) -> Result<u8, String> {
    match number::<i64>(s)? {
        p if p < 1 => Err("the port is at least 1".into()),
        p => u8::try_from(p).map_err(|_| "Couldn't get port info".into()),
    }
}

/// `-g`: a GID index. A negative one is `ibv_rc_pingpong`'s "no GID", with which a RoCE QP
/// cannot reach RTR.
fn gid_index(s: &str) -> Result<u32, String> {
    u32::try_from(number::<i64>(s)?).map_err(|_| "Failed to modify QP to RTR: RoCE needs a GID index".into())
}

/// Opens the device `-d` names (or the first one) and runs the ping-pong on it: both ends here,
/// or with `roce` (the model has a RoCE port) one end of two processes. Failures as
/// `ibv_rc_pingpong` words them, with exit status 1.
/// With `roce`, `linger` runs after the ping-pong while its QP still exists.
pub fn run(o: &Opts, roce: bool, linger: &dyn Fn()) -> Result<(), ToolFailure> {
    if o.host.is_some() && !roce {
        return Err("a HOST needs --roce: the model's loopback port runs both ends in this process".into());
    }
    let dev = match &o.ib_dev {
        Some(name) => ib_core::open_device(name).map_err(|_| format!("IB device {name} not found"))?,
        None => {
            let first = ib_core::device_list().into_iter().next().ok_or("No IB devices found")?;
            ib_core::open_device(&first.name).map_err(|e| e.to_string())?
        }
    };
    if roce {
        return crate::remote::run(&dev, o, linger).map_err(ToolFailure::from);
    }
    pingpong(&dev, o).map_err(ToolFailure::from)
}

/// Runs the ping-pong on `dev` and prints the result; `Err` (non-zero exit) on any failure.
fn pingpong(dev: &Device, o: &Opts) -> Result<(), String> {
    let gid_idx = o.gid_idx.unwrap_or(0);
    let gid = local_gid(dev, o, gid_idx)?;
    let abort = Arc::new(AtomicBool::new(false));
    let server = Arc::new(End::new(dev, o, &abort, false).map_err(|e| format!("server setup: {e}"))?);
    let client = Arc::new(End::new(dev, o, &abort, false).map_err(|e| format!("client setup: {e}"))?);
    connect(&server, &client, gid, gid_idx, o).map_err(|e| format!("connect: {e}"))?;
    for (what, end) in [("local address: ", &client), ("remote address:", &server)] {
        let (qpn, psn, gid) = (end.qp.qpn(), end.psn, gid_str(&gid));
        println!("  {what} LID 0x0000, QPN {qpn:#08x}, PSN {psn:#08x}, GID {gid}");
    }

    for (side, end) in [("server", &server), ("client", &client)] {
        end.prepare(o).map_err(|f| format!("{side}: {}", f.msg))?;
    }
    let cpu0 = process_cpu_time();
    let start = Instant::now();
    let (s, c) = (server.clone(), client.clone());
    let (o1, o2) = (o.clone(), o.clone());
    let srv = thread::spawn(move || pinned(o1.pin, || s.run(&o1, false)));
    let cli = thread::spawn(move || pinned(o2.pin, || c.run(&o2, true)));
    let cr = cli.join().map_err(|_| "client thread panicked".to_string())?;
    let sr = srv.join().map_err(|_| "server thread panicked".to_string())?;
    let (sr, cr) = match (sr, cr) {
        (Ok(s), Ok(c)) => (s, c),
        (s, c) => return Err(first_failure(s.err(), c.err())),
    };
    let wall = start.elapsed();
    let cpu = process_cpu_time().saturating_sub(cpu0);
    print_report(o, wall, cpu, &sr, &cr);
    Ok(())
}

/// Checks the options against the device and reads the GID at `gid_idx`, which must hold one.
pub(crate) fn local_gid(dev: &Device, o: &Opts, gid_idx: u32) -> Result<ib_core::Gid, String> {
    validate(dev, o, gid_idx)?;
    let gid = dev.query_gid(o.ib_port, gid_idx).map_err(|_| format!("can't read sgid of index {gid_idx}"))?;
    if gid == [0; 16] {
        return Err(format!("GID index {gid_idx} of port {} holds no GID (all zeros)", o.ib_port));
    }
    Ok(gid)
}

/// Runs `f` on the calling thread, pinned to `cpu` first if one is given (checked by
/// [`validate`]).
pub(crate) fn pinned(cpu: Option<usize>, f: impl FnOnce() -> Result<EndReport, Failure>) -> Result<EndReport, Failure> {
    if let Some(id) = cpu {
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            return Err(format!("cannot pin to CPU {id}").into());
        }
    }
    f()
}

/// The errors, the one that stopped the run first: an end that only stopped because its peer
/// failed comes second.
fn first_failure(server: Option<Failure>, client: Option<Failure>) -> String {
    let mut errs: Vec<Failure> = [server, client].into_iter().flatten().collect();
    errs.sort_by_key(|f| f.peer_gone);
    errs.into_iter().map(|f| f.msg).collect::<Vec<_>>().join("; ")
}

/// Checks the options against the device's limits.
fn validate(dev: &Device, o: &Opts, gid_idx: u32) -> Result<(), String> {
    if o.size == 0 || o.iters == 0 || o.rx_depth == 0 {
        return Err("size, iters and rx-depth must be positive".into());
    }
    if let Some(cpu) = o.pin {
        let cpus: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().iter().map(|c| c.id).collect();
        if !cpus.contains(&cpu) {
            return Err(format!("--pin {cpu}: not a CPU this process may run on (it may use {cpus:?})"));
        }
    }
    if Mtu::from_bytes(o.mtu).is_none() {
        return Err(format!("invalid MTU {} (256, 512, 1024, 2048, 4096)", o.mtu));
    }
    let attr = dev.query_device();
    let port = dev.query_port(o.ib_port).map_err(|_| "Couldn't get port info".to_string())?;
    let p = o.ib_port;
    if o.mtu > port.active_mtu {
        return Err(format!("path MTU {} exceeds port {p}'s active_mtu {}", o.mtu, port.active_mtu));
    }
    if o.size as u64 > u64::from(port.max_msg_sz) {
        return Err(format!("message size {} exceeds port {p}'s max_msg_sz {}", o.size, port.max_msg_sz));
    }
    if gid_idx >= port.gid_tbl_len.min(attr.gid_tbl_len) {
        return Err(format!("can't read sgid of index {gid_idx}"));
    }
    if (o.size as u64).saturating_mul(2) > attr.max_mr_size {
        return Err(format!("two messages of {} bytes exceed max_mr_size {}", o.size, attr.max_mr_size));
    }
    if o.rx_depth > attr.max_qp_wr || o.rx_depth >= attr.max_cqe {
        return Err(format!(
            "rx-depth {} exceeds the device's limits (max_qp_wr {}; max_cqe {} for rx-depth + 1)",
            o.rx_depth, attr.max_qp_wr, attr.max_cqe
        ));
    }
    Ok(())
}

/// Prints what this tool adds (payloads checked; with `-e`, events and CPU time), then
/// `ibv_rc_pingpong`'s two result lines, last, so scripts that read those find them as they do
/// with the C tool.
fn print_report(o: &Opts, wall: Duration, cpu: Duration, s: &EndReport, c: &EndReport) {
    let secs = wall.as_secs_f64();
    println!("payload verified: {} messages of {} bytes", s.verified + c.verified, o.size);
    if o.events {
        let (cpu, pct) = (cpu.as_secs_f64(), 100.0 * cpu.as_secs_f64() / secs);
        println!(
            "completion events waited for: {} (server {}, client {}); process CPU time {cpu:.3} s = {pct:.0}% of wall time {secs:.3} s",
            s.events + c.events,
            s.events,
            c.events
        );
    }
    print_result_lines(o, wall);
}

/// `ibv_rc_pingpong`'s two result lines: bytes both ways, and iterations, over `wall`.
pub(crate) fn print_result_lines(o: &Opts, wall: Duration) {
    let secs = wall.as_secs_f64();
    let bytes = o.size as u64 * u64::from(o.iters) * 2;
    let iters = o.iters;
    println!("{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec", bytes as f64 * 8.0 / secs / 1e6);
    println!("{iters} iters in {secs:.2} seconds = {:.2} usec/iter", secs * 1e6 / f64::from(iters));
}

/// Each end to RTS towards the other, with the attributes `ibv_rc_pingpong` sets: port `-i`,
/// GID index `-g`, hop limit 1, min RNR timer 12, timeout 14, 7 retries, 7 RNR retries.
fn connect(a: &End, b: &End, gid: [u8; 16], gid_idx: u32, o: &Opts) -> ib_core::Result<()> {
    let access = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    for (me, peer) in [(a, b), (b, a)] {
        me.qp.modify_to_init(o.ib_port, access)?;
        let grh = GlobalRoute { dgid: gid, sgid_index: gid_idx as u8, hop_limit: 1, ..Default::default() };
        let ah = AhAttr { grh, is_global: true, port_num: o.ib_port, sl: o.sl, ..Default::default() };
        to_rts(&me.qp, me.psn, peer.qp.qpn(), peer.psn, ah, o)?;
    }
    Ok(())
}

/// `pp_connect_ctx`: the QP to RTR towards `dest_qpn` (its first PSN `rq_psn`, through `ah`),
/// then to RTS with send PSN `sq_psn`.
pub(crate) fn to_rts(qp: &Qp, sq_psn: u32, dest_qp_num: u32, rq_psn: u32, ah: AhAttr, o: &Opts) -> ib_core::Result<()> {
    let path_mtu = Mtu::from_bytes(o.mtu).ok_or(ib_core::Error::InvalidArgument("path MTU"))?;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu,
        dest_qp_num,
        rq_psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: ah,
        ..Default::default()
    };
    let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    qp.modify_qp(&rtr, m)?;
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    qp.modify_qp(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC)
}

/// A start PSN that differs per run and per QP, as `ibv_rc_pingpong` draws a random one.
fn initial_psn(qpn: u32) -> u32 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    (nanos ^ qpn.wrapping_mul(0x9e37_79b9)) & 0x00ff_ffff
}

impl End {
    pub(crate) fn new(dev: &Device, o: &Opts, abort: &Arc<AtomicBool>, remote: bool) -> ib_core::Result<Self> {
        let pd = dev.alloc_pd()?;
        let buf = UserBuffer::new(2 * o.size)?;
        let mr = pd.reg_buffer(&buf, access::LOCAL_WRITE)?;
        let channel = o.events.then(|| dev.create_comp_channel()).transpose()?;
        let cq = dev.create_cq(o.rx_depth + 1, channel.as_ref())?;
        let cap =
            QpCap { max_send_wr: 1, max_recv_wr: o.rx_depth, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let attr = QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        };
        let qp = pd.create_qp(&attr)?;
        let psn = initial_psn(qp.qpn());
        Ok(Self { qp, cq, mr, buf, channel, psn, abort: abort.clone(), remote, _pd: pd })
    }

    fn sge(&self, half: usize, size: usize) -> Sge {
        Sge { addr: self.mr.addr() + (half * size) as u64, length: size as u32, lkey: self.mr.lkey() }
    }

    fn post_recv(&self, size: usize) -> ib_core::Result<()> {
        self.qp.post_recv(&RecvWr { wr_id: RECV_WRID, sg_list: &[self.sge(1, size)] })
    }

    /// Posts message `seq`: this end's pattern, or (the server of two processes) `echo`, the
    /// message it received last.
    fn post_send(&self, seq: u32, client: bool, size: usize, echo: &[u8]) -> ib_core::Result<()> {
        match (self.remote, client) {
            (false, _) => self.buf.write(0, &payload::pattern(seq, client, size))?,
            (true, true) => self.buf.write(0, &payload::wire_pattern(seq, size, page_size()))?,
            (true, false) => self.buf.write(0, echo)?,
        }
        let wr = SendWr {
            wr_id: SEND_WRID,
            sg_list: &[self.sge(0, size)],
            opcode: WrOpcode::Send,
            signaled: true,
            solicited: false,
        };
        self.qp.post_send(&wr)
    }

    /// Posts `-r` receives and, with `-e`, arms the CQ: what `ibv_rc_pingpong` does before it
    /// exchanges connection data, so the peer's first message finds a receive.
    pub(crate) fn prepare(&self, o: &Opts) -> Result<(), Failure> {
        let err = |e: ib_core::Error| Failure::from(e.to_string());
        for _ in 0..o.rx_depth {
            self.post_recv(o.size).map_err(err)?;
        }
        if o.events {
            self.cq.req_notify(NotifyFlags::NEXT_COMPLETION).map_err(err)?;
        }
        Ok(())
    }

    /// The `ibv_rc_pingpong` loop for one end, after [`End::prepare`]; on failure, tells the
    /// other end to stop.
    pub(crate) fn run(&self, o: &Opts, client: bool) -> Result<EndReport, Failure> {
        let side = if client { "client" } else { "server" };
        self.exchange(o, client).map_err(|mut f| {
            self.abort.store(true, Ordering::Relaxed);
            f.msg = format!("{side}: {}", f.msg);
            f
        })
    }

    fn exchange(&self, o: &Opts, client: bool) -> Result<EndReport, Failure> {
        let err = |e: ib_core::Error| Failure::from(e.to_string());
        let mut rep = EndReport::default();
        let mut routs = o.rx_depth;
        let (mut scnt, mut rcnt, mut pending) = (0u32, 0u32, RECV_WRID);
        let mut last = vec![0u8; o.size];
        if client {
            self.post_send(0, true, o.size, &last).map_err(err)?;
            pending |= SEND_WRID;
        }
        let mut wc = [Wc::default(); 2];
        while scnt < o.iters || rcnt < o.iters {
            let n = self.next_completions(o, &mut wc, &mut rep)?;
            for w in &wc[..n] {
                self.check_wc(w, rcnt, client, &mut last, &mut rep)?;
                match w.wr_id {
                    SEND_WRID => scnt += 1,
                    _ => {
                        rcnt += 1;
                        routs -= 1;
                        if routs <= 1 {
                            for _ in routs..o.rx_depth {
                                self.post_recv(o.size).map_err(err)?;
                            }
                            routs = o.rx_depth;
                        }
                    }
                }
                pending &= !w.wr_id;
                if scnt < o.iters && pending == 0 {
                    self.post_send(scnt, client, o.size, &last).map_err(err)?;
                    pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        Ok(rep)
    }

    /// Polls; when the CQ is empty, busy mode polls again (yielding the CPU: the device model
    /// runs in this process) and event mode sleeps for a CQ event, acknowledges it and re-arms
    /// before polling again. The CQ was armed before the first poll, so a completion is either
    /// found by a poll after an arm or raises that arm's event: none is missed (IBTA: CQEs
    /// queued before an arm raise no event).
    fn next_completions(&self, o: &Opts, wc: &mut [Wc], rep: &mut EndReport) -> Result<usize, Failure> {
        let timeout = Duration::from_secs(o.timeout_s);
        let start = Instant::now();
        loop {
            let n = self.cq.poll(wc).map_err(|e| format!("poll_cq: {e}"))?;
            if n > 0 {
                return Ok(n);
            }
            if self.abort.load(Ordering::Relaxed) {
                return Err(Failure { msg: "stopped: the other end failed".into(), peer_gone: true });
            }
            if start.elapsed() > timeout {
                return Err(self.stuck("no completion").into());
            }
            let Some(ch) = &self.channel else {
                thread::yield_now();
                continue;
            };
            match ch.get_cq_event(WAIT_SLICE) {
                Ok(cq) => {
                    rep.events += 1;
                    cq.ack_events(1);
                    self.cq.req_notify(NotifyFlags::NEXT_COMPLETION).map_err(|e| e.to_string())?;
                }
                Err(ib_core::Error::Timeout) => {}
                Err(e) => return Err(format!("waiting for a CQ event: {e}").into()),
            }
        }
    }

    /// An error message with what the CQ looks like, for a wait that ended without a completion.
    fn stuck(&self, what: &str) -> String {
        let mut wc = [Wc::default(); 4];
        let queued = self.cq.poll(&mut wc).map(|n| n.to_string()).unwrap_or_else(|e| e.to_string());
        let armed = match self.cq.armed() {
            Some(ArmKind::Next) => "armed for the next completion",
            Some(ArmKind::Solicited) => "armed for a solicited completion",
            None => "not armed",
        };
        format!("{what} (CQ {}: {armed}, CQEs queued: {queued})", self.cq.handle())
    }

    /// Checks a completion; a receive's payload (into `got`) against what the peer sends
    /// (`payload.rs`).
    fn check_wc(&self, w: &Wc, rcnt: u32, client: bool, got: &mut [u8], rep: &mut EndReport) -> Result<(), Failure> {
        if w.status != WcStatus::Success {
            return Err(format!("Failed status {} for wr_id {}", w.status, w.wr_id).into());
        }
        match (w.wr_id, w.opcode) {
            (SEND_WRID, WcOpcode::Send) => Ok(()),
            (RECV_WRID, WcOpcode::Recv) => {
                let size = got.len();
                if w.byte_len as usize != size {
                    return Err(format!("message {rcnt}: {} bytes, expected {size}", w.byte_len).into());
                }
                self.buf.read(size, got).map_err(|e| e.to_string())?;
                let ok = match (self.remote, client) {
                    (false, _) => *got == payload::pattern(rcnt, !client, size),
                    (true, true) => *got == payload::wire_pattern(rcnt, size, page_size()),
                    (true, false) => payload::server_accepts(got, rcnt, page_size()),
                };
                if !ok {
                    return Err(format!("message {rcnt}: payload differs from what was sent").into());
                }
                rep.verified += 1;
                Ok(())
            }
            (id, op) => Err(format!("unexpected completion: wr_id {id}, opcode {op:?}").into()),
        }
    }
}

pub(crate) fn gid_str(g: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_failure_is_reported_first() {
        let gone = Failure { msg: "server: stopped".into(), peer_gone: true };
        let root = Failure::from("client: LocLenErr".to_string());
        assert_eq!(first_failure(Some(gone), Some(root)), "client: LocLenErr; server: stopped");
    }
}
