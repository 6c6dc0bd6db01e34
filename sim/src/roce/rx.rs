//! The receive thread `pvrdma-roce`: waits on the port's sockets (a bounded `poll`), checks each
//! datagram (ICRC, P_Key, destination QP, sender) and hands it to the QP's responder (requests)
//! or requester (ACKs and READ responses); between packets it runs the requesters' timers and
//! releases a packet the link held back. Whatever arrives is dropped and counted, never trusted.

use super::link::{Faults, Incoming};
use super::path::{self, Path};
use super::requester::Done;
use super::responder::{Ctx, Responder};
use super::{complete, release, sys, RocePort};
use crate::backend::Backend;
use crate::ctx::Effects;
use crate::qp::Qp;
use pvrdma_abi::verbs::qp_state;
use roce_wire::{opcode as op, IpContext, Packet, WireError};
use std::cell::Cell;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest the thread waits before looking at its stop flag and timers again.
const IDLE_WAIT: Duration = Duration::from_millis(5);
/// Most datagrams taken from one socket before the timers run again.
const BATCH: usize = 64;
/// How often the responder state of QPs that are gone or reset is forgotten.
const FORGET_EVERY: Duration = Duration::from_secs(1);
/// Mixed into the fault seed for the receiving direction (the sending one uses the seed as is).
const RX_STREAM: u64 = 0x5278_5278_5278_5278;
/// Largest datagram read: a UDP payload (an MTU of 4096 plus headers fits with room to spare).
const MAX_DATAGRAM: usize = 1 << 16;

/// The thread's body: runs until the device is dropped ([`RocePort::stop`]).
pub fn run(core: Arc<Backend>, port: Arc<RocePort>) {
    let port = &*port;
    let faults = core.cfg.roce.as_ref().map(|r| r.faults.clone()).unwrap_or_default();
    let mut rx = Receiver {
        responders: HashMap::new(),
        reserved: Cell::new(0),
        buf: vec![0u8; MAX_DATAGRAM],
        faults: Faults::new(&faults, RX_STREAM),
    };
    let mut ready = Vec::new();
    let mut next_timer: Option<Instant> = None;
    let mut next_forget = Instant::now() + FORGET_EVERY;
    let mut reading = false;
    let socks: Vec<&std::net::UdpSocket> = port.socks.iter().map(|s| &s.udp).collect();
    while !port.stopped() {
        let now = Instant::now();
        let wait = next_timer.map_or(IDLE_WAIT, |t| t.saturating_duration_since(now).min(IDLE_WAIT));
        // READ responses still to send: look at the sockets, do not wait on them.
        let wait = if reading { Duration::ZERO } else { wait };
        if sys::poll_readable(&socks, wait, &mut ready).is_err() {
            std::thread::sleep(IDLE_WAIT);
        }
        let mut fx = Effects::default();
        for i in 0..port.socks.len() {
            if ready.get(i).copied().unwrap_or(false) {
                rx.drain(&core, port, i, &mut fx);
            }
        }
        reading = rx.pump_reads(&core, port, &mut fx);
        port.release_held(&core);
        rx.release_held(&core, port, &mut fx);
        next_timer = port.tick(&core, &mut fx);
        if now >= next_forget {
            rx.forget_gone(&core);
            next_forget = now + FORGET_EVERY;
        }
        core.settle(fx);
    }
}

/// The receive thread's own state.
struct Receiver {
    /// Responder state per QPN (replaced when the QP's uid or connection changes).
    responders: HashMap<u32, Responder>,
    /// What the responders' SENDs in progress hold ([`Ctx::reserved`]).
    reserved: Cell<u64>,
    buf: Vec<u8>,
    /// The link's faults on what arrives.
    faults: Faults<Incoming>,
}

impl Receiver {
    /// Drops the responder state of QPs destroyed or reset since (a message in progress holds
    /// up to a receive WQE's length), as [`RocePort::tick`] drops their requesters.
    fn forget_gone(&mut self, core: &Backend) {
        let reserved = &self.reserved;
        self.responders.retain(|&qpn, r| {
            let live = core.qp(qpn).is_some_and(|q| (q.uid, q.connection()) == (r.uid, r.conn));
            if !live {
                r.release(reserved);
            }
            live
        });
    }

