//! Queue pairs, RC only so far (Linux `pvrdma_qp.c`, mthca `mthca_qp.c`): the SQ and RQ rings,
//! state transitions with MODIFY_QP, and posting work requests.
//!
//! Memory: page 0 is the ring state (SQ = `tx`: the driver writes `prod_tail`, the device
//! `cons_head`; RQ = `rx` likewise), the SQ starts at page 1, the RQ at page `1 + send_chunks`.
//! The device's consumer indices are untrusted and validated before a slot is reused.

use crate::cq::CqInner;
use crate::error::{Error, Result};
use crate::pd::PdInner;
use crate::pdir::PagedBuf;
use crate::verbs::{mtu_code, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, WrOpcode};
use doorbell::Doorbells;
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateQp, DestroyQp, ModifyQp};
use pvrdma_abi::pdir::PAGE_DIR_MAX_PAGES;
use pvrdma_abi::ring::{idx_inc, idx_slot, ring_count};
use pvrdma_abi::ring::{RX_CONS_HEAD, RX_PROD_TAIL, TX_CONS_HEAD, TX_PROD_TAIL};
use pvrdma_abi::uar::UAR_HANDLE_MASK;
use pvrdma_abi::verbs::{qp_attr_mask as mask, qp_type, send_flags, QpAttr, AH_GRH};
use pvrdma_abi::wqe::{rq_wqe_stride, sq_wqe_stride, wr_opcode, RqWqeHdr, SqWqeHdr};
use pvrdma_abi::PAGE_SIZE;
use std::sync::Arc;
use zerocopy::IntoBytes;

/// Largest PSN (24 bits).
const PSN_MASK: u32 = 0x00ff_ffff;
/// RTR defaults (as perftest and rdma-core's examples use).
const MIN_RNR_TIMER: u8 = 12;
const MAX_DEST_RD_ATOMIC: u8 = 1;
/// RTS defaults: local ACK timeout 4.096 us * 2^14, 7 retries, infinite RNR retries.
const TIMEOUT: u8 = 14;
const RETRY_CNT: u8 = 7;
const RNR_RETRY: u8 = 7;
const MAX_RD_ATOMIC: u8 = 1;
/// Hop limit of the GRH (RoCE carries it as the IP TTL).
const HOP_LIMIT: u8 = 64;

/// One work queue's geometry and the driver's producer index.
struct WorkQueue {
    /// Slots (a power of two).
    cnt: u32,
    /// Bytes per slot.
    stride: u32,
    /// Byte offset of slot 0 from the start of the QP's memory.
    offset: u64,
    max_sge: u32,
    prod: u32,
    /// Ring-state offsets of the producer (driver) and consumer (device) indices.
    prod_at: u64,
    cons_at: u64,
}

impl WorkQueue {
    fn pages(&self) -> usize {
        (u64::from(self.cnt) * u64::from(self.stride)).div_ceil(PAGE_SIZE as u64) as usize
    }

    /// The slot the next WQE goes to. Errors: [`Error::QueueFull`];
    /// [`Error::DeviceFatal`] if the device's consumer index is out of range.
    fn next_slot(&self, buf: &PagedBuf) -> Result<u64> {
        let cons = buf.data().load_u32(self.cons_at)?;
        let used = ring_count(self.prod, cons, self.cnt).ok_or_else(|| {
            tracing::error!(prod = self.prod, cons, "work queue index out of range");
            Error::DeviceFatal
        })?;
        if used >= self.cnt {
            return Err(Error::QueueFull);
        }
        let slot = idx_slot(self.prod, self.cnt).ok_or(Error::DeviceFatal)?;
        Ok(self.offset + u64::from(slot) * u64::from(self.stride))
    }

    /// Publishes one more WQE (release store of the producer index).
    fn publish(&mut self, buf: &PagedBuf) -> Result<()> {
        self.prod = idx_inc(self.prod, self.cnt);
        buf.data().store_u32(self.prod_at, self.prod)
    }
}

/// State and attributes set by transitions.
struct QpStatus {
    state: QpState,
    port: u8,
}

