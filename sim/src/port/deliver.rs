//! Delivery on the loopback wire: the port thread's body, and each job (a packet, a kicked QP's
//! stalls, a stall whose timer ran out) carried to its responder and its sender completed, or
//! held back to be tried again (`stall.rs`).

use crate::backend::Backend;
use crate::ctx::Effects;
use crate::packet::{Op, Packet};
use crate::qp::{Qp, Rx};
use crate::timers::Retry;
use crate::wire::stall::{Attempt, Stall, Wait};
use crate::wire::{Job, INLINE_JOBS};
use pvrdma_abi::wqe::wc_status;
use std::sync::Arc;

/// The port thread's body: runs until [`crate::wire::PortQueue::stop`].
pub fn run(core: Arc<Backend>) {
    while let Some(job) = core.port.next_job() {
        let mut fx = Effects::default();
        run_job(&core, job, &mut fx);
        core.settle_effects(&mut fx);
        core.port.give_back();
        core.raise_fired(&mut fx);
    }
}

/// Runs one job (by the thread holding the port): delivers a packet (behind its sender's held
/// packets, if any), or tries a kicked or timed-out stall's packets again in order.
pub(crate) fn run_job(core: &Backend, job: Job, fx: &mut Effects) {
    match job {
        Job::Packet(pkt) => {
            let Some(pkt) = core.port.hold_behind(pkt) else { return };
            let mut stall = Stall::of(&pkt);
            if !retry_head(core, &mut stall, pkt, Attempt::First, fx) {
                core.port.hold(stall);
            }
        }
        Job::Kick(qpn, stalls) => {
            for stall in stalls {
                if stall.waits_at(qpn) {
                    retry(core, stall, Attempt::Kick, fx);
                } else {
                    prune(core, stall, fx);
                }
            }
        }
        Job::Timer(stall) => retry(core, stall, Attempt::Timer, fx),
    }
}

/// Tries `stall`'s packets in order, the first for reason `why`, until one must wait again (the
/// stall is then held back) or none is left.
fn retry(core: &Backend, mut stall: Stall, mut why: Attempt, fx: &mut Effects) {
    while let Some(pkt) = stall.pkts.pop_front() {
        if !retry_head(core, &mut stall, pkt, why, fx) {
            return core.port.hold(stall);
        }
        why = Attempt::First;
    }
}

/// A kicked sender's stall: the packets it no longer waits for (it flushed, was reset or
/// destroyed) leave the wire, and the first it still waits for is tried if it never was.
fn prune(core: &Backend, stall: Stall, fx: &mut Effects) {
    let waits = |p: &Packet| {
        let src = core.qp(p.src).filter(|q| q.uid == p.src_uid);
        src.is_some_and(|q| q.send_pending(p.seq))
    };
    match stall.pkts.front() {
        Some(head) if !waits(head) => retry(core, stall, Attempt::First, fx),
        _ => core.port.hold(stall),
    }
}

/// Tries `pkt`, the head of `stall`, for reason `why`. Returns whether it left the wire
/// (delivered, failed or dropped: the next packet is then the head); otherwise it is back at
/// the front of `stall`, waiting.
fn retry_head(core: &Backend, stall: &mut Stall, pkt: Packet, why: Attempt, fx: &mut Effects) -> bool {
    if why == Attempt::Timer && stall.wait == Wait::Answer {
        core.count(|c| &c.packets_timeouts);
        if let Err(status) = stall.timed_out() {
            return exhausted(core, stall, &pkt, status, fx);
        }
    } else if why == Attempt::Timer {
        core.count(|c| &c.packets_rnr_retries);
    }
    let len = pkt.payload.len() as u64;
    match deliver(core, pkt, fx) {
        Outcome::Gone => {
            core.port.release(len, fx);
            stall.progress();
            true
        }
        Outcome::Unanswered { pkt, retry } => {
            core.count(|c| &c.packets_unanswered);
            stall.unanswered(&retry);
            stall.pkts.push_front(pkt);
            false
        }
        Outcome::Rnr { pkt, retry, dest, timer } => {
            if !stall.waits_at(dest) {
                core.count(|c| &c.packets_parked);
            }
            if let Err(status) = stall.rnr(&retry, dest, timer, why) {
                return exhausted(core, stall, &pkt, status, fx);
            }
            stall.pkts.push_front(pkt);
            false
        }
    }
}

/// The head of `stall` (`pkt`) failed with `status` (its sender's retries ran out): its sender
/// completes it so (and goes to ERR, flushing the rest), and it leaves the wire. Returns `true`.
fn exhausted(core: &Backend, stall: &mut Stall, pkt: &Packet, status: u32, fx: &mut Effects) -> bool {
    core.count(|c| &c.packets_failed);
    if let Some(src) = core.qp(pkt.src).filter(|q| q.uid == pkt.src_uid) {
        src.complete_send(core, pkt.seq, status, fx);
    }
    core.port.release(pkt.payload.len() as u64, fx);
    stall.progress();
    true
}

