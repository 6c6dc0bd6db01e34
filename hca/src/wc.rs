//! The translation of a device CQE into a work completion (IBTA 11.4.2.1 Poll for Completion). A
//! CQE is device-written and never trusted: a CQE naming a QP that is not on its CQ, a queue
//! that completes elsewhere or a WQE never posted, carrying an unknown opcode, or reporting more
//! bytes than the receive buffer holds, becomes a completion with an error status instead of a
//! panic or a silently trusted value.

use ib_core::{Wc, WcOpcode, WcStatus};
use pvrdma_abi::wqe::{wc_flags, wc_opcode, Cqe};
use std::sync::Arc;

/// One work queue's record of the WQEs it owes a completion, as the CQs it completes into
/// retire from it (the QP owns the queue; a CQ holds it as this).
pub(crate) trait OwedQueue: Send + Sync {
    /// Retires the WQE a CQE with `wr_id` completes (`success`: the opcode of a successful CQE,
    /// which should match the WQE's kind; `None` for an error CQE): its total length in bytes and
    /// whether the kinds agreed, or `None` if no such WQE is owed a completion.
    fn complete(&self, wr_id: u64, success: Option<WcOpcode>) -> Option<(u32, bool)>;
}

/// A work queue as a CQ holds it.
pub(crate) type SharedWq = Arc<dyn OwedQueue>;

/// The core's opcode for `enum pvrdma_wc_opcode`.
fn opcode(v: u32) -> WcOpcode {
    match v {
        wc_opcode::SEND => WcOpcode::Send,
        wc_opcode::RDMA_WRITE => WcOpcode::RdmaWrite,
        wc_opcode::RDMA_READ => WcOpcode::RdmaRead,
        wc_opcode::COMP_SWAP => WcOpcode::CompSwap,
        wc_opcode::FETCH_ADD => WcOpcode::FetchAdd,
        wc_opcode::RECV => WcOpcode::Recv,
        wc_opcode::RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        other => WcOpcode::Other(other),
    }
}

/// Which work queue a CQE completes, from its opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    /// A send-queue opcode (SEND, RDMA WRITE/READ).
    Send,
    /// A receive opcode (RECV, RECV_RDMA_WITH_IMM).
    Recv,
    /// An error CQE with an opcode the driver does not know (IBTA leaves the opcode of an error
    /// completion undefined): whichever of the QP's queues on this CQ owes the `wr_id`.
    Either,
}

/// What the CQ knows of the WQE a CQE names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The QP does not complete into this CQ.
    NotOnCq,
    /// The QP completes into this CQ, but not that queue's work.
    WrongQueue,
    /// No WQE with this `wr_id` is owed a completion on that queue.
    NotOwed,
    /// The posted WQE it completes (now retired), with its total length in bytes.
    Posted(u32),
    /// A successful CQE whose opcode is not the kind of the WQE it names (retired all the same).
    WrongKind,
}

/// The CQ's side of [`translate`]: the QPs completing into it and their owed WQEs.
pub trait Owed {
    /// Whether QP `qp` completes into this CQ.
    fn on_cq(&self, qp: u32) -> bool;
    /// Retires the WQE of QP `qp`'s `queue` that a CQE with `wr_id` completes; `success` is the
    /// opcode of a successful CQE (an unsignaled WQE completes without a CQE only then, and only
    /// a WQE of that kind matches), `None` for an error CQE.
    fn retire(&self, qp: u32, queue: Queue, wr_id: u64, success: Option<WcOpcode>) -> Verdict;
}

