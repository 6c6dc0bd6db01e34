//! `ops.post_send` and `ops.post_recv` (the header's inline `ibv_post_send`/`ibv_post_recv`),
//! and the posting both they and the `ibv_qp_ex` batches share.
//!
//! As rdma-core's providers: the WRs of a chain are posted in order (one doorbell for a run of
//! them); the first that cannot be posted is returned in `*bad_wr` with its errno (`EINVAL` for a
//! bad WR or a QP before RTS, `ENOMEM` when the send queue is full), and those before it are
//! posted. The program's SGE arrays are passed to the core as they are (`ib_core::Sge` has
//! `ibv_sge`'s layout); one WR with few SGEs allocates nothing.

use super::{qp, Qp};
use crate::abi::{
    ibv_qp, ibv_recv_wr, ibv_send_wr, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED,
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
};
use crate::chain::{bad_wr, nth, post_recv_chain, sges};
use crate::ffi::{errno_of, fail, guard, why};
use ib_core::{SendWr, Sge, WrOpcode};
use smallvec::SmallVec;

/// One send WR as either path gives it.
pub(crate) struct Src<'a> {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    /// `ibv_send_flags`.
    pub flags: u32,
    /// The SGEs: posted as they are, or with `IBV_SEND_INLINE` and no `data`, the bytes to copy.
    pub sges: &'a [Sge],
    /// Inline bytes already taken (`ibv_wr_set_inline_data`).
    pub data: Option<&'a [u8]>,
}

/// A WR ready to post: its SGEs are the source's or one over a bounce slot.
struct Staged<'a> {
    wr_id: u64,
    opcode: WrOpcode,
    flags: u32,
    sges: &'a [Sge],
    bounce: Option<Sge>,
}

impl Staged<'_> {
    fn wr(&self) -> SendWr<'_> {
        SendWr {
            wr_id: self.wr_id,
            sg_list: self.bounce.as_ref().map_or(self.sges, std::slice::from_ref),
            opcode: self.opcode,
            signaled: self.flags & IBV_SEND_SIGNALED != 0,
            solicited: self.flags & IBV_SEND_SOLICITED != 0,
        }
    }
}

/// The core's opcode of an `ibv_send_wr` (its immediate data is big-endian there, host order in
/// the core). An opcode this library does not carry goes to the device as it is
/// ([`WrOpcode::Raw`]): rdma-core's `pvrdma_post_send` checks no opcode, and the device
/// completes what it cannot do with an error.
fn opcode(wr: &ibv_send_wr, ud: bool) -> Result<WrOpcode, i32> {
    if ud {
        return ud_opcode(wr);
    }
    // SAFETY: every member of the `wr` union is plain data; `rdma` is the one these opcodes use,
    // `atomic` the one of the atomics.
    let (rdma, atomic) = unsafe { (wr.wr.rdma, wr.wr.atomic) };
    let (a_addr, a_rkey) = (atomic.remote_addr, atomic.rkey);
    let (remote_addr, rkey, imm) = (rdma.remote_addr, rdma.rkey, u32::from_be(wr.imm_data));
    Ok(match wr.opcode {
        IBV_WR_SEND => WrOpcode::Send,
        IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm(imm),
        IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite { remote_addr, rkey },
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm { remote_addr, rkey, imm },
        IBV_WR_RDMA_READ => WrOpcode::RdmaRead { remote_addr, rkey },
        IBV_WR_ATOMIC_CMP_AND_SWP => {
            WrOpcode::AtomicCmpSwp { remote_addr: a_addr, rkey: a_rkey, compare: atomic.compare_add, swap: atomic.swap }
        }
        IBV_WR_ATOMIC_FETCH_AND_ADD => {
            WrOpcode::AtomicFetchAdd { remote_addr: a_addr, rkey: a_rkey, add: atomic.compare_add }
        }
        other => WrOpcode::Raw { opcode: other, ud: None },
    })
}

/// The core's opcode of an `ibv_send_wr` of a UD QP: SEND or SEND_WITH_IMM to `wr.ud`'s AH,
/// remote QPN and Q_Key; any other opcode goes to the device with that address as it is
/// ([`WrOpcode::Raw`]), as rdma-core's `pvrdma_post_send` writes every UD work request.
/// `EINVAL` for a NULL AH (the provider would dereference it; Linux's `pvrdma_post_send`
/// answers `EINVAL`, "invalid address handle").
fn ud_opcode(wr: &ibv_send_wr) -> Result<WrOpcode, i32> {
    // SAFETY: every member of the `wr` union is plain data; `ud` is the one a UD QP uses.
    let ud = unsafe { wr.wr.ud };
    // SAFETY: a non-NULL `ah` is an AH of this library the program has not destroyed.
    let ah = unsafe { crate::ah::ah(ud.ah) }.ok_or(libc::EINVAL)?;
    let dest = ah.core.dest(ud.remote_qpn, ud.remote_qkey);
    Ok(match wr.opcode {
        IBV_WR_SEND => WrOpcode::UdSend { dest, imm: None },
        IBV_WR_SEND_WITH_IMM => WrOpcode::UdSend { dest, imm: Some(u32::from_be(wr.imm_data)) },
        other => WrOpcode::Raw { opcode: other, ud: Some(dest) },
    })
}