/// What one try of a packet came to.
enum Outcome {
    /// It left the wire: delivered (its sender completed), failed with the status its sender
    /// completed with, or dropped (its sender gone or no longer waiting for it).
    Gone,
    /// No receive WQE at QP `dest`, whose `min_rnr_timer` is `timer` (an RNR NAK's); `retry` is
    /// the sender's.
    Rnr { pkt: Packet, retry: Retry, dest: u32, timer: u8 },
    /// No responder answered (as no ACK comes on a wire); `retry` is the sender's.
    Unanswered { pkt: Packet, retry: Retry },
}

/// Delivers `pkt` and completes its sender, or gives the packet back with why it must wait.
fn deliver(core: &Backend, pkt: Packet, fx: &mut Effects) -> Outcome {
    if pkt.ud.is_some() {
        crate::backend::ud::deliver(core, pkt, fx);
        return Outcome::Gone;
    }
    let Some(src) = core.qp(pkt.src).filter(|q| q.uid == pkt.src_uid) else {
        core.count(|c| &c.packets_dropped);
        return Outcome::Gone;
    };
    // The receiver's connection, read before the sender is asked: a receiver reset (and
    // perhaps reconnected) after this refuses the packet, as a new connection's PSNs would.
    let dest = core.qp(pkt.dest);
    let connection = dest.as_ref().map(|d| d.connection());
    if !src.send_pending(pkt.seq) {
        // The sender flushed or reset meanwhile: it no longer waits for an answer.
        core.count(|c| &c.packets_dropped);
        return Outcome::Gone;
    }
    let (bound, sgid) = {
        let gids = core.gids.lock();
        let sgid = gids.get(usize::from(pkt.sgid_index)).copied().flatten().map(|g| g.gid);
        (gids.iter().flatten().any(|g| g.gid == pkt.dgid), sgid)
    };
    let outcome = match (&dest, connection) {
        (Some(dest), Some(conn)) if bound && dest.expects_request(pkt.psn, sgid) => {
            let rx = respond(core, &src, dest, &pkt, conn, fx);
            if matches!(rx, Rx::Delivered) {
                dest.took_psn();
            }
            rx
        }
        _ => Rx::Fail(wc_status::RETRY_EXC_ERR),
    };
    let status = match outcome {
        Rx::Park => {
            let attrs = dest.as_ref().and_then(|d| d.transport_attrs());
            let timer = attrs.map_or(0, |(_, a)| a.min_rnr_timer);
            return Outcome::Rnr { retry: retry_of(&src), dest: pkt.dest, timer, pkt };
        }
        // Nobody answered: the responder refuses what is not its peer's, as the RoCE responder
        // drops it.
        Rx::Fail(wc_status::RETRY_EXC_ERR) => {
            return Outcome::Unanswered { retry: retry_of(&src), pkt };
        }
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
    Outcome::Gone
}

/// The retry attributes of the sender `src` (none, if it was destroyed meanwhile: its packets
/// are dropped at their next try).
fn retry_of(src: &Qp) -> Retry {
    let none = Retry { timeout: None, retry_cnt: 0, rnr_retry: 0 };
    src.transport_attrs().map_or(none, |(_, a)| Retry::of(&a))
}

/// The responder `dest`'s side of `pkt` (and, for a READ, the response at the requester `src`):
/// what the requester completes with, or [`Rx::Park`] to wait for a receive
/// WQE (a SEND, or a WRITE with immediate once its data is placed: placing it again on the retry
/// writes the same bytes, as a retried WRITE does on a wire). A remote access error moves the
/// responder to ERR (IBTA Class C; Linux rxe's responder does the same).
fn respond(core: &Backend, src: &Qp, dest: &Qp, pkt: &Packet, conn: u64, fx: &mut Effects) -> Rx {
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

/// [`Backend::settle`] for a QP doorbell; with a link latency of 0 it first delivers the packets
/// now due on this thread, up to [`INLINE_JOBS`] jobs, if the port is free (`port.rs`).
/// Only a QP doorbell does: a driver may ring a CQ's arm doorbell while it holds its
/// CQ-notification ring, which a delivery's interrupt handler takes (`eq/msix.rs`). Interrupts
/// are raised once the port is given back: the handler may wake a consumer that preempts
/// this thread, and that consumer's own doorbell then finds the port free.
pub(crate) fn settle_and_deliver(b: &Backend, mut fx: Effects) {
    b.settle_effects(&mut fx);
    if b.cfg.link_latency.is_zero() {
        for _ in 0..INLINE_JOBS {
            let Some(job) = b.port.claim_due() else { break };
            run_job(b, job, &mut fx);
            b.settle_effects(&mut fx);
            b.port.give_back();
            b.raise_fired(&mut fx);
        }
    }
    b.settle(fx);
}