/// A queue pair. Holds its PD and CQs; dropping it sends DESTROY_QP and removes its CQEs still
/// queued on its CQs.
pub struct Qp {
    pd: Arc<PdInner>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    handle: u32,
    buf: PagedBuf,
    sq: Mutex<WorkQueue>,
    rq: Mutex<WorkQueue>,
    status: Mutex<QpStatus>,
    db: Doorbells,
}

fn check_cap(cap: &QpCap, max_wr: u32, max_sge: u32) -> Result<()> {
    let wr_ok = |n: u32| (1..=max_wr).contains(&n);
    let sge_ok = |n: u32| n <= max_sge;
    if !wr_ok(cap.max_send_wr) || !wr_ok(cap.max_recv_wr) {
        return Err(Error::InvalidArgument("work request count out of range"));
    }
    if !sge_ok(cap.max_send_sge) || !sge_ok(cap.max_recv_sge) {
        return Err(Error::InvalidArgument("SGE count out of range"));
    }
    Ok(())
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
        prod_at: TX_PROD_TAIL,
        cons_at: TX_CONS_HEAD,
    };
    let mut rq = WorkQueue {
        cnt: rcnt,
        stride: rstride,
        offset: 0,
        max_sge: recv_sge,
        prod: 0,
        prod_at: RX_PROD_TAIL,
        cons_at: RX_CONS_HEAD,
    };
    rq.offset = ((1 + sq.pages()) * PAGE_SIZE) as u64;
    Ok((sq, rq))
}

impl Qp {
    /// Creates an RC QP (Linux `pvrdma_create_qp`).
    ///
    /// Errors: [`Error::InvalidArgument`] for sizes beyond the device's caps, CQs of another
    /// device or context; DMA and command errors.
    pub(crate) fn create(pd: &Arc<PdInner>, attr: &QpInitAttr) -> Result<Qp> {
        let dev = &pd.dev;
        dev.live()?;
        check_cap(&attr.cap, dev.attr.max_qp_wr, dev.attr.max_sge)?;
        let (send_cq, recv_cq) = (attr.send_cq.inner.clone(), attr.recv_cq.inner.clone());
        for cq in [&send_cq, &recv_cq] {
            if !Arc::ptr_eq(&cq.dev, dev) || cq.state.ctx() != pd.ctx() {
                return Err(Error::InvalidArgument("CQ of another device or context"));
            }
        }
        let (sq, rq) = queues(&attr.cap)?;
        let total = 1 + sq.pages() + rq.pages();
        if total > PAGE_DIR_MAX_PAGES || total > usize::from(u16::MAX) {
            return Err(Error::InvalidArgument("QP too large"));
        }
        let buf = PagedBuf::new(&dev.platform, total)?;
        let QpType::Rc = attr.qp_type;
        let resp = dev.cmd.post(CreateQp {
            pdir_dma: buf.dir().dma().into(),
            pd_handle: pd.handle.into(),
            send_cq_handle: send_cq.state.handle().into(),
            recv_cq_handle: recv_cq.state.handle().into(),
            max_send_wr: sq.cnt.into(),
            max_recv_wr: rq.cnt.into(),
            max_send_sge: sq.max_sge.into(),
            max_recv_sge: rq.max_sge.into(),
            total_chunks: (total as u16).into(),
            send_chunks: (sq.pages() as u16).into(),
            sq_sig_all: u8::from(attr.sq_sig_all),
            qp_type: qp_type::RC,
            ..Default::default()
        })?;
        let handle = resp.qpn.get();
        if handle <= UAR_HANDLE_MASK && dev.hub.register_qp(handle).is_err() {
            // The device answered with the handle of a live QP: no driver object may own it
            // twice. Nothing is destroyed (DESTROY_QP would hit the other QP, detaching would
            // strip its CQs); the ring memory is leaked rather than freed under a device that
            // may still write to it. `register_qp` logged it and made the device fatal.
            std::mem::forget(buf);
            return Err(Error::DeviceFatal);
        }
        let db = pd.uctx.as_ref().map_or_else(|| dev.kernel_db.clone(), |u| u.db.clone());
        let qp = Qp {
            pd: pd.clone(),
            send_cq,
            recv_cq,
            handle,
            buf,
            sq: Mutex::new(sq),
            rq: Mutex::new(rq),
            status: Mutex::new(QpStatus { state: QpState::Reset, port: 1 }),
            db,
        };
        if handle > UAR_HANDLE_MASK {
            // Dropping `qp` destroys it on the device.
            return Err(Error::InvalidArgument("device returned a QP handle beyond 24 bits"));
        }
        qp.send_cq.state.attach_qp(handle);
        qp.recv_cq.state.attach_qp(handle);
        tracing::debug!(qpn = handle, "QP created");
        Ok(qp)
    }

