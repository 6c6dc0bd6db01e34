//! How the device arms a CQ, found at probe by asking the device itself (design decision 15):
//! IBTA devices arm for the next completion on `ARM`; QEMU 7.2 arms only on `ARM|ARM_SOL` and
//! takes `ARM` alone as "clear the arm". Names and capabilities do not tell them apart (QEMU
//! reports the real device's IDs), and the same device can be reached through the model, qtest or
//! VFIO, so the driver tests it on private objects: two CQs, each with a loopback QP pair.
//!
//! The test reads the CQ-notification ring, not interrupts, so a masked vector or a late
//! interrupt cannot mislead it:
//! 1. A message completes on the *unarmed* CQ. QEMU 7.2 writes a notification entry for every
//!    CQE, armed or not; an IBTA device writes none.
//! 2. The ring is drained, then the *armed* CQ is armed with `ARM` alone and a message completes
//!    on it. An IBTA device fires the arm and writes an entry. (QEMU 7.2 writes its per-CQE
//!    entries.) Entries naming the armed CQ count only from its arm on.
//!
//! Any entry for the unarmed CQ means QEMU 7.2. IBTA needs none for the unarmed CQ, at least one
//! for the armed CQ, and the ring never found full meanwhile (a full ring drops entries). The test
//! waits (bounded) for the entries the device owes, so none outlives its CQ, and consumes them,
//! and on IBTA for the arm's interrupt to be taken;
//! the probe then zeroes the driver's counters, so nothing of it reaches anyone.
//!
//! Anything else — no entry within [`ENTRY_WAIT`], a message that does not complete, entries that
//! fit neither device, a full ring — falls back to the QEMU 7.2 encoding with a warning:
//! `ARM|ARM_SOL` arms for the next completion on every pvrdma we know, while `ARM` alone would
//! disarm QEMU 7.2; only solicited-only arming is lost (reported unsupported). Override with
//! `ProbeOptions::arm_encoding`.

use crate::cq::Cq;
use crate::device::DeviceInner;
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Qp;
use doorbell::ArmEncoding;
use ib_core::provider::{CqDelivery, CqError, CqEventHandler, CqOps, MrOps, QpCreate, QpEventHandler, QpOps};
use ib_core::time::poll_until;
use ib_core::{access, AhAttr, AsyncEventType, GidType, GlobalRoute, Mtu, QpAttr, QpAttrMask as M};
use ib_core::{QpCap, QpState, QpType, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode};
use pvrdma_abi::regs::IntrVector;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The longest wait for the CQ-notification entry that decides the test.
pub const ENTRY_WAIT: Duration = Duration::from_secs(2);
/// The longest wait, once decided, for the entries the device still owes.
const OWED_WAIT: Duration = Duration::from_millis(500);
/// Bound on a message's completion.
const COMPLETION_WAIT: Duration = Duration::from_secs(5);

/// The device's arm encoding, by test; QEMU 7.2's (with a warning) if the test cannot tell.
pub(crate) fn arm_encoding(dev: &Arc<DeviceInner>) -> ArmEncoding {
    match detect(dev) {
        Ok(e) => {
            tracing::info!(?e, "CQ arm encoding found by self-test");
            e
        }
        Err(why) => {
            tracing::warn!(why, "cannot tell how the device arms CQs: ARM|ARM_SOL for next, no solicited-only arming");
            ArmEncoding::Qemu72
        }
    }
}

fn detect(dev: &Arc<DeviceInner>) -> Result<ArmEncoding, String> {
    let objects = |w| Loopback::new(dev, w).map_err(|e| format!("self-test objects: {e}"));
    let (unarmed, armed) = (objects(Witness::new(true))?, objects(Witness::new(false))?);
    let message = |lb: &Loopback| lb.message().map_err(|e| format!("self-test message: {e}"));
    // Whatever the ring holds from before is spent first: a ring full from then is no reason to
    // doubt the test, one found full from now on is.
    dev.eq.drain_notifications();
    let full_before = dev.health.stats().notify_ring_full;
    message(&unarmed)?;
    dev.eq.drain_notifications();
    armed.witness.counting.store(true, Ordering::Release);
    let irqs = || dev.health.stats().interrupts[IntrVector::Cq as usize];
    let irqs_before = irqs();
    // The IBTA encoding's arm: on QEMU 7.2 it clears the arm instead, which is what tells them apart.
    dev.kernel_db
        .cq_arm_next(&armed.cq.doorbell_handle(), ArmEncoding::Ibta)
        .map_err(|e| format!("arm doorbell: {e}"))?;
    message(&armed)?;
    let counts = || {
        dev.eq.drain_notifications();
        (unarmed.witness.entries(), armed.witness.entries())
    };
    poll_until(ENTRY_WAIT, || counts() != (0, 0));
    let (encoding, owed) = match counts() {
        (0, 0) => return Err("the device wrote no CQ-notification entry".into()),
        (0, _) => (ArmEncoding::Ibta, (0, 1)),
        _ => (ArmEncoding::Qemu72, (2, 2)),
    };
    // On IBTA the arm's interrupt is owed too: taken now, it is not counted after the probe
    // zeroes the counters (a masked vector makes this wait its bound, nothing more).
    let irq_owed = encoding == ArmEncoding::Ibta;
    poll_until(OWED_WAIT, || {
        let (u, a) = counts();
        u >= owed.0 && a >= owed.1 && (!irq_owed || irqs() > irqs_before)
    });
    if dev.health.stats().notify_ring_full != full_before {
        return Err("the CQ-notification ring filled during the test".into());
    }
    match (encoding, counts()) {
        (ArmEncoding::Ibta, (u, _)) if u != 0 => {
            Err(format!("entries fit neither device: {u} for the unarmed CQ late"))
        }
        _ => Ok(encoding),
    }
}

