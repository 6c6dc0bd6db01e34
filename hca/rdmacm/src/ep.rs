//! `rdma_create_ep`/`rdma_destroy_ep` (librdmacm's `rdma_create_ep` in `librdmacm/cma.c`): a
//! sync id from an `rdma_getaddrinfo` answer, bound (passive, keeping the QP attributes for
//! `rdma_get_request`) or with its address and route resolved and its QP made (active).

use crate::abi::*;
use crate::ffi::{err, guard, read_sockaddr};
use crate::ids;
use crate::world::{cma, lock, SavedQpAttr};

fn create(res: &rdma_addrinfo, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> Result<*mut rdma_cm_id, i32> {
    let id = ids::create(std::ptr::null_mut(), std::ptr::null_mut(), res.ai_port_space as u32, res.ai_qp_type as u32)?;
    let undo = |e: i32| {
        // SAFETY: the id just made.
        unsafe { ids::rdma_destroy_id(id) };
        Err(e)
    };
    if res.ai_flags & RAI_PASSIVE != 0 {
        // SAFETY: the answer's source address (a sockaddr of its family or NULL).
        let Some(src) = (unsafe { read_sockaddr(res.ai_src_addr) }) else { return undo(libc::EINVAL) };
        let mut w = lock();
        if let Err(e) = crate::addr::bind(&mut w, id as usize, src) {
            drop(w);
            return undo(e);
        }
        // SAFETY: the program's attributes, copied (or NULL).
        if let Some(a) = unsafe { attr.as_ref() } {
            if let Ok(s) = w.id(id) {
                s.qp_init = Some(SavedQpAttr(ibv_qp_init_attr { qp_type: res.ai_qp_type as u32, ..*a }));
            }
        }
        if !pd.is_null() {
            // SAFETY: a live id box.
            unsafe { (*cma(id as usize)).id.pd = pd };
        }
        return Ok(id);
    }
    // SAFETY: the id is ours; the addresses the answer's.
    unsafe {
        if crate::addr::rdma_resolve_addr(id, res.ai_src_addr, res.ai_dst_addr, 2000) != 0
            || crate::addr::rdma_resolve_route(id, 2000) != 0
        {
            return undo(crate::sys::errno());
        }
        if !attr.is_null() {
            (*attr).qp_type = res.ai_qp_type as u32;
        }
        if !attr.is_null() && crate::qp::rdma_create_qp(id, pd, attr) != 0 {
            return undo(crate::sys::errno());
        }
    }
    Ok(id)
}

/// `rdma_create_ep`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> i32 {
    guard(-1, || {
        // SAFETY: the program's answer (NULL refused).
        let Some(r) = (unsafe { res.as_ref() }) else { return err(libc::EINVAL) };
        if id.is_null() {
            return err(libc::EINVAL);
        }
        match create(r, pd, qp_init_attr) {
            Ok(p) => {
                // SAFETY: the program's out-pointer, checked non-NULL.
                unsafe { *id = p };
                0
            }
            Err(e) => err(e),
        }
    })
}

/// `rdma_destroy_ep`: its QP, SRQ and the id.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    guard((), || {
        // SAFETY: the id is the program's; each call checks it is ours.
        unsafe {
            crate::qp::rdma_destroy_qp(id);
            crate::qp::rdma_destroy_srq(id);
            ids::rdma_destroy_id(id);
        }
    })
}
