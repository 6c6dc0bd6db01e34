//! The new post-send API (`ibv_qp_ex`, man `ibv_wr_post`): `wr_start` opens a batch, each
//! `wr_send`/`wr_send_imm`/`wr_rdma_write`/`wr_rdma_write_imm`/`wr_rdma_read`/
//! `wr_atomic_cmp_swp`/`wr_atomic_fetch_add` starts a WR with
//! the `wr_id` and `wr_flags` the program set in the `ibv_qp_ex` at that moment, the
//! `wr_set_sge*`/`wr_set_inline_data*` calls give it its data, `wr_complete` posts the batch and
//! `wr_abort` drops it; `wr_set_ud_addr` addresses a UD QP's send. Memory windows, XRC
//! addressing, TSO and atomic write stay NULL, as a
//! provider leaves what it does not carry.
//!
//! As rdma-core's rxe and mlx5, a WR error met while building (too many SGEs, inline data beyond
//! `max_inline_data`, a setter with no WR) is remembered and `wr_complete` returns it with nothing
//! posted. Unlike them, a send queue that fills while the batch is posted (`ENOMEM`) leaves the
//! WRs before the one that did not fit posted: the core posts a list in order with no
//! reservation, as `ibv_post_send` does.
//!
//! The batch keeps its WRs, SGEs and inline bytes in vectors reused from one batch to the next,
//! so a warm QP allocates nothing; inline bytes are taken when `wr_set_inline_data` returns.

use super::post::Src;
use super::{qp, Qp};
use crate::abi::{ibv_ah, ibv_data_buf, ibv_qp, ibv_qp_ex, ibv_sge, IBV_SEND_INLINE};
use crate::chain::sges;
use ib_core::{Sge, WrOpcode};
use parking_lot::Mutex;
use std::ops::Range;

/// A QP's open batch.
#[derive(Default)]
pub(crate) struct Batch(Mutex<State>);

#[derive(Default)]
struct State {
    /// The first error met while building (an errno), returned by `wr_complete`.
    err: i32,
    wrs: Vec<ExWr>,
    sges: Vec<Sge>,
    data: Vec<u8>,
}

struct ExWr {
    wr_id: u64,
    flags: u32,
    opcode: WrOpcode,
    sges: Range<usize>,
    data: Option<Range<usize>>,
}

impl State {
    fn clear(&mut self) {
        self.err = 0;
        self.wrs.clear();
        self.sges.clear();
        self.data.clear();
    }

    fn fail(&mut self, errno: i32) {
        if self.err == 0 {
            self.err = errno;
        }
    }

    /// The WR the setters fill (the last one started); `None` records `EINVAL`.
    fn last(&mut self) -> Option<&mut ExWr> {
        if self.wrs.is_empty() {
            self.fail(libc::EINVAL);
        }
        self.wrs.last_mut()
    }
}

/// The `ibv_qp_ex` of a QP whose base is `base`, with this module's functions when `ex`.
pub(crate) fn qp_ex(base: ibv_qp, ex: bool) -> ibv_qp_ex {
    let ud = base.qp_type == crate::abi::IBV_QPT_UD;
    ibv_qp_ex {
        qp_base: base,
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: ex.then_some(wr_atomic_cmp_swp as _),
        wr_atomic_fetch_add: ex.then_some(wr_atomic_fetch_add as _),
        wr_bind_mw: None,
        wr_local_inv: None,
        wr_rdma_read: ex.then_some(wr_rdma_read as _),
        wr_rdma_write: ex.then_some(wr_rdma_write as _),
        wr_rdma_write_imm: ex.then_some(wr_rdma_write_imm as _),
        wr_send: ex.then_some(wr_send as _),
        wr_send_imm: ex.then_some(wr_send_imm as _),
        wr_send_inv: None,
        wr_send_tso: None,
        wr_set_ud_addr: (ex && ud).then_some(wr_set_ud_addr as _),
        wr_set_xrc_srqn: None,
        wr_set_inline_data: ex.then_some(wr_set_inline_data as _),
        wr_set_inline_data_list: ex.then_some(wr_set_inline_data_list as _),
        wr_set_sge: ex.then_some(wr_set_sge as _),
        wr_set_sge_list: ex.then_some(wr_set_sge_list as _),
        wr_start: ex.then_some(wr_start as _),
        wr_complete: ex.then_some(wr_complete as _),
        wr_abort: ex.then_some(wr_abort as _),
        wr_atomic_write: None,
    }
}

