//! The translation of a device CQE into a work completion (IBTA 11.4.2.1 Poll for Completion). A
//! CQE is device-written and never trusted: a CQE naming a QP that is not on its CQ, or carrying
//! an unknown opcode, becomes a completion with an error status instead of a panic or a silently
//! trusted value.

use ib_core::{Wc, WcOpcode, WcStatus};
use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status, Cqe};

/// The core's status for `enum pvrdma_wc_status` (same meanings as `ib_wc_status`); codes
/// without a variant of their own keep their value.
fn status(v: u32) -> WcStatus {
    match v {
        wc_status::SUCCESS => WcStatus::Success,
        wc_status::LOC_LEN_ERR => WcStatus::LocLenErr,
        wc_status::LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
        wc_status::LOC_PROT_ERR => WcStatus::LocProtErr,
        wc_status::WR_FLUSH_ERR => WcStatus::WrFlushErr,
        wc_status::LOC_ACCESS_ERR => WcStatus::LocAccessErr,
        wc_status::REM_ACCESS_ERR => WcStatus::RemAccessErr,
        wc_status::REM_OP_ERR => WcStatus::RemOpErr,
        wc_status::RETRY_EXC_ERR => WcStatus::RetryExcErr,
        wc_status::RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        wc_status::FATAL_ERR => WcStatus::FatalErr,
        wc_status::GENERAL_ERR => WcStatus::GeneralErr,
        other => WcStatus::Other(other),
    }
}

/// The core's opcode for `enum pvrdma_wc_opcode`.
fn opcode(v: u32) -> WcOpcode {
    match v {
        wc_opcode::SEND => WcOpcode::Send,
        wc_opcode::RDMA_WRITE => WcOpcode::RdmaWrite,
        wc_opcode::RDMA_READ => WcOpcode::RdmaRead,
        wc_opcode::RECV => WcOpcode::Recv,
        wc_opcode::RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        other => WcOpcode::Other(other),
    }
}

/// Translates a CQE into a [`Wc`]; `qp_on_cq(h)` says whether QP handle `h` completes into this
/// CQ. Never panics. Untrusted content is reported, not believed:
/// - a QP handle not on this CQ (or wider than 32 bits): status `GeneralErr`, `qp_num` 0;
/// - an unknown opcode on a successful CQE: status `GeneralErr`;
/// - an unknown status: `Other(code)`.
pub fn translate(cqe: &Cqe, qp_on_cq: impl Fn(u32) -> bool) -> Wc {
    let raw_qp = cqe.qp.get();
    let qp = u32::try_from(raw_qp).ok().filter(|&h| qp_on_cq(h));
    let opcode = opcode(cqe.opcode.get());
    let mut status = status(cqe.status.get());
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
