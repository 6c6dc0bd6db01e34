//! Work-request chains as programs pass them to `ibv_post_send`, `ibv_post_recv` and
//! `ibv_post_srq_recv`: their SGE arrays read in place as the core's, the failing WR named in
//! `*bad_wr`, and the receive chain a QP's RQ and an SRQ post alike.

use crate::abi::{ibv_recv_wr, ibv_sge};
use crate::ffi::{errno_of, fail};
use ib_core::{RecvWr, Sge};
use memoffset::offset_of;
use smallvec::SmallVec;
use std::mem::{align_of, size_of};

const _: () = assert!(size_of::<Sge>() == size_of::<ibv_sge>() && align_of::<Sge>() == align_of::<ibv_sge>());
const _: () = assert!(offset_of!(Sge, addr) == offset_of!(ibv_sge, addr));
const _: () = assert!(offset_of!(Sge, length) == offset_of!(ibv_sge, length));
const _: () = assert!(offset_of!(Sge, lkey) == offset_of!(ibv_sge, lkey));

/// The program's SGE array as the core's (`num` of them at `list`).
///
/// # Safety
/// `list` points at `num` readable `ibv_sge`s that outlive `'a` (the program's promise).
pub(crate) unsafe fn sges<'a>(list: *const ibv_sge, num: i32) -> Result<&'a [Sge], i32> {
    let n = usize::try_from(num).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(&[]);
    }
    if list.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: `Sge` has `ibv_sge`'s layout (asserted above); the caller's promise covers the rest.
    Ok(unsafe { std::slice::from_raw_parts(list.cast::<Sge>(), n) })
}

/// Stores `wr` in `*bad` (when `bad` is not NULL) and returns `errno`.
pub(crate) fn bad_wr<T>(bad: *mut *mut T, wr: *mut T, errno: i32) -> i32 {
    if !bad.is_null() {
        // SAFETY: a non-NULL `bad_wr` is the program's pointer to write the failing WR to.
        unsafe { *bad = wr };
    }
    errno
}

/// The `i`-th WR of the chain at `wr` (`i` is within the chain: the walk reached it).
///
/// # Safety
/// The chain is the program's, walked once already.
pub(crate) unsafe fn nth<T>(mut wr: *mut T, i: usize, next: impl Fn(*mut T) -> *mut T) -> *mut T {
    for _ in 0..i {
        wr = next(wr);
    }
    wr
}

/// Posts the receive chain at `wr` with `post` (a QP's RQ or an SRQ of `depth` WRs), in one call
/// for every WR read; 0, or the errno of the first WR not posted, stored in `*bad_wr` (a WR whose
/// SGE list is unreadable stops the walk: those before it are posted). As rdma-core's pvrdma
/// provider: a NULL `wr` or `bad_wr` posts nothing (`EINVAL`), and a chain longer than the
/// queue (one that loops back on itself included) fails `ENOMEM` at WR `depth` at the latest,
/// where that provider, posting WR by WR, finds the ring full; so at most `depth` WRs (one if
/// 0) are read.
///
/// # Safety
/// `wr` is NULL or the program's chain, `bad` NULL or writable.
pub(crate) unsafe fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    depth: u32,
    post: impl FnOnce(&[RecvWr<'_>]) -> Result<(), (usize, ib_core::Error)>,
) -> i32 {
    // As rdma-core's pvrdma provider: no chain or nowhere to name a failed WR posts nothing.
    if wr.is_null() || bad.is_null() {
        return fail(libc::EINVAL);
    }
    let mut wrs: SmallVec<[RecvWr<'_>; 1]> = SmallVec::new();
    let mut cur = wr;
    let mut stop = None;
    // SAFETY: each WR of the chain is the program's, read during this call only.
    while let Some(w) = unsafe { cur.as_ref() } {
        if wrs.len() >= depth.max(1) as usize {
            stop = Some(libc::ENOMEM);
            break;
        }
        // SAFETY: its SGE list is the program's promise.
        match unsafe { sges(w.sg_list, w.num_sge) } {
            Ok(sg_list) => wrs.push(RecvWr { wr_id: w.wr_id, sg_list }),
            Err(e) => {
                stop = Some(e);
                break;
            }
        }
        cur = w.next;
    }
    // SAFETY: each WR of the chain is the program's; the walk reached the index.
    let nth_wr = |i| unsafe { nth(wr, i, |w: *mut ibv_recv_wr| (*w).next) };
    if !wrs.is_empty() {
        if let Err((i, e)) = post(&wrs) {
            return bad_wr(bad, nth_wr(i), errno_of(&e));
        }
    }
    match stop {
        Some(e) => bad_wr(bad, nth_wr(wrs.len()), fail(e)),
        None => 0,
    }
}
