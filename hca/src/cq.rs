//! Completion queues (Linux `pvrdma_cq.c`, mthca `mthca_cq.c`): the CQ ring, polling with
//! validation of everything the device wrote, and the driver-owned arm state.
//!
//! Arm state (design decisions 3 and 9): each CQ has an arm state the driver owns. Every CQ
//! doorbell the driver writes passes through [`crate::uar::UarTap`], which updates this state
//! *before* the MMIO write: an arm for the next completion dominates an arm for a solicited one
//! (the union of what the clients need); QEMU 7.2's "ARM alone" disarms. A CQ-notification entry
//! fires an armed CQ exactly once; entries for an unarmed CQ are counted, never delivered, so at
//! most one event per arm holds whatever the device writes. When the notification ring is found
//! full (entries may have been dropped), `eq.rs`'s recovery pass fires every armed CQ that holds
//! unpolled CQEs, through the same one-shot arm.

use crate::channel::CompChannel;
use crate::device::DeviceInner;
use crate::error::{Error, Result};
use crate::platform::{Iova, Platform};
use crate::ring::DevRing;
use crate::uctx::UctxInner;
use crate::verbs::NotifyFlags;
use crate::wc::{translate, Wc};
use doorbell::{ArmEncoding, CqArmDoorbell};
use parking_lot::{Mutex, RwLock};
use pvrdma_abi::cmd::{CreateCq, DestroyCq};
use pvrdma_abi::ring::{ring_count, RX_CONS_HEAD, RX_PROD_TAIL};
use pvrdma_abi::uar::{UAR_CQ_ARM, UAR_CQ_ARM_SOL};
use pvrdma_abi::wqe::Cqe;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use zerocopy::FromBytes;

/// Bytes of one CQE.
pub const CQE_SIZE: u64 = 64;

/// What an arm waits for. `Next` dominates `Solicited`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ArmKind {
    /// The next solicited (or error) completion.
    Solicited = 1,
    /// The next completion of any kind.
    Next = 2,
}

/// A change of arm state decoded from a CQ doorbell value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArmOp {
    /// Arm (joined with any arm already set).
    Arm(ArmKind),
    /// Clear the arm (QEMU 7.2: `ARM` without `ARM_SOL`).
    Disarm,
}

/// Decodes the arm bits of a CQ doorbell value as the device with `encoding` reads them;
/// `None` for a doorbell that does not touch the arm (POLL only).
pub fn decode_arm(value: u32, encoding: ArmEncoding) -> Option<ArmOp> {
    let (arm, sol) = (value & UAR_CQ_ARM != 0, value & UAR_CQ_ARM_SOL != 0);
    match (encoding, arm, sol) {
        (ArmEncoding::Ibta, true, _) => Some(ArmOp::Arm(ArmKind::Next)),
        (ArmEncoding::Ibta, false, true) => Some(ArmOp::Arm(ArmKind::Solicited)),
        (ArmEncoding::Qemu72, true, true) => Some(ArmOp::Arm(ArmKind::Next)),
        (ArmEncoding::Qemu72, true, false) => Some(ArmOp::Disarm),
        _ => None,
    }
}

/// The driver's one-shot arm of one CQ: 0 unarmed, else an [`ArmKind`].
#[derive(Default, Debug)]
pub struct ArmState(AtomicU8);

impl ArmState {
    /// Joins `kind` into the arm (NEXT dominates SOLICITED).
    pub fn arm(&self, kind: ArmKind) {
        self.0.fetch_max(kind as u8, Ordering::AcqRel);
    }

    /// Clears the arm without firing.
    pub fn disarm(&self) {
        self.0.store(0, Ordering::Release);
    }

    /// Spends the arm: `true` (exactly once per arm) if it was set.
    pub fn fire(&self) -> bool {
        self.0.swap(0, Ordering::AcqRel) != 0
    }

