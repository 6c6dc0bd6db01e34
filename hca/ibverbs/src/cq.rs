//! CQs (`ibv_create_cq`, `ibv_destroy_cq`, `ibv_resize_cq`) and the ops the header's inline
//! `ibv_poll_cq` and `ibv_req_notify_cq` call.

use crate::abi::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_wc, pthread_cond_t, pthread_mutex_t, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD,
    IBV_WC_GRH, IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SEND,
    IBV_WC_WITH_IMM,
};
use crate::channel::channel;
use crate::context::context;
use crate::ffi::{destroy_boxed, errno_of, fail, guard, null, why, WAIT_SLICE};
use ib_core::{Error, NotifyFlags, Wc, WcOpcode};
use std::mem::MaybeUninit;

/// What an `ibv_cq` pointer is the start of.
#[repr(C)]
pub(crate) struct Cq {
    pub ibv: ibv_cq,
    pub core: ib_core::Cq,
}

/// The [`Cq`] behind `cq`; `None` for NULL.
///
/// # Safety
/// `cq` is NULL or a live CQ of this library.
pub(crate) unsafe fn cq<'a>(cq: *const ibv_cq) -> Option<&'a Cq> {
    // SAFETY: the caller's promise.
    unsafe { crate::ffi::boxed(cq) }
}

/// `ibv_create_cq(context, cqe, cq_context, channel, comp_vector)`: a CQ of at least `cqe`
/// entries (`cq->cqe` is the size the device gave), whose completion events go to `channel`
/// (may be NULL) and carry `cq_context`. NULL with errno on failure, as libibverbs: `EINVAL` for
/// NULL or a foreign context, `cqe` above the device's `max_cqe`, `comp_vector` outside
/// `[0, num_comp_vectors)`, a channel of another context; `ENOMEM` when the device has no room;
/// `EIO` once the device is fatal. A `cqe` below 1 gets NULL with `errno` as it was: rdma-core's
/// `pvrdma_create_cq` refuses it without setting errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: i32,
    cq_context: *mut libc::c_void,
    chan: *mut ibv_comp_channel,
    comp_vector: i32,
) -> *mut ibv_cq {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller passes NULL or an open context of this library.
        let Some(c) = (unsafe { context(ctx) }) else { return null(libc::EINVAL) };
        if cqe < 1 {
            // rdma-core's `pvrdma_create_cq` returns NULL before anything sets errno.
            return std::ptr::null_mut();
        }
        // Linux's `ib_uverbs` `create_cq` (the vector is unsigned there: a negative one is huge).
        if comp_vector < 0 || comp_vector >= c.vctx.context.num_comp_vectors {
            return null(libc::EINVAL);
        }
        // SAFETY: the caller passes NULL or a live channel of this library.
        let ch = unsafe { channel(chan) };
        // The box exists first: its address is the core CQ's cq_context, which events carry.
        let slot = Box::into_raw(Box::new(MaybeUninit::<Cq>::uninit()));
        let core = match c.core.create_cq_with(cqe as u32, ch.map(|h| &h.core), slot as u64) {
            Ok(core) => core,
            Err(e) => {
                // SAFETY: `slot` came from `Box::into_raw` above and was never written.
                drop(unsafe { Box::from_raw(slot) });
                return null(why(&e));
            }
        };
        let ibv = ibv_cq {
            context: ctx,
            channel: chan,
            cq_context,
            handle: core.handle(),
            cqe: core.cqe().min(i32::MAX as u32) as i32,
            mutex: pthread_mutex_t([0; 5]),
            cond: pthread_cond_t([0; 6]),
            comp_events_completed: 0,
            async_events_completed: 0,
        };
        // SAFETY: `slot` is a live, unaliased allocation of a `Cq`, written once here.
        unsafe { slot.cast::<Cq>().write(Cq { ibv, core }) };
        slot.cast::<ibv_cq>()
    })
}

/// `ibv_destroy_cq(cq)`: 0, or the errno: `EINVAL` for NULL, `EBUSY` while a QP uses the CQ
/// (at once, as libibverbs), `EIO` once the device is fatal. As libibverbs, it first blocks until
/// every completion event (`ibv_get_cq_event`) and async event (`ibv_get_async_event`) taken for
/// the CQ has been acknowledged — without bound (the core's destroy waits, slice after slice).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(p: *mut ibv_cq) -> i32 {
    guard(libc::EIO, || {
        if p.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live CQ of this library, destroyed once by the program.
        unsafe { destroy_boxed(p.cast::<Cq>(), |b| std::ptr::addr_of_mut!((*b).core), destroy_acked) }
    })
}

