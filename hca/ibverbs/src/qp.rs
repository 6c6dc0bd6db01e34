//! QPs (`ibv_create_qp`, `ibv_create_qp_ex`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`,
//! `ibv_qp_to_qp_ex`). RC and UD.

// Attribute conversion and inline staging touch no C pointer.
#[deny(unsafe_code)]
mod attr;
mod ex;
#[deny(unsafe_code)]
mod inline;
mod post;

pub(crate) use inline::{Inline, Staging, MAX_INLINE};
pub(crate) use post::{post_recv, post_send};

use crate::abi::{
    ibv_context, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_cap, ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex,
    pthread_cond_t, pthread_mutex_t, IBV_QPT_DRIVER, IBV_QPT_RAW_PACKET, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
    IBV_QPT_XRC_SEND, IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
};
use crate::ffi::{errno_of, fail, guard, null, status, why};
use ib_core::{QpAttrMask, QpCap, QpInitAttr, QpState, QpType};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::{addr_of_mut, null_mut};
use std::time::Duration;

/// What an `ibv_qp` (and its `ibv_qp_ex`) pointer is the start of. `core` is taken out by a
/// successful `ibv_destroy_qp` (the core's destroy consumes it and may hand it back), hence
/// `ManuallyDrop`.
#[repr(C)]
pub(crate) struct Qp {
    pub ibv: ibv_qp_ex,
    pub core: ManuallyDrop<ib_core::Qp>,
    /// The sizes granted (written back at create, answered by `ibv_query_qp`).
    pub cap: ibv_qp_cap,
    pub sq_sig_all: bool,
    /// The bounce buffer of inline sends (`cap.max_inline_data` > 0).
    pub inline: Option<Inline>,
    /// The `ibv_qp_ex` batch: `Some` for a QP created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    pub batch: Option<ex::Batch>,
}

/// The [`Qp`] behind `qp`; `None` for NULL.
///
/// # Safety
/// `qp` is NULL or a live QP of this library.
pub(crate) unsafe fn qp<'a>(qp: *const ibv_qp) -> Option<&'a Qp> {
    // SAFETY: the caller's promise.
    unsafe { crate::ffi::boxed(qp) }
}

impl Qp {
    /// Inline bytes a WR may carry.
    pub(crate) fn max_inline(&self) -> u32 {
        self.inline.as_ref().map_or(0, Inline::max)
    }
}

/// The sizes granted for `asked`, as rdma-core's pvrdma provider grants them: work request
/// counts rounded up to a power of two, at least one of each. Inline data is the library's (see
/// `qp/inline.rs`; Linux's `pvrdma_create_qp` takes any request and grants 0, "not supported"):
/// as asked up to [`MAX_INLINE`], which is granted for more, and at least the room of the send
/// SGEs (16 bytes each), as rxe grants it (Linux `rxe_qp.c`, `rxe_qp_init_req`): a program that
/// asks for no inline data but posts a message that small with `IBV_SEND_INLINE` and lkey 0
/// (`rdma_xclient`) works as on rxe (docs/decisions.md, decision 34).
fn granted(asked: &ibv_qp_cap) -> ibv_qp_cap {
    let pow2 = |n: u32| n.max(1).checked_next_power_of_two().unwrap_or(n);
    let max_send_sge = asked.max_send_sge.max(1);
    let sge_room = max_send_sge.saturating_mul(size_of::<crate::abi::ibv_sge>() as u32);
    ibv_qp_cap {
        max_send_wr: pow2(asked.max_send_wr),
        max_recv_wr: pow2(asked.max_recv_wr),
        max_send_sge,
        max_recv_sge: asked.max_recv_sge.max(1),
        max_inline_data: asked.max_inline_data.max(sge_room).min(MAX_INLINE),
    }
}

/// What libibverbs 44 and Linux answer for a QP type other than RC and UD, once its objects are
/// found: `EINVAL` for a value `ibv_cmd_create_qp` does not know (XRC_RECV included:
/// `ibv_create_qp` gives it no XRC domain), `EOPNOTSUPP` for the other types (Linux's
/// `pvrdma_create_qp`). A raw packet QP without `CAP_NET_RAW` was refused before (`create`).
fn qp_type_errno(qp_type: u32) -> i32 {
    match qp_type {
        IBV_QPT_UC | IBV_QPT_RAW_PACKET | IBV_QPT_XRC_SEND | IBV_QPT_DRIVER => libc::EOPNOTSUPP,
        _ => libc::EINVAL,
    }
}

