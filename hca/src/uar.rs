//! The driver's path to BAR2: [`UarTap`] implements [`doorbell::UarMmio`] over the platform for
//! one UAR page's owner, and applies every CQ arm it carries to the driver's arm state in the same
//! step as the write, under the CQ's arm lock (design decisions 3 and 9). Every doorbell the
//! driver or a consumer rings through a [`doorbell::Doorbells`] of this driver — `Cq::req_notify`,
//! `Cq::kernel_arm_doorbell`, `UserContext::doorbells` — goes through a tap.

use crate::arm::decode_arm;
use crate::eq::EventHub;
use crate::platform::Platform;
use doorbell::{ArmEncoding, UarMmio};
use pvrdma_abi::uar::{UAR_CQ_OFFSET, UAR_HANDLE_MASK, UAR_PAGE_SIZE};
use std::sync::Arc;

/// BAR2 writes for the pages of one owner (the kernel, or one user context).
pub struct UarTap {
    platform: Arc<dyn Platform>,
    hub: Arc<EventHub>,
    encoding: ArmEncoding,
    owner: Option<u32>,
}

impl UarTap {
    /// A tap for the kernel's page (`owner` None: it may arm any CQ) or for the page of the user
    /// context `owner` (it arms only that context's CQs, as the device enforces).
    pub fn new(
        platform: Arc<dyn Platform>,
        hub: Arc<EventHub>,
        encoding: ArmEncoding,
        owner: Option<u32>,
    ) -> Self {
        Self { platform, hub, encoding, owner }
    }
}

impl UarMmio for UarTap {
    fn uar_write32(&self, offset: u64, value: u32) {
        let write = || self.platform.uar_write(offset, value);
        if offset % UAR_PAGE_SIZE == u64::from(UAR_CQ_OFFSET) {
            if let Some(op) = decode_arm(value, self.encoding) {
                // The driver's arm state and the write change in one step (a QEMU 7.2 disarm
                // re-arms for clients still waiting inside that step too).
                return self.hub.cq_doorbell(value & UAR_HANDLE_MASK, op, self.owner, write);
            }
        }
        write();
    }
}

/// BAR2 writes straight to the platform, for the arms the CQ's arm state machine makes itself
/// (it has already updated its own state; going through a [`UarTap`] would count them as the
/// completion channel's).
pub struct UarDirect(pub Arc<dyn Platform>);

impl UarMmio for UarDirect {
    fn uar_write32(&self, offset: u64, value: u32) {
        self.0.uar_write(offset, value);
    }
}