    /// Sends the next burst of every READ being answered (a QP no longer connected stops
    /// answering). Returns whether any responses remain.
    fn pump_reads(&mut self, core: &Backend, port: &RocePort, fx: &mut Effects) -> bool {
        let mut more = false;
        for (&qpn, r) in self.responders.iter_mut().filter(|(_, r)| r.is_reading()) {
            let Some((qp, attrs, path)) = responding_qp(core, port, qpn, r) else {
                r.stop_reading();
                continue;
            };
            let cx = Ctx { port, core, qp: &qp, attrs: &attrs, path, conn: r.conn, reserved: &self.reserved };
            more |= r.pump(&cx, fx);
        }
        more
    }

    /// Reads up to [`BATCH`] datagrams from socket `i`.
    fn drain(&mut self, core: &Backend, port: &RocePort, i: usize, fx: &mut Effects) {
        let sock = &port.socks[i];
        for _ in 0..BATCH {
            let (n, peer) = match sock.udp.recv_from(&mut self.buf) {
                Ok(got) => got,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => return core.count(|c| &c.roce_rx_errors),
            };
            if !self.faults.active() {
                let bytes = std::mem::take(&mut self.buf);
                self.handle(core, port, sock.local, peer, &bytes[..n], fx);
                self.buf = bytes;
                continue;
            }
            let mut out = Vec::new();
            let got = Incoming { sock: i, peer, bytes: self.buf[..n].to_vec() };
            self.faults.pass(core, got, &mut out);
            self.handle_all(core, port, out, fx);
        }
    }

    /// Handles the datagram the receiving direction's faults held back, if any.
    fn release_held(&mut self, core: &Backend, port: &RocePort, fx: &mut Effects) {
        let mut out = Vec::new();
        self.faults.release_held(&mut out);
        self.handle_all(core, port, out, fx);
    }

    /// Handles datagrams the receiving direction's faults let through.
    fn handle_all(&mut self, core: &Backend, port: &RocePort, got: Vec<Incoming>, fx: &mut Effects) {
        for g in got {
            if let Some(sock) = port.socks.get(g.sock) {
                self.handle(core, port, sock.local, g.peer, &g.bytes, fx);
            }
        }
    }

    /// Checks one datagram from `peer` to `local` and dispatches it.
    fn handle(
        &mut self,
        core: &Backend,
        port: &RocePort,
        local: SocketAddr,
        peer: SocketAddr,
        bytes: &[u8],
        fx: &mut Effects,
    ) {
        core.count(|c| &c.roce_rx_packets);
        // The Identification and DF of a received IPv4 packet are unknown: captured as the
        // model sends them (ID 0, DF), so a capture between two models verifies throughout.
        let ip = IpContext::new(peer, local);
        if let Some(cap) = &port.capture {
            if !cap.write(&ip, bytes) {
                core.count(|c| &c.roce_pcap_errors);
            }
        }
        let checked = peer.is_ipv6().then_some(&ip);
        if roce_wire::ud::is_ud(bytes) {
            return super::ud::receive(core, local, peer, bytes, checked, fx);
        }
        let pkt = match roce_wire::decode(bytes, checked) {
            Ok(pkt) => pkt,
            Err(WireError::BadIcrc) => return core.count(|c| &c.roce_rx_dropped_icrc),
            Err(_) => return core.count(|c| &c.roce_rx_dropped_malformed),
        };
        if pkt.hdr.bth.pkey != super::message::PKEY {
            return core.count(|c| &c.roce_rx_dropped_pkey);
        }
        let Some((qp, attrs, path)) = connected_qp(core, port, pkt.hdr.bth.dest_qp, peer) else {
            return core.count(|c| &c.roce_rx_dropped_qp);
        };
        let conn = qp.connection();
        match pkt.hdr.bth.opcode {
            op::RC_ACKNOWLEDGE
            | op::RC_ATOMIC_ACKNOWLEDGE
            | op::RC_RDMA_READ_RESPONSE_FIRST
            | op::RC_RDMA_READ_RESPONSE_MIDDLE
            | op::RC_RDMA_READ_RESPONSE_LAST
            | op::RC_RDMA_READ_RESPONSE_ONLY => on_response(core, port, &qp, conn, &pkt, fx),
            _ => {
                let r = self.responders.entry(qp.handle).or_insert_with(|| Responder::new(qp.uid, conn, &attrs));
                if (r.uid, r.conn) != (qp.uid, conn) {
                    r.release(&self.reserved);
                    *r = Responder::new(qp.uid, conn, &attrs);
                }
                let cx = Ctx { port, core, qp: &qp, attrs: &attrs, path, conn, reserved: &self.reserved };
                r.on_request(&cx, &pkt.hdr, pkt.payload, fx);
            }
        }
    }
}

