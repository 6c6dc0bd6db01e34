//! One end of the ping-pong: its verbs objects and message buffer, its loop, what it measured,
//! and the steps both modes share (the options checked, the GID read, the QP to RTS, the result
//! lines).

use super::Opts;
use crate::payload;
use crate::sys::page_size;
use ib_core::{
    access, AhAttr, ArmKind, CompChannel, Cq, Device, Mr, Mtu, NotifyFlags, Pd, Qp, QpAttr, QpAttrMask as M, QpCap,
    QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, UserBuffer, Wc, WcOpcode, WcStatus, WrOpcode,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

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
    pub(super) peer_gone: bool,
}

impl From<String> for Failure {
    fn from(msg: String) -> Self {
        Self { msg, peer_gone: false }
    }
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

/// `ibv_rc_pingpong`'s two result lines: bytes both ways, and iterations, over `wall`.
pub(crate) fn print_result_lines(o: &Opts, wall: Duration) {
    let secs = wall.as_secs_f64();
    let bytes = o.size as u64 * u64::from(o.iters) * 2;
    let iters = o.iters;
    println!("{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec", bytes as f64 * 8.0 / secs / 1e6);
    println!("{iters} iters in {secs:.2} seconds = {:.2} usec/iter", secs * 1e6 / f64::from(iters));
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