    /// The QP number (on pvrdma also the device's QP handle).
    pub fn qpn(&self) -> u32 {
        self.handle
    }

    /// The current state as the driver last set it.
    pub fn state(&self) -> QpState {
        self.status.lock().state
    }

    /// The send CQ's handle.
    pub fn send_cq_handle(&self) -> u32 {
        self.send_cq.state.handle()
    }

    /// The receive CQ's handle.
    pub fn recv_cq_handle(&self) -> u32 {
        self.recv_cq.state.handle()
    }

    /// RESET -> INIT on `port` with `access` ([`pvrdma_abi::verbs::access`] bits), P_Key index 0.
    ///
    /// Errors: [`Error::InvalidState`] from another state; [`Error::InvalidArgument`] for an
    /// unknown port; command errors.
    pub fn modify_to_init(&self, port: u8, access: u32) -> Result<()> {
        self.pd.dev.check_port(port)?;
        let mut a = QpAttr::default();
        a.pkey_index.set(0);
        a.port_num = port;
        a.qp_access_flags.set(access);
        let m = mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS;
        self.modify(QpState::Reset, QpState::Init, m, a)?;
        self.status.lock().port = port;
        Ok(())
    }

    /// INIT -> RTR towards QP `dest_qpn` at `dgid` (RoCE: a GRH address vector with source GID
    /// index 0), expecting PSN `rq_psn`, path MTU `path_mtu_bytes` (256..4096, a power of two).
    ///
    /// Errors: [`Error::InvalidState`] from another state; [`Error::InvalidArgument`] for a bad
    /// MTU, PSN or QPN; command errors.
    pub fn modify_to_rtr(
        &self,
        dest_qpn: u32,
        dgid: [u8; 16],
        rq_psn: u32,
        path_mtu_bytes: u32,
    ) -> Result<()> {
        let mtu = mtu_code(path_mtu_bytes).ok_or(Error::InvalidArgument("path MTU"))?;
        if rq_psn > PSN_MASK || dest_qpn > PSN_MASK {
            return Err(Error::InvalidArgument("PSN or QPN beyond 24 bits"));
        }
        let mut a = QpAttr::default();
        a.path_mtu.set(mtu);
        a.dest_qp_num.set(dest_qpn);
        a.rq_psn.set(rq_psn);
        a.max_dest_rd_atomic = MAX_DEST_RD_ATOMIC;
        a.min_rnr_timer = MIN_RNR_TIMER;
        a.ah_attr.grh.dgid = dgid;
        a.ah_attr.grh.sgid_index = 0;
        a.ah_attr.grh.hop_limit = HOP_LIMIT;
        a.ah_attr.ah_flags = AH_GRH;
        a.ah_attr.port_num = self.status.lock().port;
        let m = mask::AV
            | mask::PATH_MTU
            | mask::DEST_QPN
            | mask::RQ_PSN
            | mask::MAX_DEST_RD_ATOMIC
            | mask::MIN_RNR_TIMER;
        self.modify(QpState::Init, QpState::Rtr, m, a)
    }

    /// RTR -> RTS sending from PSN `sq_psn`, with timeout 14, 7 retries, 7 RNR retries.
    ///
    /// Errors: [`Error::InvalidState`] from another state; [`Error::InvalidArgument`] for a PSN
    /// beyond 24 bits; command errors.
    pub fn modify_to_rts(&self, sq_psn: u32) -> Result<()> {
        if sq_psn > PSN_MASK {
            return Err(Error::InvalidArgument("PSN beyond 24 bits"));
        }
        let mut a = QpAttr::default();
        a.sq_psn.set(sq_psn);
        a.timeout = TIMEOUT;
        a.retry_cnt = RETRY_CNT;
        a.rnr_retry = RNR_RETRY;
        a.max_rd_atomic = MAX_RD_ATOMIC;
        let m = mask::SQ_PSN | mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY
            | mask::MAX_QP_RD_ATOMIC;
        self.modify(QpState::Rtr, QpState::Rts, m, a)
    }