/// Destroys `core` once its events are acknowledged, however long that takes.
fn destroy_acked(mut core: ib_core::Cq) -> Result<(), (ib_core::Cq, Error)> {
    loop {
        match core.destroy(Some(WAIT_SLICE)) {
            Err((c, Error::EventsNotAcked(_))) => core = c,
            r => return r,
        }
    }
}

/// `ibv_resize_cq(cq, cqe)`: as libibverbs 44, calls the context's `resize_cq` op (the ops
/// table's `_compat_resize_cq` slot, `resize_cq` here). `EINVAL` for NULL or a CQ without a
/// context; `EOPNOTSUPP` for an empty slot (libibverbs's dummy op).
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(p: *mut ibv_cq, cqe: i32) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the caller passes NULL or a live CQ of this library, whose context is open.
        let ctx = match unsafe { p.as_ref() } {
            Some(c) if !c.context.is_null() => c.context,
            _ => return fail(libc::EINVAL),
        };
        // SAFETY: as above; the ops table is the context's own.
        match unsafe { (*ctx).ops._compat_resize_cq } {
            // SAFETY: the op takes this CQ, as libibverbs calls it.
            Some(op) => unsafe { op(p, cqe) },
            None => fail(libc::EOPNOTSUPP),
        }
    })
}

/// The `resize_cq` op: resizes the CQ to at least `cqe` entries (the CQEs queued stay, in order;
/// the arm stays) and sets `cq->cqe` to the size the device gave, as libibverbs's
/// `ibv_cmd_resize_cq` does. 0, or the errno as libibverbs returns the provider's: `EINVAL` for
/// NULL, `cqe` below 1 or above `max_cqe`, or fewer entries than CQEs queued; `EOPNOTSUPP` on a
/// device without RESIZE_CQ (pvrdma on QEMU 7.2: libibverbs's answer for a provider without the
/// verb); `EIO` once the device is fatal.
pub(crate) unsafe extern "C" fn resize_cq(p: *mut ibv_cq, cqe: i32) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the caller passes NULL or a live CQ of this library.
        let Some(c) = (unsafe { cq(p) }) else { return fail(libc::EINVAL) };
        if cqe < 1 {
            return fail(libc::EINVAL);
        }
        match c.core.resize(cqe as u32) {
            Ok(n) => {
                // SAFETY: `p` is the live CQ's `ibv_cq`, which the program shares with us; libibverbs
                // writes `cq->cqe` the same way after a resize.
                unsafe { (*p).cqe = n.min(i32::MAX as u32) as i32 };
                0
            }
            Err(e) => fail(why(&e)),
        }
    })
}

/// The `ibv_wc_opcode` value of `op`.
fn wc_opcode(op: WcOpcode) -> u32 {
    match op {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
        // The provider's opcodes number as ibv's.
        WcOpcode::Other(v) => v,
    }
}

