//! The loopback port: its attributes (QUERY_PORT, QUERY_PKEY), its GID table (CREATE_BIND,
//! DESTROY_BIND), and the wire — a device thread named `pvrdma-port` that delivers each packet
//! `link_latency` after it was sent, in send order.
//!
//! With a link latency of 0 a packet is due when it is sent, and the thread that rang the
//! doorbell carries it to the receiver itself once the device's locks are released (as a NIC's
//! own engine would, with no extra hand-off): it claims the port ([`PortQueue::claim_due`]) when
//! nobody else is delivering, so deliveries stay one at a time and in send order, and gives the
//! port back after at most [`INLINE_JOBS`] jobs so a storm of other senders' packets goes to the
//! port thread rather than to one unlucky caller. The port thread is then not woken per packet:
//! it takes only what is handed off to it ([`PortQueue::hand_off`]) — what is left due when the
//! port is given back or when a command's effects sent a packet — so a consumer busy-polling on
//! every CPU never waits for it to be scheduled.
//!
//! A UD datagram (`Packet::ud`) goes to the QP its WQE named if the destination GID is bound
//! here, and is dropped and counted otherwise or when that QP refuses it (`qp/ud.rs`); it never
//! waits for a receive WQE, and its sender completes `SUCCESS` once it left the wire.
//!
//! Delivery (RC): the destination QP (by `dest_qp_num`) must be in RTR or RTS and point back at the
//! sender, and the destination GID must be bound on this port (the loopback wire reaches only
//! itself); otherwise the sender completes with `RETRY_EXC_ERR`, as a requester whose packets go
//! unanswered. A packet for a QP with no receive WQE posted waits on that QP (infinite RNR retry)
//! until its next RECV doorbell; later packets for the same QP queue behind it, keeping per-QP
//! order. An RDMA WRITE or READ is checked by R_Key at the destination ([`crate::mr`]); a
//! READ's data is scattered at the sender before its completion; a WRITE with immediate waits
//! for a receive WQE as a SEND does. The thread stops when the [`crate::SimDevice`] is dropped;
//! its waits are condvar waits with a bound.
//!
//! # How much the wire holds
//! Every packet is a copy of its message, so what the wire holds is bounded, as RC flow control
//! bounds it on a real link (a send WQE stays on the sender's SQ until it is delivered):
//! - per QP, by the sender (`qp.rs`): at most its SQ depth of sends outstanding (consumed, not yet
//!   completed) and at most [`crate::SimConfig::qp_bytes_in_flight`] payload bytes; past either,
//!   the device stops consuming that SQ until one of its sends completes;
//! - per device, here: at most [`crate::SimConfig::device_packets_in_flight`] packets and
//!   [`crate::SimConfig::device_bytes_in_flight`] payload bytes on the wire (in flight, parked
//!   for a receive WQE, or being delivered), one packet always allowed on an empty wire. A QP
//!   refused by this budget stops draining its SQ and is resumed when a packet leaves the wire.

use crate::device::{Core, Effects};
use crate::dsr::limits;
use crate::errno::{CmdResult, Errno};
use crate::qp::{Qp, Rx};
use parking_lot::{Condvar, Mutex};
use pvrdma_abi::cmd::{
    CreateBind, DestroyBind, NoopResp, QueryPkey, QueryPkeyResp, QueryPort, QueryPortResp,
};
use pvrdma_abi::verbs::{mtu, port_state, Gid, PortAttr};
use pvrdma_abi::wqe::wc_status;
use pvrdma_abi::PVRDMA_PKEY;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zerocopy::little_endian::{U16, U32};

/// Physical port state "LinkUp".
const PHYS_STATE_LINK_UP: u8 = 5;
/// Longest the port thread sleeps before re-checking its stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Most jobs a doorbell's thread delivers before it leaves the rest to the port thread.
pub(crate) const INLINE_JOBS: usize = 8;

