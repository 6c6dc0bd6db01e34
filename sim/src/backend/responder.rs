//! The responder's side of each operation a QP carries — SEND, WRITE (with immediate), READ,
//! the atomics — and the requester's READ or atomic response: what the loopback port and the RoCE
//! responder both call, knowing no transport.

use crate::backend::mr;
use crate::limits;
use crate::packet::{Op, Packet};
use pvrdma_abi::verbs::access;
use pvrdma_abi::wqe::{wc_opcode, wc_status};

use crate::backend::Backend;
use crate::ctx::Effects;
use crate::qp::*;

impl Qp {
    /// A SEND: takes the next receive WQE for `pkt`, scatters the payload and publishes the
    /// receive CQE, if the QP [`accepts`](Qp::accepts) the packet. Called by the port thread.
    pub(crate) fn receive(&self, core: &Backend, pkt: &Packet, connection: u64, fx: &mut Effects) -> Rx {
        let mut st = self.st.lock();
        if !self.accepting(&st, pkt.src, connection) {
            return Rx::Fail(wc_status::RETRY_EXC_ERR);
        }
        let (hdr, sges) = match self.take_rq_wqe(core, &mut st, fx) {
            Ok(Some(wqe)) => wqe,
            Ok(None) => return Rx::Park,
            Err(rx) => return rx,
        };
        let status = self.check_rq_wqe(&hdr, &sges).and_then(|()| mr::scatter(core, self.pd, &sges, &pkt.payload));
        let imm = match pkt.op {
            Op::Send { imm } => imm,
            _ => None,
        };
        // RC: no source QP in the completion (see `recv_cqe`).
        let cqe = recv_cqe(self.handle, &hdr, wc_opcode::RECV, 0, pkt.payload.len(), imm);
        self.complete_recv(core, &mut st, cqe, pkt.solicited, status, fx)
    }