    /// The current arm.
    pub fn get(&self) -> Option<ArmKind> {
        match self.0.load(Ordering::Acquire) {
            1 => Some(ArmKind::Solicited),
            2 => Some(ArmKind::Next),
            _ => None,
        }
    }
}

/// Where a CQ's ring state is, so the event paths can tell whether it holds unpolled CQEs without
/// taking the CQ's ring lock ([`crate::eq::EventHub`]'s recovery after a full notification ring).
struct RingProbe {
    platform: Arc<dyn Platform>,
    /// Device address of the ring-state page (the driver's `cons_head` is kept current there).
    state: Iova,
    elems: u32,
}

/// What the event paths know about a CQ (shared with [`crate::eq::EventHub`]'s handle table).
pub struct CqState {
    handle: u32,
    ctx: Option<u32>,
    probe: Option<RingProbe>,
    arm: ArmState,
    channel: Option<CompChannel>,
    overrun: AtomicBool,
    qps: RwLock<HashSet<u32>>,
    events: AtomicU64,
    unacked: AtomicU64,
}

impl CqState {
    fn new(
        handle: u32,
        ctx: Option<u32>,
        channel: Option<CompChannel>,
        probe: Option<RingProbe>,
    ) -> Self {
        Self {
            handle,
            ctx,
            probe,
            arm: ArmState::default(),
            channel,
            overrun: AtomicBool::new(false),
            qps: RwLock::new(HashSet::new()),
            events: AtomicU64::new(0),
            unacked: AtomicU64::new(0),
        }
    }

    /// The device's CQ handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The owning user context's handle, `None` for a kernel CQ.
    pub fn ctx(&self) -> Option<u32> {
        self.ctx
    }

    /// Applies a decoded doorbell to the arm.
    pub fn apply(&self, op: ArmOp) {
        match op {
            ArmOp::Arm(kind) => self.arm.arm(kind),
            ArmOp::Disarm => self.arm.disarm(),
        }
    }

    /// Spends the arm; `true` if the CQ was armed.
    pub fn fire(&self) -> bool {
        self.arm.fire()
    }

    /// Whether the driver has armed the CQ (and the arm is not yet spent).
    pub fn armed(&self) -> bool {
        self.arm.get().is_some()
    }

    /// Whether the CQ's ring holds CQEs the consumer has not polled, read from its ring state
    /// (the device's `prod_tail`, the driver's `cons_head`). An index out of range counts as
    /// "yes": the consumer's next poll reports the fault. Unreachable ring memory counts as "no".
    pub fn has_unpolled(&self) -> bool {
        let Some(p) = &self.probe else { return false };
        let load = |off: u64| p.platform.dma_load_u32(p.state + off);
        match (load(RX_PROD_TAIL), load(RX_CONS_HEAD)) {
            (Ok(prod), Ok(cons)) => !matches!(ring_count(prod, cons, p.elems), Some(0)),
            _ => false,
        }
    }

    /// Delivers one completion event to the CQ's channel (if it has one) and counts it.
    pub fn deliver(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
        self.unacked.fetch_add(1, Ordering::Relaxed);
        if let Some(ch) = &self.channel {
            ch.push(self.handle);
        }
    }

    /// Marks the CQ overrun (CQ_ERR).
    pub fn set_overrun(&self) {
        self.overrun.store(true, Ordering::Release);
    }

    /// Records that QP `qp` completes into this CQ.
    pub fn attach_qp(&self, qp: u32) {
        self.qps.write().insert(qp);
    }

    /// Forgets QP `qp`.
    pub fn detach_qp(&self, qp: u32) {
        self.qps.write().remove(&qp);
    }
}

/// A completion queue. Dropping it sends DESTROY_CQ and frees its ring.
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

/// The CQ object; QPs hold it through an `Arc` so a CQ outlives its QPs.
pub struct CqInner {
    pub(crate) dev: Arc<DeviceInner>,
    _uctx: Option<Arc<UctxInner>>,
    pub(crate) state: Arc<CqState>,
    ring: Mutex<DevRing>,
    broken: AtomicBool,
    kernel_arm: CqArmDoorbell,
    own_arm: CqArmDoorbell,
}