/// What a request packet asks of the responder (IBTA 9.4: the RC operations the model carries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// SEND, with immediate data as on the wire for SEND with immediate (IBTA 9.4.1).
    Send {
        /// Immediate data (big-endian bytes).
        imm: Option<[u8; 4]>,
    },
    /// RDMA WRITE of the payload at `remote_addr` of the MR `rkey` names (IBTA 9.4.3); with
    /// immediate data it also consumes a receive WQE at the responder.
    Write {
        /// Virtual address in the responder's MR (the RETH's VA).
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// Immediate data (big-endian bytes) of RDMA WRITE with immediate.
        imm: Option<[u8; 4]>,
    },
    /// RDMA READ of `len` bytes at `remote_addr` of the MR `rkey` names (IBTA 9.4.4); the
    /// response data is scattered into the requester WQE's SGEs.
    Read {
        /// Virtual address in the responder's MR.
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// Bytes to read (the RETH's DMA length).
        len: u32,
    },
    /// COMPARE SWAP or FETCH ADD on the 8 bytes at `remote_addr` of the MR `rkey` names (IBTA
    /// 9.4.5): the responder returns the original value, written into the requester WQE's SGE.
    Atomic {
        /// Virtual address in the responder's MR (8-byte aligned).
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// The operation and its operands.
        op: crate::mem::Atomic64,
    },
}

/// One RC request message on the wire.
#[derive(Debug)]
pub struct Packet {
    /// Sender QPN.
    pub src: u32,
    /// Sender's unique id (a QPN may be reused).
    pub src_uid: u64,
    /// The send's sequence number on its QP.
    pub seq: u64,
    /// Its PSN on the loopback port (one per message, from the sender's `sq_psn`; the RoCE
    /// port numbers its packets itself).
    pub psn: u32,
    /// Destination QPN.
    pub dest: u32,
    /// Destination GID from the sender's address vector.
    pub dgid: Gid,
    /// The operation.
    pub op: Op,
    /// The solicited-event flag.
    pub solicited: bool,
    /// The gathered message of a SEND or WRITE; empty for a READ.
    pub payload: Vec<u8>,
    /// A UD datagram's DETH Q_Key and GRH (`None` for RC).
    pub ud: Option<Box<crate::qp::ud::Datagram>>,
}

#[derive(Default)]
struct Wire {
    /// Packets in flight, with the instant each arrives (monotonic: constant latency).
    in_flight: VecDeque<(Instant, Packet)>,
    /// QPs whose parked packets to retry.
    kicks: VecDeque<u32>,
    /// Packets waiting for a receive WQE, per destination QPN.
    parked: HashMap<u32, VecDeque<Packet>>,
    /// Packets on the wire (reserved, in flight, parked, or held by the port thread).
    packets: usize,
    /// Their payload bytes.
    bytes: u64,
    /// QPs whose SQ drain the device budget refused; resumed when a packet leaves the wire.
    starved: Vec<u32>,
    /// A thread (the port thread, or a doorbell's thread at latency 0) is delivering a job.
    busy: bool,
    /// At latency 0: work was left due with nobody to deliver it; the port thread takes it.
    handoff: bool,
    stop: bool,
}

/// The wire's queue, shared by the senders (doorbells) and the port thread. Its lock is a leaf.
pub struct PortQueue {
    wire: Mutex<Wire>,
    /// Wakes the port thread.
    cond: Condvar,
    /// Wakes [`PortQueue::wait_idle`] callers.
    idle: Condvar,
    max_packets: usize,
    max_bytes: u64,
    /// Link latency 0: doorbells' threads deliver; the port thread takes only hand-offs.
    inline: bool,
    /// When every packet is due at latency 0 (so that path reads no clock).
    epoch: Instant,
}

/// One unit of the port's work, taken by whoever holds the port.
pub(crate) enum Job {
    Packet(Packet),
    Retry(VecDeque<Packet>),
}

impl PortQueue {
    /// An empty wire holding at most `max_packets` packets and `max_bytes` payload bytes;
    /// `inline` for a link latency of 0 (see the module docs).
    pub fn new(max_packets: usize, max_bytes: u64, inline: bool) -> Self {
        Self {
            wire: Mutex::default(),
            cond: Condvar::new(),
            idle: Condvar::new(),
            max_packets,
            max_bytes,
            inline,
            epoch: Instant::now(),
        }
    }

    /// Reserves room on the wire for one message of `len` bytes that QP `qpn` is about to send
    /// (the device-wide budget). `false` if the wire is at its budget: the caller leaves the WQE
    /// posted and `qpn` is resumed ([`Effects::resume_starved`]) when a packet leaves the wire.
    /// An empty wire always takes one message.
    pub fn try_reserve(&self, qpn: u32, len: u64) -> bool {
        let mut w = self.wire.lock();
        let room = w.packets < self.max_packets
            && w.bytes.checked_add(len).is_some_and(|b| b <= self.max_bytes);
        if w.packets == 0 || room {
            w.packets += 1;
            w.bytes = w.bytes.saturating_add(len);
            return true;
        }
        if !w.starved.contains(&qpn) {
            w.starved.push(qpn);
        }
        false
    }

