//! How the device arms a CQ, found at probe by asking the device itself (design decision 15):
//! IBTA devices arm for the next completion on `ARM`; QEMU 7.2 arms only on `ARM|ARM_SOL` and
//! takes `ARM` alone as "clear the arm". Names and capabilities do not tell them apart (QEMU
//! reports the real device's IDs), and the same device can be reached through the model, qtest or
//! VFIO, so the driver tests it on private objects: a CQ and a loopback QP pair.
//!
//! 1. Ring `ARM|ARM_SOL` (an arm on every pvrdma), complete one message, and time the interrupt:
//!    this measures how long an interrupt takes on this platform (microseconds in process,
//!    milliseconds over qtest).
//! 2. Ring `ARM` alone, complete one message, and wait for the interrupt for a window of sixteen
//!    times that (at least [`WINDOW_FLOOR`], at most [`WINDOW_MAX`]), counted from the moment the
//!    CQEs are in the ring: an interrupt means IBTA, none means QEMU 7.2.
//!
//! What the test leaves in the CQ-notification ring is consumed before its CQ goes, so nothing of
//! it reaches anyone. If the test cannot run (no completion, no interrupt for either encoding)
//! the driver falls back to the IBTA encoding with a warning: events then still come from the
//! periodic drain of the CQ-notification ring, which finds QEMU's per-CQE entries (solicited
//! arms are then early on QEMU 7.2, never late).
//!
//! Limits, by design: an IBTA device whose second interrupt comes later than the window is taken
//! for QEMU 7.2 — the safe side: `ARM|ARM_SOL` arms it for next, and only solicited-only arming is
//! lost (reported unsupported); override with `ProbeOptions::arm_encoding`.

