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
use crate::device::{Core, Effects};
use crate::errno::{CmdResult, Errno};
use crate::pdir;
use crate::ring::{Producer, Push, RingPages};
use crate::Profile;
use doorbell::encoding::CqArmRequest;
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateCq, CreateCqResp, DestroyCq, NoopResp, ResizeCq, ResizeCqResp};
use pvrdma_abi::event::EqeType;
use pvrdma_abi::wqe::{wc_status, Cqe};
use std::sync::Arc;
use zerocopy::little_endian::U32;
use zerocopy::IntoBytes;

const CQE_SIZE: u32 = core::mem::size_of::<Cqe>() as u32;

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
    pdir_dma: u64,
    /// Page 0 of that directory: the ring-state page.
    state_page: u64,
    st: Mutex<CqState>,
    _charge: Charge,
}

#[derive(Debug)]
struct CqState {
    ring: Producer,
    arm: ArmState,
    error: bool,
    dead: bool,
    /// The host budget held for the ring of the last RESIZE_CQ (the CQ's own charge keeps
    /// paying for the first ring: a resized CQ is charged for both).
    resized: Option<Charge>,
}

/// CREATE_CQ: `cqe` entries (a power of two, 1 ..= `MAX_CQE`) over exactly
/// `nchunks = 1 + ceil(cqe * 64 / 4096)` pages (the ring-state page, then the entries), the count
/// Linux's `pvrdma_create_cq` sends. QEMU 7.2 refuses `nchunks` 0 or above 128; an exact count
/// is stricter (the largest CQ, 4096 CQEs, takes 65).
///
/// Errors: `EINVAL` for an unknown context, a bad size, a chunk count other than that one, a
/// misaligned page, or a
/// ring-state page whose `prod_tail` is out of range, or pages outside guest memory (as QEMU
/// 7.2); `ENOMEM` when `max_cq` exist or the host budget is spent.
pub fn create(core: &Core, req: &CreateCq) -> CmdResult<CreateCqResp> {
    let (ctx, cqe, nchunks) = (req.ctx_handle.get(), req.cqe.get(), req.nchunks.get() as usize);
    if ctx != 0 && core.objects.lock().ucs.get(ctx).is_none() {
        return Err(Errno::EINVAL);
    }
    if !cqe.is_power_of_two() || cqe > crate::dsr::limits::MAX_CQE {
        return Err(Errno::EINVAL);
    }
    let needed = 1 + pdir::pages_for(u64::from(cqe) * u64::from(CQE_SIZE)).unwrap_or(0) as usize;
    if nchunks != needed {
        return Err(Errno::EINVAL);
    }
    let mut pages = pdir::resolve(&core.mem, req.pdir_dma.get(), 0, needed)?;
    let state_page = pages.remove(0);
    let entries = RingPages::new(&core.mem, pages, CQE_SIZE, cqe).ok_or(Errno::EINVAL)?;
    let charge = core.budget.charge_object::<Cq>(entries.host_bytes())?;
    let ring = Producer::new(&core.mem, entries, state_page).ok_or(Errno::EINVAL)?;
    let st = CqState { ring, arm: ArmState::Disarmed, error: false, dead: false, resized: None };
    let mut objs = core.objects.lock();
    let handle = objs.cqs.alloc().ok_or(Errno::ENOMEM)?;
    let cq = Cq {
        handle,
        uid: core.next_uid(),
        ctx,
        pdir_dma: req.pdir_dma.get(),
        state_page,
        st: Mutex::new(st),
        _charge: charge,
    };
    objs.cqs.insert(handle, Arc::new(cq));
    Ok(CreateCqResp { cq_handle: U32::new(handle), cqe: U32::new(cqe), ..Default::default() })
}

