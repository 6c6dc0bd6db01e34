//! Queue pairs, RC, UD and the GSI QP (QP1: a UD QP of QPN 1) (Linux `pvrdma_qp.c`, mthca
//! `mthca_qp.c`; UD's `wr.ud` and address handles in `qp/ud.rs`): the SQ and RQ rings,
//! posting work requests, and MODIFY_QP / QUERY_QP with the verbs core's attributes converted to
//! the device's. The transition and posting rules are the core's; the device answers for the
//! state (QUERY_QP) and flushes what is posted to a QP in ERR.
//!
//! Memory: page 0 is the ring state (SQ = `tx`: the driver writes `prod_tail`, the device
//! `cons_head`; RQ = `rx` likewise), reached through the doorbell crate's typed records; the SQ
//! starts at page 1, the RQ at page `1 + send_chunks`. The device's consumer indices are
//! untrusted and validated before a slot is reused.

mod attr;
mod owed;
pub(crate) mod ud;
mod wqe;

use crate::cq::Cq;
use crate::device::{doorbell_handle, DeviceInner};
use crate::dma::Abandon;
use crate::health::ObjectHealth;
use crate::pd::Pd;
use crate::pdir::PagedBuf;
use crate::ring::{record_error, write_wqe, RecordWords};
use crate::wc::OwedQueue;
use attr::{from_device, to_device};
use doorbell::record::DriverProduced;
use doorbell::{Doorbells, Owner, QpHandle};
use ib_core::provider::{CqOps, QpCreate, QpEventHandler, QpOps};
use ib_core::{Error, QpAttr, QpAttrMask, QpCap, QpState, QpType};
use ib_core::{RecvWr, Result, SendWr, WcOpcode};
use owed::{Owed, Posted};
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateQp, CreateQpResp, DestroyQp, ModifyQp, QueryQp};
use pvrdma_abi::pdir::PAGE_DIR_MAX_PAGES;
use pvrdma_abi::ring::{idx_inc, idx_slot};
use pvrdma_abi::verbs::{qp_type, send_flags};
use pvrdma_abi::wqe::{rq_wqe_stride, sq_wqe_stride, RqWqeHdr, SqWqeHdr};
use pvrdma_abi::PAGE_SIZE;
use std::sync::Arc;
use wqe::{set_opcode, sg_totals};
use zerocopy::IntoBytes;

/// One work queue's geometry, the driver's producer index and the WQEs owed a completion.
pub(crate) struct WorkQueue {
    /// Slots (a power of two).
    cnt: u32,
    /// Bytes per slot.
    stride: u32,
    /// Byte offset of slot 0 from the start of the QP's memory.
    offset: u64,
    max_sge: u32,
    prod: u32,
    /// Which ring-state half is this queue's (who writes which index).
    record: DriverProduced,
    owed: Owed,
}

/// A work queue as the QP and its CQs share it (the CQ retires what a CQE completes).
type SharedWq = Arc<Mutex<WorkQueue>>;

impl OwedQueue for Mutex<WorkQueue> {
    fn complete(&self, wr_id: u64, success: Option<WcOpcode>) -> Option<(u32, bool)> {
        self.lock().owed.retire(wr_id, success).map(|(p, agrees)| (p.len, agrees))
    }
}

impl WorkQueue {
    fn pages(&self) -> usize {
        (u64::from(self.cnt) * u64::from(self.stride)).div_ceil(PAGE_SIZE as u64) as usize
    }

    /// The slot the next WQE goes to. Errors: [`Error::QueueFull`];
    /// [`Error::DeviceFatal`] if the device's consumer index is out of range.
    fn next_slot(&mut self, words: &RecordWords) -> Result<u64> {
        let used = self.record.in_use(words, self.prod).map_err(record_error)?;
        if used >= self.cnt || !self.owed.reserve() {
            return Err(Error::QueueFull);
        }
        let slot = idx_slot(self.prod, self.cnt).ok_or(Error::DeviceFatal)?;
        Ok(self.offset + u64::from(slot) * u64::from(self.stride))
    }

    /// Counts the WQE just written at [`WorkQueue::next_slot`] (not yet visible to the device)
    /// and records it as owed a completion.
    fn advance(&mut self, posted: Posted) {
        self.prod = idx_inc(self.prod, self.cnt);
        self.owed.push(posted);
    }

