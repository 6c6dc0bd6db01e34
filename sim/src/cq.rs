//! Completion queues: CREATE_CQ / DESTROY_CQ, publishing a CQE, and the arm doorbell.
//!
//! A CQ's pages: page 0 is the ring state (the device produces into `rx`: `prod_tail` at byte 8,
//! the driver's `cons_head` at byte 12), CQEs of 64 bytes from page 1.
//!
//! Publishing a CQE and testing-and-clearing the arm happen under the CQ's one lock, which the arm
//! doorbell also takes, so an arm never slips between a CQE and its check (design decision 2).
//!
//! # Profiles
//! - [`Profile::Ibta`] (default): arm states Disarmed / Next / Solicited. `ARM` arms for the next
//!   completion; `ARM_SOL` for the next solicited one unless already armed for next. An arm fires
//!   on the first later CQE that satisfies it (Next: any; Solicited: a receive CQE of a message
//!   sent with the solicited flag, or any error CQE, flushes included — never the sender's own
//!   CQE), disarms, writes the CQ handle to the CQ-notification ring (a full ring drops the entry
//!   and counts it, but the interrupt is still raised) and raises vector 2. A full CQ never gets
//!   overwritten: it overflows into its error state, posts CQ_ERR (vector 1), drops every later
//!   CQE, and its QPs go to the error state.
//! - [`Profile::Qemu72`]: `ARM|ARM_SOL` arms one-shot for any completion, `ARM` alone clears the
//!   arm, `ARM_SOL` alone is ignored. A CQ-notification entry is written for every CQE, armed or
//!   not, and vector 2 is raised only if armed and the entry was written. A full CQ drops the new
//!   CQE silently.

use crate::budget::Charge;
use crate::ctx::{Ctx, Effects};
use crate::ring::{Producer, Push};
use crate::Profile;
use doorbell::encoding::CqArmRequest;
use parking_lot::Mutex;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::wqe::{wc_status, Cqe};
use zerocopy::IntoBytes;

pub(crate) const CQE_SIZE: u32 = core::mem::size_of::<Cqe>() as u32;

/// What a CQ's arm is waiting for (IBTA profile; the QEMU profile has only armed / not armed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ArmState {
    /// No event will be raised.
    #[default]
    Disarmed,
    /// The next CQE raises an event.
    Next,
    /// The next solicited receive CQE or error CQE raises an event.
    Solicited,
}

/// A CQ's state as a test sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqStatus {
    /// The arm (QEMU profile: `Next` when armed).
    pub arm: ArmState,
    /// Whether the CQ is in its error state (overflow or a bad `cons_head`).
    pub error: bool,
    /// Entries.
    pub entries: u32,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    /// Handle (1 ..).
    pub handle: u32,
    /// Unique over the device's life (handles are reused).
    pub uid: u64,
    /// Owning context handle, 0 for the kernel.
    pub ctx: u32,
    /// The page directory it was created with (RESIZE_CQ re-reads it).
    pub(crate) pdir_dma: u64,
    /// Page 0 of that directory: the ring-state page.
    pub(crate) state_page: u64,
    pub(crate) st: Mutex<CqState>,
    pub(crate) _charge: Charge,
}

#[derive(Debug)]
pub(crate) struct CqState {
    pub(crate) ring: Producer,
    pub(crate) arm: ArmState,
    pub(crate) error: bool,
    pub(crate) dead: bool,
    /// The host budget held for the ring of the last RESIZE_CQ (the CQ's own charge keeps
    /// paying for the first ring: a resized CQ is charged for both).
    pub(crate) resized: Option<Charge>,
}

impl Cq {
    /// Publishes `cqe`, then runs the arm check. `solicited` says the CQE is a responder's receive
    /// completion of a message sent with the solicited flag. A CQ that overflows (or whose
    /// `cons_head` is out of range) is reported in `fx` so its QPs go to the error state.
    pub fn publish(&self, ctx: &Ctx, cqe: &Cqe, solicited: bool, fx: &mut Effects) {
        self.publish_with(ctx, cqe, solicited, false, fx);
    }