/// RESIZE_CQ (see the module docs): `cqe` entries, a power of two of at most `MAX_CQE` and at
/// least the CQEs queued, over the pages the CQ's page directory lists now (page 0 must still be
/// the ring-state page). Answers the new size.
///
/// Errors: `EINVAL` for an unknown handle, a bad size, fewer entries than CQEs queued, a changed
/// ring-state page, a page outside guest memory, or a CQ whose `cons_head` is out of range;
/// `ENOMEM` when the host budget cannot pay for the new ring's page list (the old ring stays).
pub fn resize(core: &Core, req: &ResizeCq) -> CmdResult<ResizeCqResp> {
    let (h, cqe) = (req.cq_handle.get(), req.cqe.get());
    let cq = core.objects.lock().cqs.get(h).cloned().ok_or(Errno::EINVAL)?;
    if !cqe.is_power_of_two() || cqe > crate::dsr::limits::MAX_CQE {
        return Err(Errno::EINVAL);
    }
    let needed = 1 + pdir::pages_for(u64::from(cqe) * u64::from(CQE_SIZE)).unwrap_or(0) as usize;
    let mut st = cq.st.lock();
    if st.dead || st.ring.queued(&core.mem).map_err(|_| Errno::EINVAL)? > cqe {
        return Err(Errno::EINVAL);
    }
    let mut pages = pdir::resolve(&core.mem, cq.pdir_dma, 0, needed)?;
    if pages.remove(0) != cq.state_page {
        return Err(Errno::EINVAL);
    }
    let entries = RingPages::new(&core.mem, pages, CQE_SIZE, cqe).ok_or(Errno::EINVAL)?;
    let charge = core.budget.charge(entries.host_bytes())?;
    st.ring.move_to(&core.mem, entries).map_err(|_| Errno::EINVAL)?;
    st.resized = Some(charge);
    Ok(ResizeCqResp { cqe: U32::new(cqe), ..Default::default() })
}

/// DESTROY_CQ. Errors: `EINVAL` for an unknown handle; `EBUSY` while a QP uses it.
pub fn destroy(core: &Core, req: &DestroyCq) -> CmdResult<NoopResp> {
    let h = req.cq_handle.get();
    let cq = {
        let mut objs = core.objects.lock();
        let uid = objs.cqs.get(h).ok_or(Errno::EINVAL)?.uid;
        if objs.qps.values().any(|q| q.send_cq.uid == uid || q.recv_cq.uid == uid) {
            return Err(Errno::EBUSY);
        }
        objs.cqs.remove(h).ok_or(Errno::EINVAL)?
    };
    cq.kill();
    Ok(NoopResp::default())
}

impl Cq {
    /// Publishes `cqe`, then runs the arm check. `solicited` says the CQE is a responder's receive
    /// completion of a message sent with the solicited flag. A CQ that overflows (or whose
    /// `cons_head` is out of range) is reported in `fx` so its QPs go to the error state.
    pub fn publish(&self, core: &Core, cqe: &Cqe, solicited: bool, fx: &mut Effects) {
        self.publish_with(core, cqe, solicited, false, fx);
    }

    /// As [`Cq::publish`] (not solicited), but a CQE the CQ has no room for is dropped instead
    /// of overflowing it: a completion no verb owes (an SRQ WQE a QP held when it was reset or
    /// destroyed, which the driver removes with that QP's other CQEs) never errs the CQ.
    pub(crate) fn publish_if_room(&self, core: &Core, cqe: &Cqe, fx: &mut Effects) {
        self.publish_with(core, cqe, false, true, fx);
    }

    fn publish_with(&self, core: &Core, cqe: &Cqe, solicited: bool, if_room: bool, fx: &mut Effects) {
        let profile = core.cfg.profile;
        let mut st = self.st.lock();
        if st.dead {
            return;
        }
        if if_room && st.ring.queued(&core.mem).map_or(true, |q| q >= st.ring.elems()) {
            return;
        }
        if st.error {
            core.count(|c| &c.cqes_dropped_overflow);
            return;
        }
        match (st.ring.push(&core.mem, cqe.as_bytes()), profile) {
            (Push::Written, _) => core.count(|c| &c.cqes_written),
            (Push::Full | Push::Fault, Profile::Qemu72) => {
                core.count(|c| &c.cqes_dropped_overflow);
                return;
            }
            (Push::Full, Profile::Ibta) => {
                st.error = true;
                core.count(|c| &c.cq_overflows);
                core.count(|c| &c.cqes_dropped_overflow);
                core.post_async_event(EqeType::CqErr, self.handle);
                fx.errored_cqs.push(self.uid);
                return;
            }
            (Push::Fault, Profile::Ibta) => {
                // The driver's cons_head is garbage: the CQ is unusable, but this is not an
                // overflow, so no CQ_ERR (design decision 7).
                st.error = true;
                core.count(|c| &c.cq_ring_faults);
                core.count(|c| &c.cqes_dropped_overflow);
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
                    core.post_cq_notification(self.handle);
                    fx.raise_cq = true;
                }
            }
            Profile::Qemu72 => {
                let written = core.post_cq_notification(self.handle);
                if written && st.arm != ArmState::Disarmed {
                    st.arm = ArmState::Disarmed;
                    fx.raise_cq = true;
                }
            }
        }
    }

    /// The CQ doorbell's arm request as the profile's device decoded it (already checked for
    /// ownership). `POLL` only counts.
    pub fn doorbell(&self, core: &Core, arm: Option<CqArmRequest>, poll: bool) {
        if poll {
            core.count(|c| &c.cq_polls);
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