    /// Any state -> ERR: outstanding work requests complete with flush errors.
    pub fn modify_to_err(&self) -> Result<()> {
        let from = self.state();
        self.modify(from, QpState::Err, 0, QpAttr::default())
    }

    fn modify(&self, from: QpState, to: QpState, m: u32, mut a: QpAttr) -> Result<()> {
        self.pd.dev.live()?;
        let mut status = self.status.lock();
        if status.state != from {
            return Err(Error::InvalidState);
        }
        a.qp_state.set(to.raw());
        self.pd.dev.cmd.post(ModifyQp {
            qp_handle: self.handle.into(),
            attr_mask: (m | mask::STATE).into(),
            attrs: a,
            ..Default::default()
        })?;
        status.state = to;
        tracing::debug!(qpn = self.handle, ?from, ?to, "QP modified");
        Ok(())
    }

    /// Posts one send work request (IBTA 11.4.1.1): writes the WQE into the next SQ slot,
    /// publishes the producer index, rings the SQ doorbell.
    ///
    /// Errors: [`Error::InvalidState`] unless RTS; [`Error::InvalidArgument`] for more SGEs than
    /// `max_send_sge` or a total length beyond 32 bits; [`Error::QueueFull`];
    /// [`Error::DeviceFatal`].
    pub fn post_send(&self, wr: &SendWr) -> Result<()> {
        self.pd.dev.live()?;
        if self.state() != QpState::Rts {
            return Err(Error::InvalidState);
        }
        let mut sq = self.sq.lock();
        let (num_sge, total) = sg_totals(wr.sg_list, sq.max_sge)?;
        let slot = sq.next_slot(&self.buf)?;
        let mut hdr = SqWqeHdr::default();
        hdr.wr_id.set(wr.wr_id);
        hdr.num_sge.set(num_sge);
        hdr.total_len.set(total);
        match wr.opcode {
            WrOpcode::Send => hdr.opcode.set(wr_opcode::SEND),
            WrOpcode::SendWithImm(imm) => {
                hdr.opcode.set(wr_opcode::SEND_WITH_IMM);
                hdr.ex.set(imm);
            }
        }
        let flags = if wr.signaled { send_flags::SIGNALED } else { 0 }
            | if wr.solicited { send_flags::SOLICITED } else { 0 };
        hdr.send_flags.set(flags);
        self.buf.data().write(slot, &wqe_bytes(hdr.as_bytes(), wr.sg_list))?;
        sq.publish(&self.buf)?;
        drop(sq);
        self.db.qp_send(self.handle);
        Ok(())
    }

    /// Posts one receive work request (IBTA 11.4.1.2) in INIT, RTR or RTS.
    ///
    /// Errors: [`Error::InvalidState`] in RESET or an error state; [`Error::InvalidArgument`] for
    /// more SGEs than `max_recv_sge`; [`Error::QueueFull`]; [`Error::DeviceFatal`].
    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        self.pd.dev.live()?;
        if !matches!(self.state(), QpState::Init | QpState::Rtr | QpState::Rts) {
            return Err(Error::InvalidState);
        }
        let mut rq = self.rq.lock();
        let (num_sge, total) = sg_totals(wr.sg_list, rq.max_sge)?;
        let slot = rq.next_slot(&self.buf)?;
        let mut hdr = RqWqeHdr::default();
        hdr.wr_id.set(wr.wr_id);
        hdr.num_sge.set(num_sge);
        hdr.total_len.set(total);
        self.buf.data().write(slot, &wqe_bytes(hdr.as_bytes(), wr.sg_list))?;
        rq.publish(&self.buf)?;
        drop(rq);
        self.db.qp_recv(self.handle);
        Ok(())
    }
}