    /// Returns a reservation whose message was never sent (its WQE failed).
    pub fn unreserve(&self, len: u64, fx: &mut Effects) {
        self.release(len, fx);
    }

    /// A packet of `len` bytes left the wire (delivered, failed or dropped).
    fn release(&self, len: u64, fx: &mut Effects) {
        let mut w = self.wire.lock();
        w.packets = w.packets.saturating_sub(1);
        w.bytes = w.bytes.saturating_sub(len);
        if !w.starved.is_empty() {
            fx.resume_starved = true;
        }
    }

    /// Takes the QPs the budget refused (to resume their SQ drains).
    pub fn take_starved(&self) -> Vec<u32> {
        std::mem::take(&mut self.wire.lock().starved)
    }

    /// Puts `pkt` (reserved with [`PortQueue::try_reserve`]) on the wire; it arrives `latency`
    /// from now (saturating: a latency too long to represent never arrives).
    pub fn transmit(&self, pkt: Packet, latency: Duration) {
        let mut w = self.wire.lock();
        let at = if self.inline { self.epoch } else { osdep::deadline_after(latency) };
        w.in_flight.push_back((at, pkt));
        if !self.inline {
            self.cond.notify_all();
        }
    }

    /// Asks the port to retry (or fail) the packets parked for QP `qpn`, if any. While the port
    /// thread is busy it may be about to park a packet for `qpn` (it found no receive WQE just
    /// before the caller posted one), so a busy port is always kicked: no lost wake-up.
    pub fn kick_if_parked(&self, qpn: u32) {
        let mut w = self.wire.lock();
        let waiting = w.busy || w.parked.get(&qpn).is_some_and(|q| !q.is_empty());
        if waiting && !w.kicks.contains(&qpn) {
            w.kicks.push_back(qpn);
            if !self.inline {
                self.cond.notify_all();
            }
        }
    }

    /// Drops everything on the wire (device reset). Packets the port thread holds right now
    /// stay counted until it finishes them.
    pub fn clear(&self) {
        let mut w = self.wire.lock();
        let in_flight = std::mem::take(&mut w.in_flight);
        let parked = std::mem::take(&mut w.parked);
        let dropped = in_flight.iter().map(|(_, p)| p).chain(parked.values().flatten());
        let (n, bytes) =
            dropped.fold((0usize, 0u64), |(n, b), p| (n + 1, b + p.payload.len() as u64));
        w.packets = w.packets.saturating_sub(n);
        w.bytes = w.bytes.saturating_sub(bytes);
        w.kicks.clear();
        w.starved.clear();
        self.cond.notify_all();
        self.idle.notify_all();
    }

    /// Tells the port thread to exit.
    pub fn stop(&self) {
        self.wire.lock().stop = true;
        self.cond.notify_all();
        self.idle.notify_all();
    }

