//! The send side of a QP's data path: the SEND and RECV doorbells, the SQ drain (a WQE made into a
//! [`crate::packet::Packet`] and put on the port's wire), and the reads of posted WQEs.

use crate::backend::{mr, ud};
use crate::limits;
use crate::packet::{Op, Packet};
use crate::ring::Slot;
use parking_lot::MutexGuard;
use pvrdma_abi::verbs::{qp_state, send_flags};
use pvrdma_abi::wqe::{wc_opcode, wc_status, RqWqeHdr, SqWqeHdr};
use zerocopy::{FromZeros, IntoBytes};

use crate::backend::Backend;
use crate::ctx::Effects;
use crate::qp::*;

impl Qp {
    /// The SEND doorbell: in RTS, drains the SQ; in ERR, flushes what was posted; otherwise the
    /// WQEs stay posted until a SEND doorbell in RTS.
    pub fn send_doorbell(&self, core: &Backend, fx: &mut Effects) {
        let mut st = self.st.lock();
        if st.dead {
            return;
        }
        match st.state {
            qp_state::RTS => self.drain_sq(core, &mut st, fx),
            qp_state::ERR => self.flush(core, true, fx),
            _ => {}
        }
    }

    /// The RECV doorbell: makes newly posted receive WQEs available (packets waiting for one are
    /// retried by the port); in ERR, flushes them; in RESET, ignored.
    pub fn recv_doorbell(&self, core: &Backend, fx: &mut Effects) {
        let st = self.st.lock();
        if st.dead {
            return;
        }
        match st.state {
            qp_state::RESET => {}
            qp_state::ERR => self.flush(core, false, fx),
            _ => {
                drop(st);
                core.port.kick_if_parked(self.handle);
            }
        }
    }

    pub(crate) fn drain_sq(&self, core: &Backend, st: &mut MutexGuard<'_, QpState>, fx: &mut Effects) {
        for _ in 0..2 * self.sq.elems() {
            let slot = match self.sq.next(&core.mem) {
                Ok(Some(slot)) => slot,
                Ok(None) => return,
                Err(_) => return self.fault(core, st, fx),
            };
            let Some((hdr, sges)) = self.read_sq_wqe(core, slot) else {
                return self.fault(core, st, fx);
            };
            let len: u64 = sges.iter().map(|s| u64::from(s.length.get())).sum();
            let op = wqe_op(&hdr, len);
            // A READ's or an atomic's request carries no payload: its data comes back in the
            // response.
            let reads = matches!(op, Some(Op::Read { .. } | Op::Atomic { .. }));
            let wire_len = if reads { 0 } else { len };
            // Flow control: leave the WQE posted. complete_send resumes the drain after the QP's
            // own limits (its SQ depth of sends outstanding, whatever their size, and its bytes);
            // the port resumes it after the device's wire budget (`Effects::resume_starved`).
            let qp_full = st.inflight.len() >= self.sq.elems() as usize
                || (st.bytes_on_wire > 0 && st.bytes_on_wire + len > core.cfg.qp_bytes_in_flight)
                || (reads && core.roce.is_none() && rd_atomic_full(st));
            if qp_full || !core.wire_reserve(self.handle, wire_len) {
                st.throttled = true;
                core.count(|c| &c.sq_throttled);
                return;
            }
            if self.sq.consume(&core.mem, slot).is_err() {
                core.wire_unreserve(wire_len, fx);
                return self.fault(core, st, fx);
            }
            let flags = hdr.send_flags.get();
            let seq = st.next_seq;
            st.next_seq += 1;
            let mut entry = InFlight {
                seq,
                wr_id: hdr.wr_id.get(),
                signaled: self.sq_sig_all || flags & send_flags::SIGNALED != 0,
                byte_len: 0,
                wc_opcode: op.as_ref().map_or(wc_opcode::SEND, op_wc_opcode),
                with_imm: matches!(op, Some(Op::Send { imm: Some(_) } | Op::Write { imm: Some(_), .. })),
                read_sges: Sges::new(),
                status: None,
            };
            // The send flags are rdma-core's provider's copy of the program's (unchecked): the
            // device acts on SIGNALED and SOLICITED and ignores the rest, as QEMU 7.2 ignores
            // them all (an INLINE WQE's SGEs are gathered as any other's: pvrdma has no inline).
            let well_formed = hdr.num_sge.get() <= self.max_send_sge;
            let checked = match op {
                Some(op) if well_formed => self.prepare(core, &hdr, sges, op, &mut entry),
                _ => Err(wc_status::LOC_QP_OP_ERR),
            };
            match checked {
                Ok((op, payload)) if self.is_datagram() => {
                    let imm = matches!(op, Op::Send { imm: Some(_) });
                    let own_qkey = st.attrs.qkey.get();
                    let addr = ud::address(core, own_qkey, &hdr, payload.len(), imm);
                    if let Err(e) = self.send_ud(core, st, entry, op, payload, addr, flags, fx) {
                        core.wire_unreserve(wire_len, fx);
                        if e {
                            return self.enter_error(core, st, fx);
                        }
                    }
                }
                Ok((op, payload)) => {
                    st.bytes_on_wire += u64::from(entry.byte_len);
                    st.inflight.push_back(entry);
                    let psn = st.send_psn;
                    st.send_psn = (psn + 1) & PSN_MASK;
                    let packet = Packet {
                        src: self.handle,
                        src_uid: self.uid,
                        seq,
                        psn,
                        dest: st.attrs.dest_qp_num.get(),
                        dgid: st.attrs.ah_attr.grh.dgid,
                        sgid_index: st.attrs.ah_attr.grh.sgid_index,
                        op,
                        solicited: flags & send_flags::SOLICITED != 0,
                        payload,
                        ud: None,
                    };
                    core.count(|c| &c.packets_sent);
                    if let Err(status) = core.transmit(self, &st.attrs, packet, fx) {
                        core.wire_unreserve(wire_len, fx);
                        if let Some(e) = st.inflight.back_mut() {
                            e.status = Some(status);
                        }
                        return self.enter_error(core, st, fx);
                    }
                }
                Err(status) => {
                    core.wire_unreserve(wire_len, fx);
                    entry.status = Some(status);
                    st.inflight.push_back(entry);
                    return self.enter_error(core, st, fx);
                }
            }
        }
    }