    /// Makes the WQEs written so far visible (release store of the producer index).
    fn publish(&self, words: &RecordWords) -> Result<()> {
        self.record.publish_prod(words, self.prod)
    }
}

/// The SQ and RQ geometry for `cap`: counts rounded up to powers of two, at least one SGE.
///
/// Errors: [`Error::InvalidArgument`] if a count does not round up to a power of two in 32 bits
/// or a WQE stride does not fit (checked, never wrapped: [`check_cap`] bounds them first, and the
/// device's caps are bounded at probe).
fn queues(cap: &QpCap) -> Result<(WorkQueue, WorkQueue)> {
    let send_sge = cap.max_send_sge.max(1);
    let recv_sge = cap.max_recv_sge.max(1);
    let too_large = Error::InvalidArgument("QP too large");
    let (Some(scnt), Some(rcnt)) =
        (cap.max_send_wr.checked_next_power_of_two(), cap.max_recv_wr.checked_next_power_of_two())
    else {
        return Err(too_large);
    };
    let (Some(sstride), Some(rstride)) = (sq_wqe_stride(send_sge), rq_wqe_stride(recv_sge)) else {
        return Err(too_large);
    };
    let sq = WorkQueue {
        cnt: scnt,
        stride: sstride,
        offset: PAGE_SIZE as u64,
        max_sge: send_sge,
        prod: 0,
        record: DriverProduced::send_queue(scnt),
        owed: Owed::new(scnt),
    };
    let mut rq = WorkQueue {
        cnt: rcnt,
        stride: rstride,
        offset: 0,
        max_sge: recv_sge,
        prod: 0,
        record: DriverProduced::recv_queue(rcnt),
        owed: Owed::new(rcnt),
    };
    rq.offset = ((1 + sq.pages()) * PAGE_SIZE) as u64;
    Ok((sq, rq))
}

/// A queue pair. Dropping it sends DESTROY_QP and removes its CQEs still queued on its CQs.
pub struct Qp {
    dev: Arc<DeviceInner>,
    send_cq: Cq,
    recv_cq: Cq,
    handle: u32,
    db_handle: QpHandle,
    buf: PagedBuf,
    words: RecordWords,
    sq: SharedWq,
    rq: SharedWq,
    /// Every send asks for a completion (`sq_sig_all`).
    sig_all: bool,
    db: Doorbells,
    /// A UD QP: its sends are [`WrOpcode::UdSend`] (or [`WrOpcode::Raw`] for a user QP).
    ud: bool,
    /// A QP of the kernel (no user context): its posts are checked as Linux's
    /// `pvrdma_post_send` checks them; a user QP's as rdma-core's provider does (see
    /// [`ud::check_opcode`]).
    kernel: bool,
    /// Whether the device broke the QP's ring state ([`Qp::mark_broken`]).
    health: ObjectHealth,
    /// What the driver set: the attributes of every MODIFY_QP the device took, and the queue
    /// sizes it confirmed (`attr::from_device` reads a QUERY_QP answer against it).
    set: Mutex<QpAttr>,
}

