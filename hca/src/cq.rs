//! Completion queues (Linux `pvrdma_cq.c`, mthca `mthca_cq.c`): the CQ ring, polling with
//! validation of everything the device wrote, and the CQ's arm doorbell on the kernel's UAR page
//! — for kernel and user CQs alike, so the driver can arm any CQ (the arm mthca gave only its
//! kernel CQs). The arm state is the verbs core's: it rings [`CqOps::arm`] when its clients need
//! the CQ armed, and hears of fired arms through the handler registered with the event rings.

use crate::device::{doorbell_handle, DeviceInner};
use crate::dma::Abandon;
use crate::eq::CqFlags;
use crate::health::ObjectHealth;
use crate::ring::DevRing;
use crate::ring::RecordWords;
use crate::uctx::UctxInner;
use crate::wc::{translate, Owed, Queue, SharedWq, Verdict};
use doorbell::record::{DeviceProduced, RecordError};
use doorbell::{CqArmDoorbell, CqHandle, Owner};
use ib_core::provider::{CqError, CqEventHandler, CqOps};
use ib_core::{ArmKind, Error, Result, Wc, WcOpcode};
use parking_lot::{Mutex, RwLock};
use pvrdma_abi::cmd::{CreateCq, DestroyCq};
use pvrdma_abi::wqe::Cqe;
use rustc_hash::FxHashMap;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

mod resize;
pub(crate) use resize::probe as probe_resize;

/// Bytes of one CQE.
pub const CQE_SIZE: u64 = 64;

/// A CQ of the device. Cheap to clone (QPs hold their CQs).
#[derive(Clone)]
pub struct Cq(pub(crate) Arc<CqInner>);

/// CQEs copied out of the ring per access.
const POLL_RUN: usize = 16;

/// An empty streak of polls rings the POLL doorbell on its first poll and every this many after
/// (a power of two).
const POLL_KICK_EVERY: u32 = 64;
const _: () = assert!(POLL_KICK_EVERY.is_power_of_two());
/// On a device that shares the host's CPUs ([`crate::Platform::shares_cpus`]), every this many
/// empty polls yield the CPU: a consumer busy-polling (`ibv_rc_pingpong` without `-e`,
/// perftest) would otherwise keep the device's own threads off a CPU until the scheduler's
/// tick, about a millisecond per message on two CPUs.
const YIELD_EVERY: u32 = 16;
const _: () = assert!(YIELD_EVERY.is_power_of_two());

pub(crate) struct CqInner {
    dev: Arc<DeviceInner>,
    /// The owning user context (its page carries the POLL doorbell); `None` for the kernel's.
    uctx: Option<Arc<UctxInner>>,
    handle: u32,
    /// The typed handle its doorbells take.
    db_handle: CqHandle,
    ring: Mutex<DevRing>,
    /// Empty polls since the last one that found CQEs (for the POLL doorbell's rate).
    empty_polls: AtomicU32,
    /// The ring-state record and its words (read without the ring's lock by `has_unpolled`).
    record: (DeviceProduced, RecordWords),
    /// Entries (RESIZE_CQ changes it under the ring's lock).
    elems: AtomicU32,
    /// Odd while a RESIZE_CQ may be rewriting the ring state; bumped before and after (a
    /// sequence lock for [`CqOps::has_unpolled`], which reads the words without the ring's lock).
    resize_seq: AtomicU32,
    flags: Arc<CqFlags>,
    /// Whether the device broke the ring ([`CqInner::mark_broken`]).
    health: ObjectHealth,
    /// QPs completing into the CQ, with the queues of each that complete here (a CQE naming
    /// another QP, or a queue of the QP that completes elsewhere, is not trusted). Looked up once
    /// per CQE: Fx hashing, not SipHash (the map holds only the driver's own QPNs; a key the
    /// device wrote only looks one up).
    qps: RwLock<FxHashMap<u32, QueuesOnCq>>,
    arm: CqArmDoorbell,
    destroyed: AtomicBool,
}

