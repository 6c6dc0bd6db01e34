//! The responder's RDMA WRITE and READ (IBTA 9.7.5.1.3, 9.7.5.1.4).

use super::{Ctx, Responder};
use crate::device::Effects;
use roce_wire::{Headers, NakCode};

impl Responder {
    /// A WRITE packet (or an opcode a responder does not take).
    pub(super) fn on_write(&mut self, cx: &Ctx<'_>, hdr: &Headers, _opcode: u8, _payload: &[u8], _fx: &mut Effects) {
        self.refuse(cx, hdr.bth.psn, NakCode::InvalidRequest);
    }

    /// A READ request at its PSN: `new` for the expected PSN, else a duplicate executed again.
    pub(super) fn read(&mut self, cx: &Ctx<'_>, hdr: &Headers, _new: bool) {
        self.refuse(cx, hdr.bth.psn, NakCode::InvalidRequest);
    }
}