impl Qp {
    /// Creates an RC, UD or GSI QP (Linux `pvrdma_create_qp`) reporting its async events to
    /// `events`; the GSI QP (QP1) must be answered QPN 1, the others any QPN above it.
    ///
    /// Errors: [`Error::InvalidArgument`] for sizes that do not fit, CQs of another context;
    /// [`Error::BadResponse`] for a QP handle beyond 24 bits or queue sizes other than asked (the
    /// QP is destroyed), or QPN 0 or 1 for RC or UD, or another than 1 for the GSI (not
    /// destroyed: that would name the special QP, or another one);
    /// [`Error::DeviceFatal`] for a live one; DMA and command errors.
    pub(crate) fn create(pd: &Pd, init: &QpCreate<'_>, events: Arc<dyn QpEventHandler>) -> Result<Qp> {
        let dev = &pd.dev;
        dev.live()?;
        let (send_cq, recv_cq) = (Cq::of(init.send_cq)?.clone(), Cq::of(init.recv_cq)?.clone());
        if send_cq.ctx() != pd.ctx() || recv_cq.ctx() != pd.ctx() {
            return Err(Error::InvalidArgument("CQ of another context"));
        }
        let (sq, rq) = queues(&init.cap)?;
        let srq = init.srq.map(crate::srq::Srq::of).transpose()?;
        // On an SRQ the QP has no RQ: no receive WRs, SGEs or pages (as Linux's vmw_pvrdma).
        let (rq_cnt, rq_sge, rq_pages) = if srq.is_some() { (0, 0, 0) } else { (rq.cnt, rq.max_sge, rq.pages()) };
        let total = 1 + sq.pages() + rq_pages;
        if total > PAGE_DIR_MAX_PAGES || total > usize::from(u16::MAX) {
            return Err(Error::InvalidArgument("QP too large"));
        }
        let mut buf = PagedBuf::new(&dev.platform, total)?;
        let owner = pd.uctx.as_ref().map_or(Owner::Kernel, |u| u.owner());
        let words = RecordWords::new(&dev.platform, &buf, owner)?;
        let gsi = init.qp_type == QpType::Gsi;
        // The GSI QP is a UD QP of QPN 1 to the provider (Linux `pvrdma_create_qp` for
        // `IB_QPT_GSI` sends `PVRDMA_QPT_GSI`; QEMU 7.2 answers QPN 1).
        let ud = init.qp_type == QpType::Ud || gsi;
        let ty = match init.qp_type {
            QpType::Rc => qp_type::RC,
            QpType::Ud => qp_type::UD,
            QpType::Gsi => qp_type::GSI,
        };
        // Creation and registration in one step against destroys (see `EventRings::objects`).
        let _objects = dev.eq.objects.lock();
        let resp = dev.cmd.post(CreateQp {
            pdir_dma: buf.dir().dma().into(),
            pd_handle: pd.handle.into(),
            send_cq_handle: CqOps::handle(&send_cq).into(),
            recv_cq_handle: CqOps::handle(&recv_cq).into(),
            max_send_wr: sq.cnt.into(),
            max_recv_wr: rq_cnt.into(),
            max_send_sge: sq.max_sge.into(),
            max_recv_sge: rq_sge.into(),
            srq_handle: srq.map_or(0, |s| s.handle()).into(),
            is_srq: u8::from(srq.is_some()),
            total_chunks: (total as u16).into(),
            send_chunks: (sq.pages() as u16).into(),
            sq_sig_all: u8::from(init.sq_sig_all),
            qp_type: ty,
            ..Default::default()
        })?;
        let db_handle =
            doorbell_handle("QP handle beyond 24 bits", resp.qpn.get(), owner, QpHandle::new).inspect_err(|_| {
                // A DESTROY the device refuses leaves it the rings (as at drop): abandoned.
                if !destroy_qp(dev, resp.qpn.get()) {
                    buf.abandon();
                }
            })?;
        let handle = db_handle.raw();
        if gsi && handle != GSI_QPN {
            // Whatever the device named is no GSI QP: destroying it could hit another QP.
            tracing::error!(qpn = handle, "CREATE_QP answered a QPN other than 1 for the GSI QP: refused");
            buf.abandon();
            return Err(Error::BadResponse("CREATE_QP: a QPN other than 1 for the GSI QP"));
        }
        if !gsi && handle <= GSI_QPN {
            // QP0/QP1 are the port's special QPs: DESTROY_QP would name them, not this one.
            tracing::error!(qpn = handle, "CREATE_QP answered QP0/QP1 for an RC or UD QP: refused");
            buf.abandon();
            return Err(Error::BadResponse("CREATE_QP: QPN 0 or 1 for an RC or UD QP"));
        }
        if let Err(e) = dev.eq.register_qp(handle, events) {
            // The device named a live QP: nothing is destroyed (DESTROY_QP would hit the other QP)
            // and the ring memory is leaked rather than freed under a device that may write it.
            buf.abandon();
            return Err(e);
        }
        if let Err(e) = check_sizes(&resp, [sq.cnt, rq_cnt, sq.max_sge, rq_sge]) {
            // The handle is fresh (registered just now): DESTROY_QP names only this QP.
            if !destroy_qp(dev, handle) {
                buf.abandon();
            }
            dev.eq.unregister_qp(handle);
            return Err(e);
        }
        let db = pd.uctx.as_ref().map_or_else(|| dev.kernel_db.clone(), |u| u.db.clone());
        let (sq_cnt, sq_sge) = (sq.cnt, sq.max_sge);
        let (sq, rq) = (Arc::new(Mutex::new(sq)), Arc::new(Mutex::new(rq)));
        send_cq.attach_qp(handle, Some(sq.clone()), None);
        let recv_owed: crate::wc::SharedWq = match srq {
            Some(s) => s.owed(),
            None => rq.clone(),
        };
        recv_cq.attach_qp(handle, None, Some(recv_owed));
        tracing::debug!(qpn = handle, "QP created");
        let sig_all = init.sq_sig_all;
        let kernel = pd.uctx.is_none();
        let health = ObjectHealth::default();
        let cap = QpCap {
            max_send_wr: sq_cnt,
            max_recv_wr: rq_cnt,
            max_send_sge: sq_sge,
            max_recv_sge: rq_sge,
            max_inline_data: 0,
        };
        let set = Mutex::new(QpAttr { cap, ..Default::default() });
        Ok(Qp {
            dev: dev.clone(),
            send_cq,
            recv_cq,
            handle,
            db_handle,
            buf,
            words,
            sq,
            rq,
            sig_all,
            db,
            ud,
            kernel,
            health,
            set,
        })
    }
}

