//! Shared receive queues (Linux `pvrdma_srq.c`, rdma-core's vmw_pvrdma `pvrdma_post_srq_recv`):
//! CREATE_SRQ / MODIFY_SRQ / QUERY_SRQ / DESTROY_SRQ, the SRQ's ring and its doorbell, and the
//! record of the WQEs owed a completion that the CQs of its QPs retire from.
//!
//! Memory: page 0 is the ring state (the SRQ uses the `rx` half: the driver writes `prod_tail`,
//! the device `cons_head`), the WQEs (`pvrdma_rq_wqe_hdr` plus SGEs, a power-of-two stride) start
//! at page 1. The device's consumer index is untrusted and validated before a slot is reused.
//!
//! Unlike a QP's RQ, the QPs of an SRQ complete its WQEs in no global order (each QP's CQEs are
//! ordered, the QPs' are not), so a CQE retires only the oldest owed WQE with its `wr_id`, never
//! older ones.
//!
//! QEMU 7.2 runs QUERY_SRQ for MODIFY_SRQ and the other way round (its command table lists them
//! swapped and is indexed by opcode): the answer carries the other command's ack, which the
//! command channel takes as a transport fault. On a device that arms CQs as QEMU 7.2 does (found
//! at probe, the only such device known), [`Srq`] answers modify and query with
//! [`Error::Unsupported`] rather than sending them.

use crate::device::{doorbell_handle, DeviceInner};
use crate::dma::Abandon;
use crate::health::ObjectHealth;
use crate::pd::Pd;
use crate::pdir::PagedBuf;
use crate::ring::{record_error, RecordWords};
use crate::wc::{OwedQueue, SharedWq};
use doorbell::record::DriverProduced;
use doorbell::{ArmEncoding, Doorbells, Owner, SrqHandle};
use ib_core::provider::{SrqEventHandler, SrqOps};
use ib_core::{Error, RecvWr, Result, SrqAttr, SrqAttrMask, WcOpcode};
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateSrq, DestroySrq, ModifySrq, QuerySrq};
use pvrdma_abi::pdir::PAGE_DIR_MAX_PAGES;
use pvrdma_abi::ring::{idx_inc, idx_slot};
use pvrdma_abi::verbs::{srq_type, SrqAttr as DevSrqAttr};
use pvrdma_abi::wqe::{rq_wqe_stride, RqWqeHdr};
use pvrdma_abi::PAGE_SIZE;
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;
use zerocopy::IntoBytes;

/// A posted WQE owed a completion: (`wr_id`, bytes its SGEs cover), `None` once retired.
type OwedWqe = Option<(u64, u32)>;

/// The ring's geometry, the driver's producer index and the WQEs owed a completion.
pub(crate) struct SrqQueue {
    cnt: u32,
    stride: u32,
    max_sge: u32,
    prod: u32,
    record: DriverProduced,
    /// Oldest first, retired entries dropped from the front (and compacted away when many).
    /// At most `cap` live entries: past it the oldest is forgotten (see [`SrqQueue::next_slot`]).
    owed: VecDeque<OwedWqe>,
    /// The most WQEs owed at once: the ring's depth plus the most CQEs one CQ holds (consumed
    /// WQEs whose CQEs wait to be polled).
    cap: usize,
}

impl SrqQueue {
    fn new(cnt: u32, max_sge: u32, max_cqe: u32) -> Result<Self> {
        let stride = rq_wqe_stride(max_sge).ok_or(Error::InvalidArgument("SRQ too large"))?;
        let owed = VecDeque::with_capacity(2 * cnt as usize);
        let cap = cnt as usize + max_cqe.max(cnt) as usize;
        Ok(Self { cnt, stride, max_sge, prod: 0, record: DriverProduced::recv_queue(cnt), owed, cap })
    }

    fn pages(&self) -> usize {
        (u64::from(self.cnt) * u64::from(self.stride)).div_ceil(PAGE_SIZE as u64) as usize
    }

    fn drop_retired(&mut self) {
        while matches!(self.owed.front(), Some(None)) {
            self.owed.pop_front();
        }
    }

