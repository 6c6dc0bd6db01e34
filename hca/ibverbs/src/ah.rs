//! Address handles (`ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`), as libibverbs 44's `verbs.c` answers them over a provider whose
//! `create_ah` builds a software address vector (rdma-core's and Linux's pvrdma).

use crate::abi::{ibv_ah, ibv_ah_attr, ibv_context, ibv_gid, ibv_global_route, ibv_pd, ibv_wc, IBV_WC_GRH};
use crate::context::context;
use crate::ffi::{destroy_boxed, fail, guard, minus_one, null, why};
use ib_core::{AhAttr, GlobalRoute, Wc, GRH_LEN};

/// What an `ibv_ah` pointer is the start of.
#[repr(C)]
pub(crate) struct Ah {
    pub ibv: ibv_ah,
    pub core: ib_core::Ah,
}

/// The [`Ah`] behind `ah`; `None` for NULL.
///
/// # Safety
/// `ah` is NULL or a live AH of this library.
pub(crate) unsafe fn ah<'a>(ah: *const ibv_ah) -> Option<&'a Ah> {
    // SAFETY: the caller's promise.
    unsafe { crate::ffi::boxed(ah) }
}

/// The core's attributes of an `ibv_ah_attr`.
pub(crate) fn from_ibv(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: a.grh.dgid.raw,
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global != 0,
        port_num: a.port_num,
    }
}

/// An `ibv_ah_attr` of the core's attributes.
pub(crate) fn to_ibv(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.grh.dgid },
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: u8::from(a.is_global),
        port_num: a.port_num,
    }
}

/// `ibv_create_ah(pd, attr)`: an AH, or NULL, as rdma-core's `pvrdma_create_ah` answers: NULL
/// with `errno` as it was for an address without a global route (RoCE) or a zero `dgid` (the
/// provider returns NULL without setting errno); NULL with `EINVAL` for NULL arguments, a port
/// the device lacks (its `ibv_query_port` fails so) or an `sgid_index` naming no GID; `EIO` once
/// the device is fatal. Any flow label is taken, its low 20 bits kept; the SL, static rate, hop
/// limit and `dlid` are taken as they are.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the program passes a PD of this library and its attributes.
        let (Some(p), Some(a)) = (unsafe { crate::pd::pd(pd) }, unsafe { attr.as_ref() }) else {
            return null(libc::EINVAL);
        };
        if a.is_global == 0 {
            return std::ptr::null_mut();
        }
        // SAFETY: the PD's context is open while the PD lives.
        let Some(c) = (unsafe { context(p.ibv.context) }) else { return null(libc::EINVAL) };
        if let Err(e) = c.dev.core.query_port(a.port_num) {
            return null(why(&e));
        }
        if a.grh.dgid.raw == [0; 16] {
            // Not link-local, multicast nor IPv4-mapped: the provider's NULL, errno untouched.
            return std::ptr::null_mut();
        }
        match p.core.create_ah(&from_ibv(a)) {
            Ok(core) => {
                let ibv = ibv_ah { context: p.ibv.context, pd, handle: 0 };
                &mut Box::leak(Box::new(Ah { ibv, core })).ibv
            }
            Err(e) => null(why(&e)),
        }
    })
}

/// `ibv_destroy_ah(ah)`: 0, or `EINVAL` for NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(a: *mut ibv_ah) -> i32 {
    guard(libc::EIO, || {
        if a.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live AH of this library, destroyed once by the program.
        unsafe { destroy_boxed(a.cast::<Ah>(), |b| std::ptr::addr_of_mut!((*b).core), ib_core::Ah::destroy) }
    })
}

/// `ibv_init_ah_from_wc(context, port_num, wc, grh, ah_attr)`: fills `ah_attr` to answer the UD
/// receive `wc` whose buffer began with `grh` (see [`ib_core::ah_attr_from_wc`]: the IPv4
/// header in bytes 20-39 for RoCE v2 over IPv4). 0, or -1 with errno: `EINVAL` for NULL
/// arguments, a multicast destination or a GID not in the table, `EPROTONOSUPPORT` for a header
/// of neither IP version (as libibverbs).
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut libc::c_void,
    ah_attr: *mut ibv_ah_attr,
) -> i32 {
    guard(-1, || {
        // SAFETY: the program passes its context, completion, GRH area (40 readable bytes, the
        // receive buffer's start) and the attributes to fill.
        let (c, w, out) = unsafe { (context(ctx), wc.as_ref(), ah_attr.as_mut()) };
        let (Some(c), Some(w), Some(out)) = (c, w, out) else { return minus_one(libc::EINVAL) };
        if grh.is_null() {
            return minus_one(libc::EINVAL);
        }
        let mut bytes = [0u8; GRH_LEN];
        // SAFETY: as above: `grh` names at least 40 readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(grh.cast::<u8>(), bytes.as_mut_ptr(), GRH_LEN) };
        let core_wc = Wc { grh: w.wc_flags & IBV_WC_GRH != 0, ..Default::default() };
        match ib_core::ah_attr_from_wc(&c.core, port_num, &core_wc, &bytes) {
            Ok(mut a) => {
                (a.dlid, a.sl, a.src_path_bits) = (w.slid, w.sl, w.dlid_path_bits);
                *out = to_ibv(&a);
                0
            }
            Err(ib_core::Error::InvalidArgument(why)) if why.starts_with("GRH of") => minus_one(libc::EPROTONOSUPPORT),
            Err(e) => minus_one(why(&e)),
        }
    })
}

/// `ibv_create_ah_from_wc(pd, wc, grh, port_num)`: [`ibv_init_ah_from_wc`] then
/// [`ibv_create_ah`]; NULL with the errno of the step that failed.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut libc::c_void,
    port_num: u8,
) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the program passes a PD of this library.
        let Some(p) = (unsafe { crate::pd::pd(pd) }) else { return null(libc::EINVAL) };
        let mut attr = ibv_ah_attr::default();
        // SAFETY: the program's arguments, passed on.
        if unsafe { ibv_init_ah_from_wc(p.ibv.context, port_num, wc, grh, &mut attr) } != 0 {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { ibv_create_ah(pd, &mut attr) }
    })
}