    /// Waits up to `timeout` until nothing is in flight and the thread is idle (parked packets do
    /// not count). Returns whether it became idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = osdep::deadline_after(timeout);
        let mut w = self.wire.lock();
        while w.busy || !w.in_flight.is_empty() || !w.kicks.is_empty() {
            if w.stop || self.idle.wait_until(&mut w, deadline).timed_out() {
                return !w.busy && w.in_flight.is_empty() && w.kicks.is_empty();
            }
        }
        true
    }

    /// Packets parked for QP `qpn` (for tests).
    pub fn parked(&self, qpn: u32) -> usize {
        self.wire.lock().parked.get(&qpn).map_or(0, |q| q.len())
    }

    /// The port thread's next job, waiting for one (and for the port to be free). `None` once
    /// stopped.
    fn next_job(&self) -> Option<Job> {
        let mut w = self.wire.lock();
        loop {
            if w.stop {
                self.idle.notify_all();
                return None;
            }
            let now = Instant::now();
            if !w.busy && (!self.inline || w.handoff) {
                if let Some(job) = Self::take_due(&mut w, now) {
                    return Some(job);
                }
                w.handoff = false;
            }
            // At latency 0 a packet in flight is its sender's to deliver until handed off (a
            // notify): waiting for its due time would spin.
            let wait_until = match w.in_flight.front() {
                Some((at, _)) if !w.busy && !self.inline => (*at).min(now + IDLE_WAIT),
                _ => now + IDLE_WAIT,
            };
            self.idle.notify_all();
            self.cond.wait_until(&mut w, wait_until);
        }
    }

    /// Claims the port for the calling thread and takes a job due now, if nobody else holds the
    /// port and one is due. The caller delivers it with [`run_job`] and then calls
    /// [`PortQueue::give_back`].
    pub(crate) fn claim_due(&self) -> Option<Job> {
        let mut w = self.wire.lock();
        if w.busy || w.stop {
            return None;
        }
        Self::take_due(&mut w, self.now())
    }

    /// Gives the port back after a job and the effects it had; the port thread takes whatever is
    /// left due.
    pub(crate) fn give_back(&self) {
        let mut w = self.wire.lock();
        w.busy = false;
        self.mark_handoff(&mut w);
        if self.inline && w.handoff {
            self.cond.notify_all();
        }
        self.idle.notify_all();
    }

    /// At latency 0, hands whatever is due to the port thread if nobody holds the port (whoever
    /// holds it looks again when it gives it back).
    pub(crate) fn hand_off(&self) {
        if !self.inline {
            return;
        }
        let mut w = self.wire.lock();
        if self.mark_handoff(&mut w) {
            self.cond.notify_all();
        }
    }

    /// The time packets are due against: any, at latency 0 (every packet is due when sent).
    fn now(&self) -> Instant {
        if self.inline {
            self.epoch
        } else {
            Instant::now()
        }
    }

    /// Marks work left due with the port free as the port thread's; whether it newly did.
    fn mark_handoff(&self, w: &mut Wire) -> bool {
        let due = !w.kicks.is_empty() || w.in_flight.front().is_some_and(|(at, _)| *at <= self.now());
        let newly = !w.handoff && !w.busy && due;
        w.handoff |= newly;
        newly
    }

    /// A kicked QP's parked packets, else the first packet due by `now`; marks the port busy.
    fn take_due(w: &mut Wire, now: Instant) -> Option<Job> {
        let job = if let Some(qpn) = w.kicks.pop_front() {
            Job::Retry(w.parked.remove(&qpn).unwrap_or_default())
        } else if w.in_flight.front().is_some_and(|(at, _)| *at <= now) {
            Job::Packet(w.in_flight.pop_front()?.1)
        } else {
            return None;
        };
        w.busy = true;
        Some(job)
    }

    /// Parks `pkts` (in order) for QP `qpn`, ahead of anything parked since.
    fn park_front(&self, qpn: u32, mut pkts: VecDeque<Packet>) {
        let mut w = self.wire.lock();
        let q = w.parked.entry(qpn).or_default();
        pkts.append(q);
        *q = pkts;
    }

    /// Parks `pkt` behind the packets already waiting for QP `pkt.dest`, if any; gives it back
    /// if none wait.
    fn park_behind(&self, pkt: Packet) -> Option<Packet> {
        let mut w = self.wire.lock();
        match w.parked.get_mut(&pkt.dest) {
            Some(q) if !q.is_empty() => {
                q.push_back(pkt);
                None
            }
            _ => Some(pkt),
        }
    }
}

/// The port thread's body: runs until [`PortQueue::stop`].
pub fn run(core: Arc<Core>) {
    while let Some(job) = core.port.next_job() {
        let mut fx = Effects::default();
        run_job(&core, job, &mut fx);
        core.settle_effects(&mut fx);
        core.port.give_back();
        core.raise_fired(&mut fx);
    }
}

/// Delivers one job (by the thread holding the port): a packet, or a kicked QP's parked
/// packets in order, parking again what still finds no receive WQE.
pub(crate) fn run_job(core: &Core, job: Job, fx: &mut Effects) {
    match job {
        Job::Packet(pkt) => {
            if let Some(pkt) = core.port.park_behind(pkt) {
                let len = pkt.payload.len() as u64;
                match deliver(core, pkt, fx) {
                    Some(pkt) => {
                        core.count(|c| &c.packets_parked);
                        core.port.park_front(pkt.dest, VecDeque::from([pkt]));
                    }
                    None => core.port.release(len, fx),
                }
            }
        }
        Job::Retry(mut pkts) => {
            while let Some(pkt) = pkts.pop_front() {
                let len = pkt.payload.len() as u64;
                match deliver(core, pkt, fx) {
                    Some(pkt) => {
                        let qpn = pkt.dest;
                        pkts.push_front(pkt);
                        core.port.park_front(qpn, pkts);
                        break;
                    }
                    None => core.port.release(len, fx),
                }
            }
        }
    }
}

