//! Queue pairs (`ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_post_send`,
//! `ibv_post_recv`, `ibv_destroy_qp`): the transition and posting rules of IBTA, the full
//! attribute interface, and the QP's async events.
//!
//! Posting follows IBTA 11.4.1 and rdma-core's pvrdma provider: a send is refused only before RTS
//! (RESET, INIT, RTR), a receive only in RESET; in any other state (ERR included) the work
//! request goes to the device, which completes it — with `WR_FLUSH_ERR` and its `wr_id` in ERR.
//! The state these rules read is the one last set or queried; [`Qp::state`] asks the device,
//! which may have moved the QP to ERR on its own (e.g. after its CQ overflowed).

use crate::attr::{AhAttr, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType};
use crate::context::ContextInner;
use crate::cq::{Cq, CqInner, DROP_ACK_WAIT};
use crate::error::{Error, Result};
use crate::events::async_event::{AsyncElement, AsyncEvent, AsyncEventType};
use crate::events::delivery::Deliveries;
use crate::events::refs::QpRef;
use crate::events::upcall::in_callback;
use crate::pd::{Pd, PdInner};
use crate::provider::{QpCreate, QpEventHandler, QpOps};
use crate::qp_state;
use crate::srq::{Srq, SrqInner};
use crate::time::deadline_after;
use crate::wr::{RecvWr, SendWr};
use parking_lot::RwLock;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The 24 bits of a PSN (IBTA 9.7.1).
const MASK_24: u32 = 0x00ff_ffff;

/// QP creation attributes (`ibv_qp_init_attr`).
pub struct QpInitAttr<'a> {
    /// CQ for send completions (of the PD's context).
    pub send_cq: &'a Cq,
    /// CQ for receive completions (of the PD's context).
    pub recv_cq: &'a Cq,
    /// Queue sizes.
    pub cap: QpCap,
    /// Transport service.
    pub qp_type: QpType,
    /// Every send WR produces a CQE, whatever its `signaled` flag.
    pub sq_sig_all: bool,
    /// The consumer's value, carried by the QP's async events.
    pub qp_context: u64,
    /// The SRQ its receives come from (of the PD's context), or `None` for its own RQ. With an
    /// SRQ, `cap.max_recv_wr` and `cap.max_recv_sge` are ignored (libibverbs) and
    /// [`Qp::post_recv`] is refused.
    pub srq: Option<&'a Srq>,
}

/// What the provider reports a QP's async events to.
struct QpEvents {
    qp: QpRef,
    ctx: Arc<ContextInner>,
    deliveries: Deliveries,
}

impl QpEventHandler for QpEvents {
    fn event(&self, event: AsyncEventType) -> bool {
        let Some(_d) = self.deliveries.enter() else { return false };
        let element = AsyncElement::Qp(self.qp.clone());
        self.ctx.async_events.dispatch(AsyncEvent { event_type: event, element });
        true
    }
}

/// A queue pair. Dropping it destroys it ([`Qp::destroy`] with a wait of 2 s for its async
/// events to be acknowledged, then logged).
pub struct Qp {
    pd: Arc<PdInner>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    ops: Option<Box<dyn QpOps>>,
    events: Arc<QpEvents>,
    qp_type: QpType,
    /// The SRQ it receives from (held: the SRQ refuses destruction while the QP exists).
    srq: Option<Arc<SrqInner>>,
    /// The state last set by a modify or read by a query, and the port last set.
    /// Written by modify and query (held across their commands); read by posts, held across
    /// the post, so no WQE is written after a modify to RESET emptied the rings (IBTA 10.3.1).
    cached: RwLock<Cached>,
}

struct Cached {
    state: QpState,
    port: u8,
}