/// Whether this process holds `CAP_NET_RAW` (bit 13 of `CapEff` in `/proc/self/status`).
fn has_cap_net_raw() -> bool {
    const CAP_NET_RAW: u32 = 13;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return false };
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim);
    eff.and_then(|h| u64::from_str_radix(h, 16).ok()).is_some_and(|caps| caps >> CAP_NET_RAW & 1 == 1)
}

/// Creates a QP of `ctx` on `pd` from the `ibv_qp_init_attr` fields at `a` (the head of an
/// `ibv_qp_init_attr_ex` too); `send_ops` makes it an `ibv_qp_ex` QP. NULL with errno on failure.
///
/// # Safety
/// `pd` and the CQs `a` names are NULL or live objects of this library.
unsafe fn create(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    send_ops: Option<u64>,
) -> *mut ibv_qp {
    // SAFETY: the caller's promise.
    let (p, scq, rcq) = unsafe { (crate::pd::pd(pd), crate::cq::cq(a.send_cq), crate::cq::cq(a.recv_cq)) };
    if a.qp_type == IBV_QPT_RAW_PACKET && !has_cap_net_raw() {
        // ib_uverbs's `create_qp` checks the capability before it looks up any object.
        return null(libc::EPERM);
    }
    // An XRC send QP has no receive queue: `ibv_cmd_create_qp` and ib_uverbs take no receive CQ
    // for it, so its refusal is the driver's EOPNOTSUPP whatever `recv_cq` holds.
    let (Some(p), Some(scq)) = (p, scq) else { return null(libc::EINVAL) };
    let (qp_type, rcq) = match (a.qp_type, rcq) {
        (IBV_QPT_RC, Some(rcq)) => (QpType::Rc, rcq),
        (IBV_QPT_UD, Some(rcq)) => (QpType::Ud, rcq),
        (other, None) if other != IBV_QPT_XRC_SEND => return null(libc::EINVAL),
        (other, _) => return null(qp_type_errno(other)),
    };
    // SAFETY: the caller's promise covers the SRQ `a` names (NULL or a live SRQ of this library).
    let srq = unsafe { crate::srq::srq(a.srq) };
    let mut cap = granted(&a.cap);
    if srq.is_some() {
        // No RQ: receives come from the SRQ (rdma-core's pvrdma provider grants none).
        (cap.max_recv_wr, cap.max_recv_sge) = (0, 0);
    }
    let slot = Box::into_raw(Box::new(MaybeUninit::<Qp>::uninit())).cast::<Qp>();
    // SAFETY: `slot` came from `Box::into_raw` of this layout and holds nothing to drop.
    let free = || drop(unsafe { Box::from_raw(slot.cast::<MaybeUninit<Qp>>()) });
    let dev_cap = QpCap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        send_cq: &scq.core,
        recv_cq: &rcq.core,
        cap: dev_cap,
        qp_type,
        sq_sig_all: a.sq_sig_all != 0,
        qp_context: slot as u64,
        srq: srq.map(|s| &*s.core),
    };
    let made = p.core.create_qp(&init).and_then(|core| Ok((Inline::new(&p.core, &cap)?, core)));
    let (inline, core) = match made {
        Ok(x) => x,
        Err(e) => {
            free();
            return null(why(&e));
        }
    };
    let qpn = core.qpn();
    let base = ibv_qp {
        context: ctx,
        qp_context: a.qp_context,
        pd,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        handle: qpn,
        qp_num: qpn,
        state: QpState::Reset.raw(),
        qp_type: a.qp_type,
        mutex: pthread_mutex_t([0; 5]),
        cond: pthread_cond_t([0; 6]),
        events_completed: 0,
    };
    let ibv = ex::qp_ex(base, send_ops.is_some());
    let batch = send_ops.map(|_| ex::Batch::default());
    let q = Qp { ibv, core: ManuallyDrop::new(core), cap, sq_sig_all: a.sq_sig_all != 0, inline, batch };
    // SAFETY: `slot` is this box's memory, uninitialised until now.
    unsafe { slot.write(q) };
    a.cap = cap;
    slot.cast::<ibv_qp>()
}