/// Delivers `pkt` and completes its sender; gives the packet back if it must wait for a receive
/// WQE.
fn deliver(core: &Core, pkt: Packet, fx: &mut Effects) -> Option<Packet> {
    if pkt.ud.is_some() {
        crate::qp::ud::deliver(core, pkt, fx);
        return None;
    }
    let Some(src) = core.qp(pkt.src).filter(|q| q.uid == pkt.src_uid) else {
        core.count(|c| &c.packets_dropped);
        return None;
    };
    // The receiver's connection, read before the sender is asked: a receiver reset (and
    // perhaps reconnected) after this refuses the packet, as a new connection's PSNs would.
    let dest = core.qp(pkt.dest);
    let connection = dest.as_ref().map(|d| d.connection());
    if !src.send_pending(pkt.seq) {
        // The sender flushed or reset meanwhile: it no longer waits for an answer.
        core.count(|c| &c.packets_dropped);
        return None;
    }
    let bound = core.gids.lock().iter().flatten().any(|g| g.gid == pkt.dgid);
    let outcome = match (dest, connection) {
        (Some(dest), Some(conn)) if bound && dest.expects_psn(pkt.psn) => {
            let rx = respond(core, &src, &dest, &pkt, conn, fx);
            if matches!(rx, Rx::Delivered) {
                dest.took_psn();
            }
            rx
        }
        _ => Rx::Fail(wc_status::RETRY_EXC_ERR),
    };
    let status = match outcome {
        Rx::Park => return Some(pkt),
        Rx::Delivered => {
            core.count(|c| &c.packets_delivered);
            wc_status::SUCCESS
        }
        Rx::Fail(status) => {
            core.count(|c| &c.packets_failed);
            status
        }
    };
    src.complete_send(core, pkt.seq, status, fx);
    None
}

/// The responder `dest`'s side of `pkt` (and, for a READ, the response at the requester `src`):
/// what the requester completes with, or [`Rx::Park`] to wait for a receive
/// WQE (a SEND, or a WRITE with immediate once its data is placed: placing it again on the retry
/// writes the same bytes, as a retried WRITE does on a wire). A remote access error moves the
/// responder to ERR (IBTA Class C; Linux rxe's responder does the same).
fn respond(core: &Core, src: &Qp, dest: &Qp, pkt: &Packet, conn: u64, fx: &mut Effects) -> Rx {
    let remote_error = |status: u32, fx: &mut Effects| {
        dest.force_error(core, fx);
        Rx::Fail(status)
    };
    match pkt.op {
        Op::Send { .. } => dest.receive(core, pkt, conn, fx),
        _ if !dest.accepts(pkt.src, conn) => Rx::Fail(wc_status::RETRY_EXC_ERR),
        Op::Write { remote_addr, rkey, imm } => {
            if let Err(status) = dest.rdma_write(core, rkey, remote_addr, &pkt.payload) {
                return remote_error(status, fx);
            }
            let Some(imm) = imm else { return Rx::Delivered };
            let len = pkt.payload.len() as u32;
            dest.receive_write_imm(core, pkt.src, imm, len, pkt.solicited, conn, fx)
        }
        Op::Read { remote_addr, rkey, len } => match dest.rdma_read(core, rkey, remote_addr, len) {
            Err(status) => remote_error(status, fx),
            Ok(data) => match src.read_response(core, pkt.seq, 0, &data) {
                Ok(()) => Rx::Delivered,
                Err(status) => Rx::Fail(status),
            },
        },
        Op::Atomic { remote_addr, rkey, op } => match dest.atomic(core, rkey, remote_addr, op) {
            Err(status) => remote_error(status, fx),
            Ok(orig) => match src.read_response(core, pkt.seq, 0, &orig.to_le_bytes()) {
                Ok(()) => Rx::Delivered,
                Err(status) => Rx::Fail(status),
            },
        },
    }
}

