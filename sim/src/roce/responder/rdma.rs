//! The responder's RDMA WRITE and READ (IBTA 9.7.5.1.3, 9.7.5.1.4). A WRITE's RETH is checked
//! whole on its first (or only) packet, so a refused WRITE writes nothing; each packet is then
//! written at its running offset. A READ is answered with responses cut by the path MTU, the
//! first, last and only ones carrying an AETH (ACK with the MSN); a duplicate READ request is
//! executed again from its own PSN and RETH (the requester names the data still wanted) if they
//! lie within one of the last READs executed (`max_dest_rd_atomic` of them, at least 16; IBTA
//! 9.7.5.1.4, as Linux rxe checks them), else dropped: a peer cannot make the responder send
//! what no READ asked for.

use super::{Ctx, InMsg, Responder, NO_CREDITS};
use crate::ctx::Effects;
use crate::limits;
use crate::qp::Rx;
use crate::roce::message::packets;
use pvrdma_abi::wqe::wc_status;
use roce_wire::{opcode as op, psn, Aeth, Headers, NakCode, Reth};

/// Responses of a READ sent at once; the receive thread sends the rest between the packets it
/// receives, so a long READ neither holds up the other QPs' packets for its whole length nor
/// fills the socket buffers in one burst.
pub(super) const READ_BURST: u32 = 64;

/// The READ being answered: its first response's PSN, responses, the next one to send, and the
/// range (the request's RETH) it reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadReply {
    psn: u32,
    npkts: u32,
    next: u32,
    rkey: u32,
    va: u64,
    len: u32,
}

/// A READ the responder executed: its first PSN, packets, R_Key and the range it read.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadDone {
    psn: u32,
    npkts: u32,
    rkey: u32,
    va: u64,
    len: u64,
}

impl ReadDone {
    /// Whether a duplicate READ request at `p` with `reth` asks for a part of this READ: a PSN
    /// among its own, the same R_Key, a range within its range and no more packets than remain.
    fn covers(&self, p: u32, reth: &Reth, mtu: u32) -> bool {
        let k = psn::diff(p, self.psn);
        let (va, len) = (reth.va, u64::from(reth.dma_len));
        k >= 0
            && (k as u32) < self.npkts
            && reth.rkey == self.rkey
            && va >= self.va
            && va.checked_add(len).is_some_and(|end| end <= self.va.saturating_add(self.len))
            && packets(len, mtu) <= self.npkts - k as u32
    }
}

impl Responder {
    /// A WRITE packet (or an opcode a responder does not take).
    pub(super) fn on_write(&mut self, cx: &Ctx<'_>, hdr: &Headers, opcode: u8, payload: &[u8], fx: &mut Effects) {
        let p = hdr.bth.psn;
        let first =
            matches!(opcode, op::RC_RDMA_WRITE_FIRST | op::RC_RDMA_WRITE_ONLY | op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE);
        let last = matches!(
            opcode,
            op::RC_RDMA_WRITE_LAST
                | op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE
                | op::RC_RDMA_WRITE_ONLY
                | op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
        );
        if !first && !last && opcode != op::RC_RDMA_WRITE_MIDDLE {
            return self.invalid(cx, p, fx);
        }
        // The message so far: from the RETH on a first (or only) packet, which is kept only
        // once the packet is written (an RNR NAK leaves the responder as it was).
        let (rkey, va, done, len) = if first {
            let (Some(reth), InMsg::None) = (hdr.reth, &self.msg) else {
                return self.invalid(cx, p, fx);
            };
            // A first packet leaves data for later ones; an only packet carries all of it.
            let len = u64::from(reth.dma_len);
            if (last && payload.len() as u64 != len) || (!last && len <= payload.len() as u64) {
                return self.invalid(cx, p, fx);
            }
            if let Err(status) = cx.qp.check_rdma_write(cx.core, reth.rkey, reth.va, len) {
                return self.access_error(cx, p, status, fx);
            }
            (reth.rkey, reth.va, 0, len)
        } else {
            let InMsg::Write { rkey, va, done, len } = self.msg else {
                return self.invalid(cx, p, fx);
            };
            (rkey, va, done, len)
        };
        let end = done + payload.len() as u64;
        if (last && end != len) || (!last && end >= len) {
            return self.invalid(cx, p, fx);
        }
        // A receive WQE must be there before a WRITE with immediate writes anything.
        let imm = hdr.imm.filter(|_| last);
        if imm.is_some() && cx.qp.recv_capacity(cx.core, fx).is_none() {
            return self.rnr(cx, p);
        }
        if let Err(status) = cx.qp.rdma_write(cx.core, rkey, va.wrapping_add(done), payload) {
            return self.access_error(cx, p, status, fx);
        }
        if !last {
            self.msg = InMsg::Write { rkey, va, done: end, len };
            self.advance(1);
            if hdr.bth.ack_req {
                self.ack(cx, p);
            }
            return;
        }
        let outcome = match imm {
            None => Rx::Delivered,
            Some(v) => {
                let src = cx.path.dest_qp;
                let solicited = hdr.bth.solicited;
                cx.qp.receive_write_imm(cx.core, src, v.to_be_bytes(), len as u32, solicited, cx.conn, fx)
            }
        };
        if outcome == Rx::Park {
            // No receive WQE after all: the data is in place, and the retried packet writes
            // the same bytes again.
            return self.rnr(cx, p);
        }
        self.msg = InMsg::None;
        self.finish(cx, p, outcome);
    }

