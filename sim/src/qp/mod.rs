//! Queue pairs: the object and its state. Its commands (CREATE_QP / MODIFY_QP / QUERY_QP /
//! DESTROY_QP) are in `cmd/qp.rs`; its half of the data path (the send and receive doorbells,
//! drain the SQ, receive into the RQ, complete, flush) in `backend/`.
//!
//! A QP's pages: page 0 is the ring state (SQ = `tx`, RQ = `rx`; the driver produces
//! `prod_tail`, the device consumes `cons_head`), SQ pages `1 ..= send_chunks`, RQ pages after.
//! RC and UD are modelled (UD in `qp/ud.rs`: its transitions, `wr.ud`, the GRH area, Q_Key
//! checks), and the port's GSI QP as a UD QP of QPN 1 (`qp/gsi.rs`). On QEMU 7.2 a QP's handle
//! is its QPN (2 .., the GSI QP's 1). The SQ carries SEND (with
//! immediate), RDMA WRITE (with immediate), RDMA READ and the atomics (COMPARE SWAP, FETCH ADD);
//! the responder's side of each ([`Qp::receive`], [`Qp::rdma_write`], [`Qp::rdma_read`],
//! [`Qp::receive_write_imm`], [`Qp::atomic`]) and the requester's READ or atomic response
//! ([`Qp::read_response`]) know no transport: the loopback port and a wire transport call them
//! alike.
//!
//! Send completions are published in SQ order whatever the order the port finishes them in: each
//! consumed send WQE gets an in-flight entry, and entries retire from the front once their status
//! is known. The SQ drain stops consuming (leaving the WQEs posted, as RC flow control keeps them
//! on the SQ until delivered) while the QP has its SQ depth of entries in flight, while
//! `qp_bytes_in_flight` payload bytes are on the wire, or while the device's wire budget is
//! spent (`wire.rs`); so a QP never has more than its SQ depth (at most `MAX_QP_WR`) packets in
//! flight or parked, zero-length sends included. A QP in the error state flushes every posted and
//! in-flight WQE with `WR_FLUSH_ERR` (completions with an error status are always written,
//! signaled or not).

use crate::budget::Charge;
use crate::cq::Cq;
use crate::mem::Atomic64;
use crate::packet::Op;
use crate::ring::Consumer;
pub(crate) use crate::wqe::{read_sges, Sges};
use parking_lot::Mutex;
use pvrdma_abi::verbs::{qp_state, Gid, QpAttr};
use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status, wr_opcode, Cqe, RqWqeHdr, Sge, SqWqeHdr, WrAtomic, WrRdma};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zerocopy::big_endian::U32 as Be32;
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromBytes;

pub(crate) mod gsi;
pub(crate) mod ud;

pub(crate) const SQ_HDR: usize = core::mem::size_of::<SqWqeHdr>();
pub(crate) const RQ_HDR: usize = core::mem::size_of::<RqWqeHdr>();

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    /// Handle, equal to the QPN (2 .., the GSI QP's 1).
    pub handle: u32,
    /// Unique over the device's life (handles are reused).
    pub uid: u64,
    /// Owning context (its PD's), 0 for the kernel.
    pub ctx: u32,
    /// Its PD.
    pub pd: u32,
    /// CQ of its send completions.
    pub send_cq: Arc<Cq>,
    /// CQ of its receive completions.
    pub recv_cq: Arc<Cq>,
    /// The SRQ its receive WQEs come from (`is_srq`); its own RQ is then never read.
    pub(crate) srq: Option<Arc<crate::srq::Srq>>,
    pub(crate) sq_sig_all: bool,
    /// `qp_type`: RC, UD or GSI.
    pub(crate) qp_type: u8,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) sq: Consumer,
    pub(crate) rq: Consumer,
    pub(crate) st: Mutex<QpState>,
    /// Times the QP was moved to RESET (under `st`): a packet sent to an earlier connection is
    /// not delivered into a later one.
    pub(crate) resets: AtomicU64,
    pub(crate) _charge: Charge,
}