impl Cq {
    /// Creates a CQ of at least `cqe` entries (rounded up to a power of two) for the kernel or a
    /// user context (Linux `pvrdma_create_cq`), reporting to `events`. The new CQ is disarmed.
    ///
    /// Errors: [`Error::InvalidArgument`] for 0 or more than the device's `max_cqe` after
    /// rounding; [`Error::BadResponse`] if the device answers with a handle beyond 24 bits or a
    /// `cqe` other than the ring's size (the CQ is destroyed); [`Error::DeviceFatal`] if it
    /// answers with a live handle; command and DMA failures.
    pub(crate) fn create(
        dev: &Arc<DeviceInner>,
        uctx: Option<Arc<UctxInner>>,
        cqe: u32,
        events: Arc<dyn CqEventHandler>,
    ) -> Result<Cq> {
        dev.live()?;
        let entries = cqe.checked_next_power_of_two().unwrap_or(0);
        if cqe == 0 || entries == 0 || entries > dev.attr.max_cqe {
            return Err(Error::InvalidArgument("cqe out of range"));
        }
        let owner = uctx.as_ref().map_or(Owner::Kernel, |u| u.owner());
        let mut ring = DevRing::new(&dev.platform, entries, CQE_SIZE, owner)?;
        // Creation and registration in one step against destroys (see `EventRings::objects`).
        let _objects = dev.eq.objects.lock();
        let resp = dev.cmd.post(CreateCq {
            pdir_dma: ring.buf().dir().dma().into(),
            ctx_handle: uctx.as_ref().map_or(0, |u| u.handle).into(),
            cqe: entries.into(),
            nchunks: (ring.buf().num_pages() as u32).into(),
            ..Default::default()
        })?;
        let db_handle = doorbell_handle("CQ handle beyond 24 bits", resp.cq_handle.get(), owner, CqHandle::new)
            .inspect_err(|_| {
                // A DESTROY the device refuses leaves it the ring (as at drop): abandoned.
                if !destroy_cq(dev, resp.cq_handle.get()) {
                    ring.abandon();
                }
            })?;
        let handle = db_handle.raw();
        let flags = Arc::new(CqFlags::default());
        if let Err(e) = dev.eq.register_cq(handle, flags.clone(), events) {
            // The device may still write into this ring (it named a live handle): leak it.
            ring.abandon();
            return Err(e);
        }
        if resp.cqe.get() != entries {
            refuse_size(dev, handle, entries, resp.cqe.get(), ring);
            return Err(Error::BadResponse("CREATE_CQ: cqe differs from the request"));
        }
        let arm = CqArmDoorbell::new(&dev.uar, db_handle, dev.encoding());
        let inner = CqInner {
            dev: dev.clone(),
            uctx,
            handle,
            db_handle,
            record: ring.record(),
            elems: AtomicU32::new(ring.elems()),
            resize_seq: AtomicU32::new(0),
            ring: Mutex::new(ring),
            empty_polls: AtomicU32::new(0),
            flags,
            health: ObjectHealth::default(),
            qps: RwLock::new(FxHashMap::default()),
            arm,
            destroyed: AtomicBool::new(false),
        };
        tracing::debug!(handle, entries, user = inner.uctx.is_some(), "CQ created");
        Ok(Cq(Arc::new(inner)))
    }

    /// The provider's CQ behind the core's.
    pub(crate) fn of(cq: &dyn CqOps) -> Result<&Cq> {
        cq.as_any().downcast_ref().ok_or(Error::InvalidArgument("a CQ of another provider"))
    }

    /// The typed handle the CQ's doorbells take (its owner is the CQ's context).
    pub fn doorbell_handle(&self) -> CqHandle {
        self.0.db_handle
    }

    /// Where the CQ's ring-state record lives (page 0 of its page list) and whose it is.
    pub fn record_page(&self) -> doorbell::record::RecordPage {
        self.0.record.1.page()
    }

