//! Memory regions (`ibv_reg_mr`, `ibv_reg_mr_iova2`, `ibv_dereg_mr`, `ibv_rereg_mr`) over the
//! program's own memory at its own addresses: the core's external-memory registration.

use crate::abi::{ibv_mr, ibv_pd};
use crate::ffi::{fail, guard, null, set_errno, why};
use crate::pd::pd;
use ib_core::UserMemory;

/// The page size whose offsets an MR's address and its `iova` must share.
const PAGE: u64 = 4096;

/// What an `ibv_mr` pointer is the start of.
#[repr(C)]
pub(crate) struct Mr {
    pub ibv: ibv_mr,
    pub core: ib_core::Mr,
}

/// `ibv_reg_mr(pd, addr, length, access)`: registers `length` bytes at `addr` of the program's
/// memory, whose addresses are the MR's (an SGE or a peer's RDMA names `addr + offset`). The
/// access flags are Linux's `ib_check_mr_access` rule (the core's `access::check`): memory-window
/// binding, zero-based, `IBV_ACCESS_HUGETLB` and the optional range (`IBV_ACCESS_RELAXED_ORDERING`)
/// are taken and passed on, as libibverbs 44 passes them to a kernel that reports
/// `IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS`. NULL with errno: `EINVAL` for NULL, a zero length,
/// a range past `max_mr_size` or wrapping, remote write or atomic without local write, or bits
/// Linux does not know; `EOPNOTSUPP` for `IBV_ACCESS_ON_DEMAND` (pvrdma has no on-demand
/// paging); `EFAULT` for a page of the range that is not mapped (NULL included), not writable
/// when the access flags let the MR be written (`IBV_ACCESS_LOCAL_WRITE`, `REMOTE_WRITE`,
/// `REMOTE_ATOMIC`, `MW_BIND`), or not readable when they do not, as Linux's `ib_umem_get` refuses it
/// (`docs/memory.md`); `ENOMEM` past the device's MRs.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    p: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    access: i32,
) -> *mut ibv_mr {
    // SAFETY: as `ibv_reg_mr_iova2` with the MR's addresses its own.
    unsafe { ibv_reg_mr_iova2(p, addr, length, addr as u64, access as u32) }
}

/// `ibv_reg_mr_iova2(pd, addr, length, iova, access)`: as [`ibv_reg_mr`]. An `iova` other than
/// `addr` is taken when both share their offset in a page, as Linux's `ib_uverbs_reg_mr`
/// requires (`EINVAL` otherwise); the MR is still registered at `addr` and the device addresses
/// it there, as Linux's vmw_pvrdma sends the device `start` and never the iova
/// (`pvrdma_reg_user_mr`): an SGE or a peer's RDMA names `addr + offset`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    p: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller passes a live PD of this library (or NULL).
        let Some(pd) = (unsafe { pd(p) }) else { return null(libc::EINVAL) };
        if iova % PAGE != addr as u64 % PAGE {
            return null(libc::EINVAL);
        }
        // SAFETY: the program registers memory it owns and keeps until `ibv_dereg_mr`, as
        // libibverbs requires of `ibv_reg_mr`.
        let mem = unsafe { UserMemory::new(addr.cast(), length) };
        match pd.core.reg_mr(mem, access) {
            Ok(core) => {
                let ibv = ibv_mr {
                    context: pd.ibv.context,
                    pd: p,
                    addr,
                    length,
                    handle: core.handle(),
                    lkey: core.lkey(),
                    rkey: core.rkey(),
                };
                &mut Box::leak(Box::new(Mr { ibv, core })).ibv
            }
            Err(e) => null(why(&e)),
        }
    })
}

/// `ibv_reg_mr_iova(pd, addr, length, iova, access)` (`IBVERBS_1.7`): as [`ibv_reg_mr_iova2`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    p: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    iova: u64,
    access: i32,
) -> *mut ibv_mr {
    // SAFETY: the same call with the access flags as unsigned.
    unsafe { ibv_reg_mr_iova2(p, addr, length, iova, access as u32) }
}

/// `ibv_dereg_mr(mr)`: deregisters and frees the MR; 0, or `EINVAL` for NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> i32 {
    guard(libc::EIO, || {
        if mr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live MR of this library, leaked in `ibv_reg_mr`, deregistered once.
        drop(unsafe { Box::from_raw(mr.cast::<Mr>()) });
        0
    })
}

/// `enum ibv_rereg_mr_err_code`: `IBV_REREG_MR_ERR_INPUT` and `IBV_REREG_MR_ERR_CMD`.
const IBV_REREG_MR_ERR_INPUT: i32 = -1;
const IBV_REREG_MR_ERR_CMD: i32 = -4;
/// `enum ibv_rereg_mr_flags`: `IBV_REREG_MR_CHANGE_TRANSLATION`, `IBV_REREG_MR_CHANGE_ACCESS`
/// and every flag (`IBV_REREG_MR_FLAGS_SUPPORTED`).
const IBV_REREG_MR_CHANGE_TRANSLATION: i32 = 1 << 0;
const IBV_REREG_MR_CHANGE_ACCESS: i32 = 1 << 2;
const IBV_REREG_MR_FLAGS_SUPPORTED: i32 = (1 << 3) - 1;

/// `ibv_rereg_mr(mr, flags, pd, addr, length, access)`: pvrdma has no REREG_MR command, so this
/// answers as libibverbs 44 does when the provider lacks the verb. Its input checks first, each
/// `IBV_REREG_MR_ERR_INPUT` with `EINVAL`: a NULL MR, an unknown flag, a new translation without
/// an address or a length, access flags without `IBV_REREG_MR_CHANGE_ACCESS`. Then the
/// provider's refusal: `IBV_REREG_MR_ERR_CMD` with `EOPNOTSUPP`. The MR is unchanged.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: i32,
    _pd: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    access: i32,
) -> i32 {
    guard(IBV_REREG_MR_ERR_CMD, || {
        let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
        let bad = mr.is_null()
            || flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (translation && (addr.is_null() || length == 0))
            || (access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0);
        if bad {
            set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        }
        set_errno(libc::EOPNOTSUPP);
        IBV_REREG_MR_ERR_CMD
    })
}
