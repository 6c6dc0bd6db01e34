//! The loopback port: its attributes (QUERY_PORT, QUERY_PKEY), its GID table (CREATE_BIND,
//! DESTROY_BIND), and the wire — a device thread named `pvrdma-port` that delivers each packet
//! `link_latency` after it was sent, in send order.
//!
//! Delivery: the destination QP (by `dest_qp_num`) must be in RTR or RTS and point back at the
//! sender, and the destination GID must be bound on this port (the loopback wire reaches only
//! itself); otherwise the sender completes with `RETRY_EXC_ERR`, as a requester whose packets go
//! unanswered. A packet for a QP with no receive WQE posted waits on that QP (infinite RNR retry)
//! until its next RECV doorbell; later packets for the same QP queue behind it, keeping per-QP
//! order. The thread stops when the [`crate::SimDevice`] is dropped; its waits are condvar waits
//! with a bound.

use crate::device::{Core, Effects};
use crate::dsr::limits;
use crate::errno::{CmdResult, Errno};
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

/// One RC SEND on the wire.
#[derive(Debug)]
pub struct Packet {
    /// Sender QPN.
    pub src: u32,
    /// Sender's unique id (a QPN may be reused).
    pub src_uid: u64,
    /// The send's sequence number on its QP.
    pub seq: u64,
    /// Destination QPN.
    pub dest: u32,
    /// Destination GID from the sender's address vector.
    pub dgid: Gid,
    /// Immediate data, as on the wire (SEND_WITH_IMM).
    pub imm: Option<[u8; 4]>,
    /// The solicited-event flag.
    pub solicited: bool,
    /// The gathered message.
    pub payload: Vec<u8>,
}

#[derive(Default)]
struct Wire {
    /// Packets in flight, with the instant each arrives (monotonic: constant latency).
    in_flight: VecDeque<(Instant, Packet)>,
    /// QPs whose parked packets to retry.
    kicks: VecDeque<u32>,
    /// Packets waiting for a receive WQE, per destination QPN.
    parked: HashMap<u32, VecDeque<Packet>>,
    busy: bool,
    stop: bool,
}

/// The wire's queue, shared by the senders (doorbells) and the port thread. Its lock is a leaf.
#[derive(Default)]
pub struct PortQueue {
    wire: Mutex<Wire>,
    cond: Condvar,
}

enum Job {
    Packet(Packet),
    Retry(VecDeque<Packet>),
}

impl PortQueue {
    /// Puts `pkt` on the wire; it arrives `latency` from now.
    pub fn transmit(&self, pkt: Packet, latency: Duration) {
        let mut w = self.wire.lock();
        w.in_flight.push_back((Instant::now() + latency, pkt));
        self.cond.notify_all();
    }

    /// Asks the port to retry (or fail) the packets parked for QP `qpn`, if any. While the port
    /// thread is busy it may be about to park a packet for `qpn` (it found no receive WQE just
    /// before the caller posted one), so a busy port is always kicked: no lost wake-up.
    pub fn kick_if_parked(&self, qpn: u32) {
        let mut w = self.wire.lock();
        let waiting = w.busy || w.parked.get(&qpn).is_some_and(|q| !q.is_empty());
        if waiting && !w.kicks.contains(&qpn) {
            w.kicks.push_back(qpn);
            self.cond.notify_all();
        }
    }

    /// Drops everything on the wire (device reset).
    pub fn clear(&self) {
        let mut w = self.wire.lock();
        w.in_flight.clear();
        w.kicks.clear();
        w.parked.clear();
        self.cond.notify_all();
    }

    /// Tells the port thread to exit.
    pub fn stop(&self) {
        self.wire.lock().stop = true;
        self.cond.notify_all();
    }

