//! Completion queues (Linux `pvrdma_cq.c`, mthca `mthca_cq.c`): the CQ ring, polling with
//! validation of everything the device wrote, and the consumer-facing arming verbs.
//!
//! Arm state (design decisions 3 and 9): each CQ has one arm state machine
//! ([`crate::arm::ArmMachine`], held in [`CqState`]) with three clients — the completion channel
//! (armed by [`Cq::req_notify`] and by any CQ doorbell: every one the driver or a consumer rings
//! passes through [`crate::uar::UarTap`], which updates the machine in the same step as the MMIO
//! write), notify requests ([`Cq::notify`]) and the upcall dispatcher ([`Cq::set_upcall`]). Every
//! arm drains the CQ-notification ring first, so an entry written before it never fires it. A
//! CQ-notification entry fires an armed CQ exactly once; entries for an unarmed CQ are counted,
//! never delivered, so at most one event per arm holds whatever the device writes. When the
//! notification ring is found full (entries may have been dropped), `eq.rs`'s recovery pass rings
//! the arm doorbell again for every CQ the driver believes armed and fires those that hold
//! unpolled CQEs, through the same one-shot arm.
//!
//! Teardown ([`Cq::destroy`], or dropping the [`Cq`]) waits until every event a consumer took from
//! the channel for this CQ is acknowledged, completes its notify requests with
//! [`NotifyStatus::Cancelled`], stops its dispatcher, removes its
//! untaken channel events, and takes it out of the handle table only once no interrupt or
//! async-event handler is using it; then DESTROY_CQ and the ring is freed.

pub use crate::arm::{decode_arm, ArmKind, ArmOp};
pub use crate::cq_state::{CqState, DevCqHw};

use crate::channel::CompChannel;
use crate::cq_state::RingProbe;
use crate::device::DeviceInner;
use crate::error::{Error, Result};
use crate::notify::{NotifyKind, NotifyRequest, NotifyStatus};
use crate::ring::DevRing;
use crate::upcall::Dispatcher;
use crate::uctx::UctxInner;
use crate::verbs::NotifyFlags;
use crate::wc::{translate, Wc};
use doorbell::{ArmEncoding, CqArmDoorbell};
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateCq, DestroyCq};
use pvrdma_abi::wqe::Cqe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use zerocopy::FromBytes;

/// Bytes of one CQE.
pub const CQE_SIZE: u64 = 64;

/// A completion queue. Dropping it destroys it ([`Cq::destroy`] with a wait of
/// [`DROP_ACK_WAIT`], then logged); a CQ still used by QPs is destroyed on the device when the
/// last of them is gone.
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
    /// `false` for the view an upcall gets: dropping it destroys nothing.
    pub(crate) owner: bool,
}

/// How long dropping a [`Cq`] waits for its obtained events to be acknowledged before it destroys
/// the CQ anyway (logged). [`Cq::destroy`] lets the caller choose.
pub const DROP_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The CQ object; QPs hold it through an `Arc` so a CQ outlives its QPs.
pub struct CqInner {
    pub(crate) dev: Arc<DeviceInner>,
    _uctx: Option<Arc<UctxInner>>,
    pub(crate) state: Arc<CqState>,
    ring: Mutex<DevRing>,
    broken: AtomicBool,
    kernel_arm: CqArmDoorbell,
    own_arm: CqArmDoorbell,
    pub(crate) dispatcher: Mutex<Option<Dispatcher>>,
}