impl Pd {
    /// Creates a QP in this PD (`ibv_create_qp`), in RESET.
    ///
    /// A [`QpType::Gsi`] QP is the port's QP1: only in the kernel's context, without an SRQ.
    ///
    /// Errors: [`Error::InvalidArgument`] for CQs of another context, 0 work requests or sizes
    /// beyond the device's caps, a GSI QP in a user context or on an SRQ; [`Error::InvalidState`]
    /// for a CQ being destroyed;
    /// [`Error::DeviceFatal`]; provider errors.
    pub fn create_qp(&self, attr: &QpInitAttr<'_>) -> Result<Qp> {
        let pd = &self.inner;
        pd.ctx.live()?;
        if attr.qp_type == QpType::Gsi && (pd.ctx.uctx.is_some() || attr.srq.is_some()) {
            // Linux's providers refuse special QPs to user space (`mthca_create_qp`: "Don't allow
            // userspace to create special QPs"); the GSI QP has its own receive queue.
            return Err(Error::InvalidArgument("the GSI QP is the kernel's, on its own receive queue"));
        }
        for cq in [attr.send_cq, attr.recv_cq] {
            if !Arc::ptr_eq(&cq.inner.ctx, &pd.ctx) {
                return Err(Error::InvalidArgument("CQ of another device or context"));
            }
        }
        if attr.srq.is_some_and(|s| !s.of_context(&pd.ctx)) {
            return Err(Error::InvalidArgument("SRQ of another device or context"));
        }
        let mut cap = attr.cap;
        if attr.srq.is_some() {
            (cap.max_recv_wr, cap.max_recv_sge) = (0, 0);
        }
        check_cap(&cap, &pd.ctx, attr.srq.is_some())?;
        let cqs = [attr.send_cq, attr.recv_cq];
        // Counted first, then the CQs' closing flags: a CQ being destroyed sees the count or this
        // sees its flag (SeqCst), never neither.
        for cq in cqs {
            cq.inner.users.fetch_add(1, Ordering::SeqCst);
        }
        let release = || {
            for cq in cqs {
                cq.inner.users.fetch_sub(1, Ordering::SeqCst);
            }
        };
        if cqs.iter().any(|cq| cq.inner.closing.load(Ordering::SeqCst)) {
            release();
            return Err(Error::InvalidState);
        }
        let create = QpCreate {
            send_cq: &*attr.send_cq.inner.ops,
            recv_cq: &*attr.recv_cq.inner.ops,
            cap,
            qp_type: attr.qp_type,
            sq_sig_all: attr.sq_sig_all,
            srq: attr.srq.map(|s| s.inner.ops()),
        };
        let late = Arc::new(LateQp(std::sync::OnceLock::new()));
        let ops = pd.ctx.device.ops.create_qp(&*pd.ops, &create, late.clone()).inspect_err(|_| release())?;
        let events = Arc::new(QpEvents {
            qp: QpRef::new(ops.qp_num(), attr.qp_context),
            ctx: pd.ctx.clone(),
            deliveries: Deliveries::default(),
        });
        let _ = late.0.set(events.clone());
        pd.hold();
        let srq = attr.srq.map(|s| s.inner.clone());
        if let Some(s) = &srq {
            s.users.fetch_add(1, Ordering::AcqRel);
        }
        Ok(Qp {
            srq,
            pd: pd.clone(),
            send_cq: attr.send_cq.inner.clone(),
            recv_cq: attr.recv_cq.inner.clone(),
            ops: Some(ops),
            events,
            qp_type: attr.qp_type,
            cached: RwLock::new(Cached { state: QpState::Reset, port: 1 }),
        })
    }
}

/// The handler the provider gets at create, forwarding once the QP's events exist.
struct LateQp(std::sync::OnceLock<Arc<QpEvents>>);

impl QpEventHandler for LateQp {
    fn event(&self, event: AsyncEventType) -> bool {
        self.0.get().is_some_and(|e| e.event(event))
    }
}

fn check_cap(cap: &QpCap, ctx: &ContextInner, with_srq: bool) -> Result<()> {
    let a = ctx.device.ops.query_device();
    let wr_ok = |n: u32| (1..=a.max_qp_wr).contains(&n);
    if !wr_ok(cap.max_send_wr) || !(with_srq || wr_ok(cap.max_recv_wr)) {
        return Err(Error::InvalidArgument("work request count out of range"));
    }
    if cap.max_send_sge > a.max_sge || cap.max_recv_sge > a.max_sge {
        return Err(Error::InvalidArgument("SGE count out of range"));
    }
    Ok(())
}

