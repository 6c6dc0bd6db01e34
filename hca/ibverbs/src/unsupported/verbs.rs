//! Public verbs pvrdma lacks here (multicast, ECE, importing objects from another process,
//! dma-buf MRs), answering as libibverbs 44 does over a provider without them, and the
//! fork-protection calls, which this library does not need.

use crate::abi::{ibv_ah_attr, ibv_context, ibv_gid, ibv_mr, ibv_pd, ibv_qp};
use crate::ffi::{guard, null, set_errno};
use libc::{c_int, c_void, EOPNOTSUPP};

/// `enum ibv_fork_status`'s `IBV_FORK_UNNEEDED`.
const IBV_FORK_UNNEEDED: c_int = 2;

/// `ibv_attach_mcast(qp, gid, lid)`: `EOPNOTSUPP`: no multicast here.
#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    EOPNOTSUPP
}

/// `ibv_detach_mcast(qp, gid, lid)`: `EOPNOTSUPP`.
#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    EOPNOTSUPP
}

/// `ibv_set_ece(qp, ece)`: `EOPNOTSUPP` (also in `errno`, as libibverbs sets it for a zero
/// vendor ID).
#[no_mangle]
pub unsafe extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    guard(EOPNOTSUPP, || {
        set_errno(EOPNOTSUPP);
        EOPNOTSUPP
    })
}

/// `ibv_query_ece(qp, ece)`: `EOPNOTSUPP`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    EOPNOTSUPP
}

/// `ibv_import_device(cmd_fd)`: NULL with errno, as libibverbs 44 answers: `EINVAL` for a
/// descriptor `fstat` refuses or that is no character device; `ENODEV` for one that is no
/// device of this library (or when the list is empty); `EOPNOTSUPP` for a context's `cmd_fd`
/// (the `/dev/null` device every context's is, `open.rs`) or a `dup` of it: the device is found,
/// and its provider has no `import_context` (rdma-core's pvrdma provider sets none).
#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let rdev = |st: &libc::stat| (st.st_mode & libc::S_IFMT == libc::S_IFCHR).then_some(st.st_rdev);
        // SAFETY: `fstat` writes a `stat` for any descriptor number (or fails).
        let Some(theirs) = (unsafe { stat_of(|st| libc::fstat(cmd_fd, st)) }).as_ref().and_then(rdev) else {
            return null(libc::EINVAL);
        };
        // SAFETY: a NUL-terminated path.
        let ours = unsafe { stat_of(|st| libc::stat(c"/dev/null".as_ptr(), st)) }.as_ref().and_then(rdev);
        if crate::devices::devices().is_empty() || ours != Some(theirs) {
            return null(libc::ENODEV);
        }
        null(EOPNOTSUPP)
    })
}

/// The `stat` `call` fills, or `None` if it fails.
///
/// # Safety
/// `call` writes a whole `stat` at its argument or fails.
unsafe fn stat_of(call: impl FnOnce(*mut libc::stat) -> c_int) -> Option<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: the caller's promise: on success `st` is written.
    (call(st.as_mut_ptr()) == 0).then(|| unsafe { st.assume_init() })
}

/// `ibv_import_pd(context, pd_handle)`: NULL, `errno` `EOPNOTSUPP`.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_pd(_ctx: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || null(EOPNOTSUPP))
}

/// `ibv_import_mr(pd, mr_handle)`: NULL, `errno` `EOPNOTSUPP`.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || null(EOPNOTSUPP))
}

/// `ibv_import_dm(context, dm_handle)`: NULL, `errno` `EOPNOTSUPP`.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_dm(_ctx: *mut ibv_context, _handle: u32) -> *mut c_void {
    guard(std::ptr::null_mut(), || null(EOPNOTSUPP))
}

/// `ibv_unimport_pd(pd)`: nothing to do (nothing can be imported).
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}

/// `ibv_unimport_mr(mr)`: nothing to do.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}

/// `ibv_unimport_dm(dm)`: nothing to do.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

/// `ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access)`: NULL, `errno` `EOPNOTSUPP`: the
/// device reaches only process memory.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _len: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || null(EOPNOTSUPP))
}

/// `ibv_query_qp_data_in_order(qp, op, flags)`: 0, no in-order guarantee, as libibverbs answers
/// for a provider that does not say (pvrdma's does not).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: u32, _flags: u32) -> c_int {
    0
}

/// `ibv_resolve_eth_l2_from_gid(context, attr, eth_mac, vid)`: `-EINVAL` (libibverbs's answer
/// when no interface of this host holds the source GID's address): our RoCE ports are not
/// netdevs, so there is no neighbour table to ask; nothing is written.
#[no_mangle]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _ctx: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    -libc::EINVAL
}

/// `ibv_fork_init()`: 0. Fork protection (`MADV_DONTFORK` on registered memory) is not needed:
/// the model reaches memory through the process's own mappings, and a VFIO device's pinned
/// pages are copied to the child on fork by the kernel (Linux 5.13+), as libibverbs reports
/// for such kernels.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized()`: `IBV_FORK_UNNEEDED` (see [`ibv_fork_init`]).
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}

/// `ibv_dontfork_range(base, size)`: 0, nothing to do (see [`ibv_fork_init`]).
#[no_mangle]
pub unsafe extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range(base, size)`: 0, nothing to do (see [`ibv_fork_init`]).
#[no_mangle]
pub unsafe extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
