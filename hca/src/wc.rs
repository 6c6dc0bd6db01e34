//! Work completions (IBTA 11.4.2.1 Poll for Completion) and the translation of a device CQE into
//! one. A CQE is device-written and never trusted: a CQE naming a QP that is not on its CQ, or
//! carrying an unknown opcode, becomes a completion with an error status instead of a panic or a
//! silently trusted value.

use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status, Cqe};

/// Completion status (`enum ib_wc_status`); codes without a variant of their own are `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WcStatus {
    /// The work request completed.
    #[default]
    Success,
    /// Local length error (e.g. a message longer than the receive buffer).
    LocLenErr,
    /// Local QP operation error.
    LocQpOpErr,
    /// Local protection error (a bad lkey or address).
    LocProtErr,
    /// Flushed: the QP was in the error state.
    WrFlushErr,
    /// Local access error.
    LocAccessErr,
    /// Remote access error.
    RemAccessErr,
    /// Remote operation error.
    RemOpErr,
    /// Transport retries exhausted.
    RetryExcErr,
    /// Receiver-not-ready retries exhausted.
    RnrRetryExcErr,
    /// Fatal error.
    FatalErr,
    /// Also what the driver reports for a CQE it cannot trust.
    GeneralErr,
    /// Any other `pvrdma_wc_status` code.
    Other(u32),
}

impl WcStatus {
    /// Decodes `enum pvrdma_wc_status`.
    pub fn from_raw(v: u32) -> Self {
        match v {
            wc_status::SUCCESS => Self::Success,
            wc_status::LOC_LEN_ERR => Self::LocLenErr,
            wc_status::LOC_QP_OP_ERR => Self::LocQpOpErr,
            wc_status::LOC_PROT_ERR => Self::LocProtErr,
            wc_status::WR_FLUSH_ERR => Self::WrFlushErr,
            wc_status::LOC_ACCESS_ERR => Self::LocAccessErr,
            wc_status::REM_ACCESS_ERR => Self::RemAccessErr,
            wc_status::REM_OP_ERR => Self::RemOpErr,
            wc_status::RETRY_EXC_ERR => Self::RetryExcErr,
            wc_status::RNR_RETRY_EXC_ERR => Self::RnrRetryExcErr,
            wc_status::FATAL_ERR => Self::FatalErr,
            wc_status::GENERAL_ERR => Self::GeneralErr,
            other => Self::Other(other),
        }
    }
}

/// Completion opcode (`enum ib_wc_opcode`); unknown codes are `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WcOpcode {
    /// A send.
    #[default]
    Send,
    /// An RDMA WRITE.
    RdmaWrite,
    /// An RDMA READ.
    RdmaRead,
    /// A receive.
    Recv,
    /// An RDMA WRITE with immediate, on the receive side.
    RecvRdmaWithImm,
    /// Any other `pvrdma_wc_opcode` code.
    Other(u32),
}

impl WcOpcode {
    /// Decodes `enum pvrdma_wc_opcode`.
    pub fn from_raw(v: u32) -> Self {
        match v {
            wc_opcode::SEND => Self::Send,
            wc_opcode::RDMA_WRITE => Self::RdmaWrite,
            wc_opcode::RDMA_READ => Self::RdmaRead,
            wc_opcode::RECV => Self::Recv,
            wc_opcode::RECV_RDMA_WITH_IMM => Self::RecvRdmaWithImm,
            other => Self::Other(other),
        }
    }

    /// Whether this is a receive-side completion.
    pub fn is_recv(self) -> bool {
        matches!(self, Self::Recv | Self::RecvRdmaWithImm)
    }
}

/// One work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Wc {
    /// The work request's ID, as posted.
    pub wr_id: u64,
    /// Completion status.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receive completions).
    pub byte_len: u32,
    /// The local QP (its handle, which is the QPN on pvrdma).
    pub qp_num: u32,
    /// The remote QP of a receive completion.
    pub src_qp: u32,
    /// Immediate data of a receive completion that carried it (host order).
    pub imm_data: Option<u32>,
}