/// A test CQ's handler: counts the CQ-notification entries naming the CQ once `counting`.
struct Witness {
    counting: AtomicBool,
    entries: AtomicU32,
}

impl Witness {
    fn new(counting: bool) -> Arc<Self> {
        Arc::new(Self { counting: AtomicBool::new(counting), entries: AtomicU32::new(0) })
    }

    fn entries(&self) -> u32 {
        self.entries.load(Ordering::Acquire)
    }
}

impl CqEventHandler for Witness {
    fn completion(&self) -> Option<CqDelivery> {
        if self.counting.load(Ordering::Acquire) {
            self.entries.fetch_add(1, Ordering::AcqRel);
        }
        Some(CqDelivery::none())
    }
    fn recover_dropped(&self) -> Option<CqDelivery> {
        None
    }
    fn error(&self, _: CqError) -> bool {
        true
    }
}

/// Takes every event of the test's QPs.
struct Quiet;

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
    witness: Arc<Witness>,
    mr: Mr,
    _pd: Pd,
}

impl Loopback {
    fn new(dev: &Arc<DeviceInner>, witness: Arc<Witness>) -> ib_core::Result<Self> {
        let pd = Pd::create(dev, None)?;
        let mr = Mr::alloc(&pd, 4096, access::LOCAL_WRITE)?;
        let cq = Cq::create(dev, None, 4, witness.clone())?;
        let cap = QpCap { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let init = QpCreate { send_cq: &cq, recv_cq: &cq, cap, qp_type: QpType::Rc, sq_sig_all: true, srq: None };
        let a = Qp::create(&pd, &init, Arc::new(Quiet))?;
        let b = Qp::create(&pd, &init, Arc::new(Quiet))?;
        // A RoCE v2 port sends only from a RoCE v2 GID: the first one when the probe bound any.
        let (index, gid) = dev.gids.first(GidType::RoceV2).unwrap_or((0, dev.gid0()));
        connect(&a, b.qp_num(), index, gid)?;
        connect(&b, a.qp_num(), index, gid)?;
        Ok(Self { a, b, cq, witness, mr, _pd: pd })
    }

    /// One message a -> b; returns once both CQEs are polled.
    fn message(&self) -> ib_core::Result<()> {
        let sge = |off: u64| [Sge { addr: self.mr.addr() + off, length: 8, lkey: self.mr.lkey() }];
        self.b.post_recv(&[RecvWr { wr_id: 1, sg_list: &sge(0) }]).map_err(|(_, e)| e)?;
        let send = SendWr { wr_id: 2, sg_list: &sge(64), opcode: WrOpcode::Send, signaled: true, solicited: false };
        self.a.post_send(&[send]).map_err(|(_, e)| e)?;
        let (mut got, mut wc) = (0, [Wc::default(); 2]);
        let done = poll_until(COMPLETION_WAIT, || {
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

/// RESET -> INIT -> RTR -> RTS towards `dest` at `gid`, from GID `index` of port 1.
fn connect(qp: &Qp, dest: u32, index: u32, gid: ib_core::Gid) -> ib_core::Result<()> {
    let init =
        QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: access::LOCAL_WRITE, ..Default::default() };
    let sgid_index = u8::try_from(index).map_err(|_| ib_core::Error::InvalidArgument("GID index"))?;
    let grh = GlobalRoute { dgid: gid, sgid_index, hop_limit: 64, ..Default::default() };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::MTU_256,
        dest_qp_num: dest,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AhAttr { grh, is_global: true, port_num: 1, ..Default::default() },
        ..Default::default()
    };
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let mut cur = QpState::Reset;
    for attr in [init, rtr, rts] {
        let mask = ib_core::qp_state::required(cur, attr.qp_state, QpType::Rc).unwrap_or(M::STATE);
        qp.modify(&attr, mask)?;
        cur = attr.qp_state;
    }
    Ok(())
}
