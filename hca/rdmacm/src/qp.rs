//! `rdma_create_qp`/`rdma_create_qp_ex`/`rdma_destroy_qp`, `rdma_create_srq(_ex)`/
//! `rdma_destroy_srq`, `rdma_init_qp_attr`: QPs through libibverbs's `ibv_create_qp`, with the
//! CQs and completion channels librdmacm makes when the program gives none
//! (`ucma_create_cqs`), moved to INIT (connected) or RTS (UD) at once as librdmacm's
//! `ucma_init_conn_qp`/`ucma_init_ud_qp` (`librdmacm/cma.c`).

use crate::abi::*;
use crate::ffi::{err, guard, ret};
use crate::qpattr;
use crate::sys::*;
use crate::world::{cma, lock, IdState};
use std::ptr::null_mut;

/// `ucma_destroy_cqs`.
fn destroy_cqs(id: &mut rdma_cm_id) {
    // SAFETY: CQs and channels the library made for this id through libibverbs.
    unsafe {
        if !id.recv_cq.is_null() {
            ibv_destroy_cq(id.recv_cq);
            if !id.send_cq.is_null() && id.send_cq != id.recv_cq {
                ibv_destroy_cq(id.send_cq);
            }
        }
        if !id.recv_cq_channel.is_null() {
            ibv_destroy_comp_channel(id.recv_cq_channel);
            if !id.send_cq_channel.is_null() && id.send_cq_channel != id.recv_cq_channel {
                ibv_destroy_comp_channel(id.send_cq_channel);
            }
        }
    }
    id.recv_cq = null_mut();
    id.send_cq = null_mut();
    id.recv_cq_channel = null_mut();
    id.send_cq_channel = null_mut();
}

/// `ucma_create_cqs`: a completion channel and a CQ for each side with a size.
fn create_cqs(id: &mut rdma_cm_id, send: u32, recv: u32) -> Result<(), i32> {
    let ctx = id.verbs;
    let me = (id as *mut rdma_cm_id).cast();
    let make = |size: u32, ch: &mut *mut ibv_comp_channel, cq: &mut *mut ibv_cq| -> Result<(), i32> {
        if size == 0 {
            return Ok(());
        }
        // SAFETY: `ctx` is the id's open context.
        *ch = unsafe { ibv_create_comp_channel(ctx) };
        if ch.is_null() {
            return Err(errno());
        }
        // SAFETY: as above; the channel was just made.
        *cq = unsafe { ibv_create_cq(ctx, size as i32, me, *ch, 0) };
        if cq.is_null() {
            return Err(errno());
        }
        Ok(())
    };
    let (mut rch, mut rcq, mut sch, mut scq) = (null_mut(), null_mut(), null_mut(), null_mut());
    let r = make(recv, &mut rch, &mut rcq).and_then(|()| make(send, &mut sch, &mut scq));
    if recv != 0 {
        id.recv_cq_channel = rch;
        id.recv_cq = rcq;
    }
    if send != 0 {
        id.send_cq_channel = sch;
        id.send_cq = scq;
    }
    if r.is_err() {
        destroy_cqs(id);
    }
    r
}