/// A doorbell the QP's own page would not ring: its context was released under it.
fn doorbell_error(e: doorbell::DoorbellError) -> Error {
    tracing::warn!(error = %e, "QP doorbell not rung");
    Error::InvalidArgument("the QP's UAR page no longer rings it")
}

impl Qp {
    /// The typed handle the QP's doorbells take (its owner is the QP's context).
    pub fn doorbell_handle(&self) -> QpHandle {
        self.db_handle
    }

    /// Where the QP's ring-state record lives (page 0 of its page list) and whose it is.
    pub fn record_page(&self) -> doorbell::record::RecordPage {
        self.words.page()
    }
}

/// DESTROY_QP; whether the device took it.
fn destroy_qp(dev: &DeviceInner, handle: u32) -> bool {
    let cmd = DestroyQp { qp_handle: handle.into(), ..Default::default() };
    dev.cmd.post(cmd).inspect_err(|e| tracing::warn!(qpn = handle, error = %e, "DESTROY_QP failed")).is_ok()
}

/// QPN of the GSI QP (QP1); QP0 is the SMI's. Neither is ever an RC QP (IBTA 10.2.4.2).
const GSI_QPN: u32 = 1;

/// Refuses a CREATE_QP answer whose queue sizes (`asked`: send WRs, receive WRs, send SGEs,
/// receive SGEs) differ from the request: the rings were sized
/// and laid out (page counts, `send_chunks`) for exactly what was asked, so a device working to
/// other sizes would read WQEs from the wrong place or past the ring. QEMU 7.2 and the model
/// echo the request.
///
/// Errors: [`Error::BadResponse`].
fn check_sizes(resp: &CreateQpResp, asked: [u32; 4]) -> Result<()> {
    let got = [resp.max_send_wr.get(), resp.max_recv_wr.get(), resp.max_send_sge.get(), resp.max_recv_sge.get()];
    if asked == got {
        return Ok(());
    }
    tracing::error!(?asked, ?got, "CREATE_QP answered other queue sizes: QP refused");
    Err(Error::BadResponse("CREATE_QP: queue sizes differ from the request"))
}

impl Qp {
    /// Writes one send WQE into the next SQ slot and counts it (not yet published).
    fn write_send(&self, sq: &mut WorkQueue, wr: &SendWr<'_>) -> Result<()> {
        let (num_sge, total) = sg_totals(wr.sg_list, sq.max_sge)?;
        ud::check_opcode(self.ud, self.kernel, &wr.opcode)?;
        let slot = sq.next_slot(&self.words)?;
        let mut hdr = SqWqeHdr::default();
        hdr.wr_id.set(wr.wr_id);
        hdr.num_sge.set(num_sge);
        hdr.total_len.set(total);
        let opcode = set_opcode(&mut hdr, wr.opcode);
        let flags =
            if wr.signaled { send_flags::SIGNALED } else { 0 } | if wr.solicited { send_flags::SOLICITED } else { 0 };
        hdr.send_flags.set(flags);
        write_wqe(self.buf.data(), slot, hdr.as_bytes(), wr.sg_list)?;
        let signaled = wr.signaled || self.sig_all;
        sq.advance(Posted { wr_id: wr.wr_id, len: total, signaled, opcode });
        Ok(())
    }

