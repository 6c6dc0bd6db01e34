//! The RoCE v2 port: the model's port speaking IBTA RC and UD transport over UDP 4791 (IBTA
//! Annex A17; UD datagrams in `ud`),
//! chosen with [`crate::SimConfig::roce`]; the in-process loopback (`port.rs`) stays the default.
//!
//! # Structure
//! - `socket` binds one UDP socket per address when the device is created (`sys` holds the
//!   socket options std lacks); `path` maps a QP's `sgid_index` and `dgid` to a socket and a
//!   peer address.
//! - `requester` (per QP, behind a lock: the SQ drain posts, the receive thread acknowledges and
//!   retransmits) cuts messages into packets (`message`) and keeps them until acknowledged;
//!   `responder` (per QP, owned by the receive thread) executes requests and acknowledges them.
//! - `link` injects faults on what is sent and received, `capture` writes the pcap file.
//! - `rx`: the receive thread `pvrdma-roce`, one per device: it waits on the sockets with a
//!   bounded `poll`, checks and dispatches each packet, and runs the requesters' timers; it stops
//!   when the device is dropped.
//!
//! # Locks (inside the device's order, `device.rs`)
//! A QP's state lock, then the requester map (a leaf but for creating a requester), then a
//! requester's lock (the SQ drain posts under the QP's lock), then the leaves: the link, the
//! capture. Nobody calls into a QP while holding a requester's lock: the requester returns its
//! completions and the caller applies them after.
//!
//! # What the port holds
//! A requester keeps each message's gathered copy until it is acknowledged (for
//! retransmission); the device's wire budget ([`crate::SimConfig::device_bytes_in_flight`],
//! `device_packets_in_flight`) bounds them as it bounds the loopback's packets. A requester has
//! at most 128 unacknowledged PSNs on the wire (AckReq on every message's last packet and every
//! 32nd packet). A responder buffers one SEND at a time, at most its receive WQE's length plus
//! one byte and at most `max_msg_sz` (16 MiB); the responders' SENDs in progress together count
//! at most `device_bytes_in_flight` (a SEND's first packet past it is RNR NAKed). A responder
//! answers one READ at a time, reading each response from the MR as it sends it, 64 responses
//! between the packets the receive thread takes in (so a long READ holds up no other QP's
//! packets for its whole length).
//!
//! # Where the model differs
//! - The ICRC of an IPv4 packet read from a UDP socket is not checked: its IPv4 Identification
//!   is inside the ICRC and a UDP socket never shows it (rxe-peer fact 4). IPv6 ICRCs always are.
//! - Only P_Key 0xffff is accepted and sent (the port's one-entry P_Key table).
//! - A remote access error or an invalid request (a length the path MTU does not allow, a bad
//!   opcode sequence) moves the responder's QP to ERR (IBTA Class C, as rxe; the loopback has no
//!   invalid requests): its receive WQEs are flushed, where rxe completes the one a refused SEND
//!   would have taken with `REM_INV_REQ_ERR`.

mod capture;
mod error;
mod link;
mod message;
pub(crate) mod path;
mod requester;
mod responder;
mod rx;
mod socket;
pub(crate) mod sys;
mod ud;

use crate::backend::{Backend, Transport};
use crate::ctx::Effects;
use crate::packet::{Op, Packet};
use crate::qp::Qp;
use link::{Link, Outgoing};
use message::Kind;
use parking_lot::Mutex;
use pvrdma_abi::verbs::QpAttr;
use requester::{Done, Requester};
use roce_wire::{Headers, IpContext};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use crate::config::{LinkFaults, RoceConfig};
pub use error::RoceError;
pub(crate) use rx::run;

/// The UDP destination port of RoCE v2 (IBTA A17.4.3).
pub use roce_wire::ROCE_V2_UDP_PORT;

/// The port of a device whose [`crate::SimConfig::roce`] is set.
pub(crate) struct RocePort {
    udp_port: u16,
    socks: Vec<socket::Socket>,
    link: Link,
    capture: Option<capture::Capture>,
    requesters: Mutex<HashMap<u32, Entry>>,
    stop: AtomicBool,
}

/// A QP's requester, with the QP's uid and connection (`Qp::connection`) it belongs to.
struct Entry {
    uid: u64,
    conn: u64,
    req: Arc<Mutex<Requester>>,
}