    /// Checks a consumed send WQE of operation `op` and gathers what its request carries (a
    /// READ's SGEs go to `entry` for the response). Errors: a completion status (`LOC_LEN_ERR`
    /// for a `total_len` that disagrees or a READ past `MAX_MSG_SZ`, the gather's errors).
    pub(crate) fn prepare(
        &self,
        core: &Backend,
        hdr: &SqWqeHdr,
        sges: Sges,
        op: Op,
        entry: &mut InFlight,
    ) -> Result<(Op, Vec<u8>), u32> {
        if !total_len_agrees(hdr.total_len.get(), &sges) {
            return Err(wc_status::LOC_LEN_ERR);
        }
        if let Op::Read { len, .. } = op {
            if len > limits::MAX_MSG_SZ {
                return Err(wc_status::LOC_LEN_ERR);
            }
            entry.byte_len = len;
            entry.read_sges = sges;
            return Ok((op, Vec::new()));
        }
        if let Op::Atomic { .. } = op {
            // The original value comes back into exactly 8 bytes of local SGEs (IBTA 9.4.5).
            if sges.iter().map(|s| u64::from(s.length.get())).sum::<u64>() != 8 {
                return Err(wc_status::LOC_LEN_ERR);
            }
            entry.byte_len = 8;
            entry.read_sges = sges;
            return Ok((op, Vec::new()));
        }
        let payload = mr::gather(core, self.pd, &sges)?;
        entry.byte_len = payload.len() as u32;
        Ok((op, payload))
    }

    /// Resumes an SQ drain the device's wire budget paused (called once a packet left the wire).
    pub fn resume_send(&self, core: &Backend, fx: &mut Effects) {
        let mut st = self.st.lock();
        if !st.dead && st.throttled && st.state == qp_state::RTS {
            st.throttled = false;
            self.drain_sq(core, &mut st, fx);
        }
    }

    /// Reads the send WQE at `slot`: its header and its first `min(num_sge, max_send_sge)` SGEs.
    pub(crate) fn read_sq_wqe(&self, core: &Backend, slot: Slot) -> Option<(SqWqeHdr, Sges)> {
        let mut hdr = SqWqeHdr::new_zeroed();
        self.sq.read(&core.mem, slot, 0, hdr.as_mut_bytes()).ok()?;
        let n = hdr.num_sge.get().min(self.max_send_sge) as usize;
        let sges = read_sges(&core.mem, &self.sq, slot, SQ_HDR, n)?;
        Some((hdr, sges))
    }

    /// Reads the receive WQE at `slot` like [`Qp::read_sq_wqe`].
    pub(crate) fn read_rq_wqe(&self, core: &Backend, slot: Slot) -> Option<(RqWqeHdr, Sges)> {
        let mut hdr = RqWqeHdr::new_zeroed();
        self.rq.read(&core.mem, slot, 0, hdr.as_mut_bytes()).ok()?;
        let n = hdr.num_sge.get().min(self.max_recv_sge) as usize;
        let sges = read_sges(&core.mem, &self.rq, slot, RQ_HDR, n)?;
        Some((hdr, sges))
    }
}