/// The QP `qpn` if it is in RTR or RTS and connected to `peer` (its `dgid` is the sender's
/// address), with its attributes and path.
fn connected_qp(
    core: &Backend,
    port: &RocePort,
    qpn: u32,
    peer: SocketAddr,
) -> Option<(Arc<Qp>, pvrdma_abi::verbs::QpAttr, Path)> {
    let qp = core.qp(qpn)?;
    let (state, attrs) = qp.transport_attrs()?;
    if !matches!(state, qp_state::RTR | qp_state::RTS | qp_state::SQD) {
        return None;
    }
    let path = path::resolve(core, &port.socks, port.udp_port, &attrs).ok()?;
    (path.dst.ip() == peer.ip()).then_some((qp, attrs, path))
}

/// The QP responder `r` answers for, if it is still the same QP and connection, in RTR or RTS,
/// with its attributes and path.
fn responding_qp(
    core: &Backend,
    port: &RocePort,
    qpn: u32,
    r: &Responder,
) -> Option<(Arc<Qp>, pvrdma_abi::verbs::QpAttr, Path)> {
    let qp = core.qp(qpn).filter(|q| (q.uid, q.connection()) == (r.uid, r.conn))?;
    let (state, attrs) = qp.transport_attrs()?;
    if !matches!(state, qp_state::RTR | qp_state::RTS | qp_state::SQD) {
        return None;
    }
    let path = path::resolve(core, &port.socks, port.udp_port, &attrs).ok()?;
    Some((qp, attrs, path))
}

/// An ACKNOWLEDGE, ATOMIC Acknowledge or READ response for QP `qp`'s requester (an atomic's
/// original value is placed as a READ response's data is, little-endian as in host memory).
fn on_response(core: &Backend, port: &RocePort, qp: &Qp, conn: u64, pkt: &Packet<'_>, fx: &mut Effects) {
    let Some(req) = port.requester(qp, conn) else {
        return core.count(|c| &c.roce_rx_dropped_qp);
    };
    let mut done = Done::new();
    let mut orig = None;
    let (scatter, freed) = {
        let mut r = req.lock();
        let scatter = match pkt.hdr.bth.opcode {
            op::RC_ACKNOWLEDGE => {
                match pkt.hdr.aeth {
                    Some(aeth) => r.on_ack(port, core, pkt.hdr.bth.psn, aeth, &mut done),
                    None => core.count(|c| &c.roce_rx_dropped_malformed),
                }
                None
            }
            op::RC_ATOMIC_ACKNOWLEDGE => {
                let answer = r.on_atomic_ack(port, core, &pkt.hdr, &mut done);
                orig = answer.map(|(_, value)| value.to_le_bytes());
                answer.map(|(seq, _)| (seq, 0))
            }
            _ => r.on_read_response(port, core, &pkt.hdr, pkt.payload.len(), &mut done),
        };
        (scatter, r.take_freed())
    };
    release(core, freed, fx);
    // The messages this response acknowledges complete first: a READ whose data cannot be
    // placed then moves the QP to ERR without flushing what the peer already acknowledged. The
    // READ's own completion comes after its data.
    let own = scatter.map(|(seq, _)| seq);
    let (own_done, earlier): (Done, Done) = done.into_iter().partition(|&(seq, _)| Some(seq) == own);
    complete(core, qp, earlier, fx);
    if let Some((seq, offset)) = scatter {
        let data = orig.as_ref().map_or(pkt.payload, |b| &b[..]);
        super::read_response(core, qp, seq, offset, data, fx);
    }
    complete(core, qp, own_done, fx);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvrdma_abi::verbs::QpAttr;
    use zerocopy::FromZeros;

    #[test]
    fn the_responder_state_of_a_qp_that_is_gone_is_forgotten() {
        let core = Backend::for_tests(crate::SimConfig::default());
        let mut rx = Receiver {
            responders: HashMap::new(),
            reserved: Cell::new(0),
            buf: Vec::new(),
            faults: Faults::new(&crate::roce::LinkFaults::default(), 0),
        };
        rx.responders.insert(0x99, Responder::new(7, 0, &QpAttr::new_zeroed()));
        rx.forget_gone(&core);
        assert!(rx.responders.is_empty());
    }
}
