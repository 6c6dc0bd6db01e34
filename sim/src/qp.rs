//! Queue pairs: CREATE_QP / MODIFY_QP / QUERY_QP / DESTROY_QP, the send and receive doorbells,
//! and the QP's half of the data path (drain the SQ, receive into the RQ, complete, flush).
//!
//! A QP's pages: page 0 is the ring state (SQ = `tx`, RQ = `rx`; the driver produces
//! `prod_tail`, the device consumes `cons_head`), SQ pages `1 ..= send_chunks`, RQ pages after.
//! RC and UD are modelled (UD in `qp/ud.rs`: its transitions, `wr.ud`, the GRH area, Q_Key
//! checks). On QEMU 7.2 a QP's handle is its QPN (2 ..). The SQ carries SEND (with
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
//! spent (`port.rs`); so a QP never has more than its SQ depth (at most `MAX_QP_WR`) packets in
//! flight or parked, zero-length sends included. A QP in the error state flushes every posted and
//! in-flight WQE with `WR_FLUSH_ERR` (completions with an error status are always written,
//! signaled or not).

use crate::budget::Charge;
use crate::cq::Cq;
use crate::device::{Core, Effects};
use crate::dsr::limits;
use crate::errno::{CmdResult, Errno};
use crate::mem::{Atomic64, GuestMemory};
use crate::mr;
use crate::pdir;
use crate::port::{Op, Packet};
use crate::ring::{Consumer, Half, RingPages, Slot};
use parking_lot::{Mutex, MutexGuard};
use pvrdma_abi::cmd::{CreateQp, CreateQpResp, DestroyQp, DestroyQpResp, ModifyQp, NoopResp, QueryQp, QueryQpResp};
use pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::verbs::{access, mtu, qp_attr_mask as m, qp_state, qp_type, send_flags, AhAttr, Gid, QpAttr, AH_GRH};
use pvrdma_abi::wqe::{
    rq_wqe_stride, sq_wqe_stride, wc_flags, wc_opcode, wc_status, wr_opcode, Cqe, RqWqeHdr, Sge, SqWqeHdr, WrAtomic,
    WrRdma,
};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zerocopy::big_endian::U32 as Be32;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

mod responder;
pub(crate) mod ud;

const SQ_HDR: usize = core::mem::size_of::<SqWqeHdr>();
const RQ_HDR: usize = core::mem::size_of::<RqWqeHdr>();
const SGE: usize = core::mem::size_of::<Sge>();

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    /// Handle, equal to the QPN (2 ..).
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
    srq: Option<Arc<crate::srq::Srq>>,
    sq_sig_all: bool,
    /// `qp_type`: RC or UD.
    qp_type: u8,
    max_send_sge: u32,
    max_recv_sge: u32,
    sq: Consumer,
    rq: Consumer,
    st: Mutex<QpState>,
    /// Times the QP was moved to RESET (under `st`): a packet sent to an earlier connection is
    /// not delivered into a later one.
    resets: AtomicU64,
    _charge: Charge,
}

#[derive(Debug)]
struct QpState {
    /// A `qp_state` value.
    state: u32,
    /// Attributes as MODIFY_QP last set them.
    attrs: QpAttr,
    /// Destroyed, or the device was reset.
    dead: bool,
    inflight: VecDeque<InFlight>,
    /// Payload bytes of the in-flight sends still on the wire.
    bytes_on_wire: u64,
    /// The SQ drain paused (SQ depth or `qp_bytes_in_flight` reached: resumes when a send
    /// completes; the device's wire budget spent: resumes when a packet leaves the wire).
    throttled: bool,
    next_seq: u64,
    /// The loopback port's PSNs, one per message there: the next this QP sends (from
    /// `sq_psn`) and the next it takes as a responder (from `rq_psn`).
    send_psn: u32,
    recv_psn: u32,
    /// The SRQ WQE taken for a message still arriving (RoCE: at its first packet, IBTA's
    /// moment), which its last packet completes; flushed on this QP if it goes to ERR first.
    held_srq_wqe: Option<(RqWqeHdr, Sges)>,
    /// In SQD, the SQ_DRAINED event is still owed (asked with `en_sqd_async_notify`).
    sqd_notify: bool,
}

/// 24-bit PSNs (IBTA 9.7.1).
const PSN_MASK: u32 = (1 << 24) - 1;