    /// Waits up to `timeout` until nothing is in flight and the thread is idle (parked packets do
    /// not count). Returns whether it became idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut w = self.wire.lock();
        while w.busy || !w.in_flight.is_empty() || !w.kicks.is_empty() {
            if w.stop || self.cond.wait_until(&mut w, deadline).timed_out() {
                return !w.busy && w.in_flight.is_empty() && w.kicks.is_empty();
            }
        }
        true
    }

    /// Packets parked for QP `qpn` (for tests).
    pub fn parked(&self, qpn: u32) -> usize {
        self.wire.lock().parked.get(&qpn).map_or(0, |q| q.len())
    }

    fn next_job(&self) -> Option<Job> {
        let mut w = self.wire.lock();
        w.busy = false;
        loop {
            if w.stop {
                self.cond.notify_all();
                return None;
            }
            if let Some(qpn) = w.kicks.pop_front() {
                let parked = w.parked.remove(&qpn).unwrap_or_default();
                w.busy = true;
                return Some(Job::Retry(parked));
            }
            let now = Instant::now();
            let wait_until = match w.in_flight.front() {
                Some((at, _)) if *at <= now => {
                    let (_, pkt) = w.in_flight.pop_front()?;
                    w.busy = true;
                    return Some(Job::Packet(pkt));
                }
                Some((at, _)) => (*at).min(now + IDLE_WAIT),
                None => now + IDLE_WAIT,
            };
            self.cond.notify_all();
            self.cond.wait_until(&mut w, wait_until);
        }
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
        match job {
            Job::Packet(pkt) => {
                if let Some(pkt) = core.port.park_behind(pkt) {
                    if let Some(pkt) = deliver(&core, pkt, &mut fx) {
                        core.stat(|s| s.packets_parked += 1);
                        core.port.park_front(pkt.dest, VecDeque::from([pkt]));
                    }
                }
            }
            Job::Retry(mut pkts) => {
                while let Some(pkt) = pkts.pop_front() {
                    if let Some(pkt) = deliver(&core, pkt, &mut fx) {
                        let qpn = pkt.dest;
                        pkts.push_front(pkt);
                        core.port.park_front(qpn, pkts);
                        break;
                    }
                }
            }
        }
        core.settle(fx);
    }
}

/// Delivers `pkt` and completes its sender; gives the packet back if it must wait for a receive
/// WQE.
fn deliver(core: &Core, pkt: Packet, fx: &mut Effects) -> Option<Packet> {
    let Some(src) = core.qp(pkt.src).filter(|q| q.uid == pkt.src_uid) else {
        core.stat(|s| s.packets_dropped += 1);
        return None;
    };
    if !src.send_pending(pkt.seq) {
        // The sender flushed or reset meanwhile: it no longer waits for an answer.
        core.stat(|s| s.packets_dropped += 1);
        return None;
    }
    let bound = core.gids.lock().iter().any(|g| g.as_ref() == Some(&pkt.dgid));
    let outcome = match core.qp(pkt.dest) {
        Some(dest) if bound => dest.receive(core, &pkt, fx),
        _ => crate::qp::Rx::Fail(wc_status::RETRY_EXC_ERR),
    };
    let status = match outcome {
        crate::qp::Rx::Park => return Some(pkt),
        crate::qp::Rx::Delivered => {
            core.stat(|s| s.packets_delivered += 1);
            wc_status::SUCCESS
        }
        crate::qp::Rx::Fail(status) => {
            core.stat(|s| s.packets_failed += 1);
            status
        }
    };
    src.complete_send(core, pkt.seq, status, fx);
    None
}

/// QUERY_PORT: port 1 is ACTIVE, LinkUp, MTU 1024 (max and active, as QEMU reports), width and
/// speed 1. Errors: `EINVAL` for a port other than 1.
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
        phys_state: PHYS_STATE_LINK_UP,
        ..Default::default()
    };
    Ok(QueryPortResp { attrs, ..Default::default() })
}

/// QUERY_PKEY: 0xffff for every index, as QEMU answers.
pub fn query_pkey(_core: &Core, _req: &QueryPkey) -> CmdResult<QueryPkeyResp> {
    Ok(QueryPkeyResp { pkey: U16::new(PVRDMA_PKEY), ..Default::default() })
}

/// CREATE_BIND: puts `new_gid` at `index` of the GID table (replacing what was there).
/// Errors: `EINVAL` for an index at or past `GID_TBL_LEN` or an all-zero GID.
pub fn create_bind(core: &Core, req: &CreateBind) -> CmdResult<NoopResp> {
    let index = req.index.get() as usize;
    if req.new_gid == [0u8; 16] {
        return Err(Errno::EINVAL);
    }
    let mut gids = core.gids.lock();
    *gids.get_mut(index).ok_or(Errno::EINVAL)? = Some(req.new_gid);
    Ok(NoopResp::default())
}

/// DESTROY_BIND: empties entry `index`. Errors: `EINVAL` for a bad index, `ENOENT` if the entry
/// is already empty.
pub fn destroy_bind(core: &Core, req: &DestroyBind) -> CmdResult<NoopResp> {
    let mut gids = core.gids.lock();
    let slot = gids.get_mut(req.index.get() as usize).ok_or(Errno::EINVAL)?;
    slot.take().ok_or(Errno::ENOENT)?;
    Ok(NoopResp::default())
}

impl Core {
    /// The GID bound at `index`, if any.
    pub(crate) fn gid(&self, index: u8) -> Option<Gid> {
        self.gids.lock().get(index as usize).copied().flatten()
    }
}