/// `ibv_create_qp(pd, qp_init_attr)`: an RC or UD QP in RESET, the sizes granted written back into
/// `qp_init_attr->cap` (work request counts rounded up to a power of two, as rdma-core's pvrdma
/// provider). NULL with errno: `EINVAL` for a NULL PD, CQ or attribute, sizes beyond the
/// device's (as Linux's `pvrdma_set_sq_size` answers; see `docs/argument-checks.md`), an SRQ of
/// another context, a QP type libibverbs does not know; `EOPNOTSUPP` for UC, XRC and driver QPs,
/// `EPERM` for a raw packet QP without `CAP_NET_RAW` (see `qp_type_errno`); the core's errno
/// otherwise. Any `max_inline_data` is taken: up to 512 bytes are granted. With `srq`, the QP's receives come from the SRQ and its
/// granted `max_recv_wr`/`max_recv_sge` are 0.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(null_mut(), || {
        // SAFETY: the program passes a PD of this library and its attributes.
        let (Some(p), Some(a)) = (unsafe { crate::pd::pd(pd) }, unsafe { attr.as_mut() }) else {
            return null(libc::EINVAL);
        };
        // SAFETY: as above; the CQs are the program's.
        unsafe { create(p.ibv.context, pd, a, None) }
    })
}

/// The `send_ops_flags` an `ibv_qp_ex` QP may ask for.
const SEND_OPS: u64 = crate::abi::IBV_QP_EX_WITH_RDMA_WRITE
    | crate::abi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | crate::abi::IBV_QP_EX_WITH_SEND
    | crate::abi::IBV_QP_EX_WITH_SEND_WITH_IMM
    | crate::abi::IBV_QP_EX_WITH_RDMA_READ
    | crate::abi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | crate::abi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

/// `verbs_context.create_qp_ex` (the header's `ibv_create_qp_ex` when `comp_mask` is more than
/// `IBV_QP_INIT_ATTR_PD`): as [`ibv_create_qp`]; with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` the QP
/// carries the `ibv_qp_ex` post-send API ([`ibv_qp_to_qp_ex`]). As rdma-core's rxe provider,
/// `EOPNOTSUPP` for other `comp_mask` bits or operations beyond SEND, SEND_WITH_IMM, RDMA_WRITE,
/// RDMA_WRITE_WITH_IMM and RDMA_READ; `EINVAL` without a PD or with a PD of another context.
pub(crate) unsafe extern "C" fn create_qp_ex(ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    guard(null_mut(), || {
        // SAFETY: the program passes its attributes.
        let Some(a) = (unsafe { attr.as_mut() }) else { return null(libc::EINVAL) };
        if a.comp_mask & !(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0 {
            return null(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            return null(libc::EINVAL);
        }
        let ex = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
        if ex && a.send_ops_flags & !SEND_OPS != 0 {
            return null(libc::EOPNOTSUPP);
        }
        let pd = a.pd;
        // SAFETY: the program's PD of this library (checked non-NULL above).
        if unsafe { (*pd).context } != ctx {
            // A PD of another context is no object of this one (the kernel finds no such handle).
            return null(libc::EINVAL);
        }
        // SAFETY: `ibv_qp_init_attr_ex` begins with `ibv_qp_init_attr`'s fields (the header's
        // `ibv_create_qp_ex` casts it so too).
        let head = unsafe { &mut *attr.cast::<ibv_qp_init_attr>() };
        // SAFETY: the PD and CQs are the program's, of this library.
        unsafe { create(ctx, pd, head, ex.then_some(a.send_ops_flags)) }
    })
}

/// `ibv_modify_qp(qp, attr, attr_mask)`: 0 or the errno, as the real stack answers (see
/// `ib_core::Qp::modify_qp` and `docs/argument-checks.md`): `EOPNOTSUPP` for mask bits past
/// `IBV_QP_DEST_QPN`; `EINVAL` for a state outside `enum ibv_qp_state`, an illegal transition, a
/// mask it does not take, a bad port or route; `ENODATA` for an `sgid_index` naming an empty GID.
/// On success with `IBV_QP_STATE`, `qp->state` follows, as libibverbs keeps it. A mask of 0
/// does nothing, as rdma-core's pvrdma provider.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(qp_: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: i32) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live QP of this library and its attributes.
        let (Some(q), Some(a)) = (unsafe { qp(qp_) }, unsafe { attr.as_ref() }) else { return fail(libc::EINVAL) };
        if mask == 0 {
            return 0;
        }
        // libibverbs's `ibv_cmd_modify_qp` sends the legacy command, which carries no attribute
        // past IBV_QP_DEST_QPN: libibverbs refuses IBV_QP_RATE_LIMIT and above, Linux's
        // `ib_uverbs_modify_qp` the rest (`EOPNOTSUPP` both).
        if mask as u32 & !QpAttrMask::ALL.bits() != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        let mask = QpAttrMask(mask as u32);
        let core_attr = match attr::to_core(a, mask) {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
        let r = q.core.modify_qp(&core_attr, mask);
        if r.is_ok() && mask.contains(QpAttrMask::STATE) {
            // SAFETY: the program's QP; `state` is the field libibverbs updates here.
            unsafe { addr_of_mut!((*qp_).state).write(core_attr.qp_state.raw()) };
        }
        status(r)
    })
}