impl RocePort {
    /// Binds the sockets and creates the capture file.
    pub fn open(cfg: &RoceConfig) -> Result<Self, RoceError> {
        let socks = socket::bind_all(&cfg.addrs, cfg.udp_port)?;
        let capture = cfg.pcap.as_deref().map(capture::Capture::create).transpose()?;
        Ok(Self {
            udp_port: cfg.udp_port,
            socks,
            link: Link::new(&cfg.faults),
            capture,
            requesters: Mutex::default(),
            stop: AtomicBool::new(false),
        })
    }

    /// A port that could not open: no socket, so every send fails (`LOC_QP_OP_ERR`).
    pub fn unbound(cfg: &RoceConfig) -> Self {
        Self {
            udp_port: cfg.udp_port,
            socks: Vec::new(),
            link: Link::new(&LinkFaults::default()),
            capture: None,
            requesters: Mutex::default(),
            stop: AtomicBool::new(false),
        }
    }

    /// Whether a receive thread has sockets to wait on.
    pub fn is_bound(&self) -> bool {
        !self.socks.is_empty()
    }

    /// Tells the receive thread to exit.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// QP `qp`'s requester for its current connection, created on its first message.
    fn requester_for(
        &self,
        core: &Backend,
        qp: &Qp,
        a: &QpAttr,
        fx: &mut Effects,
    ) -> Result<Arc<Mutex<Requester>>, u32> {
        let key = (qp.uid, qp.connection());
        let mut map = self.requesters.lock();
        match map.get(&qp.handle) {
            Some(e) if (e.uid, e.conn) == key => Ok(e.req.clone()),
            old => {
                // An earlier connection's messages give their budget back.
                if let Some(e) = old {
                    let mut g = e.req.lock();
                    g.forget_all();
                    release(core, g.take_freed(), fx);
                }
                let path = path::resolve(core, &self.socks, self.udp_port, a)?;
                let req = Arc::new(Mutex::new(Requester::new(path, a)));
                map.insert(qp.handle, Entry { uid: key.0, conn: key.1, req: req.clone() });
                Ok(req)
            }
        }
    }

    /// The requester of QP `qp` in connection `conn`, if it has one.
    fn requester(&self, qp: &Qp, conn: u64) -> Option<Arc<Mutex<Requester>>> {
        let map = self.requesters.lock();
        let e = map.get(&qp.handle).filter(|e| (e.uid, e.conn) == (qp.uid, conn))?;
        Some(e.req.clone())
    }

    /// Encodes one packet for `path` and puts it through the link's faults onto the wire (and
    /// into the capture). A packet that cannot be encoded or sent is counted
    /// (`roce_tx_errors`): the peer sees a loss, which the transport recovers from.
    pub fn send(&self, core: &Backend, path: &path::Path, hdr: &Headers, payload: &[u8]) {
        let Some(sock) = self.socks.get(path.sock) else {
            return;
        };
        let ip = tx_context(sock.local, path.dst);
        let mut bytes = Vec::with_capacity(payload.len() + 64);
        if roce_wire::encode(hdr, payload, &ip, &mut bytes).is_err() {
            return core.count(|c| &c.roce_tx_errors);
        }
        let mut out = Vec::new();
        self.link.pass(core, Outgoing { sock: path.sock, dst: path.dst, bytes }, &mut out);
        self.transmit(core, out);
    }

    /// Writes packets the link let through to their sockets.
    fn transmit(&self, core: &Backend, out: Vec<Outgoing>) {
        for o in out {
            let Some(sock) = self.socks.get(o.sock) else {
                continue;
            };
            if let Some(cap) = &self.capture {
                if !cap.write(&tx_context(sock.local, o.dst), &o.bytes) {
                    core.count(|c| &c.roce_pcap_errors);
                }
            }
            match sock.udp.send_to(&o.bytes, o.dst) {
                Ok(_) => core.count(|c| &c.roce_tx_packets),
                Err(_) => core.count(|c| &c.roce_tx_errors),
            }
        }
    }

    /// Sends the packet the link held back, if any (the link went idle).
    fn release_held(&self, core: &Backend) {
        let mut out = Vec::new();
        self.link.release_held(&mut out);
        self.transmit(core, out);
    }