/// An `ibv_send_wr` as a [`Src`] (of a UD QP's when `ud`). Send flags are not checked, as
/// rdma-core's provider passes them to the device unchecked (`ibv_send_flags_to_pvrdma`):
/// `IBV_SEND_SIGNALED`, `IBV_SEND_SOLICITED` and `IBV_SEND_INLINE` act, `IBV_SEND_FENCE` and
/// the rest change nothing (the device orders every WQE after the RDMA READs before it).
///
/// # Safety
/// `wr`'s SGE list is the program's promise (see [`sges`]).
unsafe fn src<'a>(wr: &ibv_send_wr, ud: bool) -> Result<Src<'a>, i32> {
    // SAFETY: the caller's promise.
    let list = unsafe { sges(wr.sg_list, wr.num_sge) }?;
    Ok(Src { wr_id: wr.wr_id, opcode: opcode(wr, ud)?, flags: wr.send_flags, sges: list, data: None })
}

impl Qp {
    /// Posts the send WRs `srcs` gives, in order. `Err((index, errno))` for the first not
    /// posted (a source's own error, or the core's); those before it are posted.
    pub(crate) fn post_srcs<'a>(&self, srcs: impl Iterator<Item = Result<Src<'a>, i32>>) -> Result<(), (usize, i32)> {
        let mut srcs = srcs.peekable();
        let mut staging = self.inline.as_ref().map(|i| i.lock());
        let per_call = self.inline.as_ref().map_or(usize::MAX, |i| i.per_call);
        let mut base = 0;
        while srcs.peek().is_some() {
            let mut staged: SmallVec<[Staged<'a>; 1]> = SmallVec::new();
            let mut stop = None;
            let mut inlined = 0;
            while inlined < per_call {
                let Some(s) = srcs.next() else { break };
                match s.and_then(|s| self.stage(s, staging.as_mut(), inlined)) {
                    Ok(st) => {
                        inlined += usize::from(st.bounce.is_some());
                        staged.push(st);
                    }
                    Err(e) => {
                        stop = Some(e);
                        break;
                    }
                }
            }
            let wrs: SmallVec<[SendWr<'_>; 1]> = staged.iter().map(Staged::wr).collect();
            let posted = if wrs.is_empty() { Ok(()) } else { self.core.post_send_list(&wrs) };
            let done = posted.as_ref().map_or_else(|(i, _)| *i, |()| staged.len());
            if let Some(s) = staging.as_mut() {
                s.commit(staged[..done].iter().filter(|st| st.bounce.is_some()).count());
            }
            if let Err((i, e)) = posted {
                return Err((base + i, errno_of(&e)));
            }
            if let Some(e) = stop {
                return Err((base + staged.len(), fail(e)));
            }
            base += staged.len();
        }
        Ok(())
    }

    /// Makes `s` postable, copying its bytes into bounce slot `j` of this call for an inline WR.
    /// `EINVAL` for more SGEs than the QP takes, inline or not (rdma-core's provider counts
    /// `num_sge` first). `IBV_SEND_INLINE` is this library's: pvrdma has no inline data, so
    /// rdma-core's provider posts an inline WR's SGEs as they are and the device ignores the
    /// flag. Here the bytes go through the QP's bounce buffer when they fit its
    /// `max_inline_data`; an RDMA READ or atomic flagged inline, or inline bytes beyond that, are
    /// posted as the provider posts them: their SGEs, by their lkeys.
    fn stage<'a>(&self, s: Src<'a>, staging: Option<&mut super::Staging<'_>>, j: usize) -> Result<Staged<'a>, i32> {
        let mut st = Staged { wr_id: s.wr_id, opcode: s.opcode, flags: s.flags, sges: s.sges, bounce: None };
        if s.sges.len() > self.cap.max_send_sge as usize {
            return Err(libc::EINVAL);
        }
        if s.flags & IBV_SEND_INLINE == 0 {
            return Ok(st);
        }
        let reads = matches!(
            s.opcode,
            WrOpcode::RdmaRead { .. } | WrOpcode::AtomicCmpSwp { .. } | WrOpcode::AtomicFetchAdd { .. }
        );
        if reads {
            return Ok(st);
        }
        let total: u64 = match s.data {
            Some(d) => d.len() as u64,
            None => s.sges.iter().map(|g| u64::from(g.length)).sum(),
        };
        if total == 0 {
            st.sges = &[];
            return Ok(st);
        }
        let Some(staging) = staging.filter(|_| total <= u64::from(self.max_inline())) else {
            // `ibv_wr_set_inline_data` bytes have no SGEs to fall back to: `ENOMEM`, as mlx5.
            return if s.data.is_some() { Err(libc::ENOMEM) } else { Ok(st) };
        };
        st.sges = &[];
        let copied = match s.data {
            Some(d) => staging.copy(j, total as u32, std::iter::once(d)),
            None => {
                // Empty SGEs are skipped: their address may be anything.
                let bytes = s.sges.iter().filter(|g| g.length > 0).map(|g| {
                    // SAFETY: an inline SGE names `length` readable bytes of the program's at
                    // `addr` (libibverbs's contract; no lkey is checked).
                    unsafe { std::slice::from_raw_parts(g.addr as usize as *const u8, g.length as usize) }
                });
                staging.copy(j, total as u32, bytes)
            }
        };
        st.bounce = Some(copied.map_err(|e| why(&e))?);
        Ok(st)
    }
}

/// `ops.post_send` (`ibv_post_send(qp, wr, bad_wr)`): posts the chain at `wr`. 0, or the errno
/// of the first WR not posted, stored in `*bad_wr`, as rdma-core's `pvrdma_post_send` answers:
/// `EINVAL` for a QP before RTS, more SGEs than the QP takes (or a negative `num_sge`, which
/// Linux's `pvrdma_post_send` refuses: the provider would post it as 2^32 - n SGEs), a NULL SGE
/// list with SGEs, or a UD WR without an AH; `ENOMEM` when the send queue is full, at the latest
/// for the WR past the SQ's depth (a chain that loops back on itself included). Opcodes and send
/// flags are not checked: a WR this stack does not carry (an unknown opcode, an RDMA WRITE on a
/// UD QP) is posted and completes with an error status.
pub(crate) unsafe extern "C" fn post_send(qp_: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live QP of this library.
        let Some(q) = (unsafe { qp(qp_) }) else { return bad_wr(bad, wr, fail(libc::EINVAL)) };
        // SAFETY: each WR of the chain is the program's, valid until it is walked past.
        let next = |w: *mut ibv_send_wr| unsafe { (*w).next };
        let mut cur = wr;
        let ud = q.ibv.qp_base.qp_type == crate::abi::IBV_QPT_UD;
        // The SQ holds no more: WR `depth` (of a longer or looping chain) finds it full.
        let mut left = q.cap.max_send_wr.max(1);
        let chain = std::iter::from_fn(|| {
            // SAFETY: as above; the WR is read during this call only.
            let w = unsafe { cur.as_ref() }?;
            if left == 0 {
                return Some(Err(libc::ENOMEM));
            }
            left -= 1;
            cur = w.next;
            // SAFETY: its SGE list is the program's promise.
            Some(unsafe { src(w, ud) })
        });
        match q.post_srcs(chain) {
            Ok(()) => 0,
            // SAFETY: the walk reached index `i`.
            Err((i, e)) => bad_wr(bad, unsafe { nth(wr, i, next) }, e),
        }
    })
}

/// `ops.post_recv` (`ibv_post_recv(qp, wr, bad_wr)`): posts the chain at `wr`. 0, or the errno
/// of the first WR not posted, stored in `*bad_wr`: `EINVAL` for a bad WR or a QP in RESET,
/// `ENOMEM` when the receive queue is full (at the latest at the WR past its depth). A QP on an
/// SRQ answers `EINVAL` before anything else and leaves `*bad_wr` as it was, as rdma-core's
/// `pvrdma_post_recv` does.
pub(crate) unsafe extern "C" fn post_recv(qp_: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> i32 {
    guard(libc::EIO, || {
        // SAFETY: the program passes a live QP of this library.
        let Some(q) = (unsafe { qp(qp_) }) else { return bad_wr(bad, wr, fail(libc::EINVAL)) };
        if !q.ibv.qp_base.srq.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: the chain and `bad` are the program's.
        unsafe { post_recv_chain(wr, bad, q.cap.max_recv_wr, |wrs| q.core.post_recv_list(wrs)) }
    })
}