    /// The owning user context's handle, `None` for the kernel's.
    pub(crate) fn ctx(&self) -> Option<u32> {
        self.0.uctx.as_ref().map(|u| u.handle)
    }
}

/// DESTROY_CQ; whether the device took it.
fn destroy_cq(dev: &DeviceInner, handle: u32) -> bool {
    let cmd = DestroyCq { cq_handle: handle.into(), ..Default::default() };
    dev.cmd.post(cmd).inspect_err(|e| tracing::warn!(handle, error = %e, "DESTROY_CQ failed")).is_ok()
}

/// Undoes a CQ whose CREATE_CQ answer gave another size than asked: the ring holds exactly
/// `asked` CQEs, so a device believing in more would write past it, and one believing in fewer
/// would overflow early. The handle is fresh (registered just now), so DESTROY_CQ names only
/// this CQ; it leaves the table, and the ring is freed only if the device took the DESTROY.
fn refuse_size(dev: &DeviceInner, handle: u32, asked: u32, got: u32, mut ring: DevRing) {
    tracing::error!(handle, asked, got, "CREATE_CQ answered another size: CQ refused");
    if !destroy_cq(dev, handle) {
        ring.abandon();
    }
    dev.eq.unregister_cq(handle);
}

impl CqInner {
    fn pending(&self, ring: &DevRing) -> Result<u32> {
        ring.pending().inspect_err(|_| self.mark_broken())
    }

    /// The device wrote a ring index out of range (or the ring is unreachable): the CQ is
    /// unusable from now on, for every thread at once; the core hears of it once, as
    /// [`CqError::Failure`] (its CQ_ERR), off this thread (which may hold the ring's lock).
    pub(crate) fn mark_broken(&self) {
        let report = self.dev.eq.cq_handler(self.handle).map(|h| {
            move || {
                h.error(CqError::Failure);
            }
        });
        self.health.mark(&self.dev.health, "CQ", self.handle, report);
    }

    fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        self.health.check(&self.dev.health)?;
        let out = self.poll_ring(wc);
        if matches!(out, Ok(0))
            && self.dev.shares_cpus
            && self.empty_polls.load(Ordering::Relaxed) & (YIELD_EVERY - 1) == 0
        {
            std::thread::yield_now();
        }
        out
    }

    fn poll_ring(&self, wc: &mut [Wc]) -> Result<usize> {
        let mut ring = self.ring.lock();
        let mut avail = self.pending(&ring)?;
        if avail == 0 && self.empty_polls.fetch_add(1, Ordering::Relaxed) & (POLL_KICK_EVERY - 1) == 0 {
            // As Linux's `pvrdma_poll_one`, an empty ring is kicked with the POLL doorbell (QEMU
            // polls its backend CQ on it) and looked at again — but only on the first empty
            // poll after data and every POLL_KICK_EVERY-th after that: a consumer spinning on
            // an empty CQ would otherwise trap into the device on every spin.
            let db = self.uctx.as_ref().map_or(&self.dev.kernel_db, |u| &u.db);
            // Revoked only once the context is gone; nothing is left to kick then.
            let _ = db.cq_poll(&self.db_handle);
            avail = self.pending(&ring)?;
        }
        if avail > 0 && self.empty_polls.load(Ordering::Relaxed) != 0 {
            self.empty_polls.store(0, Ordering::Relaxed);
        }
        let n = avail.min(wc.len().try_into().unwrap_or(u32::MAX));
        let qps = self.qps.read();
        let owed = OnCq(&qps);
        if n == 1 {
            let mut cqe = Cqe::new_zeroed();
            ring.read(0, cqe.as_mut_bytes())?;
            wc[0] = translate(&cqe, &owed);
        } else {
            self.read_runs(&ring, n, wc, &owed)?;
        }
        drop(qps);
        ring.advance(n)?;
        if avail == 0 && self.flags.overrun.load(Ordering::Acquire) {
            return Err(Error::CqOverrun);
        }
        Ok(n as usize)
    }

    /// Translates the `n` CQEs after the consumer index into `wc`, copying them out of the ring
    /// [`POLL_RUN`] at a time.
    fn read_runs(&self, ring: &DevRing, n: u32, wc: &mut [Wc], owed: &impl Owed) -> Result<()> {
        let mut cqes = [Cqe::new_zeroed(); POLL_RUN];
        let mut k = 0;
        while k < n {
            let want = ((n - k) as usize).min(POLL_RUN);
            let got = ring.read_run(k, cqes[..want].as_mut_bytes())?;
            if got == 0 {
                return Err(Error::DeviceFatal);
            }
            let slots = wc.iter_mut().skip(k as usize);
            for (cqe, slot) in cqes.iter().take(got as usize).zip(slots) {
                *slot = translate(cqe, owed);
            }
            k += got;
        }
        Ok(())
    }

    /// Removes the queued CQEs of QP `qp` (destroyed or reset), keeping the others in order (as
    /// Linux's `_pvrdma_flush_cqe`): the kept entries move towards the producer end and the
    /// consumer index advances past the removed ones; the device only writes beyond the producer.
    /// Each removed CQE retires the WQE it completes, as a poll would: an SRQ's WQE stays owed
    /// otherwise (the SRQ outlives the QP), and a later WQE with its `wr_id` would be matched
    /// to it.
    fn flush_qp(&self, qp: u32) {
        let mut ring = self.ring.lock();
        let Ok(n) = ring.pending() else { return };
        let mut kept = Vec::new();
        let mut removed_cqes = Vec::new();
        for k in 0..n {
            let mut b = [0u8; CQE_SIZE as usize];
            if ring.read(k, &mut b).is_err() {
                return;
            }
            match Cqe::read_from_bytes(&b) {
                Ok(c) if c.qp.get() == u64::from(qp) => removed_cqes.push(c),
                _ => kept.push(b),
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
            tracing::debug!(cq = self.handle, qp, removed, "flushed CQEs of a destroyed QP");
            let qps = self.qps.read();
            for c in &removed_cqes {
                translate(c, &OnCq(&qps));
            }
        }
    }

    fn destroy(&self) {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return;
        }
        // What the device reported for the CQ up to its DESTROY reaches it (and is dropped); the
        // handle leaves the table before the device can give it to a new CQ.
        let (dev, h) = (&self.dev, self.handle);
        let mut taken = false;
        dev.eq.destroy_object(|| taken = destroy_cq(dev, h), || dev.eq.unregister_cq(h));
        if !taken {
            // The CQ stays on the device, which may still write CQEs and the ring state: the
            // ring is abandoned, not freed (as a QP's and an SRQ's).
            self.ring.lock().abandon();
        }
    }
}

/// The queues of one QP that complete into a CQ (both when it is the QP's send and recv CQ).
#[derive(Default)]
pub(crate) struct QueuesOnCq {
    send: Option<SharedWq>,
    recv: Option<SharedWq>,
}

/// A CQ's QPs as [`translate`] asks them: a CQE is believed only for a WQE owed a completion
/// on a queue that completes into this CQ.
struct OnCq<'a>(&'a FxHashMap<u32, QueuesOnCq>);

impl Owed for OnCq<'_> {
    fn on_cq(&self, qp: u32) -> bool {
        self.0.contains_key(&qp)
    }

    fn retire(&self, qp: u32, queue: Queue, wr_id: u64, success: Option<WcOpcode>) -> Verdict {
        let Some(q) = self.0.get(&qp) else { return Verdict::NotOnCq };
        let wqs = match queue {
            Queue::Send => [q.send.as_ref(), None],
            Queue::Recv => [q.recv.as_ref(), None],
            Queue::Either => [q.send.as_ref(), q.recv.as_ref()],
        };
        if wqs.iter().all(Option::is_none) {
            return Verdict::WrongQueue;
        }
        match wqs.into_iter().flatten().find_map(|wq| wq.complete(wr_id, success)) {
            Some((len, true)) => Verdict::Posted(len),
            Some((_, false)) => Verdict::WrongKind,
            None => Verdict::NotOwed,
        }
    }
}

