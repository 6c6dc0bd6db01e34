//! `hca pingpong`: RC SEND/RECV ping-pong between two QPs of one device, shaped like
//! `ibv_rc_pingpong` (same options, same result lines), with both ends in this process: the
//! client end sends first, each end sends its next message only when its previous send has
//! completed and the peer's message has arrived, and every received payload is checked.

use crate::usage::process_cpu_time;
use clap::Args;
use hca::{
    CompChannel, Cq, Device, Mr, NotifyFlags, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr,
    Sge, Wc, WcOpcode, WcStatus, WrOpcode,
};
use pvrdma_abi::verbs::access;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Options, named as `ibv_rc_pingpong` names them.
#[derive(Args, Clone)]
pub struct Opts {
    /// Size of each message, in bytes.
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    size: usize,
    /// Number of exchanges (each end sends and receives this many messages).
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,
    /// Number of receives to keep posted.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// Path MTU in bytes (256 .. 4096).
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: u32,
    /// Sleep on CQ events instead of busy polling.
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Give up when no completion arrives for this many seconds.
    #[arg(long, default_value_t = 10)]
    timeout_s: u64,
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// One end: its verbs objects and the message buffers (send half, then receive half of one MR).
struct End {
    qp: Qp,
    cq: Cq,
    mr: Mr,
    channel: Option<CompChannel>,
    _pd: Pd,
}

/// What one end measured.
#[derive(Default)]
struct EndReport {
    events: u64,
    verified: u64,
}

/// Runs the ping-pong on `dev` and prints the result; `Err` (non-zero exit) on any failure.
pub fn run(dev: &Device, o: &Opts) -> Result<(), String> {
    validate(o)?;
    let gid = dev.query_gid(1, 0).map_err(|e| e.to_string())?;
    let server = Arc::new(End::new(dev, o).map_err(|e| format!("server setup: {e}"))?);
    let client = Arc::new(End::new(dev, o).map_err(|e| format!("client setup: {e}"))?);
    connect(&server, &client, gid, o).map_err(|e| format!("connect: {e}"))?;
    println!("  local address:  QPN {:#08x}, PSN 0x000000, GID {}", client.qp.qpn(), gid_str(&gid));
    println!("  remote address: QPN {:#08x}, PSN 0x000000, GID {}", server.qp.qpn(), gid_str(&gid));

    let cpu0 = process_cpu_time();
    let start = Instant::now();
    let (s, c) = (server.clone(), client.clone());
    let (o1, o2) = (o.clone(), o.clone());
    let srv = thread::spawn(move || s.run(&o1, false));
    let cli = thread::spawn(move || c.run(&o2, true));
    let cr = cli.join().map_err(|_| "client thread panicked".to_string())?;
    let sr = srv.join().map_err(|_| "server thread panicked".to_string())?;
    let (sr, cr) = match (sr, cr) {
        (Ok(s), Ok(c)) => (s, c),
        (s, c) => {
            let errs: Vec<String> = [s.err(), c.err()].into_iter().flatten().collect();
            return Err(errs.join("; "));
        }
    };
    let wall = start.elapsed();
    let cpu = process_cpu_time().saturating_sub(cpu0);
    print_report(o, wall, cpu, &sr, &cr);
    Ok(())
}

fn validate(o: &Opts) -> Result<(), String> {
    if o.size == 0 || o.iters == 0 || o.rx_depth < 2 {
        return Err("size and iters must be positive and rx-depth at least 2".into());
    }
    if ![256, 512, 1024, 2048, 4096].contains(&o.mtu) {
        return Err(format!("invalid MTU {} (256, 512, 1024, 2048, 4096)", o.mtu));
    }
    Ok(())
}

fn print_report(o: &Opts, wall: Duration, cpu: Duration, s: &EndReport, c: &EndReport) {
    let secs = wall.as_secs_f64();
    let bytes = o.size as u64 * u64::from(o.iters) * 2;
    println!("{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec", bytes as f64 * 8.0 / secs / 1e6);
    println!("{} iters in {secs:.2} seconds = {:.2} usec/iter", o.iters, secs * 1e6 / f64::from(o.iters));
    println!("payload verified: {} messages of {} bytes", s.verified + c.verified, o.size);
    if o.events {
        let pct = 100.0 * cpu.as_secs_f64() / secs;
        println!(
            "completion events waited for: {} (server {}, client {}); CPU time {:.3} s = {pct:.0}% of wall time {secs:.3} s",
            s.events + c.events, s.events, c.events, cpu.as_secs_f64()
        );
    }
}

fn connect(a: &End, b: &End, gid: [u8; 16], o: &Opts) -> hca::Result<()> {
    let acc = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    for (me, peer) in [(a, b), (b, a)] {
        me.qp.modify_to_init(1, acc)?;
        me.qp.modify_to_rtr(peer.qp.qpn(), gid, 0, o.mtu)?;
        me.qp.modify_to_rts(0)?;
    }
    Ok(())
}

impl End {
    fn new(dev: &Device, o: &Opts) -> hca::Result<Self> {
        let pd = dev.alloc_pd()?;
        let mr = pd.reg_mr(2 * o.size, access::LOCAL_WRITE)?;
        let channel = o.events.then(|| dev.create_comp_channel());
        let cq = dev.create_cq(o.rx_depth + 1, channel.as_ref())?;
        let cap = QpCap { max_send_wr: 1, max_recv_wr: o.rx_depth, max_send_sge: 1, max_recv_sge: 1 };
        let attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap, qp_type: QpType::Rc, sq_sig_all: false };
        let qp = pd.create_qp(&attr)?;
        Ok(Self { qp, cq, mr, channel, _pd: pd })
    }