/// Runs `f` on the QP and its batch state (nothing for NULL or a QP without the API).
///
/// # Safety
/// `qpx` is NULL or the `ibv_qp_ex` of a live QP of this library.
unsafe fn with<R: Default>(qpx: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut State) -> R) -> R {
    crate::ffi::guard(R::default(), || {
        // SAFETY: the caller's promise; the `ibv_qp_ex` starts with the `ibv_qp`.
        let Some(q) = (unsafe { qp(qpx.cast::<ibv_qp>()) }) else { return R::default() };
        let Some(b) = q.batch.as_ref() else { return R::default() };
        f(q, &mut b.0.lock())
    })
}

/// Starts a WR of `opcode` with the `wr_id` and `wr_flags` the program set.
///
/// # Safety
/// As [`with`].
unsafe fn start(qpx: *mut ibv_qp_ex, opcode: WrOpcode) {
    // SAFETY: the caller's promise; `with` runs the closure only for a QP it found, so the
    // fields read are the program's `ibv_qp_ex`, which it does not write during the call.
    unsafe {
        with(qpx, |_, s| {
            let (wr_id, flags) = ((*qpx).wr_id, (*qpx).wr_flags);
            let at = s.sges.len();
            s.wrs.push(ExWr { wr_id, flags, opcode, sges: at..at, data: None });
        })
    }
}

/// `ibv_wr_set_ud_addr(qpx, ah, remote_qpn, remote_qkey)`: the destination of the WR just
/// started (a SEND or SEND_WITH_IMM of a UD QP); `EINVAL` at `wr_complete` for a NULL AH or
/// another operation.
unsafe extern "C" fn wr_set_ud_addr(qpx: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
    // SAFETY: the program passes its QP and an AH of this library (or NULL).
    unsafe {
        with(qpx, |_, s| {
            let Some(a) = crate::ah::ah(ah) else { return s.fail(libc::EINVAL) };
            let dest = a.core.dest(remote_qpn, remote_qkey);
            let Some(w) = s.last() else { return };
            w.opcode = match w.opcode {
                WrOpcode::Send => WrOpcode::UdSend { dest, imm: None },
                WrOpcode::SendWithImm(imm) | WrOpcode::UdSend { imm: Some(imm), .. } => {
                    WrOpcode::UdSend { dest, imm: Some(imm) }
                }
                WrOpcode::UdSend { imm: None, .. } => WrOpcode::UdSend { dest, imm: None },
                _ => return s.fail(libc::EINVAL),
            };
        })
    }
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    // SAFETY: the program passes its QP.
    unsafe { with(qpx, |_, s| s.clear()) }
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    // SAFETY: the program passes its QP.
    unsafe { with(qpx, |_, s| s.clear()) }
}

/// Posts the batch: 0, or the first building error (nothing posted), or the errno of the first
/// WR the core did not post.
unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> i32 {
    // SAFETY: the program passes its QP.
    unsafe {
        with(qpx, |q, s| {
            if s.err != 0 {
                let e = s.err;
                s.clear();
                return crate::ffi::fail(e);
            }
            let st = &*s;
            let srcs = st.wrs.iter().map(|w| {
                Ok(Src {
                    wr_id: w.wr_id,
                    opcode: w.opcode,
                    flags: w.flags,
                    sges: &st.sges[w.sges.clone()],
                    data: w.data.clone().map(|r| &st.data[r]),
                })
            });
            let r = q.post_srcs(srcs).err().map_or(0, |(_, e)| e);
            s.clear();
            r
        })
    }
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    // SAFETY: the program passes its QP.
    unsafe { start(qpx, WrOpcode::Send) }
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    // SAFETY: the program passes its QP.
    unsafe { start(qpx, WrOpcode::SendWithImm(u32::from_be(imm))) }
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: the program passes its QP.
    unsafe { start(qpx, WrOpcode::RdmaWrite { remote_addr, rkey }) }
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    let imm = u32::from_be(imm);
    // SAFETY: the program passes its QP.
    unsafe { start(qpx, WrOpcode::RdmaWriteWithImm { remote_addr, rkey, imm }) }
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: the program passes its QP.
    unsafe { start(qpx, WrOpcode::RdmaRead { remote_addr, rkey }) }
}