impl Cq {
    /// Records that QP `qp` completes the work of `send` and/or `recv` into this CQ (called
    /// once per queue; a CQ that is both the QP's send and recv CQ holds both).
    pub(crate) fn attach_qp(&self, qp: u32, send: Option<SharedWq>, recv: Option<SharedWq>) {
        let mut qps = self.0.qps.write();
        let e = qps.entry(qp).or_default();
        e.send = send.or(e.send.take());
        e.recv = recv.or(e.recv.take());
    }

    /// Removes the CQEs of QP `qp` still queued (the QP was reset).
    pub(crate) fn flush_qp(&self, qp: u32) {
        self.0.flush_qp(qp);
    }

    /// Forgets a destroyed QP and removes its CQEs still queued.
    pub(crate) fn detach_qp(&self, qp: u32) {
        self.0.flush_qp(qp);
        self.0.qps.write().remove(&qp);
    }
}

impl CqOps for Cq {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn handle(&self) -> u32 {
        self.0.handle
    }

    fn cqe(&self) -> u32 {
        self.0.elems.load(Ordering::Acquire)
    }

    fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        self.0.poll(wc)
    }

    /// SOLICITED where the device can arm for it; on QEMU 7.2 NEXT, which fires no later.
    fn arm(&self, kind: ArmKind) {
        match kind {
            ArmKind::Next => {
                self.0.arm.arm_next();
            }
            ArmKind::Solicited => {
                if self.0.arm.arm_solicited().is_err() {
                    self.0.arm.arm_next();
                }
            }
        }
    }

    fn can_arm_solicited(&self) -> bool {
        self.0.arm.can_arm_solicited()
    }

    /// Reads the ring state (the device's `prod_tail`, the driver's `cons_head`). An index out of
    /// range counts as "yes" and marks the CQ broken (every later verb on it fails; the poll the
    /// "yes" brings reports it). Unreachable ring memory
    /// counts as "no". A read that a RESIZE_CQ may have torn (the device rewrites both words and
    /// the size changes) counts as "yes": a spurious "yes" costs the consumer one empty poll, a
    /// torn "no" would lose a wake-up.
    fn has_unpolled(&self) -> bool {
        let (inner, words) = (&self.0, &self.0.record.1);
        let before = inner.resize_seq.load(Ordering::Acquire);
        let pending = DeviceProduced::new(inner.elems.load(Ordering::Acquire)).has_pending(words);
        let torn = before % 2 == 1 || inner.resize_seq.load(Ordering::Acquire) != before;
        match pending {
            Ok(queued) => queued || torn,
            Err(RecordError::BadIndex { .. }) if !torn => {
                // Not a read a resize tore: the device wrote an index outside the ring.
                inner.mark_broken();
                true
            }
            Err(RecordError::BadIndex { .. }) => true,
            Err(_) => torn,
        }
    }

    /// `DeviceFatal` once the device is fatal or the CQ's ring is broken (whichever thread found
    /// it), `CqOverrun` once the device reported the CQ overflowed.
    fn usable(&self) -> Result<()> {
        let inner = &self.0;
        inner.health.check(&inner.dev.health)?;
        if inner.flags.overrun.load(Ordering::Acquire) {
            return Err(Error::CqOverrun);
        }
        Ok(())
    }

    /// Drains the CQ-notification ring and runs `change` under its lock.
    fn fenced(&self, change: &mut dyn FnMut()) {
        self.0.dev.eq.fenced(change);
    }

    fn destroy(&self) {
        self.0.destroy();
    }

    fn resize(&self, cqe: u32) -> Result<u32> {
        Cq::resize(self, cqe)
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        self.destroy();
    }
}
