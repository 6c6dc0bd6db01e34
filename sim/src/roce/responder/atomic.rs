//! The responder's atomics (IBTA 9.4.5, 9.7.5.1.x): a CmpSwap or FetchAdd at the expected PSN is
//! executed once, as one atomic step on the memory ([`crate::qp::Qp::atomic`]), and answered
//! with an ATOMIC Acknowledge carrying the original value. The responder keeps the results of
//! its last atomics (`max_dest_rd_atomic` of them, at least the device's `max_qp_rd_atom`), so a
//! duplicate request (its response was lost and the requester sent it again) is answered from
//! the saved result and never executed a second time (IBTA C9-xx, as Linux rxe's responder
//! resources do). A duplicate that matches no saved result (another PSN, R_Key, address or
//! operand) is dropped and counted: a peer cannot make the responder execute or reveal anything
//! by replaying PSNs.

use super::{Ctx, InMsg, Responder, NO_CREDITS};
use crate::ctx::Effects;
use crate::limits;
use crate::mem::Atomic64;
use roce_wire::{opcode as op, psn, Aeth, AtomicEth, Headers};

/// An atomic the responder executed: its PSN and request, and the original value it returned.
#[derive(Debug, Clone, Copy)]
pub(super) struct AtomicDone {
    psn: u32,
    opcode: u8,
    eth: AtomicEth,
    orig: u64,
}

/// The operation an atomic opcode and its AtomicETH ask for.
fn operation(opcode: u8, eth: &AtomicEth) -> Atomic64 {
    if opcode == op::RC_COMPARE_SWAP {
        Atomic64::CmpSwap { compare: eth.compare, swap: eth.swap_add }
    } else {
        Atomic64::FetchAdd(eth.swap_add)
    }
}

impl Responder {
    /// A CmpSwap or FetchAdd at PSN `p`: `new` at the expected PSN (executed), else a duplicate
    /// (answered from the saved result, or dropped).
    pub(super) fn atomic(&mut self, cx: &Ctx<'_>, hdr: &Headers, new: bool, fx: &mut Effects) {
        let p = hdr.bth.psn;
        let Some(eth) = hdr.atomic_eth else {
            return self.invalid(cx, p, fx);
        };
        let opcode = hdr.bth.opcode;
        if !new {
            let saved = self.atomics.iter().find(|a| a.psn == p);
            match saved.filter(|a| a.opcode == opcode && a.eth == eth) {
                Some(a) => {
                    let orig = a.orig;
                    cx.core.count(|c| &c.roce_atomic_replays);
                    self.atomic_ack(cx, p, orig);
                }
                None => cx.core.count(|c| &c.roce_rx_dropped_psn),
            }
            return;
        }
        if !matches!(self.msg, InMsg::None) {
            return self.invalid(cx, p, fx);
        }
        let orig = match cx.qp.atomic(cx.core, eth.rkey, eth.va, operation(opcode, &eth)) {
            Ok(orig) => orig,
            Err(status) => return self.access_error(cx, p, status, fx),
        };
        self.msn = psn::add(self.msn, 1);
        self.advance(1);
        self.atomics.push_back(AtomicDone { psn: p, opcode, eth, orig });
        let keep = usize::from(cx.attrs.max_dest_rd_atomic.max(limits::MAX_QP_RD_ATOM as u8));
        while self.atomics.len() > keep {
            self.atomics.pop_front();
        }
        self.atomic_ack(cx, p, orig);
    }

    /// Sends an ATOMIC Acknowledge for PSN `p` carrying `orig`.
    fn atomic_ack(&self, cx: &Ctx<'_>, p: u32, orig: u64) {
        cx.core.count(|c| &c.roce_acks_sent);
        let hdr = Headers { aeth: Some(Aeth::ack(self.msn, NO_CREDITS)), atomic_ack: Some(orig), ..Default::default() };
        cx.send_response(op::RC_ATOMIC_ACKNOWLEDGE, p, hdr, &[]);
    }
}