/// (number of SGEs, total bytes) of an SGE list of at most `max_sge` entries.
fn sg_totals(sg: &[Sge], max_sge: u32) -> Result<(u32, u32)> {
    let n = u32::try_from(sg.len()).map_err(|_| Error::InvalidArgument("too many SGEs"))?;
    if n > max_sge {
        return Err(Error::InvalidArgument("more SGEs than the QP was created for"));
    }
    let total = sg.iter().try_fold(0u32, |t, s| t.checked_add(s.length));
    Ok((n, total.ok_or(Error::InvalidArgument("total length beyond 32 bits"))?))
}

/// A WQE: its header, then its SGEs.
fn wqe_bytes(hdr: &[u8], sg: &[Sge]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hdr.len() + 16 * sg.len());
    out.extend_from_slice(hdr);
    for s in sg {
        let mut e = pvrdma_abi::wqe::Sge::default();
        e.addr.set(s.addr);
        e.length.set(s.length);
        e.lkey.set(s.lkey);
        out.extend_from_slice(e.as_bytes());
    }
    out
}

impl Drop for Qp {
    fn drop(&mut self) {
        let cmd = DestroyQp { qp_handle: self.handle.into(), ..Default::default() };
        if let Err(e) = self.pd.dev.cmd.post(cmd) {
            tracing::warn!(qpn = self.handle, error = %e, "DESTROY_QP failed");
        }
        for cq in [&self.send_cq, &self.recv_cq] {
            cq.flush_qp(self.handle);
            cq.state.detach_qp(self.handle);
        }
        self.pd.dev.hub.unregister_qp(self.handle);
    }
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qp({}, {:?})", self.handle, self.state())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(s: u32, r: u32, ss: u32, rs: u32) -> QpCap {
        QpCap { max_send_wr: s, max_recv_wr: r, max_send_sge: ss, max_recv_sge: rs }
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
    fn caps_are_checked() {
        assert!(check_cap(&cap(16, 16, 2, 2), 1024, 4).is_ok());
        assert!(check_cap(&cap(0, 16, 2, 2), 1024, 4).is_err());
        assert!(check_cap(&cap(2048, 16, 2, 2), 1024, 4).is_err());
        assert!(check_cap(&cap(16, 16, 5, 2), 1024, 4).is_err());
    }

    #[test]
    fn sge_totals() {
        let s = |l| Sge { addr: 0, length: l, lkey: 1 };
        assert_eq!(sg_totals(&[s(10), s(20)], 2), Ok((2, 30)));
        assert!(sg_totals(&[s(10), s(20)], 1).is_err());
        assert!(sg_totals(&[s(u32::MAX), s(1)], 2).is_err());
        assert_eq!(wqe_bytes(&[0u8; 80], &[s(1)]).len(), 96);
    }

    #[test]
    fn sq_fills_then_frees_as_the_device_consumes() {
        use crate::platform::{sim::SimPlatform, Platform};
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(pvrdma_sim::SimConfig::default()));
        let (mut sq, rq) = queues(&cap(2, 1, 1, 1)).unwrap();
        let buf = PagedBuf::new(&p, 1 + sq.pages() + rq.pages()).unwrap();
        assert_eq!(sq.next_slot(&buf), Ok(4096));
        sq.publish(&buf).unwrap();
        assert_eq!(sq.next_slot(&buf), Ok(4096 + 128));
        sq.publish(&buf).unwrap();
        assert_eq!(buf.data().load_u32(TX_PROD_TAIL), Ok(2));
        assert_eq!(sq.next_slot(&buf), Err(Error::QueueFull));
        buf.data().store_u32(TX_CONS_HEAD, 1).unwrap(); // the device took one
        assert_eq!(sq.next_slot(&buf), Ok(4096));
        buf.data().store_u32(TX_CONS_HEAD, 9).unwrap(); // out of range
        assert_eq!(sq.next_slot(&buf), Err(Error::DeviceFatal));
        buf.data().store_u32(TX_CONS_HEAD, 3).unwrap(); // ahead of the producer
        assert_eq!(sq.next_slot(&buf), Err(Error::DeviceFatal));
    }
}
