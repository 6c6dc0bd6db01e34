//! SRQs (`ibv_create_srq`, the extended ops' `create_srq_ex`, `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_destroy_srq`, and `ops.post_srq_recv` behind the header's inline
//! `ibv_post_srq_recv`). Basic SRQs only: XRC and tag-matching SRQs answer `EOPNOTSUPP`, as
//! rdma-core's pvrdma provider (which has no `create_srq_ex`).

use crate::abi::{
    ibv_context, ibv_pd, ibv_recv_wr, ibv_srq, ibv_srq_attr, ibv_srq_init_attr, ibv_srq_init_attr_ex, pthread_cond_t,
    pthread_mutex_t, IBV_SRQT_BASIC, IBV_SRQ_INIT_ATTR_CQ, IBV_SRQ_INIT_ATTR_PD, IBV_SRQ_INIT_ATTR_TYPE,
};
use crate::ffi::{errno_of, fail, guard, null, status, why};
use ib_core::{SrqAttr, SrqAttrMask, SrqInitAttr};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::null_mut;

/// What an `ibv_srq` pointer is the start of. `core` is taken out by a successful
/// `ibv_destroy_srq`, hence `ManuallyDrop`.
#[repr(C)]
pub(crate) struct Srq {
    pub ibv: ibv_srq,
    pub core: ManuallyDrop<ib_core::Srq>,
}

/// The [`Srq`] behind `srq`; `None` for NULL.
///
/// # Safety
/// `srq` is NULL or a live SRQ of this library.
pub(crate) unsafe fn srq<'a>(srq: *const ibv_srq) -> Option<&'a Srq> {
    // SAFETY: the caller's promise.
    unsafe { crate::ffi::boxed(srq) }
}

/// Creates a basic SRQ on `pd` from `a`, writing the sizes granted back into `a.attr` (0 taken as
/// 1, the work request count rounded up to a power of two). NULL with errno on failure.
///
/// # Safety
/// `pd` is a live PD of this library.
unsafe fn create(pd: *mut ibv_pd, a: &mut ibv_srq_init_attr) -> *mut ibv_srq {
    // SAFETY: the caller's promise.
    let Some(p) = (unsafe { crate::pd::pd(pd) }) else { return null(libc::EINVAL) };
    let slot = Box::into_raw(Box::new(MaybeUninit::<Srq>::uninit())).cast::<Srq>();
    // rdma-core's pvrdma provider asks for at least one work request and one SGE.
    let attr = SrqAttr { max_wr: a.attr.max_wr.max(1), max_sge: a.attr.max_sge.max(1), srq_limit: 0 };
    let core = match p.core.create_srq(&SrqInitAttr { attr, srq_context: slot as u64 }) {
        Ok(c) => c,
        Err(e) => {
            // SAFETY: `slot` came from `Box::into_raw` of this layout and holds nothing to drop.
            drop(unsafe { Box::from_raw(slot.cast::<MaybeUninit<Srq>>()) });
            return null(why(&e));
        }
    };
    let ibv = ibv_srq {
        context: p.ibv.context,
        srq_context: a.srq_context,
        pd,
        handle: core.handle(),
        mutex: pthread_mutex_t([0; 5]),
        cond: pthread_cond_t([0; 6]),
        events_completed: 0,
    };
    // SAFETY: `slot` is this box's memory, uninitialised until now.
    unsafe { slot.write(Srq { ibv, core: ManuallyDrop::new(core) }) };
    // SAFETY: written just above.
    let granted = unsafe { &(*slot).core };
    // The provider's ring: the count rounded up to a power of two.
    (a.attr.max_wr, a.attr.max_sge) = (granted.max_wr(), attr.max_sge);
    slot.cast::<ibv_srq>()
}

/// `ibv_create_srq(pd, srq_init_attr)`: a basic SRQ, `attr.max_wr` and `attr.max_sge` written
/// back as granted (0 taken as 1, as rdma-core's pvrdma provider does; the work request count
/// rounded up to a power of two). NULL with errno: `EINVAL` for a NULL PD or attribute, more
/// work requests or SGEs than the device's `max_srq_wr` / `max_srq_sge`; `EOPNOTSUPP` on a
/// device without SRQs; the core's errno otherwise (`ENOMEM` past `max_srq`).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard(null_mut(), || {
        // SAFETY: the program passes its attributes.
        let Some(a) = (unsafe { attr.as_mut() }) else { return null(libc::EINVAL) };
        // SAFETY: the program passes NULL or a PD of this library.
        unsafe { create(pd, a) }
    })
}