    /// Writes `wrs` into `queue` in order with `write` until one fails, publishes the producer
    /// index once and rings `doorbell` once if any was written. Errors: (index of the first
    /// request not posted, why); 0 if publishing or the doorbell failed.
    fn post<W>(
        &self,
        queue: &SharedWq,
        wrs: &[W],
        write: impl Fn(&Self, &mut WorkQueue, &W) -> Result<()>,
        doorbell: impl FnOnce() -> std::result::Result<(), doorbell::DoorbellError>,
    ) -> std::result::Result<(), (usize, Error)> {
        self.health.check(&self.dev.health).map_err(|e| (0, e))?;
        let mut q = queue.lock();
        let failed = wrs.iter().enumerate().find_map(|(k, wr)| write(self, &mut q, wr).err().map(|e| (k, e)));
        if matches!(failed, Some((_, Error::DeviceFatal))) {
            self.mark_broken();
        }
        let posted = failed.as_ref().map_or(wrs.len(), |(k, _)| *k);
        if posted > 0 {
            q.publish(&self.words).map_err(|e| (0, e))?;
            drop(q);
            doorbell().map_err(|e| (0, doorbell_error(e)))?;
        }
        failed.map_or(Ok(()), Err)
    }

    /// Writes one receive WQE into the next RQ slot and counts it (not yet published).
    fn write_recv(&self, rq: &mut WorkQueue, wr: &RecvWr<'_>) -> Result<()> {
        let (num_sge, total) = sg_totals(wr.sg_list, rq.max_sge)?;
        let slot = rq.next_slot(&self.words)?;
        let mut hdr = RqWqeHdr::default();
        hdr.wr_id.set(wr.wr_id);
        hdr.num_sge.set(num_sge);
        hdr.total_len.set(total);
        write_wqe(self.buf.data(), slot, hdr.as_bytes(), wr.sg_list)?;
        rq.advance(Posted { wr_id: wr.wr_id, len: total, signaled: true, opcode: WcOpcode::Recv });
        Ok(())
    }
}

impl Qp {
    /// The device wrote a consumer index out of range (or the ring state is unreachable): the
    /// QP is unusable from now on, for every thread at once, and its consumer hears
    /// `QP_FATAL` (IBTA's local work queue catastrophic error) once, off this thread.
    fn mark_broken(&self) {
        let report = self.dev.eq.qp_handler(self.handle).map(|h| {
            move || {
                h.event(ib_core::AsyncEventType::QpFatal);
            }
        });
        self.health.mark(&self.dev.health, "QP", self.handle, report);
    }
}

impl QpOps for Qp {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn qp_num(&self) -> u32 {
        self.handle
    }

    /// Writes the WQEs into the next SQ slots in order, publishes the producer index once and
    /// rings the SQ doorbell once (as `ibv_post_send` with a chain: a batch costs one doorbell).
    /// Each is recorded as owed a completion; [`Error::QueueFull`] when the ring is full, or when
    /// twice its depth in signaled work still awaits its completions.
    fn post_send(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.post(&self.sq, wrs, Self::write_send, || self.db.qp_send(&self.db_handle))
    }

    /// As [`Qp::post_send`], for the RQ.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.post(&self.rq, wrs, Self::write_recv, || self.db.qp_recv(&self.db_handle))
    }

    /// MODIFY_QP with the core's attributes in the device's layout. pvrdma is RoCE: an address
    /// vector must carry a global route.
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.health.check(&self.dev.health)?;
        if mask.contains(QpAttrMask::AV) && !attr.ah_attr.is_global {
            return Err(Error::InvalidArgument("RoCE needs a global route (is_global)"));
        }
        if mask.contains(QpAttrMask::PORT) {
            self.dev.check_port(attr.port_num)?;
        }
        let mut set = self.set.lock();
        self.dev.cmd.post(ModifyQp {
            qp_handle: self.handle.into(),
            attr_mask: mask.bits().into(),
            attrs: to_device(attr),
            ..Default::default()
        })?;
        attr::record(&mut set, attr, mask);
        drop(set);
        if mask.contains(QpAttrMask::STATE) && attr.qp_state == QpState::Reset {
            self.reset_rings()?;
        }
        Ok(())
    }

    /// QUERY_QP; the state the device reports is checked (an unknown one is refused).
    fn query(&self, mask: QpAttrMask) -> Result<QpAttr> {
        self.health.check(&self.dev.health)?;
        let resp = self.dev.cmd.post(QueryQp {
            qp_handle: self.handle.into(),
            attr_mask: mask.bits().into(),
            ..Default::default()
        })?;
        from_device(&resp.attrs, &self.dev.attr, &self.set.lock())
    }
}