impl Cq {
    /// Creates a CQ of at least `cqe` entries (rounded up to a power of two) for the kernel
    /// (`uctx` None) or a user context (Linux `pvrdma_create_cq`). The new CQ is disarmed.
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
        let direct_arm = CqArmDoorbell::new(dev.kernel_db_direct.clone(), handle, dev.encoding);
        let hw = DevCqHw::new(Some(probe), Some(direct_arm), Some(Arc::downgrade(&dev.hub)));
        let state = Arc::new(CqState::new(handle, ctx, channel.cloned(), hw));
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
            dispatcher: Mutex::new(None),
        };
        if let Err(e) = dev.hub.register_cq(state) {
            // The CQ is destroyed by CqInner's drop, which must not unregister the live handle.
            std::mem::forget(inner);
            return Err(e);
        }
        tracing::debug!(handle, entries, user = ctx.is_some(), "CQ created");
        Ok(Cq { inner: Arc::new(inner), owner: true })
    }

    /// The device's CQ handle.
    pub fn handle(&self) -> u32 {
        self.inner.state.handle()
    }

    /// Capacity in CQEs (the requested size rounded up to a power of two).
    pub fn cqe(&self) -> u32 {
        self.inner.ring.lock().elems()
    }

    /// Whether this CQ belongs to a user context.
    pub fn is_user(&self) -> bool {
        self.inner.state.ctx().is_some()
    }

    /// Polls up to `wc.len()` completions into `wc` and returns how many (IBTA 11.4.2.1).
    ///
    /// Every CQE is validated ([`crate::wc::translate`]). Errors: [`Error::CqOverrun`] once the
    /// CQEs queued before an overflow are consumed; [`Error::DeviceFatal`] if the device is
    /// fatal or wrote a bad ring index (the CQ then stays unusable, and its notify requests
    /// complete with [`NotifyStatus::Failure`]).
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        self.inner.poll(wc)
    }

    /// Requests a completion event on the CQ's channel (IBTA 11.4.2.5, `ib_req_notify_cq`): arms
    /// the CQ for its next completion (`NEXT_COMPLETION`) or next solicited completion
    /// (`SOLICITED`); one-shot; NEXT after SOLICITED upgrades, SOLICITED after NEXT keeps NEXT.
    /// With `REPORT_MISSED_EVENTS`, returns `true` if CQEs are already queued (Linux's
    /// `IB_CQ_REPORT_MISSED_EVENTS`: the caller must poll again, those raise no event). A user
    /// CQ rings its own context's UAR page.
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

    /// Makes a notify request (winverbs `CQ::Notify`; see [`crate::notify`]): completes with
    /// [`NotifyStatus::Success`] on the CQ's next completion event of `kind` (every outstanding
    /// request of the CQ completes on the same event), with [`NotifyStatus::Overrun`] if the CQ
    /// overflows, [`NotifyStatus::Failure`] on a catastrophic error, [`NotifyStatus::Cancelled`]
    /// when withdrawn or when the CQ is destroyed. [`NotifyKind::ErrorOnly`] does not arm the CQ.
    ///
    /// With `report_missed` the request completes at once (Success) if CQEs are already queued
    /// after it armed — those raise no event (IBTA): poll them. The arm goes through the CQ's
    /// doorbell on the kernel's UAR page, so a user context's CQ is served too.
    ///
    /// Errors: [`Error::Unsupported`] for [`NotifyKind::Solicited`] on QEMU 7.2's encoding;
    /// [`Error::DeviceFatal`] once the device is fatal.
    pub fn notify(&self, kind: NotifyKind, report_missed: bool) -> Result<NotifyRequest> {
        self.inner.live()?;
        if kind == NotifyKind::Solicited && self.inner.dev.encoding == ArmEncoding::Qemu72 {
            return Err(Error::Unsupported("solicited-only arming on this device"));
        }
        // The machine drains the notification ring before it arms (entries written before this
        // arm must not fire it), as for every arm.
        Ok(self.inner.state.machine().request(kind, report_missed))
    }

    /// The CQ's arm doorbell on the kernel's UAR page; exists for user CQs too, so the kernel side
    /// can arm a user CQ (the gap mthca left). Rings through the driver, so its arms count as the
    /// completion channel's, like [`Cq::req_notify`]'s.
    pub fn kernel_arm_doorbell(&self) -> &CqArmDoorbell {
        &self.inner.kernel_arm
    }

    /// Acknowledges `n` completion events taken from the channel for this CQ
    /// (`ibv_ack_cq_events`); more than were taken and not yet acknowledged counts as that many.
    /// Acknowledging on another CQ does not count for this one.
    pub fn ack_events(&self, n: u32) {
        self.inner.state.ack(n);
    }

    /// A handle that acknowledges this CQ's events from another thread — e.g. while
    /// [`Cq::destroy`] waits for them — without borrowing the CQ.
    pub fn acker(&self) -> CqAcker {
        CqAcker(self.inner.state.clone())
    }

    /// Completion events delivered to this CQ's channel so far.
    pub fn events(&self) -> u64 {
        self.inner.state.events()
    }

    /// Events taken from the channel for this CQ and not yet acknowledged.
    pub fn unacked_events(&self) -> u64 {
        self.inner.state.unacked()
    }

    /// The driver's current arm of this CQ (for diagnostics and tests).
    pub fn armed(&self) -> Option<ArmKind> {
        self.inner.state.machine().armed()
    }

    /// Notify requests of this CQ not yet completed.
    pub fn outstanding_notifies(&self) -> usize {
        self.inner.state.machine().outstanding()
    }
}

/// Acknowledges one CQ's completion events ([`Cq::acker`]); cheap to clone.
#[derive(Clone)]
pub struct CqAcker(Arc<CqState>);

impl CqAcker {
    /// As [`Cq::ack_events`].
    pub fn ack_events(&self, n: u32) {
        self.0.ack(n);
    }

    /// The CQ's handle.
    pub fn handle(&self) -> u32 {
        self.0.handle()
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cq({})", self.handle())
    }
}

impl CqInner {
    pub(crate) fn live(&self) -> Result<()> {
        if self.dev.hub.is_fatal() || self.broken.load(Ordering::Acquire) {
            Err(Error::DeviceFatal)
        } else {
            Ok(())
        }
    }

    fn pending(&self, ring: &DevRing) -> Result<u32> {
        ring.pending().inspect_err(|_| {
            tracing::error!(cq = self.state.handle(), "CQ ring index out of range: CQ unusable");
            self.broken.store(true, Ordering::Release);
            let fired = self.state.machine().fail(NotifyStatus::Failure);
            self.state.deliver(fired);
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
        let qps = self.state.qps();
        for (k, slot) in (0..n).zip(wc.iter_mut()) {
            let mut b = [0u8; CQE_SIZE as usize];
            ring.read(k, &mut b)?;
            let cqe = Cqe::read_from_bytes(&b).map_err(|_| Error::DeviceFatal)?;
            *slot = translate(&cqe, |h| qps.contains(&h));
        }
        drop(qps);
        ring.advance(n)?;
        if avail == 0 && self.state.overrun() {
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
            tracing::debug!(cq = self.state.handle(), qp, removed, "flushed CQEs of a destroyed QP");
        }
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let handle = self.state.handle();
        // Out of the table first, then wait for any handler still using the CQ: after this no
        // event path reads the ring that is freed below.
        self.dev.hub.unregister_cq(handle);
        self.state.retire();
        if let Err(e) = self.dev.cmd.post(DestroyCq { cq_handle: handle.into(), ..Default::default() }) {
            tracing::warn!(handle, error = %e, "DESTROY_CQ failed");
        }
    }
}