#[derive(Debug)]
pub(crate) struct QpState {
    /// A `qp_state` value.
    pub(crate) state: u32,
    /// Attributes as MODIFY_QP last set them.
    pub(crate) attrs: QpAttr,
    /// Destroyed, or the device was reset.
    pub(crate) dead: bool,
    pub(crate) inflight: VecDeque<InFlight>,
    /// Payload bytes of the in-flight sends still on the wire.
    pub(crate) bytes_on_wire: u64,
    /// The SQ drain paused (SQ depth or `qp_bytes_in_flight` reached: resumes when a send
    /// completes; the device's wire budget spent: resumes when a packet leaves the wire).
    pub(crate) throttled: bool,
    pub(crate) next_seq: u64,
    /// The loopback port's PSNs, one per message there: the next this QP sends (from
    /// `sq_psn`) and the next it takes as a responder (from `rq_psn`).
    pub(crate) send_psn: u32,
    pub(crate) recv_psn: u32,
    /// The SRQ WQE taken for a message still arriving (RoCE: at its first packet, IBTA's
    /// moment), which its last packet completes; flushed on this QP if it goes to ERR first.
    pub(crate) held_srq_wqe: Option<(RqWqeHdr, Sges)>,
    /// In SQD, the SQ_DRAINED event is still owed (asked with `en_sqd_async_notify`).
    pub(crate) sqd_notify: bool,
}

/// 24-bit PSNs (IBTA 9.7.1).
pub(crate) const PSN_MASK: u32 = (1 << 24) - 1;

/// A consumed send WQE whose completion is not yet published.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) seq: u64,
    pub(crate) wr_id: u64,
    pub(crate) signaled: bool,
    /// Bytes sent (SEND, WRITE) or to read (READ): the completion's `byte_len`.
    pub(crate) byte_len: u32,
    /// The completion's `wc_opcode` (SEND, RDMA_WRITE or RDMA_READ).
    pub(crate) wc_opcode: u32,
    /// SEND or RDMA WRITE with immediate: the successful completion says `WITH_IMM`.
    pub(crate) with_imm: bool,
    /// An RDMA READ's local SGEs, where its response data goes (empty for other operations).
    pub(crate) read_sges: Sges,
    pub(crate) status: Option<u32>,
}

/// What [`Qp::receive`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rx {
    /// Scattered and completed.
    Delivered,
    /// No receive WQE is posted (RNR): the requester tries again within its `rnr_retry`.
    Park,
    /// The sender completes with this status; `RETRY_EXC_ERR` means the responder refused the
    /// packet unanswered (not in RTR/RTS, not connected to the sender, reset, or its ring
    /// broke): both ports then leave it to the requester's timeout and `retry_cnt`.
    Fail(u32),
}

/// Whether a WQE's `total_len` agrees with its SGEs: 0 (unstated: Linux's driver writes 0) or
/// exactly the sum of their lengths. Another value fails the WQE with `LOC_LEN_ERR`.
pub(crate) fn total_len_agrees(stated: u32, sges: &[Sge]) -> bool {
    stated == 0 || u64::from(stated) == sges.iter().map(|s| u64::from(s.length.get())).sum::<u64>()
}

impl Qp {
    /// Marks the QP destroyed (DESTROY_QP, device reset).
    pub fn kill(&self) {
        Self::kill_locked(&mut self.st.lock());
    }

    pub(crate) fn kill_locked(st: &mut QpState) {
        st.dead = true;
        st.inflight.clear();
        st.held_srq_wqe = None;
    }

    /// The current `qp_state`.
    pub fn state(&self) -> u32 {
        self.st.lock().state
    }

    /// Which connection the QP is in: read before a delivery, passed to [`Qp::receive`].
    pub fn connection(&self) -> u64 {
        self.resets.load(Ordering::Acquire)
    }