/// Translates a CQE into a [`Wc`], retiring the WQE it completes from `owed`. Never panics.
/// Untrusted content is reported, not believed:
/// - a QP handle not on this CQ (or wider than 32 bits): status `GeneralErr`, `qp_num` 0;
/// - an unknown opcode on a successful CQE: status `GeneralErr` (nothing retired);
/// - a CQE of a queue that completes into another CQ (a RECV on the QP's send-only CQ, a SEND
///   on its recv-only CQ), or for no WQE owed a completion on that queue (nothing posted, not
///   that `wr_id`, or a successful CQE of another kind than was posted: an RDMA WRITE completed
///   as a SEND — as QEMU 7.2, which carries every send WQE as a SEND, completes it): status
///   `GeneralErr` — the consumer is told of no work it did not post;
/// - a successful receive or RDMA READ whose `byte_len` exceeds the posted buffer: status
///   `LocLenErr` (IBTA's local length error, as rdma-core's providers report a message longer
///   than the receive buffer) with `byte_len` 0 — never more bytes than the buffer holds. An
///   RDMA WRITE with immediate is not bounded so: its length is the write's, not the receive
///   buffer's;
/// - an unknown status: `Other(code)`.
pub fn translate(cqe: &Cqe, owed: &impl Owed) -> Wc {
    let raw_qp = cqe.qp.get();
    let qp = u32::try_from(raw_qp).ok().filter(|&h| owed.on_cq(h));
    let opcode = opcode(cqe.opcode.get());
    // `enum pvrdma_wc_status` numbers its codes as `ibv_wc_status` does.
    let mut status = WcStatus::from_raw(cqe.status.get());
    let mut byte_len = cqe.byte_len.get();
    let success = status == WcStatus::Success;
    let queue = match opcode {
        WcOpcode::Other(_) => Queue::Either,
        o if o.is_recv() => Queue::Recv,
        _ => Queue::Send,
    };
    match qp {
        None => {
            tracing::warn!(qp = raw_qp, "CQE names a QP not on this CQ");
            status = WcStatus::GeneralErr;
        }
        Some(_) if status == WcStatus::Success && queue == Queue::Either => {
            tracing::warn!(opcode = cqe.opcode.get(), "CQE with an unknown opcode");
            status = WcStatus::GeneralErr;
        }
        Some(h) => match owed.retire(h, queue, cqe.wr_id.get(), success.then_some(opcode)) {
            Verdict::Posted(len) => {
                let bounded =
                    matches!(opcode, WcOpcode::Recv | WcOpcode::RdmaRead | WcOpcode::CompSwap | WcOpcode::FetchAdd);
                if success && bounded && byte_len > len {
                    tracing::warn!(qp = h, byte_len, len, "receive CQE longer than its buffer");
                    (status, byte_len) = (WcStatus::LocLenErr, 0);
                }
            }
            v => {
                tracing::warn!(qp = h, ?queue, verdict = ?v, "CQE for no WQE owed a completion");
                status = WcStatus::GeneralErr;
            }
        },
    }
    // `WITH_IMM` on a receive carries the immediate data; on the send completion of an operation
    // with immediate (Linux rxe's `make_send_cqe` sets the flag there too) the CQE's value.
    let with_imm = cqe.wc_flags.get() & wc_flags::WITH_IMM != 0 && queue != Queue::Either;
    Wc {
        wr_id: cqe.wr_id.get(),
        status,
        opcode,
        byte_len,
        qp_num: qp.unwrap_or(0),
        src_qp: cqe.src_qp.get(),
        imm_data: with_imm.then(|| cqe.imm_data.get()),
        grh: cqe.wc_flags.get() & wc_flags::GRH != 0 && opcode.is_recv(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvrdma_abi::wqe::wc_status;
    use std::cell::RefCell;
    use zerocopy::FromBytes;

    /// QPs `qps` on the CQ, each owing the (queue, wr_id, len) WQEs in `posted`.
    struct Fake {
        qps: Vec<u32>,
        posted: RefCell<Vec<(Queue, u64, u32)>>,
    }

    impl Fake {
        fn new(qps: &[u32], posted: &[(Queue, u64, u32)]) -> Self {
            Self { qps: qps.to_vec(), posted: RefCell::new(posted.to_vec()) }
        }
    }

    impl Owed for Fake {
        fn on_cq(&self, qp: u32) -> bool {
            self.qps.contains(&qp)
        }

        fn retire(&self, _qp: u32, queue: Queue, wr_id: u64, _success: Option<WcOpcode>) -> Verdict {
            let mut p = self.posted.borrow_mut();
            let hit = p.iter().position(|&(q, id, _)| id == wr_id && (q == queue || queue == Queue::Either));
            hit.map_or(Verdict::NotOwed, |k| Verdict::Posted(p.remove(k).2))
        }
    }

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
        let wc = translate(&c, &Fake::new(&[7], &[(Queue::Recv, 42, 100)]));
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
                grh: false,
            }
        );
    }

    /// Issue 21 §5: a send completion of an operation with immediate says so, as Linux rxe's.
    #[test]
    fn imm_on_receive_and_send_completions_that_carry_it() {
        let mut c = cqe(7, wc_opcode::SEND, wc_status::SUCCESS);
        c.wc_flags.set(wc_flags::WITH_IMM);
        assert_eq!(translate(&c, &Fake::new(&[7], &[(Queue::Send, 42, 0)])).imm_data, Some(0));
        let plain = cqe(7, wc_opcode::RDMA_WRITE, wc_status::SUCCESS);
        assert_eq!(translate(&plain, &Fake::new(&[7], &[(Queue::Send, 42, 0)])).imm_data, None);
        let mut odd = cqe(7, 0x55, wc_status::WR_FLUSH_ERR);
        odd.wc_flags.set(wc_flags::WITH_IMM | wc_flags::GRH);
        let w = translate(&odd, &Fake::new(&[7], &[(Queue::Send, 42, 0)]));
        assert_eq!((w.imm_data, w.grh), (None, false), "an unknown opcode carries neither");
    }

    #[test]
    fn hostile_cqes_are_reported_not_trusted() {
        let sent = || Fake::new(&[7], &[(Queue::Send, 42, 0)]);
        let foreign = translate(&cqe(8, wc_opcode::SEND, 0), &Fake::new(&[7], &[]));
        assert_eq!((foreign.status, foreign.qp_num), (WcStatus::GeneralErr, 0));
        let wide = translate(&cqe(1 << 40 | 7, wc_opcode::SEND, 0), &sent());
        assert_eq!(wide.status, WcStatus::GeneralErr);
        let op = translate(&cqe(7, 0x55, 0), &sent());
        assert_eq!((op.status, op.opcode), (WcStatus::GeneralErr, WcOpcode::Other(0x55)));
        let st = translate(&cqe(7, wc_opcode::SEND, 999), &sent());
        assert_eq!(st.status, WcStatus::Other(999));
        let flush = translate(&cqe(7, 0x55, wc_status::WR_FLUSH_ERR), &sent());
        assert_eq!(flush.status, WcStatus::WrFlushErr, "an error CQE's opcode is not trusted either way");
    }

    #[test]
    fn completions_for_work_not_owed_are_errors() {
        let wrong_queue = translate(&cqe(7, wc_opcode::RECV, 0), &Fake::new(&[7], &[(Queue::Send, 42, 0)]));
        assert_eq!((wrong_queue.status, wrong_queue.qp_num), (WcStatus::GeneralErr, 7));
        let other_id = translate(&cqe(7, wc_opcode::SEND, 0), &Fake::new(&[7], &[(Queue::Send, 41, 0)]));
        assert_eq!(other_id.status, WcStatus::GeneralErr);
        let once = Fake::new(&[7], &[(Queue::Send, 42, 0)]);
        assert_eq!(translate(&cqe(7, wc_opcode::SEND, 0), &once).status, WcStatus::Success);
        assert_eq!(translate(&cqe(7, wc_opcode::SEND, 0), &once).status, WcStatus::GeneralErr, "retired");
    }

    #[test]
    fn a_receive_longer_than_its_buffer_is_a_local_length_error() {
        let short = translate(&cqe(7, wc_opcode::RECV, 0), &Fake::new(&[7], &[(Queue::Recv, 42, 99)]));
        assert_eq!((short.status, short.byte_len), (WcStatus::LocLenErr, 0));
        let fits = translate(&cqe(7, wc_opcode::RECV, 0), &Fake::new(&[7], &[(Queue::Recv, 42, 100)]));
        assert_eq!((fits.status, fits.byte_len), (WcStatus::Success, 100));
        let imm = translate(&cqe(7, wc_opcode::RECV_RDMA_WITH_IMM, 0), &Fake::new(&[7], &[(Queue::Recv, 42, 0)]));
        assert_eq!(imm.status, WcStatus::Success, "an RDMA WRITE's length is not the buffer's");
        let read = translate(&cqe(7, wc_opcode::RDMA_READ, 0), &Fake::new(&[7], &[(Queue::Send, 42, 99)]));
        assert_eq!((read.status, read.byte_len), (WcStatus::LocLenErr, 0), "a READ past its SGEs");
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
            let owed = Fake::new(&[c.qp.get() as u32], &[(Queue::Recv, c.wr_id.get(), 64)]);
            let wc = translate(&c, &owed);
            if wc.status == WcStatus::Success {
                assert_eq!(wc.qp_num, c.qp.get() as u32);
                assert!(!matches!(wc.opcode, WcOpcode::Other(_)));
                assert!(wc.opcode != WcOpcode::Recv || wc.byte_len <= 64);
            }
        }
    }
}