/// The core's completion as libibverbs delivers it: `imm_data` big-endian with
/// `IBV_WC_WITH_IMM`, `IBV_WC_GRH` for a receive; `vendor_err`, `pkey_index`, `slid`, `sl` and
/// `dlid_path_bits` are 0 (the core's completion does not carry them; an RC/UD port of pvrdma
/// reports them as 0 too). An error completion carries only `wr_id`, `status` and `qp_num`
/// (`ibv_poll_cq(3)`: the others are not valid) and zeros elsewhere, opcode `IBV_WC_SEND`
/// included, as Linux rxe reports one (`make_send_cqe`, `flush_recv_wqe`).
pub(crate) fn to_ibv_wc(w: &Wc) -> ibv_wc {
    if w.status != ib_core::WcStatus::Success {
        return ibv_wc { wr_id: w.wr_id, status: w.status.raw(), qp_num: w.qp_num, ..ibv_wc::default() };
    }
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status.raw(),
        opcode: wc_opcode(w.opcode),
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: w.imm_data.map_or(0, u32::to_be),
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: if w.imm_data.is_some() { IBV_WC_WITH_IMM } else { 0 } | if w.grh { IBV_WC_GRH } else { 0 },
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

/// Completions polled from the core per chunk (on the stack).
const CHUNK: usize = 16;

/// `ops.poll_cq(cq, n, wc)` (the header's inline `ibv_poll_cq`): polls up to `n` completions
/// into `wc[0..n)` and returns how many; 0 for `n` below 1. Negative on error, as providers
/// answer: `-EOVERFLOW` once the CQ overflowed and its queued CQEs are consumed, `-EIO` on a
/// fatal device, `-EINVAL` for NULL. Completions polled before an error are returned first.
pub(crate) unsafe extern "C" fn poll_cq(p: *mut ibv_cq, n: i32, wc: *mut ibv_wc) -> i32 {
    guard(-libc::EIO, || {
        // SAFETY: the caller passes a live CQ of this library.
        let Some(c) = (unsafe { cq(p) }) else { return -libc::EINVAL };
        if n < 1 {
            return 0;
        }
        if wc.is_null() {
            return -libc::EINVAL;
        }
        if n == 1 {
            let mut one = [Wc::default()];
            return match c.core.poll(&mut one) {
                // SAFETY: the caller gives room for `n` (1) completions at `wc`.
                Ok(k) => unsafe { write_wcs(&one[..k], wc) },
                Err(e) => -why(&e),
            };
        }
        // SAFETY: the caller gives room for `n` completions at `wc`.
        unsafe { poll_chunks(c, n as usize, wc) }
    })
}

/// Polls `n` (more than 1) completions in chunks of [`CHUNK`].
///
/// # Safety
/// `wc` has room for `n` completions.
unsafe fn poll_chunks(c: &Cq, n: usize, wc: *mut ibv_wc) -> i32 {
    let mut buf = [Wc::default(); CHUNK];
    let mut done = 0;
    while done < n {
        let want = (n - done).min(CHUNK);
        let k = match c.core.poll(&mut buf[..want]) {
            Ok(k) => k,
            Err(_) if done > 0 => break,
            Err(e) => return -why(&e),
        };
        // SAFETY: `done + k <= n`: within the caller's room.
        unsafe { write_wcs(&buf[..k], wc.add(done)) };
        done += k;
        if k < want {
            break;
        }
    }
    done as i32
}

/// Writes `src` converted at `dst`; returns how many.
///
/// # Safety
/// `dst` has room for `src.len()` completions.
unsafe fn write_wcs(src: &[Wc], dst: *mut ibv_wc) -> i32 {
    for (i, w) in src.iter().enumerate() {
        // SAFETY: the caller's promise.
        unsafe { dst.add(i).write(to_ibv_wc(w)) };
    }
    src.len() as i32
}

/// `ops.req_notify_cq(cq, solicited_only)` (the header's inline `ibv_req_notify_cq`): arms the
/// CQ for its next completion, or next solicited one, to raise one event on its channel. 0 or
/// the errno: `EOPNOTSUPP` for solicited-only where the device cannot arm for it (QEMU 7.2),
/// `EOVERFLOW` once the CQ overflowed, `EIO` on a fatal device, `EINVAL` for NULL.
pub(crate) unsafe extern "C" fn req_notify_cq(p: *mut ibv_cq, solicited_only: i32) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the caller passes a live CQ of this library.
        let Some(c) = (unsafe { cq(p) }) else { return fail(libc::EINVAL) };
        let flags = if solicited_only != 0 { NotifyFlags::SOLICITED } else { NotifyFlags::NEXT_COMPLETION };
        c.core.req_notify(flags).map_or_else(|e| errno_of(&e), |_| 0)
    })
}

/// `ibv_ack_cq_events(cq, nevents)`: acknowledges `nevents` completion events taken for `cq`
/// with `ibv_get_cq_event` (more than were taken counts as that many). NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(p: *mut ibv_cq, nevents: u32) {
    guard((), || {
        // SAFETY: the caller passes NULL or a live CQ of this library.
        if let Some(c) = unsafe { cq(p) } {
            c.core.ack_events(nevents);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ib_core::WcStatus;

    #[test]
    fn completions_convert_as_libibverbs_delivers_them() {
        let w = Wc {
            wr_id: 7,
            status: WcStatus::RemAccessErr,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 64,
            qp_num: 3,
            src_qp: 9,
            imm_data: Some(0x1234_5678),
            grh: false,
        };
        let c = to_ibv_wc(&Wc { status: WcStatus::Success, ..w });
        assert_eq!((c.wr_id, c.status, c.opcode, c.byte_len, c.qp_num, c.src_qp), (7, 0, 129, 64, 3, 9));
        assert_eq!(c.imm_data.to_ne_bytes(), [0x12, 0x34, 0x56, 0x78], "big-endian in memory");
        assert_eq!(c.wc_flags, IBV_WC_WITH_IMM);
        // Issue 21 §5: an error completion as rxe reports one: wr_id, status, qp_num, zeros.
        let e = to_ibv_wc(&Wc { grh: true, ..w });
        assert_eq!((e.wr_id, e.status, e.qp_num), (7, 10, 3));
        assert_eq!((e.opcode, e.byte_len, e.imm_data, e.src_qp, e.wc_flags), (IBV_WC_SEND, 0, 0, 0, 0));
        let plain = to_ibv_wc(&Wc { opcode: WcOpcode::Other(6), ..Wc::default() });
        assert_eq!((plain.imm_data, plain.wc_flags, plain.opcode, plain.status), (0, 0, 6, 0));
    }
}