fn create_qp(p: *mut rdma_cm_id, attr: &mut ibv_qp_init_attr_ex) -> Result<(), i32> {
    let mut w = lock();
    let s: &mut IdState = w.id(p)?;
    let c = cma(p as usize);
    // SAFETY: a live id box; the program does not use it from another thread meanwhile.
    let id = unsafe { &mut (*c).id };
    if !id.qp.is_null() || id.verbs.is_null() {
        return Err(libc::EINVAL);
    }
    if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
        attr.pd = id.pd;
    // SAFETY: a PD of libibverbs (the program's).
    } else if unsafe { (*attr.pd).context } != id.verbs {
        return Err(libc::EINVAL);
    }
    if attr.pd.is_null() {
        return Err(libc::EINVAL);
    }
    if (!id.recv_cq.is_null() && !attr.recv_cq.is_null() && id.recv_cq != attr.recv_cq)
        || (!id.send_cq.is_null() && !attr.send_cq.is_null() && id.send_cq != attr.send_cq)
    {
        return Err(libc::EINVAL);
    }
    if id.qp_type == IBV_QPT_XRC_RECV && (attr.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null()) {
        // librdmacm opens the device's XRC domain for it (`ucma_get_xrcd`): there is none.
        return Err(OPEN_XRCD_ERRNO);
    }
    let send = if attr.send_cq.is_null() && id.send_cq.is_null() { attr.cap.max_send_wr } else { 0 };
    let recv = if attr.recv_cq.is_null() && id.recv_cq.is_null() { attr.cap.max_recv_wr } else { 0 };
    create_cqs(id, send, recv)?;
    if attr.send_cq.is_null() {
        attr.send_cq = id.send_cq;
    }
    if attr.recv_cq.is_null() {
        attr.recv_cq = id.recv_cq;
    }
    if !id.srq.is_null() && attr.srq.is_null() {
        attr.srq = id.srq;
    }
    // SAFETY: the PD is the program's, of the id's context; so are the CQs (or ours).
    let qp = unsafe { ibv_create_qp_ex(id.verbs, attr) };
    if qp.is_null() {
        let e = errno();
        destroy_cqs(id);
        return Err(e);
    }
    let qp_type = id.qp_type;
    let init = qpattr::modify(qp, s, qp_type, IBV_QPS_INIT).and_then(|()| {
        if qp_type == IBV_QPT_UD {
            qpattr::modify(qp, s, qp_type, IBV_QPS_RTR).and_then(|()| qpattr::modify(qp, s, qp_type, IBV_QPS_RTS))
        } else {
            Ok(())
        }
    });
    if let Err(e) = init {
        // SAFETY: the QP just made.
        unsafe { ibv_destroy_qp(qp) };
        destroy_cqs(id);
        return Err(e);
    }
    // SAFETY: the QP libibverbs made, with its PD.
    id.pd = unsafe { (*qp).pd };
    id.qp = qp;
    Ok(())
}

/// `rdma_create_qp_ex`: the QP through verbs.h's `ibv_create_qp_ex`, so libibverbs answers for
/// every extension it does not carry (`EOPNOTSUPP`); an XRC receive QP needs the device's XRC
/// domain, which it has not (`EOPNOTSUPP`).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> i32 {
    guard(-1, || {
        // SAFETY: the program's attributes (NULL refused).
        let Some(a) = (unsafe { attr.as_mut() }) else { return err(libc::EINVAL) };
        ret(create_qp(id, a))
    })
}

/// `rdma_create_qp`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> i32 {
    guard(-1, || {
        // SAFETY: the program's attributes (NULL refused).
        let Some(a) = (unsafe { qp_init_attr.as_mut() }) else { return err(libc::EINVAL) };
        // SAFETY: ibv_qp_init_attr_ex is plain C data; all-zero is valid.
        let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        ex.qp_context = a.qp_context;
        ex.send_cq = a.send_cq;
        ex.recv_cq = a.recv_cq;
        ex.srq = a.srq;
        ex.cap = a.cap;
        ex.qp_type = a.qp_type;
        ex.sq_sig_all = a.sq_sig_all;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD;
        ex.pd = if pd.is_null() {
            let mut w = lock();
            if w.id(id).is_err() {
                return err(libc::EINVAL);
            }
            // SAFETY: a live id box.
            unsafe { (*cma(id as usize)).id.pd }
        } else {
            pd
        };
        let r = create_qp(id, &mut ex);
        a.send_cq = ex.send_cq;
        a.recv_cq = ex.recv_cq;
        a.srq = ex.srq;
        a.cap = ex.cap;
        ret(r)
    })
}

/// `rdma_destroy_qp`: the QP, and the CQs and channels made for it.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard((), || {
        let mut w = lock();
        if w.id(id).is_err() {
            return;
        }
        // SAFETY: a live id box.
        let id = unsafe { &mut (*cma(id as usize)).id };
        if !id.qp.is_null() {
            // SAFETY: the id's QP.
            unsafe { ibv_destroy_qp(id.qp) };
            id.qp = null_mut();
        }
        destroy_cqs(id);
    })
}