/// `verbs_context.create_srq_ex` (the header's `ibv_create_srq_ex` when `comp_mask` is more than
/// a PD and a basic type): a basic SRQ with a PD (a CQ, meaningful for XRC only, is ignored);
/// NULL with `EOPNOTSUPP` for XRC or tag-matching SRQs or other `comp_mask` bits, `EINVAL`
/// without a PD or with a PD of another context.
pub(crate) unsafe extern "C" fn create_srq_ex(ctx: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq {
    guard(null_mut(), || {
        // SAFETY: the program passes its attributes.
        let Some(a) = (unsafe { attr.as_mut() }) else { return null(libc::EINVAL) };
        let known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
        let basic = a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || a.srq_type == IBV_SRQT_BASIC;
        if a.comp_mask & !known != 0 || !basic {
            return null(libc::EOPNOTSUPP);
        }
        // SAFETY: checked non-NULL; the program's PD of this library.
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() || unsafe { (*a.pd).context } != ctx {
            return null(libc::EINVAL);
        }
        let mut head = ibv_srq_init_attr { srq_context: a.srq_context, attr: a.attr };
        // SAFETY: the program's PD of this library (checked above).
        let made = unsafe { create(a.pd, &mut head) };
        a.attr = head.attr;
        made
    })
}

/// `ibv_modify_srq(srq, srq_attr, srq_attr_mask)`: 0 or the errno: `IBV_SRQ_LIMIT` arms the limit
/// (0 disarms); `EINVAL` for NULL, an empty or unknown mask, a limit above `max_wr`, or
/// `IBV_SRQ_MAX_WR` (pvrdma does not resize SRQs, as Linux's vmw_pvrdma answers);
/// `EOPNOTSUPP` on QEMU 7.2 (see the provider's `srq.rs`).
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(srq_: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: i32) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live SRQ of this library and its attributes.
        let (Some(s), Some(a)) = (unsafe { srq(srq_) }, unsafe { attr.as_ref() }) else { return fail(libc::EINVAL) };
        let core_attr = SrqAttr { max_wr: a.max_wr, max_sge: 0, srq_limit: a.srq_limit };
        status(s.core.modify(&core_attr, SrqAttrMask(mask as u32)))
    })
}

/// `ibv_query_srq(srq, srq_attr)`: 0 with the device's `max_wr`, `max_sge` and armed limit (0
/// once it fired), or the errno (`EINVAL` for NULL, `EOPNOTSUPP` on QEMU 7.2).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq_: *mut ibv_srq, attr: *mut ibv_srq_attr) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live SRQ of this library and room for the answer.
        let (Some(s), Some(a)) = (unsafe { srq(srq_) }, unsafe { attr.as_mut() }) else { return fail(libc::EINVAL) };
        match s.core.query() {
            Ok(g) => {
                *a = ibv_srq_attr { max_wr: g.max_wr, max_sge: g.max_sge, srq_limit: g.srq_limit };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_destroy_srq(srq)`: 0, or `EINVAL` for NULL, `EBUSY` while a QP uses it (the SRQ stays).
/// As libibverbs, it first waits for every async event taken for the SRQ to be acknowledged.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq_: *mut ibv_srq) -> i32 {
    guard(libc::EIO, || {
        if srq_.is_null() {
            return fail(libc::EINVAL);
        }
        let p = srq_.cast::<Srq>();
        // SAFETY: a live SRQ box of this library (the program's promise); the destroy consumes
        // its core or hands it back into place.
        unsafe {
            crate::ffi::destroy_boxed(
                p,
                |b| std::ptr::addr_of_mut!((*b).core).cast::<ib_core::Srq>(),
                |core| core.destroy(Some(ib_core::time::FAR_FUTURE)),
            )
        }
    })
}

/// `ops.post_srq_recv` (`ibv_post_srq_recv(srq, wr, bad_wr)`): posts the chain at `wr` to the
/// SRQ. 0, or the errno of the first WR not posted, stored in `*bad_wr`: `EINVAL` for a bad WR
/// (more SGEs than the SRQ takes), `ENOMEM` when the SRQ is full (at the latest at the WR past
/// its depth: a chain that loops back on itself ends there).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq_: *mut libc::c_void,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the header passes the program's SRQ of this library.
        let Some(s) = (unsafe { srq(srq_.cast::<ibv_srq>()) }) else {
            if !bad.is_null() {
                // SAFETY: a non-NULL `bad_wr` is the program's pointer to write to.
                unsafe { *bad = wr };
            }
            return fail(libc::EINVAL);
        };
        // SAFETY: the chain and `bad` are the program's.
        unsafe { crate::chain::post_recv_chain(wr, bad, s.core.max_wr(), |wrs| s.core.post_recv_list(wrs)) }
    })
}