/// `ibv_query_qp(qp, attr, attr_mask, init_attr)`: the device's attributes into `attr` (its
/// `cap` and `init_attr->cap` are the granted sizes, as rdma-core's pvrdma provider answers)
/// and the creation attributes into `init_attr`. 0 or the errno; with `IBV_QP_STATE`,
/// `qp->state` is updated, as libibverbs does.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp_: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: i32,
    init: *mut ibv_qp_init_attr,
) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live QP of this library and room for both answers.
        let (Some(q), Some(a), Some(i)) = (unsafe { qp(qp_) }, unsafe { attr.as_mut() }, unsafe { init.as_mut() })
        else {
            return fail(libc::EINVAL);
        };
        let mask = QpAttrMask(mask as u32);
        let got = match q.core.query_qp(mask) {
            Ok(g) => g,
            Err(e) => return errno_of(&e),
        };
        *a = attr::from_core(&got, q.cap);
        let b = &q.ibv.qp_base;
        *i = ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: b.srq,
            cap: q.cap,
            qp_type: b.qp_type,
            sq_sig_all: i32::from(q.sq_sig_all),
        };
        if mask.contains(QpAttrMask::STATE) {
            // SAFETY: the program's QP; `state` is the field libibverbs updates here.
            unsafe { addr_of_mut!((*qp_).state).write(got.qp_state.raw()) };
        }
        0
    })
}

/// `ibv_destroy_qp(qp)`: 0, or `EINVAL` for NULL. As libibverbs, it first waits for every async
/// event taken for the QP to be acknowledged (without bound; a fatal device ends the wait); a
/// connected RC QP over a model's RoCE port first lingers (see `linger`). The box is freed here
/// rather than by `ffi::destroy_boxed`, which drops none of a box's other fields: a
/// `Qp`'s inline buffer (an MR) and batch must be dropped.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp_: *mut ibv_qp) -> i32 {
    guard(libc::EIO, || {
        if qp_.is_null() {
            return fail(libc::EINVAL);
        }
        let p = qp_.cast::<Qp>();
        // SAFETY: a live QP box of this library (the program's promise).
        linger(unsafe { &*p });
        // SAFETY: a live QP box of this library (the program's promise); its core is taken out
        // here and put back below unless the destroy consumed it.
        let core = unsafe { ManuallyDrop::take(&mut (*p).core) };
        match core.destroy(Some(ib_core::time::FAR_FUTURE)) {
            Ok(()) => {
                // SAFETY: the box was leaked at create; its core is gone, the rest drops here.
                drop(unsafe { Box::from_raw(p) });
                0
            }
            Err((core, e)) => {
                // SAFETY: as above: the core goes back into its box, which had none.
                unsafe { addr_of_mut!((*p).core).write(ManuallyDrop::new(core)) };
                errno_of(&e)
            }
        }
    })
}

/// Before destroying an RC QP that was connected (RTS, SQD, SQE): lets the RoCE port of its
/// model answer the peer's retransmissions until the wire is quiet for the QP's local ACK
/// timeout (4.096 µs × 2^timeout; the peer's is likely alike) four times over (so that up to three
/// retransmissions in a row may be lost), within 10 ms ..= 1 s.
fn linger(q: &Qp) {
    let Ok(a) = q.core.query_qp(QpAttrMask::STATE | QpAttrMask::TIMEOUT) else { return };
    if q.ibv.qp_base.qp_type != IBV_QPT_RC || !matches!(a.qp_state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
        return;
    }
    // SAFETY: the program's QP is live, so its context is open (closing a context frees its
    // objects; a QP used after that is the program's error, as in C).
    let Some(ctx) = (unsafe { crate::context::context(q.ibv.qp_base.context) }) else { return };
    let ack_timeout_us = 4.096 * f64::from(1u32 << a.timeout.min(31));
    let quiet =
        Duration::from_micros((4.0 * ack_timeout_us) as u64).clamp(Duration::from_millis(10), Duration::from_secs(1));
    ctx.dev.linger_roce(quiet);
}

/// `ibv_qp_to_qp_ex(qp)`: the `ibv_qp_ex` of a QP created with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, NULL for any other (as libibverbs).
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp_: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard(null_mut(), || {
        // SAFETY: the program passes a live QP of this library.
        match unsafe { qp(qp_) } {
            Some(q) if q.batch.is_some() => qp_.cast::<ibv_qp_ex>(),
            _ => null_mut(),
        }
    })
}

#[cfg(test)]
mod tests;
