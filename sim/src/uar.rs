//! BAR2 (UAR) doorbells: decode, ownership, dispatch.
//!
//! BAR2 is 4 KiB pages; page index = offset / 4096. Within a page, offset 0 is the QP doorbell
//! (`SEND` bit 30, `RECV` bit 31), 4 the CQ doorbell (`ARM` bit 30, `ARM_SOL` bit 29, `POLL` bit
//! 31), 8 the SRQ doorbell; the handle is in the low 24 bits. QEMU looks only at `offset & 0xfff`
//! and rings any handle from any page; the model enforces ownership (design decision 5):
//! page 0 is the kernel's and may ring any handle; a page CREATE_UC gave a context rings only
//! that context's QPs and CQs; anything else (an unowned page, a foreign or unknown handle, the
//! SRQ doorbell, an unknown offset) is refused and counted in `SimStats::refused_doorbells`.

use crate::device::{Core, DeviceState, Effects};
use pvrdma_abi::uar::*;

/// A decoded doorbell write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Doorbell {
    /// UAR page index within BAR2.
    pub page: u32,
    /// Which doorbell and its bits.
    pub kind: Kind,
    /// Object handle (low 24 bits of the value).
    pub handle: u32,
}

/// The doorbell within the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// QP doorbell.
    Qp { send: bool, recv: bool },
    /// CQ doorbell.
    Cq { arm: bool, arm_sol: bool, poll: bool },
    /// SRQ doorbell (no SRQs are modelled).
    Srq,
    /// Any other offset.
    Unknown,
}

/// Decodes a 32-bit write of `value` at byte `offset` of BAR2; `None` past the BAR.
pub fn decode(offset: u64, value: u32) -> Option<Doorbell> {
    if offset >= UAR_BAR_SIZE {
        return None;
    }
    let page = (offset / UAR_PAGE_SIZE) as u32;
    let kind = match (offset % UAR_PAGE_SIZE) as u32 {
        UAR_QP_OFFSET => {
            Kind::Qp { send: value & UAR_QP_SEND != 0, recv: value & UAR_QP_RECV != 0 }
        }
        UAR_CQ_OFFSET => Kind::Cq {
            arm: value & UAR_CQ_ARM != 0,
            arm_sol: value & UAR_CQ_ARM_SOL != 0,
            poll: value & UAR_CQ_POLL != 0,
        },
        UAR_SRQ_OFFSET => Kind::Srq,
        _ => Kind::Unknown,
    };
    Some(Doorbell { page, kind, handle: value & UAR_HANDLE_MASK })
}

/// Who may ring doorbells on a UAR page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Page 0: any handle.
    Kernel,
    /// A user context's page: that context's handles only.
    Context(u32),
    /// Nobody: every doorbell is refused.
    Nobody,
}

impl Owner {
    /// Whether this page may ring an object owned by context `ctx` (0 = kernel).
    pub fn allows(self, ctx: u32) -> bool {
        match self {
            Owner::Kernel => true,
            Owner::Context(c) => c == ctx,
            Owner::Nobody => false,
        }
    }
}

impl Core {
    /// Handles a BAR2 write; runs to completion before returning.
    pub(crate) fn doorbell(&self, offset: u64, value: u32) {
        self.stat(|s| s.doorbells += 1);
        let accepted = self.state() != DeviceState::Broken && self.ring_doorbell(offset, value);
        if !accepted {
            self.stat(|s| s.refused_doorbells += 1);
        }
    }

    fn ring_doorbell(&self, offset: u64, value: u32) -> bool {
        let Some(db) = decode(offset, value) else {
            return false;
        };
        let owner = self.page_owner(db.page);
        let mut fx = Effects::default();
        match db.kind {
            Kind::Qp { send, recv } => {
                let Some(qp) = self.qp(db.handle).filter(|q| owner.allows(q.ctx)) else {
                    return false;
                };
                if send {
                    qp.send_doorbell(self, &mut fx);
                }
                if recv {
                    qp.recv_doorbell(self, &mut fx);
                }
            }
            Kind::Cq { arm, arm_sol, poll } => {
                let cq = self.objects.lock().cqs.get(db.handle).cloned();
                let Some(cq) = cq.filter(|c| owner.allows(c.ctx)) else {
                    return false;
                };
                cq.doorbell(self, arm, arm_sol, poll);
            }
            Kind::Srq | Kind::Unknown => return false,
        }
        self.settle(fx);
        true
    }

    fn page_owner(&self, page: u32) -> Owner {
        if page == 0 {
            return Owner::Kernel;
        }
        match self.objects.lock().uar_pages.get(&page) {
            Some(ctx) => Owner::Context(*ctx),
            None => Owner::Nobody,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_pages_offsets_and_bits() {
        let d = decode(4096 + 4, UAR_CQ_ARM | 7).unwrap();
        assert_eq!(d.page, 1);
        assert_eq!(d.handle, 7);
        assert_eq!(d.kind, Kind::Cq { arm: true, arm_sol: false, poll: false });
        let d = decode(0, UAR_QP_SEND | UAR_QP_RECV | 0x00ff_ffff).unwrap();
        assert_eq!(d.kind, Kind::Qp { send: true, recv: true });
        assert_eq!(decode(12, 0).unwrap().kind, Kind::Unknown);
        assert_eq!(decode(UAR_BAR_SIZE, 0), None);
        assert!(Owner::Kernel.allows(3));
        assert!(!Owner::Context(2).allows(3));
        assert!(!Owner::Nobody.allows(0));
    }
}