/// librdmacm's `rdma_create_srq_ex`: the id's PD when the program gives none; for an XRC SRQ
/// the device's XRC domain (none here: `EOPNOTSUPP`) and a receive CQ made for it; then verbs.h's
/// `ibv_create_srq_ex`, so libibverbs answers for what it does not carry.
fn create_srq(p: *mut rdma_cm_id, attr: &mut ibv_srq_init_attr_ex) -> Result<(), i32> {
    let mut w = lock();
    w.id(p)?;
    // SAFETY: a live id box.
    let id = unsafe { &mut (*cma(p as usize)).id };
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return Err(libc::EINVAL);
    }
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.pd = id.pd;
        attr.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if attr.srq_type == IBV_SRQT_XRC && (attr.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null()) {
        return Err(OPEN_XRCD_ERRNO);
    }
    if attr.pd.is_null() || id.verbs.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the program's PD and attributes, of the id's context.
    let srq = unsafe { ibv_create_srq_ex(id.verbs, attr) };
    if srq.is_null() {
        return Err(errno());
    }
    if id.pd.is_null() {
        id.pd = attr.pd;
    }
    id.srq = srq;
    Ok(())
}

/// `rdma_create_srq`: as librdmacm, an `ibv_srq_init_attr_ex` of the id's kind (XRC for an XRC
/// receive id) through [`rdma_create_srq_ex`]'s path.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> i32 {
    guard(-1, || {
        // SAFETY: the program's attributes (NULL refused).
        let Some(a) = (unsafe { attr.as_mut() }) else { return err(libc::EINVAL) };
        let xrc = {
            let mut w = lock();
            if w.id(id).is_err() {
                return err(libc::EINVAL);
            }
            // SAFETY: a live id box.
            unsafe { (*cma(id as usize)).id.qp_type == IBV_QPT_XRC_RECV }
        };
        // SAFETY: ibv_srq_init_attr_ex is plain C data; all-zero is valid.
        let mut ex: ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        ex.srq_type = if xrc { IBV_SRQT_XRC } else { IBV_SRQT_BASIC };
        ex.srq_context = a.srq_context;
        ex.attr = a.attr;
        ex.pd = pd;
        let r = create_srq(id, &mut ex);
        a.attr = ex.attr;
        ret(r)
    })
}

/// `rdma_create_srq_ex`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> i32 {
    guard(-1, || {
        // SAFETY: the program's attributes (NULL refused).
        let Some(a) = (unsafe { attr.as_mut() }) else { return err(libc::EINVAL) };
        ret(create_srq(id, a))
    })
}

/// `rdma_destroy_srq`.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    guard((), || {
        let mut w = lock();
        if w.id(id).is_err() {
            return;
        }
        // SAFETY: a live id box.
        let id = unsafe { &mut (*cma(id as usize)).id };
        if !id.srq.is_null() {
            // SAFETY: the id's SRQ.
            unsafe { ibv_destroy_srq(id.srq) };
            id.srq = null_mut();
        }
        destroy_cqs(id);
    })
}

/// `rdma_init_qp_attr`: the attributes for `qp_attr->qp_state`, as the kernel gives them.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut i32,
) -> i32 {
    guard(-1, || {
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return err(libc::EINVAL);
        }
        let mut w = lock();
        let Ok(s) = w.id(id) else { return err(libc::EINVAL) };
        // SAFETY: a live id box; the program's attr and mask (checked non-NULL).
        unsafe {
            let qp_type = (*cma(id as usize)).id.qp_type;
            match qpattr::init_attr(s, qp_type, (*qp_attr).qp_state) {
                Ok((a, m)) => {
                    *qp_attr = a;
                    *qp_attr_mask = m;
                    0
                }
                Err(e) => err(e),
            }
        }
    })
}