    /// As [`Cq::publish`] (not solicited), but a CQE the CQ has no room for is dropped instead
    /// of overflowing it: a completion no verb owes (an SRQ WQE a QP held when it was reset or
    /// destroyed, which the driver removes with that QP's other CQEs) never errs the CQ.
    pub(crate) fn publish_if_room(&self, ctx: &Ctx, cqe: &Cqe, fx: &mut Effects) {
        self.publish_with(ctx, cqe, false, true, fx);
    }

    pub(crate) fn publish_with(&self, ctx: &Ctx, cqe: &Cqe, solicited: bool, if_room: bool, fx: &mut Effects) {
        let profile = ctx.cfg.profile;
        let mut st = self.st.lock();
        if st.dead {
            return;
        }
        if if_room && st.ring.queued(&ctx.mem).map_or(true, |q| q >= st.ring.elems()) {
            return;
        }
        if st.error {
            ctx.count(|c| &c.cqes_dropped_overflow);
            return;
        }
        match (st.ring.push(&ctx.mem, cqe.as_bytes()), profile) {
            (Push::Written, _) => ctx.count(|c| &c.cqes_written),
            (Push::Full | Push::Fault, Profile::Qemu72) => {
                ctx.count(|c| &c.cqes_dropped_overflow);
                return;
            }
            (Push::Full, Profile::Ibta) => {
                st.error = true;
                ctx.count(|c| &c.cq_overflows);
                ctx.count(|c| &c.cqes_dropped_overflow);
                ctx.post_async_event(EqeType::CqErr, self.handle);
                fx.errored_cqs.push(self.uid);
                return;
            }
            (Push::Fault, Profile::Ibta) => {
                // The driver's cons_head is garbage: the CQ is unusable, but this is not an
                // overflow, so no CQ_ERR (design decision 7).
                st.error = true;
                ctx.count(|c| &c.cq_ring_faults);
                ctx.count(|c| &c.cqes_dropped_overflow);
                fx.errored_cqs.push(self.uid);
                return;
            }
        }
        match profile {
            Profile::Ibta => {
                let error = cqe.status.get() != wc_status::SUCCESS;
                let fire = match st.arm {
                    ArmState::Disarmed => false,
                    ArmState::Next => true,
                    ArmState::Solicited => solicited || error,
                };
                if fire {
                    st.arm = ArmState::Disarmed;
                    ctx.post_cq_notification(self.handle);
                    fx.raise_cq = true;
                }
            }
            Profile::Qemu72 => {
                let written = ctx.post_cq_notification(self.handle);
                if written && st.arm != ArmState::Disarmed {
                    st.arm = ArmState::Disarmed;
                    fx.raise_cq = true;
                }
            }
        }
    }

    /// The CQ doorbell's arm request as the profile's device decoded it (already checked for
    /// ownership). `POLL` only counts.
    pub fn doorbell(&self, ctx: &Ctx, arm: Option<CqArmRequest>, poll: bool) {
        if poll {
            ctx.count(|c| &c.cq_polls);
        }
        let mut st = self.st.lock();
        match arm {
            Some(CqArmRequest::Next) => st.arm = ArmState::Next,
            // The union of the arms since the last event: solicited never weakens next.
            Some(CqArmRequest::Solicited) if st.arm != ArmState::Next => st.arm = ArmState::Solicited,
            Some(CqArmRequest::Solicited) | None => {}
            Some(CqArmRequest::Disarm) => st.arm = ArmState::Disarmed,
        }
    }

    /// Marks the CQ destroyed: later publishes are dropped.
    pub fn kill(&self) {
        self.st.lock().dead = true;
    }

    /// The CQ's arm and error state.
    pub fn status(&self) -> CqStatus {
        let st = self.st.lock();
        CqStatus { arm: st.arm, error: st.error, entries: st.ring.elems() }
    }
}