impl Cq {
    /// Creates a CQ of at least `cqe` entries (rounded up to a power of two) for the kernel
    /// (`uctx` None) or a user context (Linux `pvrdma_create_cq`).
    ///
    /// Errors: [`Error::InvalidArgument`] for 0 or more than the device's `max_cqe` after
    /// rounding; command and DMA failures.
    pub(crate) fn create(
        dev: &Arc<DeviceInner>,
        uctx: Option<&Arc<UctxInner>>,
        cqe: u32,
        channel: Option<&CompChannel>,
    ) -> Result<Cq> {
        let entries = cqe.checked_next_power_of_two().unwrap_or(0);
        if cqe == 0 || entries == 0 || entries > dev.attr.max_cqe {
            return Err(Error::InvalidArgument("cqe out of range"));
        }
        let ring = DevRing::new(&dev.platform, entries, CQE_SIZE)?;
        let ctx = uctx.map(|u| u.handle);
        let resp = dev.cmd.post(CreateCq {
            pdir_dma: ring.buf().dir().dma().into(),
            ctx_handle: ctx.unwrap_or(0).into(),
            cqe: entries.into(),
            nchunks: (ring.buf().num_pages() as u32).into(),
            ..Default::default()
        })?;
        let handle = resp.cq_handle.get();
        if resp.cqe.get() != entries {
            tracing::warn!(handle, asked = entries, got = resp.cqe.get(), "CQ size differs");
        }
        let probe = RingProbe {
            platform: dev.platform.clone(),
            state: ring.buf().data().iova(),
            elems: ring.elems(),
        };
        let state = Arc::new(CqState::new(handle, ctx, channel.cloned(), Some(probe)));
        let kernel_arm = CqArmDoorbell::new(dev.kernel_db.clone(), handle, dev.encoding);
        let own_arm = match uctx {
            Some(u) => CqArmDoorbell::new(u.db.clone(), handle, dev.encoding),
            None => kernel_arm.clone(),
        };
        let inner = CqInner {
            dev: dev.clone(),
            _uctx: uctx.cloned(),
            state: state.clone(),
            ring: Mutex::new(ring),
            broken: AtomicBool::new(false),
            kernel_arm,
            own_arm,
        };
        if let Err(e) = dev.hub.register_cq(state) {
            // The CQ is destroyed by CqInner's drop, which must not unregister the live handle.
            std::mem::forget(inner);
            return Err(e);
        }
        tracing::debug!(handle, entries, user = ctx.is_some(), "CQ created");
        Ok(Cq { inner: Arc::new(inner) })
    }

    /// The device's CQ handle.
    pub fn handle(&self) -> u32 {
        self.inner.state.handle
    }

    /// Capacity in CQEs (the requested size rounded up to a power of two).
    pub fn cqe(&self) -> u32 {
        self.inner.ring.lock().elems()
    }

    /// Whether this CQ belongs to a user context.
    pub fn is_user(&self) -> bool {
        self.inner.state.ctx.is_some()
    }