    fn sge(&self, half: usize, size: usize) -> Sge {
        Sge { addr: self.mr.addr() + (half * size) as u64, length: size as u32, lkey: self.mr.lkey() }
    }

    fn post_recv(&self, size: usize) -> hca::Result<()> {
        self.qp.post_recv(&RecvWr { wr_id: RECV_WRID, sg_list: &[self.sge(1, size)] })
    }

    fn post_send(&self, seq: u32, client: bool, size: usize) -> hca::Result<()> {
        self.mr.write(0, &pattern(seq, client, size))?;
        let wr = SendWr {
            wr_id: SEND_WRID,
            sg_list: &[self.sge(0, size)],
            opcode: WrOpcode::Send,
            signaled: true,
            solicited: false,
        };
        self.qp.post_send(&wr)
    }

    /// The `ibv_rc_pingpong` loop for one end.
    fn run(&self, o: &Opts, client: bool) -> Result<EndReport, String> {
        let side = if client { "client" } else { "server" };
        self.exchange(o, client).map_err(|e| format!("{side}: {e}"))
    }

    fn exchange(&self, o: &Opts, client: bool) -> Result<EndReport, String> {
        let err = |e: hca::Error| e.to_string();
        let mut rep = EndReport::default();
        let mut routs = o.rx_depth;
        for _ in 0..routs {
            self.post_recv(o.size).map_err(err)?;
        }
        if o.events {
            self.cq.req_notify(NotifyFlags::NEXT_COMPLETION).map_err(err)?;
        }
        let (mut scnt, mut rcnt, mut pending) = (0u32, 0u32, RECV_WRID);
        if client {
            self.post_send(0, true, o.size).map_err(err)?;
            pending |= SEND_WRID;
        }
        let mut wc = [Wc::default(); 2];
        while scnt < o.iters || rcnt < o.iters {
            let n = self.next_completions(o, &mut wc, &mut rep)?;
            for w in &wc[..n] {
                self.check_wc(w, rcnt, client, o.size, &mut rep)?;
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
                    self.post_send(scnt, client, o.size).map_err(err)?;
                    pending = RECV_WRID | SEND_WRID;
                }
            }
        }
        Ok(rep)
    }

    /// Polls; when the CQ is empty, busy mode polls again and event mode sleeps for a CQ event,
    /// acknowledges it and re-arms before polling again. The CQ was armed before the first poll,
    /// so a completion is either found by a poll after an arm or raises that arm's event: none is
    /// missed (IBTA: CQEs queued before an arm raise no event).
    fn next_completions(&self, o: &Opts, wc: &mut [Wc], rep: &mut EndReport) -> Result<usize, String> {
        let timeout = Duration::from_secs(o.timeout_s);
        let start = Instant::now();
        loop {
            let n = self.cq.poll(wc).map_err(|e| format!("poll_cq: {e}"))?;
            if n > 0 {
                return Ok(n);
            }
            match &self.channel {
                Some(ch) => {
                    ch.get_cq_event(timeout)
                        .map_err(|e| self.stuck(&format!("waiting for a CQ event: {e}")))?;
                    rep.events += 1;
                    self.cq.ack_events(1);
                    self.cq.req_notify(NotifyFlags::NEXT_COMPLETION).map_err(|e| e.to_string())?;
                }
                None if start.elapsed() > timeout => {
                    return Err(self.stuck("timed out polling for a completion"))
                }
                None => std::hint::spin_loop(),
            }
        }
    }

    /// An error message with what the CQ looks like, for a wait that ended without an event.
    fn stuck(&self, what: &str) -> String {
        let mut wc = [Wc::default(); 4];
        let queued = self.cq.poll(&mut wc).map(|n| n.to_string()).unwrap_or_else(|e| e.to_string());
        format!("{what} (CQ {} armed: {:?}, CQEs queued: {queued})", self.cq.handle(), self.cq.armed())
    }

    fn check_wc(&self, w: &Wc, rcnt: u32, client: bool, size: usize, rep: &mut EndReport) -> Result<(), String> {
        if w.status != WcStatus::Success {
            return Err(format!("work completion for wr_id {} failed: {:?}", w.wr_id, w.status));
        }
        match (w.wr_id, w.opcode) {
            (SEND_WRID, WcOpcode::Send) => Ok(()),
            (RECV_WRID, WcOpcode::Recv) => {
                if w.byte_len as usize != size {
                    return Err(format!("message {rcnt}: {} bytes, expected {size}", w.byte_len));
                }
                let mut got = vec![0u8; size];
                self.mr.read(size, &mut got).map_err(|e| e.to_string())?;
                if got != pattern(rcnt, !client, size) {
                    return Err(format!("message {rcnt}: payload differs from what was sent"));
                }
                rep.verified += 1;
                Ok(())
            }
            (id, op) => Err(format!("unexpected completion: wr_id {id}, opcode {op:?}")),
        }
    }
}

/// The payload of message `seq` from the client (or server) end: distinct per message and end.
fn pattern(seq: u32, from_client: bool, size: usize) -> Vec<u8> {
    let salt = if from_client { 0x5a } else { 0xa5 };
    let mut p: Vec<u8> = (0..size).map(|i| (i as u32).wrapping_mul(7).wrapping_add(seq * 31 + salt) as u8).collect();
    let tag = seq.to_le_bytes();
    let n = size.min(4);
    p[..n].copy_from_slice(&tag[..n]);
    p
}

fn gid_str(g: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_per_message_and_end() {
        assert_ne!(pattern(1, true, 64), pattern(2, true, 64));
        assert_ne!(pattern(1, true, 64), pattern(1, false, 64));
        assert_eq!(pattern(3, true, 1).len(), 1);
    }
}