impl Qp {
    /// The provider's QP, if it is a `T`.
    pub fn provider_qp<T: 'static>(&self) -> Option<&T> {
        self.ops.as_deref()?.as_any().downcast_ref()
    }

    fn ops(&self) -> &dyn QpOps {
        self.ops.as_deref().expect("a QP's provider object lives until its drop")
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.ops().qp_num()
    }

    /// What this QP's async events carry (its number and `qp_context`).
    pub fn qp_ref(&self) -> &QpRef {
        &self.events.qp
    }

    /// The send CQ's handle.
    pub fn send_cq_handle(&self) -> u32 {
        self.send_cq.ops.handle()
    }

    /// The receive CQ's handle.
    pub fn recv_cq_handle(&self) -> u32 {
        self.recv_cq.ops.handle()
    }

    /// Modifies the QP (`ibv_modify_qp`): the fields of `attr` that `mask` names. The arguments
    /// are checked as Linux checks them before a device sees them — `ib_uverbs`'s `modify_qp`
    /// (ports), `_ib_modify_qp` (the address vector's route and source GID, PSNs), then the
    /// driver's `pvrdma_modify_qp` (IBTA's transition table through `ib_modify_qp_is_ok`, the
    /// RNR timer, the P_Key index) — and only so: every other value (path MTU, timeouts, retry
    /// counts, RDMA READ depths, access flags, destination QPN, the address vector's SL, rate,
    /// hop limit, flow label) goes to the device as given, which keeps what its fields hold.
    ///
    /// Errors: [`Error::InvalidState`] for an illegal transition or a `CUR_STATE` the QP cannot
    /// be in (see [`qp_state::claim_possible`]); [`Error::InvalidArgument`] for a mask the
    /// transition does not take, a port the device lacks (an address vector's at RTR other than
    /// the QP's), an address vector without a global route (RoCE), an `sgid_index` beyond the
    /// GID table, an alternate path (Linux refuses path migration on RoCE), a `min_rnr_timer`
    /// above 31 or a P_Key index beyond the table; [`Error::NoData`] for an `sgid_index` naming
    /// an empty GID entry; [`Error::DeviceFatal`]; provider errors.
    pub fn modify_qp(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.pd.ctx.live()?;
        let mut cached = self.cached.write();
        let (attr, mask) = self.route_checks(attr, mask, cached.port)?;
        let claim = mask.contains(QpAttrMask::CUR_STATE);
        if claim && !qp_state::claim_possible(cached.state, attr.cur_qp_state) {
            return Err(Error::InvalidState);
        }
        let cur = if claim { attr.cur_qp_state } else { cached.state };
        let next = if mask.contains(QpAttrMask::STATE) { attr.qp_state } else { cur };
        qp_state::check(cur, next, self.qp_type, mask)?;
        self.driver_checks(&attr, mask)?;
        self.ops().modify(&attr, mask)?;
        cached.state = next;
        if mask.contains(QpAttrMask::PORT) {
            cached.port = attr.port_num;
        }
        tracing::debug!(qpn = self.qpn(), ?cur, ?next, "QP modified");
        Ok(())
    }

    /// The checks Linux makes before the driver sees a modify (`ib_uverbs`'s `modify_qp`, then
    /// `_ib_modify_qp` with `rdma_fill_sgid_attr`), with the attributes and mask they leave:
    /// `PORT` added to an `AV` outside INIT -> RTR (uverbs does, so that the device moves the
    /// QP's port with its path), PSNs masked to their 24 bits (`_ib_modify_qp` masks, with a
    /// warning, rather than refuse). `qp_port` is the port the QP's INIT set.
    fn route_checks(&self, attr: &QpAttr, mask: QpAttrMask, qp_port: u8) -> Result<(QpAttr, QpAttrMask)> {
        let dev = &self.pd.ctx.device.ops;
        let ports = dev.query_device().phys_port_cnt;
        let port_ok = |p: u8| (1..=ports).contains(&p);
        let has = |m| mask.contains(m);
        let (mut a, mut mask) = (*attr, mask);
        if has(QpAttrMask::PORT) && !port_ok(a.port_num) {
            return Err(Error::InvalidArgument("no such port"));
        }
        if has(QpAttrMask::AV) {
            let av_port = a.ah_attr.port_num;
            if !port_ok(av_port) {
                return Err(Error::InvalidArgument("no such port in the address vector"));
            }
            if has(QpAttrMask::STATE) && a.qp_state == QpState::Rtr {
                if av_port != qp_port {
                    return Err(Error::InvalidArgument("the address vector's port is not the QP's"));
                }
            } else if has(QpAttrMask::PORT) {
                if a.port_num != av_port {
                    return Err(Error::InvalidArgument("the address vector's port is not the one set"));
                }
            } else {
                mask |= QpAttrMask::PORT;
                a.port_num = av_port;
            }
            // rdma_check_ah_attr: a RoCE port's address vector carries a GRH (IBTA A16.4.1).
            if !a.ah_attr.is_global {
                return Err(Error::InvalidArgument("RoCE needs a global route (is_global)"));
            }
            let index = u32::from(a.ah_attr.grh.sgid_index);
            if index >= dev.query_port(av_port)?.gid_tbl_len {
                return Err(Error::InvalidArgument("sgid_index beyond the GID table"));
            }
            if dev.query_gid(av_port, index)? == [0; 16] {
                return Err(Error::NoData("sgid_index names an empty GID entry"));
            }
        }
        if has(QpAttrMask::ALT_PATH) {
            // uverbs checks the alternate ports; _ib_modify_qp then bans alternate paths (and
            // path migration) on RoCE: pvrdma's every port is RoCE.
            return Err(Error::InvalidArgument("alternate paths on RoCE"));
        }
        a.rq_psn &= MASK_24;
        a.sq_psn &= MASK_24;
        Ok((a, mask))
    }

    /// The checks of Linux's `pvrdma_modify_qp` beyond the transition table: `min_rnr_timer`
    /// fits its 5 bits, the P_Key index the device's table.
    fn driver_checks(&self, a: &QpAttr, mask: QpAttrMask) -> Result<()> {
        if mask.contains(QpAttrMask::MIN_RNR_TIMER) && a.min_rnr_timer > 31 {
            return Err(Error::InvalidArgument("min_rnr_timer above 31"));
        }
        let max_pkeys = self.pd.ctx.device.ops.query_device().max_pkeys;
        if mask.contains(QpAttrMask::PKEY_INDEX) && a.pkey_index >= max_pkeys {
            return Err(Error::InvalidArgument("P_Key index beyond the table"));
        }
        Ok(())
    }

    /// Asks the device for the QP's attributes (`ibv_query_qp`): those `mask` names (the device
    /// may fill in more). The state read becomes the one the posting rules use.
    ///
    /// Errors: [`Error::DeviceFatal`]; provider errors.
    pub fn query_qp(&self, mask: QpAttrMask) -> Result<QpAttr> {
        self.pd.ctx.live()?;
        // Held across the command, as modify_qp holds it: a query that raced a modify never
        // stores a state older than the modify's.
        let mut cached = self.cached.write();
        let a = self.ops().query(mask)?;
        if mask.contains(QpAttrMask::STATE) {
            cached.state = a.qp_state;
        }
        Ok(a)
    }

    /// What the transition `cur -> next` requires, for the `modify_to_*` helpers (whose
    /// transitions are legal, so the table has them).
    fn required(&self, cur: QpState, next: QpState) -> QpAttrMask {
        qp_state::required(cur, next, self.qp_type).unwrap_or(QpAttrMask::STATE)
    }

    /// The QP's state as the device has it now (a QUERY_QP).
    pub fn state(&self) -> Result<QpState> {
        Ok(self.query_qp(QpAttrMask::STATE)?.qp_state)
    }

    /// RESET -> INIT on `port` with remote `access` flags and P_Key index 0.
    pub fn modify_to_init(&self, port: u8, access: u32) -> Result<()> {
        let a = QpAttr { qp_state: QpState::Init, port_num: port, qp_access_flags: access, ..Default::default() };
        self.modify_qp(&a, self.required(QpState::Reset, QpState::Init))
    }

    /// INIT -> RTR towards QP `dest_qpn` at `dgid` through GID index 0 of the QP's port (the one
    /// its INIT set), expecting PSN `rq_psn`, path MTU `path_mtu_bytes`; hop limit 64, min RNR
    /// timer 12 (0.64 ms), one outstanding RDMA READ as responder (the values rdma-core's
    /// examples use). For other values use [`Qp::modify_qp`].
    pub fn modify_to_rtr(&self, dest_qpn: u32, dgid: Gid, rq_psn: u32, path_mtu_bytes: u32) -> Result<()> {
        let mtu = Mtu::from_bytes(path_mtu_bytes).ok_or(Error::InvalidArgument("path MTU"))?;
        let grh = GlobalRoute { dgid, sgid_index: 0, hop_limit: 64, ..Default::default() };
        let a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: mtu,
            dest_qp_num: dest_qpn,
            rq_psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: AhAttr { grh, is_global: true, port_num: self.cached.read().port, ..Default::default() },
            ..Default::default()
        };
        self.modify_qp(&a, self.required(QpState::Init, QpState::Rtr))
    }

    /// RTR -> RTS sending from PSN `sq_psn`, with timeout 14 (67 ms), 7 retries, 7 RNR retries
    /// (infinite) and one outstanding RDMA READ. For other values use [`Qp::modify_qp`].
    pub fn modify_to_rts(&self, sq_psn: u32) -> Result<()> {
        let a = QpAttr {
            qp_state: QpState::Rts,
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify_qp(&a, self.required(QpState::Rtr, QpState::Rts))
    }

    /// Any state -> ERR: outstanding work requests complete with `WR_FLUSH_ERR`.
    pub fn modify_to_err(&self) -> Result<()> {
        self.modify_qp(&QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE)
    }

    /// Posts one send work request (IBTA 11.4.1.1).
    ///
    /// Errors: [`Error::InvalidState`] before RTS (RESET, INIT, RTR); in ERR the request is
    /// posted and completes with `WR_FLUSH_ERR`; [`Error::InvalidArgument`] for more SGEs than the
    /// QP takes; [`Error::QueueFull`]; [`Error::DeviceFatal`].
    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<()> {
        self.post_send_list(std::slice::from_ref(wr)).map_err(|(_, e)| e)
    }

    /// Posts send work requests in order with one doorbell for all (`ibv_post_send` with a chain
    /// of work requests). An empty list posts nothing.
    ///
    /// Errors: `(index, error)` for the first request not posted (libibverbs's `bad_wr`), with
    /// the errors of [`Qp::post_send`]; the requests before it are posted and will complete.
    pub fn post_send_list(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.pd.ctx.live().map_err(|e| (0, e))?;
        let cached = self.cached.read();
        if cached.state < QpState::Rts {
            return Err((0, Error::InvalidState));
        }
        self.ops().post_send(wrs)
    }

    /// Posts one receive work request (IBTA 11.4.1.2).
    ///
    /// Errors: [`Error::InvalidState`] in RESET; in ERR the request is posted and completes with
    /// `WR_FLUSH_ERR`; [`Error::InvalidArgument`] (also for a QP on an SRQ);
    /// [`Error::QueueFull`]; [`Error::DeviceFatal`].
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<()> {
        self.post_recv_list(std::slice::from_ref(wr)).map_err(|(_, e)| e)
    }

    /// Posts receive work requests in order with one doorbell for all (`ibv_post_recv` with a
    /// chain). Errors: as [`Qp::post_send_list`], with the errors of [`Qp::post_recv`].
    pub fn post_recv_list(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.pd.ctx.live().map_err(|e| (0, e))?;
        if self.srq.is_some() {
            // As Linux rxe and rdma-core's providers: a QP on an SRQ has no RQ to post to.
            return Err((0, Error::InvalidArgument("the QP receives from an SRQ")));
        }
        let cached = self.cached.read();
        if cached.state == QpState::Reset {
            return Err((0, Error::InvalidState));
        }
        self.ops().post_recv(wrs)
    }

    /// Destroys the QP (`ibv_destroy_qp`), waiting up to `wait` for the async events taken for it
    /// to be acknowledged.
    ///
    /// Errors: [`Error::EventsNotAcked`] (the QP is handed back); [`Error::WouldDeadlock`] from
    /// inside the async handler running for this QP.
    pub fn destroy(self, wait: Option<Duration>) -> std::result::Result<(), (Qp, Error)> {
        if in_callback(self.events.qp.uid()) {
            return Err((self, Error::WouldDeadlock("destroying a QP from inside its own async handler")));
        }
        let fatal = || self.pd.ctx.live().is_err();
        let left = self.events.qp.0.async_.wait_acked(deadline_after(wait.unwrap_or(Duration::ZERO)), fatal);
        if left > 0 {
            return Err((self, Error::EventsNotAcked(left)));
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // Nothing more is delivered, what is queued and not taken goes, then those taken in the
        // race with `destroy`'s check are waited for (bounded; a fatal device ends the wait).
        let uid = self.events.qp.uid();
        self.events.deliveries.quiesce(true, uid);
        self.pd.ctx.async_events.purge(uid);
        let fatal = || self.pd.ctx.live().is_err();
        let acks = &self.events.qp.0.async_;
        if !in_callback(uid) && acks.wait_acked(deadline_after(DROP_ACK_WAIT), fatal) > 0 {
            tracing::warn!(qpn = self.events.qp.qp_num(), "QP destroyed with unacknowledged async events");
        }
        drop(self.ops.take());
        self.pd.release();
        for cq in [&self.send_cq, &self.recv_cq] {
            cq.users.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(s) = self.srq.take() {
            s.users.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qp({}, {:?})", self.qpn(), self.cached.read().state)
    }
}