    /// Polls up to `wc.len()` completions into `wc` and returns how many (IBTA 11.4.2.1).
    ///
    /// Every CQE is validated ([`crate::wc::translate`]). Errors: [`Error::CqOverrun`] once the
    /// CQEs queued before an overflow are consumed; [`Error::DeviceFatal`] if the device is
    /// fatal or wrote a bad ring index (the CQ then stays unusable).
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        self.inner.poll(wc)
    }

    /// Requests a completion event (IBTA 11.4.2.5, `ib_req_notify_cq`): arms the CQ for its next
    /// completion (`NEXT_COMPLETION`) or next solicited completion (`SOLICITED`); one-shot.
    /// With `REPORT_MISSED_EVENTS`, returns `true` if CQEs are already queued (the caller must
    /// poll again: those raise no event). A user CQ rings its own context's UAR page.
    ///
    /// Errors: [`Error::InvalidArgument`] without NEXT_COMPLETION or SOLICITED;
    /// [`Error::Unsupported`] for SOLICITED on QEMU 7.2's encoding; [`Error::DeviceFatal`].
    pub fn req_notify(&self, flags: NotifyFlags) -> Result<bool> {
        self.inner.live()?;
        let arm = &self.inner.own_arm;
        if flags.contains(NotifyFlags::NEXT_COMPLETION) {
            arm.arm_next();
        } else if flags.contains(NotifyFlags::SOLICITED) {
            if !arm.arm_solicited() {
                return Err(Error::Unsupported("solicited-only arming on this device"));
            }
        } else {
            return Err(Error::InvalidArgument("notify flags need NEXT_COMPLETION or SOLICITED"));
        }
        if flags.contains(NotifyFlags::REPORT_MISSED_EVENTS) {
            return self.inner.has_data();
        }
        Ok(false)
    }

    /// The CQ's arm doorbell on the kernel's UAR page; exists for user CQs too, so the kernel side
    /// can arm a user CQ (the gap mthca left). Rings through the driver, so its arms count as the
    /// driver's arm state like [`Cq::req_notify`]'s.
    pub fn kernel_arm_doorbell(&self) -> &CqArmDoorbell {
        &self.inner.kernel_arm
    }

    /// Acknowledges `n` completion events taken from the channel (`ibv_ack_cq_events`).
    pub fn ack_events(&self, n: u32) {
        let _ = self.inner.state.unacked.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
            Some(u.saturating_sub(u64::from(n)))
        });
    }

    /// Completion events delivered for this CQ so far.
    pub fn events(&self) -> u64 {
        self.inner.state.events.load(Ordering::Relaxed)
    }

    /// Delivered events not yet acknowledged.
    pub fn unacked_events(&self) -> u64 {
        self.inner.state.unacked.load(Ordering::Relaxed)
    }

    /// The driver's current arm of this CQ (for diagnostics and tests).
    pub fn armed(&self) -> Option<ArmKind> {
        self.inner.state.arm.get()
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cq({})", self.handle())
    }
}

impl CqInner {
    fn live(&self) -> Result<()> {
        if self.dev.hub.is_fatal() || self.broken.load(Ordering::Acquire) {
            Err(Error::DeviceFatal)
        } else {
            Ok(())
        }
    }

    fn pending(&self, ring: &DevRing) -> Result<u32> {
        ring.pending().inspect_err(|_| {
            tracing::error!(cq = self.state.handle, "CQ ring index out of range: CQ unusable");
            self.broken.store(true, Ordering::Release);
        })
    }

    fn has_data(&self) -> Result<bool> {
        Ok(self.pending(&self.ring.lock())? > 0)
    }

    fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        self.live()?;
        let mut ring = self.ring.lock();
        let mut avail = self.pending(&ring)?;
        if avail == 0 && self.dev.encoding == ArmEncoding::Qemu72 {
            // QEMU polls its backend CQ on this doorbell; the model needs no kick.
            self.own_arm.poll();
            avail = self.pending(&ring)?;
        }
        let n = avail.min(wc.len().try_into().unwrap_or(u32::MAX));
        let qps = self.state.qps.read();
        for (k, slot) in (0..n).zip(wc.iter_mut()) {
            let mut b = [0u8; CQE_SIZE as usize];
            ring.read(k, &mut b)?;
            let cqe = Cqe::read_from_bytes(&b).map_err(|_| Error::DeviceFatal)?;
            *slot = translate(&cqe, |h| qps.contains(&h));
        }
        drop(qps);
        ring.advance(n)?;
        if avail == 0 && self.state.overrun.load(Ordering::Acquire) {
            return Err(Error::CqOverrun);
        }
        Ok(n as usize)
    }

    /// Removes the queued CQEs of QP `qp` (destroyed), keeping the others in order
    /// (as Linux's `_pvrdma_flush_cqe`): the kept entries move towards the producer end and the
    /// consumer index advances past the removed ones; the device only writes beyond the producer.
    pub(crate) fn flush_qp(&self, qp: u32) {
        let mut ring = self.ring.lock();
        let Ok(n) = ring.pending() else { return };
        let mut kept = Vec::new();
        for k in 0..n {
            let mut b = [0u8; CQE_SIZE as usize];
            if ring.read(k, &mut b).is_err() {
                return;
            }
            let mine = Cqe::read_from_bytes(&b).map(|c| c.qp.get() == u64::from(qp)).unwrap_or(false);
            if !mine {
                kept.push(b);
            }
        }
        let removed = n - kept.len() as u32;
        if removed == 0 {
            return;
        }
        for (j, b) in kept.iter().enumerate() {
            if ring.write(removed + j as u32, b).is_err() {
                return;
            }
        }
        if ring.advance(removed).is_ok() {
            tracing::debug!(cq = self.state.handle, qp, removed, "flushed CQEs of a destroyed QP");
        }
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let handle = self.state.handle;
        self.dev.hub.unregister_cq(handle);
        let unacked = self.state.unacked.load(Ordering::Relaxed);
        if unacked > 0 {
            tracing::warn!(handle, unacked, "CQ destroyed with unacknowledged events");
        }
        if let Err(e) = self.dev.cmd.post(DestroyCq { cq_handle: handle.into(), ..Default::default() }) {
            tracing::warn!(handle, error = %e, "DESTROY_CQ failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_dominates_solicited_and_fires_once() {
        let a = ArmState::default();
        assert!(!a.fire());
        a.arm(ArmKind::Solicited);
        assert_eq!(a.get(), Some(ArmKind::Solicited));
        a.arm(ArmKind::Next);
        a.arm(ArmKind::Solicited);
        assert_eq!(a.get(), Some(ArmKind::Next));
        assert!(a.fire());
        assert!(!a.fire());
        a.arm(ArmKind::Next);
        a.disarm();
        assert!(!a.fire());
    }

    #[test]
    fn doorbell_arm_bits_decode_per_encoding() {
        use ArmEncoding::*;
        let poll = pvrdma_abi::uar::UAR_CQ_POLL;
        assert_eq!(decode_arm(UAR_CQ_ARM | 5, Ibta), Some(ArmOp::Arm(ArmKind::Next)));
        assert_eq!(decode_arm(UAR_CQ_ARM_SOL | 5, Ibta), Some(ArmOp::Arm(ArmKind::Solicited)));
        assert_eq!(decode_arm(poll | 5, Ibta), None);
        assert_eq!(decode_arm(UAR_CQ_ARM | UAR_CQ_ARM_SOL, Qemu72), Some(ArmOp::Arm(ArmKind::Next)));
        assert_eq!(decode_arm(UAR_CQ_ARM, Qemu72), Some(ArmOp::Disarm));
        assert_eq!(decode_arm(UAR_CQ_ARM_SOL, Qemu72), None);
    }

    #[test]
    fn notifications_fire_one_event_per_arm() {
        let ch = CompChannel::new();
        let s = CqState::new(3, None, Some(ch.clone()), None);
        for _ in 0..5 {
            if s.fire() {
                s.deliver();
            }
        }
        assert_eq!(ch.try_get_cq_event(), None);
        s.apply(ArmOp::Arm(ArmKind::Next));
        s.apply(ArmOp::Arm(ArmKind::Solicited));
        for _ in 0..5 {
            if s.fire() {
                s.deliver();
            }
        }
        assert_eq!((ch.try_get_cq_event(), ch.try_get_cq_event()), (Some(3), None));
        assert_eq!(s.events.load(Ordering::Relaxed), 1);
    }
}