    /// The receive side of an RDMA WRITE with immediate whose data [`Qp::rdma_write`] placed:
    /// consumes the next receive WQE without scattering into it and completes it with
    /// `RECV_RDMA_WITH_IMM`, `imm` and `byte_len` (the bytes written), as IBTA 9.4.3 and Linux
    /// rxe's `do_complete` do. [`Rx::Park`] when no receive WQE is posted (RNR, as a SEND).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn receive_write_imm(
        &self,
        core: &Backend,
        src_qp: u32,
        imm: [u8; 4],
        byte_len: u32,
        solicited: bool,
        connection: u64,
        fx: &mut Effects,
    ) -> Rx {
        let mut st = self.st.lock();
        if !self.accepting(&st, src_qp, connection) {
            return Rx::Fail(wc_status::RETRY_EXC_ERR);
        }
        let (hdr, sges) = match self.take_rq_wqe(core, &mut st, fx) {
            Ok(Some(wqe)) => wqe,
            Ok(None) => return Rx::Park,
            Err(rx) => return rx,
        };
        let status = self.check_rq_wqe(&hdr, &sges);
        let len = byte_len as usize;
        let opcode = wc_opcode::RECV_RDMA_WITH_IMM;
        let cqe = recv_cqe(self.handle, &hdr, opcode, 0, len, Some(imm));
        self.complete_recv(core, &mut st, cqe, solicited, status, fx)
    }

    /// The responder side of an RDMA WRITE: writes `data` at `remote_addr` of the MR `rkey`
    /// names, if the QP grants `REMOTE_WRITE` (its `qp_access_flags`) and the MR passes
    /// [`mr::remote_write`]'s checks (a zero-length write checks no rkey). Consumes no receive
    /// WQE. The caller has checked [`Qp::accepts`].
    ///
    /// Errors: `REM_ACCESS_ERR`, the requester's completion status (NAK Remote Access Error),
    /// with nothing written; the caller then moves this QP to ERR with [`Qp::force_error`]
    /// (a Class C responder error of IBTA 9.9, as Linux rxe's `RESPST_ERR_RKEY_VIOLATION` does).
    /// Linux rxe answers a QP without the access bit with Invalid Request instead
    /// (`check_op_valid`); the model reports it as the access error it is.
    pub(crate) fn rdma_write(&self, core: &Backend, rkey: u32, remote_addr: u64, data: &[u8]) -> Result<(), u32> {
        self.check_remote_access(access::REMOTE_WRITE)?;
        mr::remote_write(core, self.pd, rkey, remote_addr, data)
    }

    /// The responder side of an RDMA READ: the `len` bytes at `remote_addr` of the MR `rkey`
    /// names, checked as [`Qp::rdma_write`] with `REMOTE_READ`. Errors: as `rdma_write`, and
    /// `REM_INV_REQ_ERR` for a length past `MAX_MSG_SZ`.
    pub(crate) fn rdma_read(&self, core: &Backend, rkey: u32, remote_addr: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.check_remote_access(access::REMOTE_READ)?;
        mr::remote_read(core, self.pd, rkey, remote_addr, len)
    }

    /// The responder side of an atomic (IBTA 9.4.5): applies `op` to the 8 bytes at
    /// `remote_addr` of the MR `rkey` names as one atomic step and returns their original value,
    /// if the QP grants `REMOTE_ATOMIC` and the MR passes [`mr::remote_atomic`]'s checks.
    /// Errors: `REM_ACCESS_ERR`, or `REM_INV_REQ_ERR` for a misaligned address, nothing changed;
    /// the caller moves this QP to ERR (Class C, as for [`Qp::rdma_write`]).
    pub(crate) fn atomic(
        &self,
        core: &Backend,
        rkey: u32,
        remote_addr: u64,
        op: crate::mem::Atomic64,
    ) -> Result<u64, u32> {
        self.check_remote_access(access::REMOTE_ATOMIC)?;
        let orig = mr::remote_atomic(core, self.pd, rkey, remote_addr, op)?;
        core.count(|c| &c.atomics_executed);
        Ok(orig)
    }

    /// Checks a whole RDMA READ's RETH (`len` bytes at `remote_addr` under `rkey`) before its
    /// first response is sent, as [`Qp::rdma_read`] checks each response's part: a READ the
    /// responder refuses sends nothing. Errors: as `rdma_read`.
    pub(crate) fn check_rdma_read(&self, core: &Backend, rkey: u32, remote_addr: u64, len: u32) -> Result<(), u32> {
        self.check_remote_access(access::REMOTE_READ)?;
        if len > limits::MAX_MSG_SZ {
            return Err(wc_status::REM_INV_REQ_ERR);
        }
        if len == 0 {
            return Ok(());
        }
        mr::remote(core, self.pd, rkey, remote_addr, u64::from(len), access::REMOTE_READ).map(|_| ())
    }

    /// Checks a whole RDMA WRITE's RETH (`len` bytes at `remote_addr` under `rkey`) before its
    /// first packet is written, as [`Qp::rdma_write`] checks each packet: a multi-packet WRITE
    /// the responder refuses writes nothing. Errors: `REM_ACCESS_ERR`.
    pub(crate) fn check_rdma_write(&self, core: &Backend, rkey: u32, remote_addr: u64, len: u64) -> Result<(), u32> {
        self.check_remote_access(access::REMOTE_WRITE)?;
        if len == 0 {
            return Ok(());
        }
        mr::remote(core, self.pd, rkey, remote_addr, len, access::REMOTE_WRITE).map(|_| ())
    }

    /// Whether the QP's `qp_access_flags` grant `need`.
    fn check_remote_access(&self, need: u32) -> Result<(), u32> {
        let granted = self.st.lock().attrs.qp_access_flags.get();
        if granted & need == need {
            Ok(())
        } else {
            Err(wc_status::REM_ACCESS_ERR)
        }
    }

    /// The requester side of an RDMA READ response: scatters `data` at byte `offset` of READ
    /// `seq`'s local SGEs (`LOCAL_WRITE` needed). The caller then completes `seq` with
    /// [`Qp::complete_send`] (the error status on failure).
    ///
    /// Errors: `LOC_PROT_ERR` for a bad local SGE, `LOC_LEN_ERR` for data past the SGEs, and
    /// `BAD_RESP_ERR` if `seq` is no READ waiting for its response.
    pub(crate) fn read_response(&self, core: &Backend, seq: u64, offset: u32, data: &[u8]) -> Result<(), u32> {
        let st = self.st.lock();
        let read = st.inflight.iter().find(|e| e.seq == seq && e.status.is_none() && e.is_read());
        let entry = read.filter(|_| !st.dead).ok_or(wc_status::BAD_RESP_ERR)?;
        mr::scatter_at(core, self.pd, &entry.read_sges, offset, data)
    }
}
