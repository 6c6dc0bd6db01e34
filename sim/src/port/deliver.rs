//! Delivery on the loopback wire: the port thread's body, and each job (a packet, or a kicked
//! QP's parked packets) carried to its responder and its sender completed.

use super::{Job, Op, Packet};
use crate::device::{Core, Effects};
use crate::qp::{Qp, Rx};
use pvrdma_abi::wqe::wc_status;
use std::collections::VecDeque;
use std::sync::Arc;

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