/// Translates a CQE into a [`Wc`]; `qp_on_cq(h)` says whether QP handle `h` completes into this
/// CQ. Never panics. Untrusted content is reported, not believed:
/// - a QP handle not on this CQ (or wider than 32 bits): status `GeneralErr`, `qp_num` 0;
/// - an unknown opcode on a successful CQE: status `GeneralErr`;
/// - an unknown status: `Other(code)`.
pub fn translate(cqe: &Cqe, qp_on_cq: impl Fn(u32) -> bool) -> Wc {
    let raw_qp = cqe.qp.get();
    let qp = u32::try_from(raw_qp).ok().filter(|&h| qp_on_cq(h));
    let opcode = WcOpcode::from_raw(cqe.opcode.get());
    let mut status = WcStatus::from_raw(cqe.status.get());
    if qp.is_none() {
        tracing::warn!(qp = raw_qp, "CQE names a QP not on this CQ");
        status = WcStatus::GeneralErr;
    } else if status == WcStatus::Success && matches!(opcode, WcOpcode::Other(_)) {
        tracing::warn!(opcode = cqe.opcode.get(), "CQE with an unknown opcode");
        status = WcStatus::GeneralErr;
    }
    let with_imm = cqe.wc_flags.get() & wc_flags::WITH_IMM != 0 && opcode.is_recv();
    Wc {
        wr_id: cqe.wr_id.get(),
        status,
        opcode,
        byte_len: cqe.byte_len.get(),
        qp_num: qp.unwrap_or(0),
        src_qp: cqe.src_qp.get(),
        imm_data: with_imm.then(|| cqe.imm_data.get()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromBytes;

    fn cqe(qp: u64, opcode: u32, status: u32) -> Cqe {
        let mut c = Cqe::default();
        c.wr_id.set(42);
        c.qp.set(qp);
        c.opcode.set(opcode);
        c.status.set(status);
        c.byte_len.set(100);
        c
    }

    #[test]
    fn good_cqe_translates() {
        let mut c = cqe(7, wc_opcode::RECV, wc_status::SUCCESS);
        c.wc_flags.set(wc_flags::WITH_IMM);
        c.imm_data.set(0xdead_beef);
        c.src_qp.set(9);
        let wc = translate(&c, |h| h == 7);
        assert_eq!(
            wc,
            Wc {
                wr_id: 42,
                status: WcStatus::Success,
                opcode: WcOpcode::Recv,
                byte_len: 100,
                qp_num: 7,
                src_qp: 9,
                imm_data: Some(0xdead_beef),
            }
        );
    }

    #[test]
    fn imm_only_on_receive_completions() {
        let mut c = cqe(7, wc_opcode::SEND, wc_status::SUCCESS);
        c.wc_flags.set(wc_flags::WITH_IMM);
        assert_eq!(translate(&c, |_| true).imm_data, None);
    }

    #[test]
    fn hostile_cqes_are_reported_not_trusted() {
        let foreign = translate(&cqe(8, wc_opcode::SEND, 0), |h| h == 7);
        assert_eq!((foreign.status, foreign.qp_num), (WcStatus::GeneralErr, 0));
        let wide = translate(&cqe(1 << 40 | 7, wc_opcode::SEND, 0), |h| h == 7);
        assert_eq!(wide.status, WcStatus::GeneralErr);
        let op = translate(&cqe(7, 0x55, 0), |_| true);
        assert_eq!((op.status, op.opcode), (WcStatus::GeneralErr, WcOpcode::Other(0x55)));
        let st = translate(&cqe(7, wc_opcode::SEND, 999), |_| true);
        assert_eq!(st.status, WcStatus::Other(999));
        let flush = translate(&cqe(7, 0x55, wc_status::WR_FLUSH_ERR), |_| true);
        assert_eq!(flush.status, WcStatus::WrFlushErr);
    }

    #[test]
    fn any_bytes_translate_without_panic() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            let mut bytes = [0u8; 64];
            for b in bytes.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            let c = Cqe::read_from_bytes(&bytes).unwrap();
            let wc = translate(&c, |h| h % 3 == 0);
            if wc.status == WcStatus::Success {
                assert_eq!(wc.qp_num % 3, 0);
                assert!(!matches!(wc.opcode, WcOpcode::Other(_)));
            }
        }
    }
}