    /// The loopback port's check of a request's PSN and source: whether `psn` is the next this
    /// responder takes and `from` (the sender's source GID) is the GID its address vector names.
    /// A QP whose peer's PSNs disagree with its own (misconnected: two processes' models that
    /// each found their own QP under the peer's number), or that is connected to another
    /// address, leaves the request unanswered, as a wire's responder would (it NAKs or drops
    /// it; the RoCE port takes requests only from its `dgid`'s address), rather than delivering
    /// it to the wrong QP.
    pub(crate) fn expects_request(&self, psn: u32, from: Option<Gid>) -> bool {
        let st = self.st.lock();
        st.recv_psn == psn && from == Some(st.attrs.ah_attr.grh.dgid)
    }

    /// The loopback port delivered the request [`Qp::expects_request`] passed: the next PSN is due.
    pub(crate) fn took_psn(&self) {
        let mut st = self.st.lock();
        st.recv_psn = (st.recv_psn + 1) & PSN_MASK;
    }

    /// Whether the QP, as a responder, takes requests from QP `src_qp` in `connection`: it is
    /// alive, in RTR or RTS, connected to `src_qp`, and not reset since `connection` was read.
    pub(crate) fn accepts(&self, src_qp: u32, connection: u64) -> bool {
        self.accepting(&self.st.lock(), src_qp, connection)
    }

    pub(crate) fn accepting(&self, st: &QpState, src_qp: u32, connection: u64) -> bool {
        let ready = matches!(st.state, qp_state::RTR | qp_state::RTS | qp_state::SQD);
        let current = self.resets.load(Ordering::Acquire) == connection;
        !st.dead && ready && current && st.attrs.dest_qp_num.get() == src_qp
    }

    /// A receive WQE's header agrees with what the QP allows: `LOC_QP_OP_ERR` for too many SGEs,
    /// `LOC_LEN_ERR` for a `total_len` that disagrees with them.
    pub(crate) fn check_rq_wqe(&self, hdr: &RqWqeHdr, sges: &[Sge]) -> Result<(), u32> {
        let max_sge = self.srq.as_ref().map_or(self.max_recv_sge, |s| s.max_sge());
        if hdr.num_sge.get() > max_sge {
            Err(wc_status::LOC_QP_OP_ERR)
        } else if !total_len_agrees(hdr.total_len.get(), sges) {
            Err(wc_status::LOC_LEN_ERR)
        } else {
            Ok(())
        }
    }

    /// The state and attributes, unless destroyed (for the RoCE port's transport).
    pub(crate) fn transport_attrs(&self) -> Option<(u32, QpAttr)> {
        let st = self.st.lock();
        (!st.dead).then_some((st.state, st.attrs))
    }

    /// Whether send `seq` is still waiting for the port (the QP did not flush it meanwhile).
    pub fn send_pending(&self, seq: u64) -> bool {
        let st = self.st.lock();
        !st.dead && st.inflight.iter().any(|e| e.seq == seq && e.status.is_none())
    }
}

/// A successful receive completion of `wqe` for a message of `len` bytes (`src_qp`: the sender
/// of a UD datagram, 0 on RC, where IBTA 11.4.2.1 defines none and Linux rxe reports 0). `GRH`
/// is set on every receive, as rxe reports a RoCE receive of any QP type (a UD receive's buffer
/// also starts with the GRH area); `WITH_IMM` with the immediate data.
pub(crate) fn recv_cqe(qp: u32, wqe: &RqWqeHdr, opcode: u32, src_qp: u32, len: usize, imm: Option<[u8; 4]>) -> Cqe {
    let mut cqe = Cqe {
        wr_id: wqe.wr_id,
        qp: U64::new(u64::from(qp)),
        opcode: U32::new(opcode),
        src_qp: U32::new(src_qp),
        byte_len: U32::new(len as u32),
        wc_flags: U32::new(wc_flags::GRH),
        port_num: 1,
        ..Default::default()
    };
    if let Some(imm) = imm {
        cqe.imm_data = Be32::from_bytes(imm);
        cqe.wc_flags = U32::new(wc_flags::GRH | wc_flags::WITH_IMM);
    }
    cqe
}