use crate::cq::Cq;
use crate::device::DeviceInner;
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Qp;
use doorbell::{ArmEncoding, CqArmDoorbell};
use ib_core::provider::{CqError, CqEventHandler, CqOps, MrOps, QpCreate, QpEventHandler, QpOps};
use ib_core::{access, AhAttr, AsyncEventType, GlobalRoute, Mtu, QpAttr, QpAttrMask as M};
use ib_core::{QpCap, QpState, QpType, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest wait for an interrupt after the CQEs are in the ring.
pub const WINDOW_FLOOR: Duration = Duration::from_millis(50);
/// The longest wait for an interrupt after the CQEs are in the ring.
pub const WINDOW_MAX: Duration = Duration::from_secs(2);
/// Bound on a message's completion.
const COMPLETION_WAIT: Duration = Duration::from_secs(5);

/// The device's arm encoding, by test; IBTA (with a warning) if the test cannot tell.
pub(crate) fn arm_encoding(dev: &Arc<DeviceInner>) -> ArmEncoding {
    match detect(dev) {
        Ok(e) => {
            tracing::info!(?e, "CQ arm encoding found by self-test");
            e
        }
        Err(why) => {
            tracing::warn!(why, "cannot tell how the device arms CQs: IBTA encoding, events from the periodic ring drain");
            ArmEncoding::Ibta
        }
    }
}

fn detect(dev: &Arc<DeviceInner>) -> Result<ArmEncoding, String> {
    let lb = Loopback::new(dev).map_err(|e| format!("self-test objects: {e}"))?;
    let both = lb.interrupt_after(ArmEncoding::Qemu72, WINDOW_MAX)?;
    let window = both.map_or(WINDOW_MAX, |l| (l * 16).clamp(WINDOW_FLOOR, WINDOW_MAX));
    let arm_alone = lb.interrupt_after(ArmEncoding::Ibta, window)?;
    dev.eq.drain_notifications();
    match (both, arm_alone) {
        (_, Some(_)) => Ok(ArmEncoding::Ibta),
        (Some(_), None) => Ok(ArmEncoding::Qemu72),
        (None, None) => Err("no CQ interrupt for either arm encoding".into()),
    }
}

/// Takes every report of the test's objects (it counts interrupts, not reports).
struct Quiet;

impl CqEventHandler for Quiet {
    fn completion(&self) -> bool {
        true
    }
    fn recover_dropped(&self) -> bool {
        false
    }
    fn error(&self, _: CqError) -> bool {
        true
    }
}

impl QpEventHandler for Quiet {
    fn event(&self, _: AsyncEventType) -> bool {
        true
    }
}

/// A CQ and two RC QPs connected to each other through the device's port. Fields drop in order:
/// QPs, then CQ, MR and PD.
struct Loopback {
    a: Qp,
    b: Qp,
    cq: Cq,
    mr: Mr,
    _pd: Pd,
    dev: Arc<DeviceInner>,
}

impl Loopback {
    fn new(dev: &Arc<DeviceInner>) -> ib_core::Result<Self> {
        let pd = Pd::create(dev, None)?;
        let mr = Mr::alloc(&pd, 4096, access::LOCAL_WRITE)?;
        let cq = Cq::create(dev, None, 4, Arc::new(Quiet))?;
        let cap = QpCap { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let init = QpCreate { send_cq: &cq, recv_cq: &cq, cap, qp_type: QpType::Rc, sq_sig_all: true };
        let a = Qp::create(&pd, &init, Arc::new(Quiet))?;
        let b = Qp::create(&pd, &init, Arc::new(Quiet))?;
        connect(&a, b.qp_num(), dev.gid)?;
        connect(&b, a.qp_num(), dev.gid)?;
        Ok(Self { a, b, cq, mr, _pd: pd, dev: dev.clone() })
    }

    /// Arms the CQ the way `encoding` arms for the next completion, completes one message, and
    /// returns how long the CQ interrupt took, or `None` if none came within `window` of the
    /// CQEs reaching the ring.
    fn interrupt_after(&self, encoding: ArmEncoding, window: Duration) -> Result<Option<Duration>, String> {
        let irqs = || self.dev.health.stats().interrupts[2];
        let before = irqs();
        let start = Instant::now();
        CqArmDoorbell::new(self.dev.kernel_db.clone(), self.cq.handle(), encoding).arm_next();
        self.message().map_err(|e| format!("self-test message: {e}"))?;
        let deadline = Instant::now() + window;
        loop {
            if irqs() > before {
                return Ok(Some(start.elapsed()));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// One message a -> b; returns once both CQEs are polled.
    fn message(&self) -> ib_core::Result<()> {
        let sge = |off: u64| [Sge { addr: self.mr.addr() + off, length: 8, lkey: self.mr.lkey() }];
        self.b.post_recv(&RecvWr { wr_id: 1, sg_list: &sge(0) })?;
        let send = SendWr { wr_id: 2, sg_list: &sge(64), opcode: WrOpcode::Send, signaled: true, solicited: false };
        self.a.post_send(&send)?;
        let (mut got, mut wc) = (0, [Wc::default(); 2]);
        let done = ib_core::time::poll_until(COMPLETION_WAIT, || {
            let n = self.cq.poll(&mut wc).unwrap_or(0);
            got += wc[..n].iter().filter(|w| w.status == WcStatus::Success).count();
            got >= 2
        });
        if done {
            Ok(())
        } else {
            Err(ib_core::Error::Timeout)
        }
    }
}

/// RESET -> INIT -> RTR -> RTS towards `dest` through GID index 0 of port 1.
fn connect(qp: &Qp, dest: u32, gid: ib_core::Gid) -> ib_core::Result<()> {
    let init = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: access::LOCAL_WRITE, ..Default::default() };
    qp.modify(&init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)?;
    let grh = GlobalRoute { dgid: gid, hop_limit: 64, ..Default::default() };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::MTU_256,
        dest_qp_num: dest,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AhAttr { grh, is_global: true, port_num: 1, ..Default::default() },
        ..Default::default()
    };
    let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    qp.modify(&rtr, m)?;
    let rts = QpAttr { qp_state: QpState::Rts, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1, ..Default::default() };
    qp.modify(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC)
}