/// QUERY_PORT: port 1 is ACTIVE, LinkUp, MTU 1024 (max and active, as QEMU reports), width and
/// speed 1, one virtual lane (as rxe, QEMU's usual backend, reports). Errors: `EINVAL` for a port
/// other than 1.
pub fn query_port(_core: &Core, req: &QueryPort) -> CmdResult<QueryPortResp> {
    if req.port_num != 1 {
        return Err(Errno::EINVAL);
    }
    let attrs = PortAttr {
        state: U32::new(port_state::ACTIVE),
        max_mtu: U32::new(mtu::MTU_1024),
        active_mtu: U32::new(mtu::MTU_1024),
        gid_tbl_len: U32::new(limits::GID_TBL_LEN),
        max_msg_sz: U32::new(limits::MAX_MSG_SZ),
        pkey_tbl_len: U16::new(limits::PKEY_TBL_LEN),
        active_width: 1,
        active_speed: 1,
        max_vl_num: 1,
        phys_state: PHYS_STATE_LINK_UP,
        ..Default::default()
    };
    Ok(QueryPortResp { attrs, ..Default::default() })
}

/// QUERY_PKEY: 0xffff at index 0 of port 1, the one entry of the table. Errors: `EINVAL` for
/// another port or index (QEMU 7.2 refuses a port past 1 or an index past 1, and answers 0xffff
/// for the index 1 its one-entry table lacks; the model refuses it).
pub fn query_pkey(_core: &Core, req: &QueryPkey) -> CmdResult<QueryPkeyResp> {
    if req.port_num != 1 || u32::from(req.index) >= u32::from(limits::PKEY_TBL_LEN) {
        return Err(Errno::EINVAL);
    }
    Ok(QueryPkeyResp { pkey: U16::new(PVRDMA_PKEY), ..Default::default() })
}

/// CREATE_BIND: puts `new_gid` with its `gid_type` at `index` of the GID table (replacing what
/// was there).
/// Errors: `EINVAL` for an index at or past `GID_TBL_LEN`, an all-zero or multicast GID (no port
/// address), a `gid_type` that is not exactly one of the types `caps.gid_types` reports (Linux
/// sends one flag), an `mtu` that is no IB MTU in bytes (Linux sends 1024), or a `vlan` past 12
/// bits (0xfff: none, as Linux sends). QEMU 7.2 ignores `mtu` and `vlan`.
pub fn create_bind(core: &Core, req: &CreateBind) -> CmdResult<NoopResp> {
    let index = req.index.get() as usize;
    let one_type = req.gid_type.count_ones() == 1 && req.gid_type & limits::GID_TYPES != 0;
    let mtu_bytes = matches!(req.mtu.get(), 256 | 512 | 1024 | 2048 | 4096);
    let unicast = req.new_gid != [0u8; 16] && req.new_gid[0] != 0xff;
    if !unicast || !one_type || !mtu_bytes || req.vlan.get() > 0xfff {
        return Err(Errno::EINVAL);
    }
    let mut gids = core.gids.lock();
    let entry = GidEntry { gid: req.new_gid, gid_type: req.gid_type };
    *gids.get_mut(index).ok_or(Errno::EINVAL)? = Some(entry);
    Ok(NoopResp::default())
}

/// DESTROY_BIND: empties entry `index`. `dest_gid` names the GID the driver believes is there
/// (all-zero: unstated; no bound GID is all-zero). Errors: `EINVAL` for a bad index or a
/// `dest_gid` the entry does not hold (QEMU 7.2 ignores it), `ENOENT` if the entry is already
/// empty.
pub fn destroy_bind(core: &Core, req: &DestroyBind) -> CmdResult<NoopResp> {
    let mut gids = core.gids.lock();
    let slot = gids.get_mut(req.index.get() as usize).ok_or(Errno::EINVAL)?;
    let held = slot.ok_or(Errno::ENOENT)?;
    if req.dest_gid != [0u8; 16] && req.dest_gid != held.gid {
        return Err(Errno::EINVAL);
    }
    *slot = None;
    Ok(NoopResp::default())
}

/// One entry of the port's GID table, as CREATE_BIND set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its type: one `PVRDMA_GID_TYPE_FLAG_*` bit (RoCE v1 or v2).
    pub gid_type: u8,
}

impl Core {
    /// The GID table entry at `index`, if bound.
    pub(crate) fn gid_entry(&self, index: u8) -> Option<GidEntry> {
        self.gids.lock().get(index as usize).copied().flatten()
    }
}