/// Whether the QP initiates as many RDMA READs and atomics as it may have outstanding on the
/// loopback port: its `max_rd_atomic` (IBTA 9.4.4, 9.4.5; 0 counts as 1, as many applications
/// leave it and as the RoCE requester counts it), beyond which the next one waits on the SQ.
/// The RoCE port's requester keeps the same window itself (`roce/requester.rs`).
pub(crate) fn rd_atomic_full(st: &QpState) -> bool {
    let most = usize::from(st.attrs.max_rd_atomic).max(1);
    st.inflight.iter().filter(|e| e.status.is_none() && e.is_read()).count() >= most
}

impl InFlight {
    /// An RDMA READ or an atomic: its completion waits for response data.
    pub(crate) fn is_read(&self) -> bool {
        matches!(self.wc_opcode, wc_opcode::RDMA_READ | wc_opcode::COMP_SWAP | wc_opcode::FETCH_ADD)
    }
}

/// What a send WQE asks for, from its opcode and its `wr.rdma` fields (`struct pvrdma_sq_wqe_hdr`
/// as Linux's `pvrdma_post_send` fills it: `remote_addr` and `rkey` for the RDMA opcodes, the
/// immediate data in `ex`); `len` is its SGEs' total (a READ's length, saturated so that a
/// length past 32 bits fails the `MAX_MSG_SZ` check); an atomic's from `wr.atomic`. `None` for an
/// opcode the model does not carry (masked atomics, LSO, invalidation, registration, binding).
pub(crate) fn wqe_op(hdr: &SqWqeHdr, len: u64) -> Option<Op> {
    let rdma = WrRdma::read_from_bytes(&hdr.wr[..]).ok()?;
    let atomic = WrAtomic::read_from_bytes(&hdr.wr[..]).ok()?;
    let (compare_add, swap) = (atomic.compare_add.get(), atomic.swap.get());
    let atomic_op = |op| Op::Atomic { remote_addr: atomic.remote_addr.get(), rkey: atomic.rkey.get(), op };
    let (remote_addr, rkey) = (rdma.remote_addr.get(), rdma.rkey.get());
    let imm = hdr.ex.to_bytes();
    Some(match hdr.opcode.get() {
        wr_opcode::SEND => Op::Send { imm: None },
        wr_opcode::SEND_WITH_IMM => Op::Send { imm: Some(imm) },
        wr_opcode::RDMA_WRITE => Op::Write { remote_addr, rkey, imm: None },
        wr_opcode::RDMA_WRITE_WITH_IMM => Op::Write { remote_addr, rkey, imm: Some(imm) },
        wr_opcode::RDMA_READ => Op::Read { remote_addr, rkey, len: u32::try_from(len).unwrap_or(u32::MAX) },
        wr_opcode::ATOMIC_CMP_AND_SWP => atomic_op(Atomic64::CmpSwap { compare: compare_add, swap }),
        wr_opcode::ATOMIC_FETCH_AND_ADD => atomic_op(Atomic64::FetchAdd(compare_add)),
        _ => return None,
    })
}

/// The send completion's `wc_opcode` for an operation.
pub(crate) fn op_wc_opcode(op: &Op) -> u32 {
    match op {
        Op::Send { .. } => wc_opcode::SEND,
        Op::Write { .. } => wc_opcode::RDMA_WRITE,
        Op::Read { .. } => wc_opcode::RDMA_READ,
        Op::Atomic { op: Atomic64::CmpSwap { .. }, .. } => wc_opcode::COMP_SWAP,
        Op::Atomic { op: Atomic64::FetchAdd(_), .. } => wc_opcode::FETCH_ADD,
    }
}
