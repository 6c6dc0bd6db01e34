//! Send completions (published in SQ order), the error state and the flush of posted and
//! in-flight WQEs with `WR_FLUSH_ERR`, and the SQ_DRAINED event.

use parking_lot::MutexGuard;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::verbs::qp_state;
use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status, Cqe};
use zerocopy::little_endian::{U32, U64};

use crate::backend::Backend;
use crate::ctx::Effects;
use crate::qp::*;

impl Qp {
    /// The port finished send `seq` with `status`: publishes every send completion now due, in SQ
    /// order (each with its WQE's opcode: SEND, RDMA_WRITE or RDMA_READ); an error moves the QP
    /// to ERR.
    pub fn complete_send(&self, core: &Backend, seq: u64, status: u32, fx: &mut Effects) {
        let mut st = self.st.lock();
        if st.dead {
            return;
        }
        let Some(e) = st.inflight.iter_mut().find(|e| e.seq == seq && e.status.is_none()) else {
            return;
        };
        e.status = Some(status);
        let len = u64::from(e.byte_len);
        st.bytes_on_wire = st.bytes_on_wire.saturating_sub(len);
        if status != wc_status::SUCCESS && st.state != qp_state::ERR {
            self.enter_error(core, &mut st, fx);
        } else {
            self.retire(core, &mut st, fx);
            self.tell_drained(core, &mut st);
            if st.throttled && st.state == qp_state::RTS {
                st.throttled = false;
                self.drain_sq(core, &mut st, fx);
            }
        }
    }

    /// Moves the QP to ERR (a CQ of it overflowed, or, as a responder, it met a remote access
    /// error: IBTA Class C); no-op in RESET or ERR.
    pub fn force_error(&self, core: &Backend, fx: &mut Effects) {
        let mut st = self.st.lock();
        if !st.dead && !matches!(st.state, qp_state::RESET | qp_state::ERR) {
            self.enter_error(core, &mut st, fx);
        }
    }

    /// In SQD with nothing in flight: posts the SQ_DRAINED event owed, once.
    pub(crate) fn tell_drained(&self, core: &Backend, st: &mut MutexGuard<'_, QpState>) {
        if st.state == qp_state::SQD && st.sqd_notify && st.inflight.is_empty() {
            st.sqd_notify = false;
            core.post_async_event(EqeType::SqDrained, self.handle);
        }
    }

    /// Publishes the send completions at the front of the in-flight list whose status is known:
    /// a successful one with the WQE's length (`byte_len`: the bytes sent, read, or 8 for an
    /// atomic) and `WITH_IMM` for an operation with immediate, as Linux rxe's `make_send_cqe`; an
    /// error one with its opcode (the queue it completes) and nothing else, as rxe.
    pub(crate) fn retire(&self, core: &Backend, st: &mut MutexGuard<'_, QpState>, fx: &mut Effects) {
        while let Some(e) = st.inflight.front() {
            let Some(status) = e.status else { break };
            let ok = status == wc_status::SUCCESS;
            let (wr_id, signaled, opcode) = (e.wr_id, e.signaled, e.wc_opcode);
            let byte_len = if ok { e.byte_len } else { 0 };
            let flags = if ok && e.with_imm { wc_flags::WITH_IMM } else { 0 };
            st.inflight.pop_front();
            if signaled || !ok {
                let cqe = Cqe {
                    wr_id: U64::new(wr_id),
                    qp: U64::new(u64::from(self.handle)),
                    opcode: U32::new(opcode),
                    status: U32::new(status),
                    byte_len: U32::new(byte_len),
                    wc_flags: U32::new(flags),
                    port_num: 1,
                    ..Default::default()
                };
                self.send_cq.publish(core, &cqe, false, fx);
            }
        }
    }

    /// Moves to ERR: flushes in-flight sends, then posted send and receive WQEs, and fails packets
    /// parked for this QP.
    pub(crate) fn enter_error(&self, core: &Backend, st: &mut MutexGuard<'_, QpState>, fx: &mut Effects) {
        st.state = qp_state::ERR;
        st.attrs.qp_state = U32::new(qp_state::ERR);
        st.bytes_on_wire = 0;
        st.throttled = false;
        for e in st.inflight.iter_mut().filter(|e| e.status.is_none()) {
            e.status = Some(wc_status::WR_FLUSH_ERR);
        }
        self.retire(core, st, fx);
        self.flush(core, true, fx);
        self.flush(core, false, fx);
        self.flush_held(core, st, false, fx);
        if self.srq.is_some() && core.cfg.profile == crate::Profile::Ibta {
            // IBTA 11.6.3.3 (o11-5.2.5): no more WQEs will be taken from the SRQ for this QP.
            core.post_async_event(EqeType::QpLastWqeReached, self.handle);
        }
        fx.kicks.push(self.handle);
    }

    /// A ring index out of range (or ring memory gone): QP_FATAL, then ERR.
    pub(crate) fn fault(&self, core: &Backend, st: &mut MutexGuard<'_, QpState>, fx: &mut Effects) {
        core.count(|c| &c.qp_ring_faults);
        core.post_async_event(EqeType::QpFatal, self.handle);
        if st.state != qp_state::ERR {
            self.enter_error(core, st, fx);
        }
    }

    /// Completes the SRQ WQE the QP holds for a message in progress, if any, with `WR_FLUSH_ERR`
    /// (`if_room`: at RESET and DESTROY_QP, only if the CQ has room, see
    /// [`crate::cq::Cq::publish_if_room`]).
    pub(crate) fn flush_held(&self, core: &Backend, st: &mut QpState, if_room: bool, fx: &mut Effects) {
        if let Some((hdr, _)) = st.held_srq_wqe.take() {
            let cqe = Cqe {
                wr_id: hdr.wr_id,
                qp: U64::new(u64::from(self.handle)),
                opcode: U32::new(wc_opcode::RECV),
                status: U32::new(wc_status::WR_FLUSH_ERR),
                port_num: 1,
                ..Default::default()
            };
            if if_room {
                self.recv_cq.publish_if_room(core, &cqe, fx);
            } else {
                self.recv_cq.publish(core, &cqe, false, fx);
            }
        }
    }

    /// Completes every posted WQE of the SQ (`send`) or RQ with `WR_FLUSH_ERR`. Stops at a bad
    /// index; never loops more than twice the queue size.
    pub(crate) fn flush(&self, core: &Backend, send: bool, fx: &mut Effects) {
        // The SRQ's WQEs stay posted for its other QPs (one this QP took: `flush_held`).
        if !send && self.srq.is_some() {
            return;
        }
        let (ring, cq, opcode) =
            if send { (&self.sq, &self.send_cq, wc_opcode::SEND) } else { (&self.rq, &self.recv_cq, wc_opcode::RECV) };
        for _ in 0..2 * ring.elems() {
            let slot = match ring.next(&core.mem) {
                Ok(Some(slot)) => slot,
                Ok(None) => return,
                Err(_) => {
                    core.count(|c| &c.qp_ring_faults);
                    return;
                }
            };
            let mut wr_id = [0u8; 8];
            if ring.read(&core.mem, slot, 0, &mut wr_id).is_err() || ring.consume(&core.mem, slot).is_err() {
                core.count(|c| &c.qp_ring_faults);
                return;
            }
            let cqe = Cqe {
                wr_id: U64::new(u64::from_le_bytes(wr_id)),
                qp: U64::new(u64::from(self.handle)),
                opcode: U32::new(opcode),
                status: U32::new(wc_status::WR_FLUSH_ERR),
                port_num: 1,
                ..Default::default()
            };
            cq.publish(core, &cqe, false, fx);
        }
    }
}