impl Qp {
    /// After a move to RESET (as Linux's `pvrdma_reset_qp`): the QP's CQEs still queued leave its
    /// CQs and both work queues start empty again (indices 0 on both sides), so nothing posted
    /// before the reset comes back.
    fn reset_rings(&self) -> Result<()> {
        for cq in [&self.send_cq, &self.recv_cq] {
            cq.flush_qp(self.handle);
        }
        for wq in [&self.sq, &self.rq] {
            let mut q = wq.lock();
            q.prod = 0;
            q.owed.clear();
            q.record.reset(&self.words)?;
        }
        Ok(())
    }
}

impl Drop for Qp {
    /// DESTROY_QP, then out of the tables and off its CQs (its queued CQEs removed) before the
    /// device can give its QPN to a new QP. A DESTROY the device refused or never answered
    /// leaves the QP on the device, which may still read its WQEs and write its ring state: the
    /// rings are abandoned, not freed (as an SRQ's).
    fn drop(&mut self) {
        let h = self.handle;
        let forget = || {
            self.dev.eq.unregister_qp(h);
            self.send_cq.detach_qp(h);
            self.recv_cq.detach_qp(h);
        };
        let mut taken = false;
        self.dev.eq.destroy_object(|| taken = destroy_qp(&self.dev, h), forget);
        if !taken {
            self.buf.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(s: u32, r: u32, ss: u32, rs: u32) -> QpCap {
        QpCap { max_send_wr: s, max_recv_wr: r, max_send_sge: ss, max_recv_sge: rs, ..Default::default() }
    }

    #[test]
    fn geometry_rounds_and_places_the_rq_after_the_sq() {
        let (sq, rq) = queues(&cap(100, 10, 1, 2)).unwrap();
        assert_eq!((sq.cnt, sq.stride, sq.pages()), (128, 128, 4));
        assert_eq!((rq.cnt, rq.stride, rq.pages()), (16, 64, 1));
        assert_eq!(sq.offset, 4096);
        assert_eq!(rq.offset, 5 * 4096);
        let (sq, _) = queues(&cap(1, 1, 0, 0)).unwrap();
        assert_eq!((sq.cnt, sq.max_sge), (1, 1));
        // Counts and SGE lists that would wrap are refused, never turned into a zero stride.
        assert!(queues(&cap(u32::MAX, 1, 1, 1)).is_err());
        assert!(queues(&cap(1, 1, u32::MAX, 1)).is_err());
        assert!(queues(&cap(1, 1, 1, 1 << 28)).is_err());
    }

    #[test]
    fn sq_fills_then_frees_as_the_device_consumes() {
        use crate::platform::{sim::SimPlatform, Platform};
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(pvrdma_sim::SimConfig::default()));
        use pvrdma_abi::ring::{TX_CONS_HEAD, TX_PROD_TAIL};
        let (mut sq, rq) = queues(&cap(2, 1, 1, 1)).unwrap();
        let buf = PagedBuf::new(&p, 1 + sq.pages() + rq.pages()).unwrap();
        let w = RecordWords::new(&p, &buf, Owner::Kernel).unwrap();
        let unsignaled = Posted { wr_id: 0, len: 0, signaled: false, opcode: WcOpcode::Send };
        assert_eq!(sq.next_slot(&w), Ok(4096));
        sq.advance(unsignaled);
        assert_eq!(sq.next_slot(&w), Ok(4096 + 128), "counted before it is published");
        sq.advance(unsignaled);
        assert_eq!(buf.data().load_u32(TX_PROD_TAIL), Ok(0), "nothing visible yet");
        sq.publish(&w).unwrap();
        assert_eq!(buf.data().load_u32(TX_PROD_TAIL), Ok(2), "both at once");
        assert_eq!(sq.next_slot(&w), Err(Error::QueueFull));
        buf.data().store_u32(TX_CONS_HEAD, 1).unwrap(); // the device took one
        assert_eq!(sq.next_slot(&w), Ok(4096));
        buf.data().store_u32(TX_CONS_HEAD, 9).unwrap(); // out of range
        assert_eq!(sq.next_slot(&w), Err(Error::DeviceFatal));
        buf.data().store_u32(TX_CONS_HEAD, 3).unwrap(); // ahead of the producer
        assert_eq!(sq.next_slot(&w), Err(Error::DeviceFatal));
    }
}