    /// Byte offset of the slot the next WQE goes to. Errors: [`Error::QueueFull`] when the ring
    /// is full (only then, as rdma-core's `pvrdma_post_srq_recv`); [`Error::DeviceFatal`] for a
    /// consumer index out of range.
    ///
    /// A WQE a QP took and that never completes (a device that drops the WQE a QP held for a
    /// message in progress when the QP is reset or destroyed; the model completes it with
    /// `WR_FLUSH_ERR`, which the reset's CQE flush retires) stays owed: once `cap` are owed, the
    /// oldest is forgotten (a CQE naming it later reads as not owed), so such WQEs neither fill
    /// the SRQ nor grow the record without bound.
    fn next_slot(&mut self, words: &RecordWords) -> Result<u64> {
        let used = self.record.in_use(words, self.prod).map_err(record_error)?;
        self.drop_retired();
        if used >= self.cnt {
            return Err(Error::QueueFull);
        }
        if self.owed.len() >= self.cap {
            self.owed.retain(Option::is_some);
        }
        while self.owed.len() >= self.cap {
            if let Some(Some((wr_id, _))) = self.owed.pop_front() {
                tracing::warn!(wr_id, "SRQ WQE never completed: forgotten");
            }
        }
        let slot = idx_slot(self.prod, self.cnt).ok_or(Error::DeviceFatal)?;
        Ok(PAGE_SIZE as u64 + u64::from(slot) * u64::from(self.stride))
    }
}

impl OwedQueue for Mutex<SrqQueue> {
    /// Retires the oldest owed WQE with `wr_id` (only it: see the module docs). A successful
    /// completion of a receive is RECV or RECV_RDMA_WITH_IMM.
    fn complete(&self, wr_id: u64, success: Option<WcOpcode>) -> Option<(u32, bool)> {
        let mut q = self.lock();
        let e = q.owed.iter_mut().find(|e| matches!(e, Some((w, _)) if *w == wr_id))?;
        let (_, len) = e.take()?;
        q.drop_retired();
        let agrees = matches!(success, None | Some(WcOpcode::Recv | WcOpcode::RecvRdmaWithImm));
        Some((len, agrees))
    }
}

/// A shared receive queue. Dropping it sends DESTROY_SRQ (the verbs core drops it after its QPs).
pub struct Srq {
    dev: Arc<DeviceInner>,
    handle: u32,
    db_handle: SrqHandle,
    /// The ring; `None` only while dropping.
    buf: Option<PagedBuf>,
    words: RecordWords,
    queue: Arc<Mutex<SrqQueue>>,
    db: Doorbells,
    /// Whether the device broke the SRQ's ring state ([`Srq::mark_broken`]).
    health: ObjectHealth,
}

impl Srq {
    /// CREATE_SRQ of `attr.max_wr` (rounded up to a power of two) WQEs of `attr.max_sge` SGEs in
    /// `pd`, reporting its async events to `events` (Linux `pvrdma_create_srq`).
    ///
    /// Errors: [`Error::InvalidArgument`] for sizes that do not fit a page directory;
    /// [`Error::BadResponse`] for an SRQ handle beyond 24 bits (the SRQ is destroyed);
    /// [`Error::DeviceFatal`] for a live one; DMA and command errors.
    pub(crate) fn create(pd: &Pd, attr: &SrqAttr, events: Arc<dyn SrqEventHandler>) -> Result<Srq> {
        let dev = &pd.dev;
        dev.live()?;
        let cnt = attr.max_wr.checked_next_power_of_two().ok_or(Error::InvalidArgument("SRQ too large"))?;
        let queue = SrqQueue::new(cnt, attr.max_sge.max(1), dev.attr.max_cqe)?;
        let total = 1 + queue.pages();
        if total > PAGE_DIR_MAX_PAGES {
            return Err(Error::InvalidArgument("SRQ too large"));
        }
        let mut buf = PagedBuf::new(&dev.platform, total)?;
        let owner = pd.uctx.as_ref().map_or(Owner::Kernel, |u| u.owner());
        let words = RecordWords::new(&dev.platform, &buf, owner)?;
        let _objects = dev.eq.objects.lock();
        let resp = dev.cmd.post(CreateSrq {
            pdir_dma: buf.dir().dma().into(),
            pd_handle: pd.handle.into(),
            nchunks: (total as u32).into(),
            attrs: DevSrqAttr { max_wr: cnt.into(), max_sge: queue.max_sge.into(), ..Default::default() },
            srq_type: srq_type::BASIC,
            ..Default::default()
        })?;
        let raw = resp.srqn.get();
        let db_handle = doorbell_handle("SRQ handle beyond 24 bits", raw, owner, SrqHandle::new).inspect_err(|_| {
            // A DESTROY the device refuses leaves it the ring (as at drop): abandoned.
            if !destroy_srq(dev, raw) {
                buf.abandon();
            }
        })?;
        if let Err(e) = dev.eq.register_srq(raw, events) {
            // A live SRQ's handle: DESTROY_SRQ would reach the other SRQ; the ring is leaked.
            buf.abandon();
            return Err(e);
        }
        let db = pd.uctx.as_ref().map_or_else(|| dev.kernel_db.clone(), |u| u.db.clone());
        tracing::debug!(srq = raw, "SRQ created");
        let queue = Arc::new(Mutex::new(queue));
        Ok(Srq {
            dev: dev.clone(),
            handle: raw,
            db_handle,
            buf: Some(buf),
            words,
            queue,
            db,
            health: ObjectHealth::default(),
        })
    }