/// A consumed send WQE whose completion is not yet published.
#[derive(Debug)]
struct InFlight {
    seq: u64,
    wr_id: u64,
    signaled: bool,
    /// Bytes sent (SEND, WRITE) or to read (READ): the completion's `byte_len`.
    byte_len: u32,
    /// The completion's `wc_opcode` (SEND, RDMA_WRITE or RDMA_READ).
    wc_opcode: u32,
    /// SEND or RDMA WRITE with immediate: the successful completion says `WITH_IMM`.
    with_imm: bool,
    /// An RDMA READ's local SGEs, where its response data goes (empty for other operations).
    read_sges: Sges,
    status: Option<u32>,
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

/// The access bits a QP takes (`enum ib_access_flags`' QP part; MW_BIND and ZERO_BASED are MR
/// flags).
const QP_ACCESS_BITS: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

fn pow2_within(n: u32, max: u32) -> bool {
    n.is_power_of_two() && n <= max
}

/// CREATE_QP. With `is_srq` its receive WQEs come from the SRQ `srq_handle` (`srq.rs`): it then
/// takes no receive WRs, SGEs or pages.
///
/// Errors: `EINVAL` for a type other than RC and UD, an unknown SRQ or an SRQ handle without
/// `is_srq`, receive WRs or SGEs with an SRQ, inline data or extended atomic arguments
/// (`max_atomic_arg`: the caps report neither), access bits that are no QP access, a
/// `sq_sig_all` other than 0 or 1, bad queue sizes (powers of two up to
/// `MAX_QP_WR`, at most `MAX_SGE` SGEs), chunk counts that do not describe the rings exactly
/// (`send_chunks` the SQ's pages, `total_chunks` one ring-state page plus the SQ's and the RQ's, as
/// Linux's `pvrdma_create_qp` counts; QEMU 7.2 only bounds each ring's count to 1 ..= 128), an
/// unknown PD or CQ, or a
/// misaligned page or a page outside guest memory (QEMU answers `EINVAL` there too); `EPERM` if a
/// CQ or the SRQ belongs to another context than the PD; `ENOMEM` when `max_qp` exist or the host budget is
/// spent.
pub fn create(core: &Core, req: &CreateQp) -> CmdResult<CreateQpResp> {
    // Every field means what it says: no SRQ, no inline data and no atomics (the caps report
    // none), QP access bits only, a boolean `sq_sig_all`.
    let meaningful = matches!(req.qp_type, qp_type::RC | qp_type::UD)
        && req.is_srq <= 1
        && (req.is_srq == 1 || req.srq_handle.get() == 0)
        && req.max_inline_data.get() == 0
        && req.max_atomic_arg.get() == 0
        && req.access_flags.get() & !QP_ACCESS_BITS == 0
        && req.sq_sig_all <= 1;
    if !meaningful {
        return Err(Errno::EINVAL);
    }
    let (swr, rwr) = (req.max_send_wr.get(), req.max_recv_wr.get());
    let (ssge, rsge) = (req.max_send_sge.get(), req.max_recv_sge.get());
    let with_srq = req.is_srq == 1;
    // A QP on an SRQ has no RQ: no receive WRs, no receive pages (as Linux's vmw_pvrdma sends).
    let rq_fits = if with_srq { rwr == 0 && rsge == 0 } else { pow2_within(rwr, limits::MAX_QP_WR) };
    if !pow2_within(swr, limits::MAX_QP_WR) || !rq_fits || ssge > limits::MAX_SGE || rsge > limits::MAX_SGE {
        return Err(Errno::EINVAL);
    }
    let (pd, ctx, send_cq, recv_cq) = {
        let objs = core.objects.lock();
        let pd = objs.pds.get(req.pd_handle.get()).ok_or(Errno::EINVAL)?;
        let scq = objs.cqs.get(req.send_cq_handle.get()).ok_or(Errno::EINVAL)?;
        let rcq = objs.cqs.get(req.recv_cq_handle.get()).ok_or(Errno::EINVAL)?;
        if scq.ctx != pd.ctx || rcq.ctx != pd.ctx {
            return Err(Errno::EPERM);
        }
        (pd.handle, pd.ctx, scq.clone(), rcq.clone())
    };
    let srq = crate::srq::for_new_qp(core, with_srq, req.srq_handle.get(), ctx)?;
    let (Some(sstride), Some(rstride)) = (sq_wqe_stride(ssge), rq_wqe_stride(rsge)) else {
        return Err(Errno::EINVAL);
    };
    let sq_pages = pdir::pages_for(u64::from(swr) * u64::from(sstride)).unwrap_or(u64::MAX);
    let rq_pages = pdir::pages_for(u64::from(rwr) * u64::from(rstride)).unwrap_or(u64::MAX);
    // With an SRQ the RQ is a placeholder of one entry over the ring-state page, never read.
    let (rq_pages, rwr_ring) = if with_srq { (0, 1) } else { (rq_pages, rwr) };
    let (total, send_chunks) = (u64::from(req.total_chunks.get()), u64::from(req.send_chunks.get()));
    let recv_chunks = total.checked_sub(1 + send_chunks).ok_or(Errno::EINVAL)?;
    if send_chunks != sq_pages || recv_chunks != rq_pages {
        return Err(Errno::EINVAL);
    }
    let dir = req.pdir_dma.get();
    let state_page = pdir::resolve(&core.mem, dir, 0, 1)?[0];
    let sq = pdir::resolve(&core.mem, dir, 1, sq_pages as usize)?;
    let mut rq = pdir::resolve(&core.mem, dir, 1 + send_chunks as usize, rq_pages as usize)?;
    if with_srq {
        rq.push(state_page);
    }
    let sq = RingPages::new(&core.mem, sq, sstride, swr).ok_or(Errno::EINVAL)?;
    let rq = RingPages::new(&core.mem, rq, rstride, rwr_ring).ok_or(Errno::EINVAL)?;
    // Its rings' page lists, and its in-flight queue at full SQ depth.
    let queues = u64::from(swr) * size_of::<InFlight>() as u64;
    let charge = core.budget.charge_object::<Qp>(sq.host_bytes() + rq.host_bytes() + queues)?;

    let mut attrs = QpAttr::new_zeroed();
    attrs.qp_state = U32::new(qp_state::RESET);
    attrs.cap.max_send_wr = U32::new(swr);
    attrs.cap.max_recv_wr = U32::new(rwr);
    attrs.cap.max_send_sge = U32::new(ssge);
    attrs.cap.max_recv_sge = U32::new(rsge);
    let st = QpState {
        state: qp_state::RESET,
        attrs,
        dead: false,
        inflight: VecDeque::new(),
        bytes_on_wire: 0,
        throttled: false,
        next_seq: 0,
        send_psn: 0,
        recv_psn: 0,
        held_srq_wqe: None,
        sqd_notify: false,
    };
    let mut objs = core.objects.lock();
    let handle = objs.qps.alloc().ok_or(Errno::ENOMEM)?;
    let qp = Qp {
        handle,
        uid: core.next_uid(),
        ctx,
        pd,
        send_cq,
        recv_cq,
        srq,
        sq_sig_all: req.sq_sig_all != 0,
        qp_type: req.qp_type,
        max_send_sge: ssge,
        max_recv_sge: rsge,
        sq: Consumer::new(&core.mem, sq, state_page, Half::Tx),
        rq: Consumer::new(&core.mem, rq, state_page, Half::Rx),
        st: Mutex::new(st),
        resets: AtomicU64::new(0),
        _charge: charge,
    };
    let srq = qp.srq.clone();
    objs.qps.insert(handle, Arc::new(qp));
    drop(objs);
    if let Some(s) = srq {
        s.attach(handle);
    }
    Ok(CreateQpResp {
        qpn: U32::new(handle),
        max_send_wr: U32::new(swr),
        max_recv_wr: U32::new(rwr),
        max_send_sge: U32::new(ssge),
        max_recv_sge: U32::new(rsge),
        max_inline_data: U32::new(0),
        ..Default::default()
    })
}

/// Checks an address vector: a nonzero `dgid` and an `sgid_index` naming a bound GID, as the real
/// device does at RTR, a global route on port 1 (what Linux checks before any device sees it:
/// `rdma_check_ah_attr`, `ib_uverbs`'s port checks) and no VLAN (Linux's `rdma_ah_attr_to_pvrdma`
/// sends none). On a model with a RoCE v2 port the source GID must be a RoCE v2 one: the port
/// sends nothing else, so a QP from the link-local RoCE v1 GID could never reach its peer (refused
/// here rather than at its first send, so `ibv_rc_pingpong -g 0` says "Failed to modify QP to
/// RTR"). The other fields — SL, static rate, source path bits, hop limit, traffic class, flow
/// label — are taken whatever they hold, as Linux's driver passes them unchecked and QEMU 7.2
/// reads none of them; [`apply`] keeps the flow label's 20 bits (IBTA 8.3).
fn check_av(core: &Core, av: &AhAttr) -> CmdResult<()> {
    let fits = av.ah_flags == AH_GRH && av.port_num == 1 && av.vlan_id.get() < 4096;
    let Some(sgid) = core.gid_entry(av.grh.sgid_index) else { return Err(Errno::EINVAL) };
    let roce_v1_on_v2_port = core.roce.is_some() && sgid.gid_type != GID_TYPE_FLAG_ROCE_V2;
    if !fits || av.grh.dgid == [0u8; 16] || roce_v1_on_v2_port {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// MODIFY_QP: RESET -> INIT -> RTR -> RTS (INIT -> INIT and RTS -> RTS too), RTS -> SQD -> RTS
/// (SQD -> SQD too), any -> ERR, any -> RESET. For RC, INIT -> RTR demands `AV` (a nonzero dgid,
/// an sgid_index naming a bound GID) and `DEST_QPN` in the mask, as the real device does; UD takes
/// a Q_Key instead (`ud::transition`). Moving to ERR flushes; moving to RESET drops
/// every WQE without completions (the driver resets its ring indices), but for the SRQ WQE the QP
/// held (see `srq.rs`). In SQD (IBTA 10.3.1 Send
/// Queue Drain) the send queue starts no new WQE — they stay posted until SQD -> RTS — while the
/// sends in flight finish and the QP keeps responding; once none is in flight `sq_draining` reads
/// 0 and, if the RTS -> SQD modify set `en_sqd_async_notify`, SQ_DRAINED is posted once. The
/// address vector, retry attributes and `max_rd_atomic` an SQD -> SQD modify changes apply to
/// what is sent next, on both ports (the RoCE requester takes them, `RocePort::reconfigure`). SQE is
/// never a modify's target (the device enters it; an RC QP never does).
///
/// Errors: `EINVAL` for an unknown handle, an illegal transition, SQE, a `cur_qp_state` that
/// does not match, a missing or bad RTR attribute, a port other than 1, a P_Key index other than
/// 0; an alternate path whose port, P_Key index or GID does not exist; `CAP` (a pvrdma QP is not
/// resized) or an unknown mask bit. Values Linux's `pvrdma_modify_qp` passes through unchecked
/// (and QEMU 7.2 ignores) are taken and kept as the device's fields hold them (see [`apply`]):
/// any path MTU, timeout, retry count, RNR timer, RDMA READ depth, access flags, destination
/// QPN, PSN, migration state and SQ-drained flag.
pub fn modify(core: &Core, req: &ModifyQp, fx: &mut Effects) -> CmdResult<NoopResp> {
    use qp_state::*;
    let qp = core.qp(req.qp_handle.get()).ok_or(Errno::EINVAL)?;
    let (mask, a) = (req.attr_mask.get(), &req.attrs);
    let mut st = qp.st.lock();
    if st.dead {
        return Err(Errno::EINVAL);
    }
    let cur = st.state;
    if mask & m::CUR_STATE != 0 && a.cur_qp_state.get() != cur {
        return Err(Errno::EINVAL);
    }
    let new = if mask & m::STATE != 0 { a.qp_state.get() } else { cur };
    let table = if qp.is_ud() { ud::transition } else { transition };
    let (required, optional) = table(cur, new).ok_or(Errno::EINVAL)?;
    if mask & required != required || mask & !(required | optional | m::STATE) != 0 {
        return Err(Errno::EINVAL);
    }
    check_counts(core, mask, a)?;
    if mask & m::PORT != 0 && a.port_num != 1 {
        return Err(Errno::EINVAL);
    }
    if mask & m::PKEY_INDEX != 0 && a.pkey_index.get() >= limits::PKEY_TBL_LEN {
        return Err(Errno::EINVAL);
    }
    if mask & m::AV != 0 {
        check_av(core, &a.ah_attr)?;
    }
    apply(&mut st.attrs, mask, a);
    if mask & m::SQ_PSN != 0 {
        st.send_psn = st.attrs.sq_psn.get();
    }
    if mask & m::RQ_PSN != 0 {
        st.recv_psn = st.attrs.rq_psn.get();
    }
    st.state = new;
    st.attrs.qp_state = U32::new(new);
    const REQUESTER: u32 = m::AV | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::MAX_QP_RD_ATOMIC;
    if let (Some(roce), true) = (&core.roce, cur == SQD && mask & REQUESTER != 0) {
        roce.reconfigure(core, &qp, &st.attrs);
    }
    if new == SQD && cur == RTS {
        st.sqd_notify = mask & m::EN_SQD_ASYNC_NOTIFY != 0 && a.en_sqd_async_notify != 0;
        qp.tell_drained(core, &mut st);
    } else if new == RTS && cur == SQD {
        (st.sqd_notify, st.throttled) = (false, false);
        qp.drain_sq(core, &mut st, fx);
    }
    if new == ERR && cur != ERR {
        qp.enter_error(core, &mut st, fx);
    } else if new == RESET {
        qp.resets.fetch_add(1, Ordering::AcqRel);
        st.inflight.clear();
        qp.flush_held(core, &mut st, true, fx);
        (st.send_psn, st.recv_psn) = (0, 0);
        st.bytes_on_wire = 0;
        st.throttled = false;
        fx.kicks.push(qp.handle);
    }
    Ok(NoopResp::default())
}

/// Whether a WQE's `total_len` agrees with its SGEs: 0 (unstated: Linux's driver writes 0) or
/// exactly the sum of their lengths. Another value fails the WQE with `LOC_LEN_ERR`.
fn total_len_agrees(stated: u32, sges: &[Sge]) -> bool {
    stated == 0 || u64::from(stated) == sges.iter().map(|s| u64::from(s.length.get())).sum::<u64>()
}

/// The attributes an RC transition `cur -> new` requires and allows (IBTA 11.2.5, as Linux's
/// `ib_modify_qp_is_ok` and the verbs core's `qp_state.rs` tabulate them); `None` if illegal.
/// The device requires less than IBTA at INIT -> RTR (the address vector, the destination QPN and
/// the path MTU, which define the connection; the verbs core demands the rest) but allows
/// nothing more: an attribute a transition does not take is refused.
fn transition(cur: u32, new: u32) -> Option<(u32, u32)> {
    use qp_state::*;
    const INIT_ATTRS: u32 = m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS;
    const RTS_OPT: u32 = m::CUR_STATE | m::ACCESS_FLAGS | m::ALT_PATH | m::MIN_RNR_TIMER | m::PATH_MIG_STATE;
    Some(match (cur, new) {
        (_, RESET) | (_, ERR) => (0, 0),
        (RESET, INIT) | (INIT, INIT) => (0, INIT_ATTRS),
        (INIT, RTR) => (
            m::AV | m::DEST_QPN | m::PATH_MTU,
            m::RQ_PSN | m::MAX_DEST_RD_ATOMIC | m::MIN_RNR_TIMER | m::ALT_PATH | m::ACCESS_FLAGS | m::PKEY_INDEX,
        ),
        (RTR, RTS) => (0, m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::SQ_PSN | m::MAX_QP_RD_ATOMIC | RTS_OPT),
        (RTS, RTS) | (SQD, RTS) => (0, RTS_OPT),
        (RTS, SQD) => (0, m::EN_SQD_ASYNC_NOTIFY),
        (SQD, SQD) => (
            0,
            m::PORT
                | m::AV
                | m::TIMEOUT
                | m::RETRY_CNT
                | m::RNR_RETRY
                | m::MAX_QP_RD_ATOMIC
                | m::MAX_DEST_RD_ATOMIC
                | m::ALT_PATH
                | m::ACCESS_FLAGS
                | m::PKEY_INDEX
                | m::MIN_RNR_TIMER
                | m::PATH_MIG_STATE,
        ),
        _ => return None,
    })
}

/// The mask names only attributes MODIFY_QP takes, and an alternate path names what exists.
fn check_counts(core: &Core, mask: u32, a: &QpAttr) -> CmdResult<()> {
    const KNOWN: u32 = (m::DEST_QPN << 1) - 1;
    if mask & !KNOWN != 0 || mask & m::CAP != 0 {
        return Err(Errno::EINVAL);
    }
    if mask & m::ALT_PATH != 0 {
        let fits = a.alt_port_num == 1 && a.alt_pkey_index.get() < limits::PKEY_TBL_LEN && a.alt_timeout <= 31;
        if !fits {
            return Err(Errno::EINVAL);
        }
        check_av(core, &a.alt_ah_attr)?;
    }
    Ok(())
}

/// The path MTU a QP uses for `code`: the MTU `code` names, at most the port's (1024); the
/// port's for a code that names none. Linux's driver passes any value and QEMU 7.2 gives its
/// backend QP 1024 whatever the guest asked, so a larger or unknown MTU is taken, not refused.
fn path_mtu(code: u32) -> u32 {
    if mtu::bytes(code).is_some() && code <= mtu::MTU_1024 {
        code
    } else {
        mtu::MTU_1024
    }
}

/// Copies the attributes `mask` selects, each as the device's field holds it: PSNs, the
/// destination QPN and the flow labels in their 24 and 20 bits (IBTA 9.7.1, 9.2, 8.3), retry
/// counts in their 3 bits and timers in their 5 (IBTA 11.2.5.3), RDMA READ depths within the
/// caps, the path MTU as [`path_mtu`] uses it, `en_sqd_async_notify` as a flag; a migration
/// state outside `enum ib_mig_state` leaves the one held (RoCE has no path migration).
fn apply(to: &mut QpAttr, mask: u32, a: &QpAttr) {
    // `enum ib_mig_state`: MIGRATED, REARM, ARMED.
    const PATH_MIG_ARMED: u32 = 2;
    let rd_atomic = |v: u8| v.min(limits::MAX_QP_RD_ATOM as u8);
    macro_rules! take {
        ($bit:expr, $($f:ident),+) => {
            if mask & $bit != 0 {
                $(to.$f = a.$f;)+
            }
        };
    }
    take!(m::ACCESS_FLAGS, qp_access_flags);
    take!(m::PKEY_INDEX, pkey_index);
    take!(m::PORT, port_num);
    take!(m::QKEY, qkey);
    take!(m::AV, ah_attr);
    take!(m::ALT_PATH, alt_ah_attr, alt_pkey_index, alt_port_num);
    let has = |bit: u32| mask & bit != 0;
    if has(m::EN_SQD_ASYNC_NOTIFY) {
        to.en_sqd_async_notify = u8::from(a.en_sqd_async_notify != 0);
    }
    if has(m::AV) {
        to.ah_attr.grh.flow_label = U32::new(a.ah_attr.grh.flow_label.get() & FLOW_LABEL_MASK);
    }
    if has(m::ALT_PATH) {
        to.alt_ah_attr.grh.flow_label = U32::new(a.alt_ah_attr.grh.flow_label.get() & FLOW_LABEL_MASK);
        to.alt_timeout = a.alt_timeout & 31;
    }
    if has(m::PATH_MTU) {
        to.path_mtu = U32::new(path_mtu(a.path_mtu.get()));
    }
    if has(m::TIMEOUT) {
        to.timeout = a.timeout & 31;
    }
    if has(m::RETRY_CNT) {
        to.retry_cnt = a.retry_cnt & 7;
    }
    if has(m::RNR_RETRY) {
        to.rnr_retry = a.rnr_retry & 7;
    }
    if has(m::MIN_RNR_TIMER) {
        to.min_rnr_timer = a.min_rnr_timer & 31;
    }
    if has(m::RQ_PSN) {
        to.rq_psn = U32::new(a.rq_psn.get() & PSN_MASK);
    }
    if has(m::SQ_PSN) {
        to.sq_psn = U32::new(a.sq_psn.get() & PSN_MASK);
    }
    if has(m::MAX_QP_RD_ATOMIC) {
        to.max_rd_atomic = rd_atomic(a.max_rd_atomic);
    }
    if has(m::MAX_DEST_RD_ATOMIC) {
        to.max_dest_rd_atomic = rd_atomic(a.max_dest_rd_atomic);
    }
    if has(m::PATH_MIG_STATE) && a.path_mig_state.get() <= PATH_MIG_ARMED {
        to.path_mig_state = a.path_mig_state;
    }
    if has(m::DEST_QPN) {
        to.dest_qp_num = U32::new(a.dest_qp_num.get() & PSN_MASK);
    }
}

/// The 20 bits of a flow label (IBTA 8.3).
const FLOW_LABEL_MASK: u32 = (1 << 20) - 1;

/// QUERY_QP: the attributes as last set, with the current state. Errors: `EINVAL` for an unknown
/// handle.
pub fn query(core: &Core, req: &QueryQp) -> CmdResult<QueryQpResp> {
    let qp = core.qp(req.qp_handle.get()).ok_or(Errno::EINVAL)?;
    let st = qp.st.lock();
    let mut attrs = st.attrs;
    attrs.qp_state = U32::new(st.state);
    attrs.cur_qp_state = U32::new(st.state);
    attrs.sq_draining = u8::from(st.state == qp_state::SQD && !st.inflight.is_empty());
    Ok(QueryQpResp { attrs, ..Default::default() })
}

/// DESTROY_QP: no completions for what was posted (but the SRQ WQE it held, see `srq.rs`);
/// packets parked for it fail their senders. Errors: `EINVAL` for an unknown handle.
pub fn destroy(core: &Core, req: &DestroyQp, fx: &mut Effects) -> CmdResult<DestroyQpResp> {
    let qp = core.objects.lock().qps.remove(req.qp_handle.get()).ok_or(Errno::EINVAL)?;
    if let Some(s) = &qp.srq {
        s.detach(qp.handle);
    }
    // Flushed and killed under one lock: a RoCE packet cannot take an SRQ WQE in between (it
    // would be dropped by `kill`, its completion lost).
    let mut st = qp.st.lock();
    qp.flush_held(core, &mut st, true, fx);
    Qp::kill_locked(&mut st);
    drop(st);
    fx.kicks.push(qp.handle);
    Ok(DestroyQpResp::default())
}

impl Qp {
    /// Marks the QP destroyed (DESTROY_QP, device reset).
    pub fn kill(&self) {
        Self::kill_locked(&mut self.st.lock());
    }

    fn kill_locked(st: &mut QpState) {
        st.dead = true;
        st.inflight.clear();
        st.held_srq_wqe = None;
    }

    /// The current `qp_state`.
    pub fn state(&self) -> u32 {
        self.st.lock().state
    }

    /// The SEND doorbell: in RTS, drains the SQ; in ERR, flushes what was posted; otherwise the
    /// WQEs stay posted until a SEND doorbell in RTS.
    pub fn send_doorbell(&self, core: &Core, fx: &mut Effects) {
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
    pub fn recv_doorbell(&self, core: &Core, fx: &mut Effects) {
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

    fn drain_sq(&self, core: &Core, st: &mut MutexGuard<'_, QpState>, fx: &mut Effects) {
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
                Ok((op, payload)) if self.is_ud() => {
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
    fn prepare(
        &self,
        core: &Core,
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
    pub fn resume_send(&self, core: &Core, fx: &mut Effects) {
        let mut st = self.st.lock();
        if !st.dead && st.throttled && st.state == qp_state::RTS {
            st.throttled = false;
            self.drain_sq(core, &mut st, fx);
        }
    }

    /// Reads the send WQE at `slot`: its header and its first `min(num_sge, max_send_sge)` SGEs.
    fn read_sq_wqe(&self, core: &Core, slot: Slot) -> Option<(SqWqeHdr, Sges)> {
        let mut hdr = SqWqeHdr::new_zeroed();
        self.sq.read(&core.mem, slot, 0, hdr.as_mut_bytes()).ok()?;
        let n = hdr.num_sge.get().min(self.max_send_sge) as usize;
        let sges = read_sges(&core.mem, &self.sq, slot, SQ_HDR, n)?;
        Some((hdr, sges))
    }

    /// Reads the receive WQE at `slot` like [`Qp::read_sq_wqe`].
    fn read_rq_wqe(&self, core: &Core, slot: Slot) -> Option<(RqWqeHdr, Sges)> {
        let mut hdr = RqWqeHdr::new_zeroed();
        self.rq.read(&core.mem, slot, 0, hdr.as_mut_bytes()).ok()?;
        let n = hdr.num_sge.get().min(self.max_recv_sge) as usize;
        let sges = read_sges(&core.mem, &self.rq, slot, RQ_HDR, n)?;
        Some((hdr, sges))
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

    fn accepting(&self, st: &QpState, src_qp: u32, connection: u64) -> bool {
        let ready = matches!(st.state, qp_state::RTR | qp_state::RTS | qp_state::SQD);
        let current = self.resets.load(Ordering::Acquire) == connection;
        !st.dead && ready && current && st.attrs.dest_qp_num.get() == src_qp
    }

    /// Takes the next receive WQE: `Ok(None)` if none is posted; `Err` (the sender's status, the
    /// QP moved to ERR) on a ring fault.
    fn take_rq_wqe(
        &self,
        core: &Core,
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

    /// A receive WQE's header agrees with what the QP allows: `LOC_QP_OP_ERR` for too many SGEs,
    /// `LOC_LEN_ERR` for a `total_len` that disagrees with them.
    fn check_rq_wqe(&self, hdr: &RqWqeHdr, sges: &[Sge]) -> Result<(), u32> {
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

    /// The length of the next receive WQE (the sum of its SGEs' lengths), if one is posted and
    /// readable: what a multi-packet SEND may bring (the RoCE responder's bound on reassembly).
    /// On an SRQ the WQE is taken now and held for the message (other QPs take from the same
    /// SRQ meanwhile); an SRQ ring fault moves this QP to ERR.
    pub(crate) fn recv_capacity(&self, core: &Core, fx: &mut Effects) -> Option<u64> {
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
    fn complete_recv(
        &self,
        core: &Core,
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

    /// Whether send `seq` is still waiting for the port (the QP did not flush it meanwhile).
    pub fn send_pending(&self, seq: u64) -> bool {
        let st = self.st.lock();
        !st.dead && st.inflight.iter().any(|e| e.seq == seq && e.status.is_none())
    }

    /// The port finished send `seq` with `status`: publishes every send completion now due, in SQ
    /// order (each with its WQE's opcode: SEND, RDMA_WRITE or RDMA_READ); an error moves the QP
    /// to ERR.
    pub fn complete_send(&self, core: &Core, seq: u64, status: u32, fx: &mut Effects) {
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
    pub fn force_error(&self, core: &Core, fx: &mut Effects) {
        let mut st = self.st.lock();
        if !st.dead && !matches!(st.state, qp_state::RESET | qp_state::ERR) {
            self.enter_error(core, &mut st, fx);
        }
    }

    /// In SQD with nothing in flight: posts the SQ_DRAINED event owed, once.
    fn tell_drained(&self, core: &Core, st: &mut MutexGuard<'_, QpState>) {
        if st.state == qp_state::SQD && st.sqd_notify && st.inflight.is_empty() {
            st.sqd_notify = false;
            core.post_async_event(EqeType::SqDrained, self.handle);
        }
    }

    /// Publishes the send completions at the front of the in-flight list whose status is known:
    /// a successful one with the WQE's length (`byte_len`: the bytes sent, read, or 8 for an
    /// atomic) and `WITH_IMM` for an operation with immediate, as Linux rxe's `make_send_cqe`; an
    /// error one with its opcode (the queue it completes) and nothing else, as rxe.
    fn retire(&self, core: &Core, st: &mut MutexGuard<'_, QpState>, fx: &mut Effects) {
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
    fn enter_error(&self, core: &Core, st: &mut MutexGuard<'_, QpState>, fx: &mut Effects) {
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
    fn fault(&self, core: &Core, st: &mut MutexGuard<'_, QpState>, fx: &mut Effects) {
        core.count(|c| &c.qp_ring_faults);
        core.post_async_event(EqeType::QpFatal, self.handle);
        if st.state != qp_state::ERR {
            self.enter_error(core, st, fx);
        }
    }

    /// Completes the SRQ WQE the QP holds for a message in progress, if any, with `WR_FLUSH_ERR`
    /// (`if_room`: at RESET and DESTROY_QP, only if the CQ has room, see
    /// [`crate::cq::Cq::publish_if_room`]).
    fn flush_held(&self, core: &Core, st: &mut QpState, if_room: bool, fx: &mut Effects) {
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
    fn flush(&self, core: &Core, send: bool, fx: &mut Effects) {
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

/// A successful receive completion of `wqe` for a message of `len` bytes (`src_qp`: the sender
/// of a UD datagram, 0 on RC, where IBTA 11.4.2.1 defines none and Linux rxe reports 0). `GRH`
/// is set on every receive, as rxe reports a RoCE receive of any QP type (a UD receive's buffer
/// also starts with the GRH area); `WITH_IMM` with the immediate data.
fn recv_cqe(qp: u32, wqe: &RqWqeHdr, opcode: u32, src_qp: u32, len: usize, imm: Option<[u8; 4]>) -> Cqe {
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
fn rd_atomic_full(st: &QpState) -> bool {
    let most = usize::from(st.attrs.max_rd_atomic).max(1);
    st.inflight.iter().filter(|e| e.status.is_none() && e.is_read()).count() >= most
}

impl InFlight {
    /// An RDMA READ or an atomic: its completion waits for response data.
    fn is_read(&self) -> bool {
        matches!(self.wc_opcode, wc_opcode::RDMA_READ | wc_opcode::COMP_SWAP | wc_opcode::FETCH_ADD)
    }
}

/// What a send WQE asks for, from its opcode and its `wr.rdma` fields (`struct pvrdma_sq_wqe_hdr`
/// as Linux's `pvrdma_post_send` fills it: `remote_addr` and `rkey` for the RDMA opcodes, the
/// immediate data in `ex`); `len` is its SGEs' total (a READ's length, saturated so that a
/// length past 32 bits fails the `MAX_MSG_SZ` check); an atomic's from `wr.atomic`. `None` for an
/// opcode the model does not carry (masked atomics, LSO, invalidation, registration, binding).
fn wqe_op(hdr: &SqWqeHdr, len: u64) -> Option<Op> {
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
fn op_wc_opcode(op: &Op) -> u32 {
    match op {
        Op::Send { .. } => wc_opcode::SEND,
        Op::Write { .. } => wc_opcode::RDMA_WRITE,
        Op::Read { .. } => wc_opcode::RDMA_READ,
        Op::Atomic { op: Atomic64::CmpSwap { .. }, .. } => wc_opcode::COMP_SWAP,
        Op::Atomic { op: Atomic64::FetchAdd(_), .. } => wc_opcode::FETCH_ADD,
    }
}

/// The SGEs of one WQE (at most the device's `MAX_SGE` of them, kept inline).
pub(crate) type Sges = SmallVec<[Sge; limits::MAX_SGE as usize]>;

/// The `n` SGEs at byte `at` of the WQE in `slot` of `ring` (a QP's RQ or SQ, or an SRQ; inside
/// the slot, already range-checked by the ring).
pub(crate) fn read_sges(mem: &GuestMemory, ring: &Consumer, slot: Slot, at: usize, n: usize) -> Option<Sges> {
    (0..n)
        .map(|k| {
            let mut sge = Sge::new_zeroed();
            ring.read(mem, slot, at + k * SGE, sge.as_mut_bytes()).ok().map(|()| sge)
        })
        .collect()
}