    /// A READ request at its PSN: `new` for the expected PSN, else a duplicate executed again
    /// (the MSN and expected PSN stay). Its responses are sent [`READ_BURST`] at a time (the rest
    /// by [`Responder::pump`]); a duplicate replaces the READ being answered, as Linux rxe's
    /// `duplicate_request` does.
    pub(super) fn read(&mut self, cx: &Ctx<'_>, hdr: &Headers, new: bool, fx: &mut Effects) {
        let p = hdr.bth.psn;
        let Some(reth) = hdr.reth else {
            return self.invalid(cx, p, fx);
        };
        if reth.dma_len > limits::MAX_MSG_SZ {
            return self.invalid(cx, p, fx);
        }
        if !new && !self.reads.iter().any(|r| r.covers(p, &reth, cx.path.mtu)) {
            return cx.core.count(|c| &c.roce_rx_dropped_psn);
        }
        if let Err(status) = cx.qp.check_rdma_read(cx.core, reth.rkey, reth.va, reth.dma_len) {
            return self.access_error(cx, p, status, fx);
        }
        let n = packets(u64::from(reth.dma_len), cx.path.mtu);
        if new {
            self.msn = psn::add(self.msn, 1);
            self.advance(n);
            self.remember(p, n, &reth, cx.attrs.max_dest_rd_atomic);
        }
        self.reading = Some(ReadReply { psn: p, npkts: n, next: 0, rkey: reth.rkey, va: reth.va, len: reth.dma_len });
        self.read_responses(cx, READ_BURST, fx);
    }

    /// Sends up to `most` more responses of the READ being answered. A part of it the MR no
    /// longer grants (deregistered meanwhile) ends it with a remote access error.
    pub(super) fn read_responses(&mut self, cx: &Ctx<'_>, most: u32, fx: &mut Effects) {
        let Some(mut r) = self.reading.take() else {
            return;
        };
        let mtu = cx.path.mtu;
        let end = r.next.saturating_add(most).min(r.npkts);
        while r.next < end {
            let k = r.next;
            let off = u64::from(k) * u64::from(mtu);
            let len = u64::from(r.len).saturating_sub(off).min(u64::from(mtu)) as u32;
            let p = psn::add(r.psn, k);
            let chunk = match cx.qp.rdma_read(cx.core, r.rkey, r.va.wrapping_add(off), len) {
                Ok(data) => data,
                Err(status) => return self.access_error(cx, p, status, fx),
            };
            let opcode = match (k == 0, k + 1 == r.npkts) {
                (true, true) => op::RC_RDMA_READ_RESPONSE_ONLY,
                (true, false) => op::RC_RDMA_READ_RESPONSE_FIRST,
                (false, false) => op::RC_RDMA_READ_RESPONSE_MIDDLE,
                (false, true) => op::RC_RDMA_READ_RESPONSE_LAST,
            };
            let aeth = (opcode != op::RC_RDMA_READ_RESPONSE_MIDDLE).then(|| Aeth::ack(self.msn, NO_CREDITS));
            cx.send_response(opcode, p, Headers { aeth, ..Default::default() }, &chunk);
            r.next += 1;
        }
        if r.next < r.npkts {
            self.reading = Some(r);
        }
    }

    /// Keeps READ `reth` at PSN `p` (`n` packets) among the last `keep` executed, and at least
    /// the device's `max_qp_rd_atom`: many applications leave `max_dest_rd_atomic` at 0 while
    /// their requester (rxe's, or ours at `max_rd_atomic` 0) still has a READ outstanding.
    fn remember(&mut self, p: u32, n: u32, reth: &Reth, keep: u8) {
        self.reads.push_back(ReadDone { psn: p, npkts: n, rkey: reth.rkey, va: reth.va, len: u64::from(reth.dma_len) });
        while self.reads.len() > usize::from(keep.max(limits::MAX_QP_RD_ATOM as u8)) {
            self.reads.pop_front();
        }
    }

    /// A request refused by its R_Key: NAK Remote Access Error (or what `status` says) and the
    /// QP goes to ERR (IBTA 9.9.3.1.2 Class C, as Linux rxe and the loopback port).
    pub(super) fn access_error(&mut self, cx: &Ctx<'_>, p: u32, status: u32, fx: &mut Effects) {
        let code =
            if status == wc_status::REM_INV_REQ_ERR { NakCode::InvalidRequest } else { NakCode::RemoteAccessError };
        cx.qp.force_error(cx.core, fx);
        self.refuse(cx, p, code);
    }
}