    /// Where the SRQ's ring-state record lives (page 0 of its page list; the SRQ's indices are
    /// its `rx` pair) and whose it is.
    pub fn record_page(&self) -> doorbell::record::RecordPage {
        self.words.page()
    }

    /// The record its QPs' receive CQs retire completions from.
    pub(crate) fn owed(&self) -> SharedWq {
        self.queue.clone()
    }

    /// The provider's SRQ behind the core's.
    pub(crate) fn of(srq: &dyn SrqOps) -> Result<&Srq> {
        srq.as_any().downcast_ref().ok_or(Error::InvalidArgument("an SRQ of another provider"))
    }

    /// The handle the QPs' CREATE_QP names.
    pub(crate) fn handle(&self) -> u32 {
        self.handle
    }

    /// Whether the device runs MODIFY_SRQ and QUERY_SRQ as QEMU 7.2 does (swapped).
    fn swaps_srq_commands(&self) -> bool {
        self.dev.encoding() == ArmEncoding::Qemu72
    }

    /// Writes one receive WQE into the next slot and counts it (not yet published).
    fn write_recv(&self, q: &mut SrqQueue, wr: &RecvWr<'_>) -> Result<()> {
        let n = u32::try_from(wr.sg_list.len()).map_err(|_| Error::InvalidArgument("too many SGEs"))?;
        if n > q.max_sge {
            return Err(Error::InvalidArgument("more SGEs than the SRQ was created for"));
        }
        let total = wr.sg_list.iter().try_fold(0u32, |t, s| t.checked_add(s.length));
        let total = total.ok_or(Error::InvalidArgument("total length beyond 32 bits"))?;
        let slot = q.next_slot(&self.words)?;
        let mut hdr = RqWqeHdr::default();
        hdr.wr_id.set(wr.wr_id);
        hdr.num_sge.set(n);
        hdr.total_len.set(total);
        let buf = self.buf.as_ref().ok_or(Error::DeviceFatal)?;
        crate::ring::write_wqe(buf.data(), slot, hdr.as_bytes(), wr.sg_list)?;
        q.prod = idx_inc(q.prod, q.cnt);
        q.owed.push_back(Some((wr.wr_id, total)));
        Ok(())
    }
}

/// DESTROY_SRQ; whether the device took it.
fn destroy_srq(dev: &DeviceInner, handle: u32) -> bool {
    let cmd = DestroySrq { srq_handle: handle.into(), ..Default::default() };
    dev.cmd.post(cmd).inspect_err(|e| tracing::warn!(srq = handle, error = %e, "DESTROY_SRQ failed")).is_ok()
}

impl Srq {
    /// The device wrote a consumer index out of range (or the ring state is unreachable): the
    /// SRQ is unusable from now on, for every thread at once, and its consumer hears `SRQ_ERR`
    /// once, off this thread.
    fn mark_broken(&self) {
        let report = self.dev.eq.srq_handler(self.handle).map(|h| {
            move || {
                h.event(ib_core::AsyncEventType::SrqErr);
            }
        });
        self.health.mark(&self.dev.health, "SRQ", self.handle, report);
    }
}

impl SrqOps for Srq {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn handle(&self) -> u32 {
        self.handle
    }

    fn max_wr(&self) -> u32 {
        self.queue.lock().cnt
    }