unsafe extern "C" fn wr_atomic_cmp_swp(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64) {
    // SAFETY: the program passes its QP.
    unsafe { start(qpx, WrOpcode::AtomicCmpSwp { remote_addr, rkey, compare, swap }) }
}

unsafe extern "C" fn wr_atomic_fetch_add(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) {
    // SAFETY: the program passes its QP.
    unsafe { start(qpx, WrOpcode::AtomicFetchAdd { remote_addr, rkey, add }) }
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = Sge { addr, length, lkey };
    // SAFETY: the program passes its QP.
    unsafe { set_sges(qpx, std::slice::from_ref(&sge)) }
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, num: usize, list: *const ibv_sge) {
    let Ok(n) = i32::try_from(num) else {
        // SAFETY: the program passes its QP.
        return unsafe { with(qpx, |_, s| s.fail(libc::EINVAL)) };
    };
    // SAFETY: the program's `num` SGEs at `list`.
    match unsafe { sges(list, n) } {
        // SAFETY: the program passes its QP.
        Ok(list) => unsafe { set_sges(qpx, list) },
        // SAFETY: as above.
        Err(e) => unsafe { with(qpx, |_, s| s.fail(e)) },
    }
}

/// Gives the last WR the SGEs `list` (`EINVAL` beyond the QP's `max_send_sge`).
///
/// # Safety
/// As [`with`].
unsafe fn set_sges(qpx: *mut ibv_qp_ex, list: &[Sge]) {
    // SAFETY: the caller's promise.
    unsafe {
        with(qpx, |q, s| {
            if list.len() > q.cap.max_send_sge as usize {
                return s.fail(libc::EINVAL);
            }
            let at = s.sges.len();
            s.sges.extend_from_slice(list);
            if let Some(w) = s.last() {
                w.sges = at..at + list.len();
                w.data = None;
            }
        })
    }
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut libc::c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: the program passes its QP and its buffer.
    unsafe { set_inline(qpx, std::slice::from_ref(&buf)) }
}

unsafe extern "C" fn wr_set_inline_data_list(qpx: *mut ibv_qp_ex, num: usize, bufs: *const ibv_data_buf) {
    if num == 0 || bufs.is_null() {
        // SAFETY: the program passes its QP.
        return unsafe { set_inline(qpx, &[]) };
    }
    // SAFETY: the program's `num` buffers at `bufs`.
    let list = unsafe { std::slice::from_raw_parts(bufs, num) };
    // SAFETY: the program passes its QP.
    unsafe { set_inline(qpx, list) }
}

/// Copies the bytes of `bufs` as the last WR's inline data (`ENOMEM` beyond the QP's
/// `max_inline_data`, as mlx5).
///
/// # Safety
/// As [`with`]; each buffer names `length` readable bytes at `addr` (the program's promise).
unsafe fn set_inline(qpx: *mut ibv_qp_ex, bufs: &[ibv_data_buf]) {
    // SAFETY: the caller's promise.
    unsafe {
        with(qpx, |q, s| {
            // Checked: lengths from the program may wrap when added.
            let total = bufs.iter().try_fold(0usize, |t, b| t.checked_add(b.length));
            let Some(total) = total.filter(|&t| t <= q.max_inline() as usize) else {
                return s.fail(libc::ENOMEM);
            };
            let at = s.data.len();
            for b in bufs.iter().filter(|b| b.length > 0) {
                // SAFETY: the program's buffer of `length` bytes (checked non-empty).
                s.data.extend_from_slice(std::slice::from_raw_parts(b.addr.cast::<u8>(), b.length));
            }
            if let Some(w) = s.last() {
                w.sges = 0..0;
                w.data = Some(at..at + total);
                w.flags |= IBV_SEND_INLINE;
            }
        })
    }
}
