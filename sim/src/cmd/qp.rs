//! CREATE_QP, MODIFY_QP, QUERY_QP, DESTROY_QP.

use crate::errno::{CmdResult, Errno};
use crate::limits;
use crate::pdir;
use crate::ring::{Consumer, Half, RingPages};
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateQp, CreateQpResp, DestroyQp, DestroyQpResp, ModifyQp, NoopResp, QueryQp, QueryQpResp};
use pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
use pvrdma_abi::verbs::{access, mtu, qp_attr_mask as m, qp_state, qp_type, AhAttr, QpAttr, AH_GRH};
use pvrdma_abi::wqe::{rq_wqe_stride, sq_wqe_stride};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zerocopy::little_endian::U32;
use zerocopy::FromZeros;

use crate::backend::Backend;
use crate::ctx::Effects;
use crate::qp::*;

/// The access bits a QP takes (`enum ib_access_flags`' QP part; MW_BIND and ZERO_BASED are MR
/// flags).
const QP_ACCESS_BITS: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

fn pow2_within(n: u32, max: u32) -> bool {
    n.is_power_of_two() && n <= max
}

/// CREATE_QP. With `is_srq` its receive WQEs come from the SRQ `srq_handle` (`srq.rs`): it then
/// takes no receive WRs, SGEs or pages.
///
/// A GSI QP (`PVRDMA_QPT_GSI`, `qp/gsi.rs`) is answered QPN 1.
///
/// Errors: `EINVAL` for a type other than RC, UD and GSI, an unknown SRQ or an SRQ handle without
/// `is_srq`, receive WRs or SGEs with an SRQ, inline data or extended atomic arguments
/// (`max_atomic_arg`: the caps report neither), access bits that are no QP access, a
/// `sq_sig_all` other than 0 or 1, bad queue sizes (powers of two up to
/// `MAX_QP_WR`, at most `MAX_SGE` SGEs), chunk counts that do not describe the rings exactly
/// (`send_chunks` the SQ's pages, `total_chunks` one ring-state page plus the SQ's and the RQ's, as
/// Linux's `pvrdma_create_qp` counts; QEMU 7.2 only bounds each ring's count to 1 ..= 128), an
/// unknown PD or CQ, or a
/// misaligned page or a page outside guest memory (QEMU answers `EINVAL` there too); `EPERM` if a
/// CQ or the SRQ belongs to another context than the PD; `ENOMEM` when `max_qp` exist or the host budget is
/// spent; `EBUSY` for a GSI QP while the port's GSI QP exists.
pub fn create(core: &Backend, req: &CreateQp) -> CmdResult<CreateQpResp> {
    // Every field means what it says: no SRQ, no inline data and no atomics (the caps report
    // none), QP access bits only, a boolean `sq_sig_all`.
    let meaningful = matches!(req.qp_type, qp_type::RC | qp_type::UD | qp_type::GSI)
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
    let srq = super::srq::for_new_qp(core, with_srq, req.srq_handle.get(), ctx)?;
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
    let handle =
        if req.qp_type == qp_type::GSI { gsi_handle(&objs)? } else { objs.qps.alloc().ok_or(Errno::ENOMEM)? };
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

/// The handle (and QPN) of a new GSI QP: 1, the port's only one. Errors: `EBUSY` while the port's
/// GSI QP exists (one per port: the model has one), `ENOMEM` when `max_qp` QPs exist.
fn gsi_handle(objs: &crate::table::Objects) -> CmdResult<u32> {
    if objs.qps.get(gsi::GSI_QPN).is_some() {
        return Err(Errno::EBUSY);
    }
    if objs.qps.len() >= limits::MAX_QP as usize {
        return Err(Errno::ENOMEM);
    }
    Ok(gsi::GSI_QPN)
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
fn check_av(core: &Backend, av: &AhAttr) -> CmdResult<()> {
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
pub fn modify(core: &Backend, req: &ModifyQp, fx: &mut Effects) -> CmdResult<NoopResp> {
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
    let table = if qp.is_gsi() {
        gsi::transition
    } else if qp.is_ud() {
        ud::transition
    } else {
        transition
    };
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
fn check_counts(core: &Backend, mask: u32, a: &QpAttr) -> CmdResult<()> {
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
pub fn query(core: &Backend, req: &QueryQp) -> CmdResult<QueryQpResp> {
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
pub fn destroy(core: &Backend, req: &DestroyQp, fx: &mut Effects) -> CmdResult<DestroyQpResp> {
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