    /// Writes the WQEs in order, publishes the producer index once and rings the SRQ doorbell
    /// once (as rdma-core's `pvrdma_post_srq_recv`). Errors: (index of the first request not
    /// posted, why): more SGEs than the SRQ takes, [`Error::QueueFull`], [`Error::DeviceFatal`].
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.health.check(&self.dev.health).map_err(|e| (0, e))?;
        let mut q = self.queue.lock();
        let failed = wrs.iter().enumerate().find_map(|(k, wr)| self.write_recv(&mut q, wr).err().map(|e| (k, e)));
        if matches!(failed, Some((_, Error::DeviceFatal))) {
            self.mark_broken();
        }
        let posted = failed.as_ref().map_or(wrs.len(), |(k, _)| *k);
        if posted > 0 {
            q.record.publish_prod(&self.words, q.prod).map_err(|e| (0, e))?;
            drop(q);
            self.db.srq_recv(&self.db_handle).map_err(|e| {
                tracing::warn!(error = %e, "SRQ doorbell not rung");
                (0, Error::InvalidArgument("the SRQ's UAR page no longer rings it"))
            })?;
        }
        failed.map_or(Ok(()), Err)
    }

    /// MODIFY_SRQ. Errors: [`Error::InvalidArgument`] for [`SrqAttrMask::MAX_WR`] (Linux's
    /// vmw_pvrdma refuses a resize with `EINVAL`); [`Error::Unsupported`] on QEMU 7.2 (see the
    /// module docs); the device's refusal.
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.health.check(&self.dev.health)?;
        if mask.contains(SrqAttrMask::MAX_WR) {
            return Err(Error::InvalidArgument("pvrdma does not resize SRQs"));
        }
        if self.swaps_srq_commands() {
            return Err(Error::Unsupported("MODIFY_SRQ on QEMU 7.2 (it runs QUERY_SRQ)"));
        }
        self.dev.cmd.post(ModifySrq {
            srq_handle: self.handle.into(),
            attr_mask: mask.bits().into(),
            attrs: DevSrqAttr { srq_limit: attr.srq_limit.into(), ..Default::default() },
            ..Default::default()
        })?;
        Ok(())
    }

    /// QUERY_SRQ. Errors: [`Error::Unsupported`] on QEMU 7.2; command errors.
    fn query(&self) -> Result<SrqAttr> {
        self.health.check(&self.dev.health)?;
        if self.swaps_srq_commands() {
            return Err(Error::Unsupported("QUERY_SRQ on QEMU 7.2 (it runs MODIFY_SRQ)"));
        }
        let resp = self.dev.cmd.post(QuerySrq { srq_handle: self.handle.into(), ..Default::default() })?;
        let a = resp.attrs;
        let attr = SrqAttr { max_wr: a.max_wr.get(), max_sge: a.max_sge.get(), srq_limit: a.srq_limit.get() };
        check_query(&attr, &self.dev.attr)
            .inspect_err(|_| tracing::error!(srq = self.handle, ?attr, "QUERY_SRQ answer refused"))?;
        Ok(attr)
    }
}

/// Checks a QUERY_SRQ answer against the device's caps before the consumer sees it: `max_wr`
/// from 1 to `max_srq_wr`, `max_sge` at most `max_srq_sge`, the limit at most `max_wr`.
///
/// Errors: [`Error::BadResponse`] naming the field.
fn check_query(a: &SrqAttr, caps: &ib_core::DeviceAttr) -> Result<()> {
    let checks = [
        (!(1..=caps.max_srq_wr).contains(&a.max_wr), "QUERY_SRQ: max_wr out of range"),
        (a.max_sge > caps.max_srq_sge, "QUERY_SRQ: max_sge above the device's max_srq_sge"),
        (a.srq_limit > a.max_wr, "QUERY_SRQ: srq_limit above max_wr"),
    ];
    match checks.iter().find(|(bad, _)| *bad) {
        Some((_, what)) => Err(Error::BadResponse(what)),
        None => Ok(()),
    }
}

impl Drop for Srq {
    /// DESTROY_SRQ, then out of the event table, under the object lock (as a QP's drop). A
    /// DESTROY the device refused or never answered leaves the SRQ on the device, which may
    /// still take WQEs from its ring and write its consumer index: the ring is abandoned, not
    /// freed, so no later allocation meets those writes.
    fn drop(&mut self) {
        let h = self.handle;
        let mut taken = false;
        self.dev.eq.destroy_object(|| taken = destroy_srq(&self.dev, h), || self.dev.eq.unregister_srq(h));
        if !taken {
            if let Some(buf) = self.buf.as_mut() {
                buf.abandon();
            }
        }
    }
}