    /// Runs every requester's timers; forgets the requesters of QPs that are gone, reset or no
    /// longer in RTS or SQD (a draining QP finishes what it sent). Returns the earliest instant a timer is due next.
    fn tick(&self, core: &Backend, fx: &mut Effects) -> Option<Instant> {
        let all: Vec<(u32, u64, u64, Arc<Mutex<Requester>>)> =
            self.requesters.lock().iter().map(|(k, e)| (*k, e.uid, e.conn, e.req.clone())).collect();
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        for (qpn, uid, conn, req) in all {
            use pvrdma_abi::verbs::qp_state::{RTS, SQD};
            let live =
                core.qp(qpn).filter(|q| q.uid == uid && q.connection() == conn && matches!(q.state(), RTS | SQD));
            let Some(qp) = live else {
                self.forget(core, qpn, &req, fx);
                continue;
            };
            let mut done = Done::new();
            let (due, freed) = {
                let mut g = req.lock();
                g.tick(self, core, now, &mut done);
                (g.next_deadline(), g.take_freed())
            };
            release(core, freed, fx);
            next = match (next, due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            complete(core, &qp, done, fx);
        }
        next
    }

    /// Removes requester `req` of QP `qpn` (unless another replaced it meanwhile).
    fn forget(&self, core: &Backend, qpn: u32, req: &Arc<Mutex<Requester>>, fx: &mut Effects) {
        let mut map = self.requesters.lock();
        if map.get(&qpn).is_some_and(|e| Arc::ptr_eq(&e.req, req)) {
            map.remove(&qpn);
        }
        drop(map);
        let mut g = req.lock();
        g.forget_all();
        release(core, g.take_freed(), fx);
    }
}

impl Transport for RocePort {
    /// Sends the message `pkt` of QP `qp` (with attributes `a`, in RTS, its state lock held by
    /// the caller). Errors: the completion status of a WQE whose path the port cannot serve
    /// (`path::resolve`).
    fn post(&self, core: &Backend, qp: &Qp, a: &QpAttr, pkt: Packet, fx: &mut Effects) -> Result<(), u32> {
        if let Some(d) = pkt.ud.as_deref() {
            return ud::send(self, core, &pkt, d);
        }
        let req = self.requester_for(core, qp, a, fx)?;
        let imm = |b: Option<[u8; 4]>| b.map(u32::from_be_bytes);
        let kind = match pkt.op {
            Op::Send { imm: i } => Kind::Send { imm: imm(i) },
            Op::Write { remote_addr, rkey, imm: i } => Kind::Write { va: remote_addr, rkey, imm: imm(i) },
            Op::Read { remote_addr, rkey, len } => Kind::Read { va: remote_addr, rkey, len },
            Op::Atomic { remote_addr, rkey, op } => Kind::Atomic { va: remote_addr, rkey, op },
        };
        req.lock().post(self, core, pkt.seq, kind, pkt.payload, pkt.solicited);
        Ok(())
    }

    /// Hands QP `qp`'s requester (if it has one in its current connection) the attributes `a`
    /// MODIFY_QP just changed in SQD ([`Requester::reconfigure`]). Called under the QP's lock.
    fn reconfigure(&self, core: &Backend, qp: &Qp, a: &QpAttr) {
        let Some(req) = self.requester(qp, qp.connection()) else { return };
        let path = path::resolve(core, &self.socks, self.udp_port, a).ok();
        req.lock().reconfigure(a, path);
    }
}

/// Scatters a READ response's `data` at `offset` of the READ `seq`'s local buffers; a local
/// error completes the READ with it (the QP then goes to ERR).
fn read_response(core: &Backend, qp: &Qp, seq: u64, offset: u32, data: &[u8], fx: &mut Effects) {
    if let Err(status) = qp.read_response(core, seq, offset, data) {
        qp.complete_send(core, seq, status, fx);
    }
}

/// Returns the device's wire budget of messages a requester let go (the loopback's budget,
/// `PortQueue::try_reserve`, bounds the RoCE port's memory too).
fn release(core: &Backend, freed: Vec<u64>, fx: &mut Effects) {
    for len in freed {
        core.port.unreserve(len, fx);
    }
}

/// Hands the requester's decisions to the QP (its lock taken here, the requester's released).
fn complete(core: &Backend, qp: &Qp, done: Done, fx: &mut Effects) {
    for (seq, status) in done {
        qp.complete_send(core, seq, status, fx);
    }
}

/// The IP context of a packet the port sends from `src` to `dst`: IPv4 with Identification 0 and
/// DF set (`IP_PMTUDISC_DO` on an unconnected socket: rxe-peer fact 4).
fn tx_context(src: SocketAddr, dst: SocketAddr) -> IpContext {
    IpContext::new(src, dst)
}
