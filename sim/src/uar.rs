//! BAR2 (UAR) doorbells: ownership and dispatch. Values are taken apart by the doorbell crate's
//! one decoder (`doorbell::encoding`), read as the profile's device reads the arm bits.
//!
//! BAR2 is 4 KiB pages; page index = offset / 4096. Within a page, offset 0 is the QP doorbell
//! (`SEND` bit 30, `RECV` bit 31), 4 the CQ doorbell (`ARM` bit 30, `ARM_SOL` bit 29, `POLL` bit
//! 31), 8 the SRQ doorbell; the handle is in the low 24 bits. QEMU looks only at `offset & 0xfff`
//! and rings any handle from any page; the model enforces ownership (design decision 5):
//! page 0 is the kernel's and may ring any handle; a page CREATE_UC gave a context rings only
//! that context's QPs, CQs and SRQs; anything else (an unowned page, a foreign or unknown handle,
//! an unknown offset) is refused and counted in `SimStats::refused_doorbells`.

use crate::ctx::Effects;
use crate::device::{Core, DeviceState};
use crate::Profile;
use doorbell::encoding::{decode, split_bar_offset, ArmEncoding, Decoded};

/// How a device of `profile` reads the CQ doorbell's arm bits.
fn arm_encoding(profile: Profile) -> ArmEncoding {
    match profile {
        Profile::Ibta => ArmEncoding::Ibta,
        Profile::Qemu72 => ArmEncoding::Qemu72,
    }
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
        self.count(|c| &c.doorbells);
        let accepted = self.state() != DeviceState::Broken && self.ring_doorbell(offset, value);
        if !accepted {
            self.count(|c| &c.refused_doorbells);
        }
    }

    fn ring_doorbell(&self, offset: u64, value: u32) -> bool {
        let Some((page, offset)) = split_bar_offset(offset) else {
            return false;
        };
        let owner = self.page_owner(page);
        match decode(offset, value, arm_encoding(self.cfg.profile)) {
            Decoded::Qp { handle, send, recv } => {
                let Some(qp) = self.qp(handle).filter(|q| owner.allows(q.ctx)) else {
                    return false;
                };
                let mut fx = Effects::default();
                if send {
                    qp.send_doorbell(self, &mut fx);
                }
                if recv {
                    qp.recv_doorbell(self, &mut fx);
                }
                crate::port::settle_and_deliver(self, fx);
            }
            Decoded::Cq { handle, arm, poll } => {
                let cq = self.objects.lock().cqs.get(handle).cloned();
                let Some(cq) = cq.filter(|c| owner.allows(c.ctx)) else {
                    return false;
                };
                cq.doorbell(self, arm, poll);
            }
            Decoded::Srq { handle, recv } => {
                let Some(srq) = self.srq(handle).filter(|s| owner.allows(s.ctx)) else {
                    return false;
                };
                if recv {
                    let mut fx = Effects::default();
                    srq.doorbell(&mut fx);
                    crate::port::settle_and_deliver(self, fx);
                }
            }
            Decoded::Unknown => return false,
        }
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
    fn owners() {
        assert!(Owner::Kernel.allows(3));
        assert!(!Owner::Context(2).allows(3));
        assert!(!Owner::Nobody.allows(0));
    }
}
