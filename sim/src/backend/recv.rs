//! The receive side of a QP's data path: taking a receive WQE (the QP's RQ or its SRQ), the room
//! a SEND may fill, and the receive completion.

use parking_lot::MutexGuard;
use pvrdma_abi::verbs::qp_state;
use pvrdma_abi::wqe::{wc_status, Cqe, RqWqeHdr};
use zerocopy::big_endian::U32 as Be32;
use zerocopy::little_endian::U32;

use crate::backend::Backend;
use crate::ctx::Effects;
use crate::qp::*;

impl Qp {
    /// Takes the next receive WQE: `Ok(None)` if none is posted; `Err` (the sender's status, the
    /// QP moved to ERR) on a ring fault.
    pub(crate) fn take_rq_wqe(
        &self,
        core: &Backend,
        st: &mut MutexGuard<'_, QpState>,
        fx: &mut Effects,
    ) -> Result<Option<(RqWqeHdr, Sges)>, Rx> {
        if let Some(srq) = &self.srq {
            if let Some(held) = st.held_srq_wqe.take() {
                return Ok(Some(held));
            }
            return srq.take(core).map_err(|()| {
                self.fault(core, st, fx);
                Rx::Fail(wc_status::RETRY_EXC_ERR)
            });
        }
        let wqe = match self.rq.next(&core.mem) {
            Ok(None) => return Ok(None),
            Ok(Some(slot)) => self.read_rq_wqe(core, slot).filter(|_| self.rq.consume(&core.mem, slot).is_ok()),
            Err(_) => None,
        };
        match wqe {
            Some(wqe) => Ok(Some(wqe)),
            None => {
                self.fault(core, st, fx);
                Err(Rx::Fail(wc_status::RETRY_EXC_ERR))
            }
        }
    }

    /// The length of the next receive WQE (the sum of its SGEs' lengths), if one is posted and
    /// readable: what a multi-packet SEND may bring (the RoCE responder's bound on reassembly).
    /// On an SRQ the WQE is taken now and held for the message (other QPs take from the same
    /// SRQ meanwhile); an SRQ ring fault moves this QP to ERR.
    pub(crate) fn recv_capacity(&self, core: &Backend, fx: &mut Effects) -> Option<u64> {
        let mut st = self.st.lock();
        if st.dead || !matches!(st.state, qp_state::RTR | qp_state::RTS | qp_state::SQD) {
            return None;
        }
        if self.srq.is_some() {
            if st.held_srq_wqe.is_none() {
                st.held_srq_wqe = self.take_rq_wqe(core, &mut st, fx).ok()?;
            }
            let (_, sges) = st.held_srq_wqe.as_ref()?;
            return Some(sges.iter().map(|s| u64::from(s.length.get())).sum());
        }
        let slot = self.rq.next(&core.mem).ok()??;
        let (_, sges) = self.read_rq_wqe(core, slot)?;
        Some(sges.iter().map(|s| u64::from(s.length.get())).sum())
    }

    /// Publishes a receive completion: `cqe` on success; on error, `cqe` with that status (no
    /// length, no immediate data), the QP moved to ERR and the sender failed with what the
    /// responder's NAK tells it.
    pub(crate) fn complete_recv(
        &self,
        core: &Backend,
        st: &mut MutexGuard<'_, QpState>,
        mut cqe: Cqe,
        solicited: bool,
        status: Result<(), u32>,
        fx: &mut Effects,
    ) -> Rx {
        let Err(status) = status else {
            self.recv_cq.publish(core, &cqe, solicited, fx);
            return Rx::Delivered;
        };
        cqe.status = U32::new(status);
        cqe.byte_len = U32::new(0);
        cqe.imm_data = Be32::new(0);
        cqe.wc_flags = U32::new(0);
        self.recv_cq.publish(core, &cqe, solicited, fx);
        self.enter_error(core, st, fx);
        Rx::Fail(if status == wc_status::LOC_LEN_ERR { wc_status::REM_INV_REQ_ERR } else { wc_status::REM_OP_ERR })
    }
}
