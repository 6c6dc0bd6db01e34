//! One set of test bodies for three devices: the model with its IBTA profile, the model with its
//! QEMU 7.2 profile, and QEMU 7.2's real pvrdma (over qtest, `tests/tests/qemu_real.rs`). Each body
//! checks what every side does; where the sides differ on purpose the body says so by name
//! ([`Difference`]) and checks each side's own behaviour. Any other disagreement is a model bug.
//!
//! Rules these bodies follow (`shared/design.md`, decision 13): interrupts are the driver's count
//! (`Pvrdma::stats`), never a sticky mailbox; "no event" is asserted only after the CQE has been
//! polled from the ring; capabilities are compared by rule, not by value (QEMU's come from rxe).
//! Every target is probed the default way: how the device arms CQs is found by the driver's
//! self-test, never declared.

use crate::fixture::{cap, cq_handle, doorbells, pair, pv, raw_doorbell, rc_qp, stats, uar_page, Pair};
use crate::qemu::{backend_gid, QemuPeer};
use doorbell::{ArmEncoding, DoorbellError, DoorbellOp};
use hca::{Platform, ProbeOptions};
use ib_core::{access, AhAttr, AsyncEventType, CompChannel, Cq, Device, Error, GlobalRoute, Mtu};
use ib_core::{NotifyFlags, PortState, QpAttr, QpAttrMask as M, QpState, Wc};
use ib_core::{WcOpcode, WcStatus, WrOpcode};
use pvrdma_abi::regs::REG_VERSION;
use pvrdma_abi::uar::UAR_HANDLE_MASK;
use pvrdma_sim::Profile;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The deliberate differences between the model and QEMU 7.2 that these bodies name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difference {
    /// IBTA arming: the model's default profile arms on `ARM` (next) and `ARM_SOL` (solicited);
    /// QEMU 7.2 arms only on `ARM|ARM_SOL` (any completion), clears the arm on `ARM` alone and
    /// ignores `ARM_SOL` alone.
    IbtaArming,
    /// QEMU writes a CQ-notification entry for every CQE, armed or not; the IBTA model writes one
    /// only when an arm fires.
    NotificationPerCqe,
    /// The model refuses a doorbell rung on a UAR page for a handle of another context; QEMU
    /// looks only at the offset within the page and rings any handle.
    OwnershipChecks,
    /// The IBTA model reports a full CQ as CQ_ERR (Overrun) and puts the CQ in error; QEMU 7.2
    /// drops the new CQE silently and carries on.
    CqOverflowReporting,
    /// QEMU 7.2 reports port 1 DOWN while the vmxnet3 at function 0 is not active, and nothing
    /// activates it here (there is no guest OS); the model has no function 0 and reports ACTIVE.
    /// The data path works either way.
    PortStateFollowsFunction0,
    /// QEMU 7.2 hands every send WQE to its backend as a signaled plain SEND: the opcode's
    /// immediate data, the solicited flag and "unsignaled" are lost (a SEND_WITH_IMM arrives as a
    /// RECV without immediate; an unsignaled send completes anyway). The model follows IBTA.
    SendWqeFlattened,
    /// QEMU 7.2 passes only some MODIFY_QP attributes to its backend (state, GIDs, destination
    /// QPN, Q_Key, PSNs: its backend picks the path MTU, timeout and retries itself), and answers
    /// QUERY_QP by casting the backend's `ibv_qp_attr` onto `pvrdma_qp_attr`: the fields up to
    /// `qp_access_flags` (state, MTU, Q_Key, PSNs, destination QPN) are the backend's, the rest
    /// (timeout, retries, address vector) come from other offsets. The model stores and returns
    /// every attribute as set.
    QueryQpLayout,
    /// QEMU 7.2 keeps a move to ERR to itself: it records the state but never moves its backend
    /// QP, so QUERY_QP (answered by the backend) still reads RTS and work requests posted
    /// afterwards are carried out, not flushed. The model flushes them with WR_FLUSH_ERR (IBTA).
    ErrStateNotPassedOn,
    /// A UD receive's GRH area on QEMU 7.2 is what its backend (rxe, RoCE v2 only) writes: for
    /// the IPv4-mapped GID, 20 zero bytes then the IPv4 header, whatever type the guest bound the
    /// GID as. The model's loopback port carries the GID's own type: for the RoCE v1 GID the
    /// driver binds at index 0, an IB GRH (IPv6 layout, next header 0x1B) with the GIDs.
    UdGrhFromBackend,
    /// QEMU 7.2 leaves the DSR's `atomic_ops` 0 (so `atomic_cap` reads NONE), and so does the
    /// model's QEMU profile; the IBTA model reports compare-and-swap and fetch-and-add
    /// (`ATOMIC_HCA`).
    NoAtomicCaps,
    /// QEMU 7.2 carries an atomic WQE to its backend as a plain SEND of the 8-byte SGE (as every
    /// send WQE): the peer's next receive WQE takes those 8 bytes, the target memory is not
    /// touched, no original value comes back, and the SEND completion does not match the atomic
    /// posted (the driver reports it as `GeneralErr`). Both model profiles execute the atomic.
    AtomicsAsSend,
    /// QEMU 7.2 names RESIZE_CQ in its command table without a handler: it writes no response
    /// (the ack stays 0), sets `REG_ERR` to 0xffff and raises the command interrupt. The driver's
    /// probe reads that as "no RESIZE_CQ" and answers EOPNOTSUPP (so does the model's QEMU 7.2
    /// profile); the IBTA model resizes, keeping the queued CQEs in order.
    NoResizeCq,
}

/// Which device a body runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The in-process model with a conformance profile.
    Model(Profile),
    /// QEMU 7.2's pvrdma.
    Qemu72,
}

impl Side {
    /// Whether the device follows QEMU 7.2's observable behaviour (the real one, or the model's
    /// QEMU profile).
    pub fn qemu_like(self) -> bool {
        matches!(self, Side::Qemu72 | Side::Model(Profile::Qemu72))
    }

    /// Whether `d` shows on this side (the model side of a difference is the IBTA profile's,
    /// except ownership checks, which both model profiles make).
    pub fn differs(self, d: Difference) -> bool {
        match d {
            Difference::OwnershipChecks
            | Difference::PortStateFollowsFunction0
            | Difference::SendWqeFlattened
            | Difference::QueryQpLayout
            | Difference::ErrStateNotPassedOn
            | Difference::UdGrhFromBackend
            | Difference::AtomicsAsSend => self == Side::Qemu72,
            _ => self.qemu_like(),
        }
    }
}

/// A device to run a body against. Fields drop in order: the device, then the model or QEMU.
pub struct Target {
    /// The probed device.
    pub dev: Device,
    /// The side.
    pub side: Side,
    /// Its platform.
    pub platform: Arc<dyn Platform>,
    /// The model, when the side is a model.
    pub sim: Option<hca::platform::sim::SimPlatform>,
    /// Bound on anything the device should do at once.
    pub wait: Duration,
    /// Time after which an event that was going to be delivered has been.
    pub settle: Duration,
    peer: Option<QemuPeer>,
    name: String,
    started: Instant,
    probe_time: Duration,
}

impl Target {
    /// The model with `profile`, probed like the real device (IPv4-mapped GID).
    pub fn model(profile: Profile) -> Target {
        let started = Instant::now();
        let cfg = pvrdma_sim::SimConfig { profile, ..Default::default() };
        let opts = ProbeOptions { gid: Some(backend_gid()), ..Default::default() };
        let (dev, sim) = hca::open_sim_with(cfg, opts).expect("probe of the model");
        Target {
            dev,
            side: Side::Model(profile),
            platform: Arc::new(sim.clone()),
            sim: Some(sim),
            wait: Duration::from_secs(5),
            settle: Duration::from_millis(200),
            peer: None,
            name: format!("model-{profile:?}"),
            started,
            probe_time: started.elapsed(),
        }
    }

    /// A fresh QEMU 7.2 for the test `name`, probed. Panics with QEMU's output if it fails.
    pub fn qemu(name: &str) -> Target {
        Self::qemu_with(name, true)
    }

    /// [`Target::qemu`], with DMA memory through the guest-RAM file (`shared_ram`) or through
    /// qtest reads and writes only.
    pub fn qemu_with(name: &str, shared_ram: bool) -> Target {
        let started = Instant::now();
        let peer = QemuPeer::start_with(name, shared_ram).unwrap_or_else(|e| panic!("{e}"));
        let dev = peer.probe().unwrap_or_else(|e| panic!("{e}"));
        let platform: Arc<dyn Platform> = peer.platform().clone();
        Target {
            dev,
            side: Side::Qemu72,
            platform,
            sim: None,
            wait: Duration::from_secs(20),
            settle: Duration::from_millis(500),
            peer: Some(peer),
            name: name.to_owned(),
            started,
            probe_time: started.elapsed(),
        }
    }

    /// The model's doorbells refused so far (0 for QEMU, which refuses none and counts none).
    fn refused_doorbells(&self) -> u64 {
        self.sim.as_ref().map_or(0, |s| s.device().stats().refused_doorbells)
    }

    /// CQ interrupts the driver has taken.
    pub fn cq_interrupts(&self) -> u64 {
        stats(&self.dev).interrupts[2]
    }

    /// Polls `cq` until `n` completions arrived or [`Target::wait`] passed.
    pub fn poll_n(&self, cq: &Cq, n: usize) -> Vec<Wc> {
        let deadline = Instant::now() + self.wait;
        let mut out = Vec::new();
        let mut buf = [Wc::default(); 16];
        while out.len() < n && Instant::now() < deadline {
            let k = cq.poll(&mut buf[..(n - out.len()).min(16)]).expect("poll");
            out.extend_from_slice(&buf[..k]);
            if k == 0 {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        assert_eq!(out.len(), n, "{:?}: completions on CQ {}", self.side, cq.handle());
        out
    }

    /// Waits [`Target::settle`] and asserts `ch` has no event (call after polling the CQEs).
    pub fn assert_no_event(&self, ch: &CompChannel, what: &str) {
        std::thread::sleep(self.settle);
        assert_eq!(ch.try_get_cq_event(), None, "{:?}: unexpected completion event: {what}", self.side);
    }

    /// Sends one message a -> b and polls both CQEs from `cq` (both QPs complete into it).
    fn one_message(&self, p: &Pair, cq: &Cq, id: u64, solicited: bool) {
        p.recv_b(id, 0, 64);
        p.send_a(id, 0, b"ping", WrOpcode::Send, solicited);
        self.poll_n(cq, 2);
    }
}

/// Appends `line` to `$PVRDMA_QEMU_OUT/timings.txt` (the stage prints it) and to stderr.
pub fn report_line(line: &str) {
    if let Some(dir) = std::env::var_os("PVRDMA_QEMU_OUT") {
        use std::io::Write as _;
        let path = std::path::Path::new(&dir).join("timings.txt");
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(line.as_bytes());
        }
    }
    eprint!("{line}");
}

impl Target {
    /// The QEMU platform, when the side is the real device.
    pub fn qtest(&self) -> Option<&Arc<hca::platform::qtest::QtestPlatform>> {
        self.peer.as_ref().map(|p| p.platform())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let Some(peer) = &self.peer else { return };
        let line = format!(
            "TIMING {:<36} qemu+open {:>6} ms  probe {:>6} ms  total {:>6} ms  qtest round trips {}\n",
            self.name,
            peer.start_time.as_millis(),
            (self.probe_time - peer.start_time.min(self.probe_time)).as_millis(),
            self.started.elapsed().as_millis(),
            peer.platform().round_trips(),
        );
        report_line(&line);
    }
}

// -------------------------------------------------------------------------------------------------
// Bodies

/// Bring-up: version 17, DSR load and caps (by rule), activation, the arm encoding the self-test
/// found, QUERY_PORT, QUERY_PKEY, the GID, and one command interrupt per command, counted by the
/// driver.
pub fn bring_up(t: &Target) {
    let dev = &t.dev;
    let irq0 = stats(dev).interrupts[0];
    let expected = if t.side.differs(Difference::IbtaArming) { ArmEncoding::Qemu72 } else { ArmEncoding::Ibta };
    assert_eq!(pv(dev).arm_encoding(), expected, "{:?}: the probe's self-test", t.side);
    assert_eq!(t.platform.reg_read(REG_VERSION), pvrdma_abi::PVRDMA_ROCEV1_VERSION);
    let a = dev.query_device();
    // By rule: every count at least 1 and within what the ABI can address (24-bit handles).
    let handles = UAR_HANDLE_MASK + 1;
    for (name, v) in [
        ("max_qp", a.max_qp),
        ("max_qp_wr", a.max_qp_wr),
        ("max_sge", a.max_sge),
        ("max_cq", a.max_cq),
        ("max_cqe", a.max_cqe),
        ("max_mr", a.max_mr),
        ("max_pd", a.max_pd),
        ("gid_tbl_len", a.gid_tbl_len),
    ] {
        assert!((1..=handles).contains(&v), "{:?}: caps.{name} = {v}", t.side);
    }
    assert_eq!(a.phys_port_cnt, 1);
    assert!(a.max_mr_size >= 4096, "{:?}: max_mr_size {}", t.side, a.max_mr_size);
    assert!(a.max_pkeys >= 1);
    // The driver sizes by these caps: past them it refuses before the device sees anything.
    let too_many = a.max_cqe.saturating_mul(2);
    assert!(matches!(dev.create_cq(too_many, None), Err(Error::InvalidArgument(_))));
    let port = dev.query_port(1).unwrap();
    if t.side.differs(Difference::PortStateFollowsFunction0) {
        assert_eq!(port.state, PortState::Down, "{:?}: no driver activated the vmxnet3", t.side);
    } else {
        assert_eq!(port.state, PortState::Active, "{:?}", t.side);
    }
    assert!(
        port.active_mtu >= 256 && port.active_mtu <= port.max_mtu && port.max_mtu <= 4096,
        "{:?}: {port:?}",
        t.side
    );
    assert!(port.gid_tbl_len >= 1 && port.pkey_tbl_len >= 1, "{:?}: {port:?}", t.side);
    assert!(matches!(dev.query_port(2), Err(Error::InvalidArgument(_))));
    assert_eq!(dev.query_pkey(1, 0).unwrap(), 0xffff);
    assert_eq!(dev.query_gid(1, 0).unwrap(), backend_gid());
    // This body posted QUERY_PORT and QUERY_PKEY (the refusals above never reach the device):
    // one interrupt each (the real device raises vector 0 per command, failed ones too).
    assert_eq!(stats(dev).interrupts[0] - irq0, 2, "{:?}: {:?}", t.side, stats(dev));
    assert!(!dev.is_fatal());
}

/// Create and destroy PD, MR, CQ, QP and UC in any order; the device keeps working afterwards.
pub fn objects(t: &Target) {
    let dev = &t.dev;
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.alloc_mr(10_000, access::LOCAL_WRITE).unwrap();
    assert_eq!(mr.len(), 10_000);
    mr.write(9_990, b"0123456789").unwrap();
    let mut b = [0u8; 10];
    mr.read(9_990, &mut b).unwrap();
    assert_eq!(&b, b"0123456789");
    // An MR over this process's own memory: the model maps it; qtest reaches guest RAM only and
    // says so.
    let buf = ib_core::UserBuffer::new(4096).unwrap();
    match (t.side, pd.reg_buffer(&buf, access::LOCAL_WRITE)) {
        (Side::Qemu72, r) => assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}"),
        (_, r) => assert_eq!(r.unwrap().addr(), buf.addr()),
    }
    let cq = dev.create_cq(100, None).unwrap();
    assert_eq!(cq.cqe(), 128);
    let qp = rc_qp(&pd, &cq, &cq);
    assert_eq!(qp.state().unwrap(), ib_core::QpState::Reset);
    qp.modify_to_init(1, access::LOCAL_WRITE).unwrap();
    // The QP holds its CQ and PD: dropping them first is safe; the QP's drop destroys in order.
    drop(cq);
    drop(pd);
    drop(mr);
    drop(qp);
    // A user context: its own UAR page, PD, CQ and QP; a user PD cannot take a kernel CQ.
    let ctx = dev.alloc_ucontext().unwrap();
    let page = ctx.provider_context::<hca::Ucontext>().unwrap().uar_page();
    assert!(page.index() >= 1);
    let upd = ctx.alloc_pd().unwrap();
    let ucq = ctx.create_cq(8, None).unwrap();
    assert!(ucq.is_user());
    let uqp = rc_qp(&upd, &ucq, &ucq);
    let kcq = dev.create_cq(1, None).unwrap();
    let attr = ib_core::QpInitAttr {
        send_cq: &kcq,
        recv_cq: &ucq,
        cap: cap(),
        qp_type: ib_core::QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    assert!(matches!(upd.create_qp(&attr), Err(Error::InvalidArgument(_))));
    drop(ctx);
    drop(ucq);
    drop(upd);
    drop(uqp);
    drop(kcq);
    // Everything was destroyed without an error; the device still carries data.
    assert!(!dev.is_fatal());
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    t.one_message(&p, &cq, 1, false);
}

/// RC SEND/RECV between two QPs through the kernel's UAR page: payload, completion fields, send
/// with immediate, and enough messages that both rings wrap.
pub fn rc_send_recv(t: &Target) {
    let dev = &t.dev;
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(32, None).unwrap(), dev.create_cq(32, None).unwrap());
    let p = pair(dev, &pd, (&scq, &rcq), (&scq, &rcq));
    let msg: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
    p.recv_b(11, 100, 4096);
    p.send_a(21, 0, &msg, WrOpcode::Send, false);
    let s = t.poll_n(&scq, 1)[0];
    assert_eq!((s.wr_id, s.status, s.opcode, s.qp_num), (21, WcStatus::Success, WcOpcode::Send, p.a.qpn()));
    let r = t.poll_n(&rcq, 1)[0];
    assert_eq!((r.wr_id, r.status, r.opcode), (11, WcStatus::Success, WcOpcode::Recv), "{:?}", t.side);
    assert_eq!((r.byte_len, r.qp_num, r.imm_data), (1500, p.b.qpn(), None), "{:?}", t.side);
    // IBTA defines a completion's source QP only for UD: the model reports 0 for an RC receive,
    // as QEMU passes on its backend's (rxe's) value (issue 21 §5).
    assert_eq!(r.src_qp, 0, "{:?}: RC source QP", t.side);
    let mut got = vec![0u8; msg.len()];
    p.mr_b.read(100, &mut got).unwrap();
    assert_eq!(got, msg, "{:?}: payload", t.side);

    p.recv_b(1, 0, 64);
    p.send_a(2, 0, b"imm", WrOpcode::SendWithImm(0x1234_5678), false);
    t.poll_n(&scq, 1);
    let r = t.poll_n(&rcq, 1)[0];
    if t.side.differs(Difference::SendWqeFlattened) {
        assert_eq!((r.opcode, r.imm_data, r.byte_len), (WcOpcode::Recv, None, 3), "{:?}: {r:?}", t.side);
    } else {
        assert_eq!((r.opcode, r.imm_data, r.byte_len), (WcOpcode::Recv, Some(0x1234_5678), 3));
    }

    // An unsignaled send, then a signaled one: IBTA completes only the signaled one.
    p.recv_b(3, 0, 64);
    p.recv_b(4, 0, 64);
    p.mr_a.write(0, b"quiet").unwrap();
    let sge = [ib_core::Sge { addr: p.mr_a.addr(), length: 5, lkey: p.mr_a.lkey() }];
    let quiet = ib_core::SendWr { wr_id: 5, sg_list: &sge, opcode: WrOpcode::Send, signaled: false, solicited: false };
    p.a.post_send(&quiet).unwrap();
    p.send_a(6, 0, b"loud", WrOpcode::Send, false);
    t.poll_n(&rcq, 2);
    std::thread::sleep(t.settle);
    let mut wc = [Wc::default(); 4];
    let n = scq.poll(&mut wc).unwrap();
    let ids: Vec<u64> = wc[..n].iter().map(|w| w.wr_id).collect();
    if t.side.differs(Difference::SendWqeFlattened) {
        assert_eq!(ids, [5, 6], "{:?}: QEMU signals every send", t.side);
    } else {
        assert_eq!(ids, [6], "{:?}", t.side);
    }

    // More messages than either queue (16) holds, so SQ, RQ and both CQ rings wrap.
    for i in 0..40u64 {
        p.recv_b(100 + i, 0, 64);
        p.send_a(200 + i, 0, &i.to_le_bytes(), WrOpcode::Send, false);
        assert_eq!(t.poll_n(&scq, 1)[0].wr_id, 200 + i);
        assert_eq!(t.poll_n(&rcq, 1)[0].wr_id, 100 + i);
        let mut b = [0u8; 8];
        p.mr_b.read(0, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), i);
    }
}

/// RC SEND/RECV of a user context's QPs, rung through the context's own UAR page.
pub fn user_context_data_path(t: &Target) {
    let dev = &t.dev;
    let ctx = dev.alloc_ucontext().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    p.recv_b(5, 0, 16);
    p.send_a(6, 0, b"from user", WrOpcode::Send, false);
    let wcs = t.poll_n(&cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{:?}: {wcs:?}", t.side);
    let mut b = [0u8; 9];
    p.mr_b.read(0, &mut b).unwrap();
    assert_eq!(&b, b"from user");
    assert_eq!(t.refused_doorbells(), 0);
}

/// What [`cq_arming`] saw, step by step: (events, CQ interrupts) per step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArmingReport {
    /// Steps as (name, events delivered, CQ interrupts taken by the driver).
    pub steps: Vec<(&'static str, u64, u64)>,
}

/// CQ arming and the CQ-notification interrupt: no arm no interrupt, one arm one event, the
/// kernel's arm of a user CQ, and — through raw doorbells, which are the device's arms and not
/// the driver's, so they raise interrupts but never events — QEMU's doorbell encoding against
/// IBTA's and another context's doorbell.
pub fn cq_arming(t: &Target) -> ArmingReport {
    let dev = &t.dev;
    let side = t.side;
    let mut report = ArmingReport::default();
    let ctx = dev.alloc_ucontext().unwrap();
    let other = dev.alloc_ucontext().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, Some(&ch)).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    let h = cq.handle();
    let hc = cq_handle(&cq);
    // Raw device arms through the context's own page: IBTA's `ARM` (next) or `ARM_SOL`
    // (solicited), or QEMU's `ARM|ARM_SOL` (next there).
    let raw = |op: DoorbellOp, enc: ArmEncoding| match op {
        DoorbellOp::CqArmNext => doorbells(&ctx).cq_arm_next(&hc, enc).unwrap(),
        _ => doorbells(&ctx).cq_arm_solicited(&hc, enc).unwrap(),
    };
    let mut irq0 = t.cq_interrupts();
    let mut id = 0;
    // One step: ring `arm`, send one message (solicited or not), poll both CQEs from the ring, then
    // count events and CQ interrupts.
    let mut step = |name: &'static str, arm: &dyn Fn(), solicited: bool| -> (u64, u64) {
        arm();
        id += 1;
        t.one_message(&p, &cq, id, solicited);
        std::thread::sleep(t.settle);
        let mut events = 0;
        while let Some(e) = ch.try_get_cq_event() {
            assert_eq!(e.handle(), h);
            e.ack_events(1);
            events += 1;
        }
        let irq = t.cq_interrupts();
        let got = (events, irq - irq0);
        irq0 = irq;
        report.steps.push((name, got.0, got.1));
        got
    };

    // A. Unarmed: CQEs, no event, no interrupt. QEMU writes a notification entry per CQE anyway.
    let spurious0 = stats(dev).spurious_cq_notifications;
    assert_eq!(step("unarmed", &|| {}, false), (0, 0), "{side:?}: an unarmed CQ signalled");
    let entries = stats(dev).spurious_cq_notifications - spurious0;
    if side.differs(Difference::NotificationPerCqe) {
        assert_eq!(entries, 2, "{side:?}: QEMU writes an entry per CQE, armed or not");
    } else {
        assert_eq!(entries, 0, "{side:?}: the IBTA model writes an entry only when an arm fires");
    }

    // B. Armed for next (twice: a repeated arm is harmless), one message: one event, one
    // interrupt. The CQ is a user context's: the driver arms it through the kernel's UAR page
    // (the arm doorbell mthca never gave a user CQ).
    let arm_next = || {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    };
    assert_eq!(step("req_notify(NEXT) x2, user CQ", &arm_next, false), (1, 1), "{side:?}");
    // The arm is one-shot: the next message raises nothing.
    assert_eq!(step("after the arm fired", &|| {}, false), (0, 0), "{side:?}");

    // C. IBTA arming, raw: ARM|ARM_SOL then ARM alone, through the owner's page.
    let got = step(
        "raw ARM|ARM_SOL, then raw ARM",
        &|| {
            raw(DoorbellOp::CqArmNext, ArmEncoding::Qemu72);
            raw(DoorbellOp::CqArmNext, ArmEncoding::Ibta);
        },
        false,
    );
    if side.differs(Difference::IbtaArming) {
        assert_eq!(got, (0, 0), "{side:?}: ARM alone clears QEMU's arm");
    } else {
        assert_eq!(got, (0, 1), "{side:?}: ARM arms for next under IBTA (a device arm: no event)");
    }

    // D. IBTA arming: ARM_SOL alone (raw), then a solicited message.
    let got = step("raw ARM_SOL, solicited send", &|| raw(DoorbellOp::CqArmSolicited, ArmEncoding::Ibta), true);
    if side.differs(Difference::IbtaArming) {
        assert_eq!(got, (0, 0), "{side:?}: QEMU ignores ARM_SOL alone");
        assert!(matches!(cq.req_notify(NotifyFlags::SOLICITED), Err(Error::Unsupported(_))));
    } else {
        assert_eq!(got, (0, 1), "{side:?}: the solicited receive fires a solicited arm");
        // A solicited arm ignores an unsolicited message (the sender's CQE never satisfies it).
        cq.req_notify(NotifyFlags::SOLICITED).unwrap();
        assert_eq!(step("req_notify(SOLICITED), plain send", &|| {}, false), (0, 0));
        assert_eq!(step("... then a solicited send", &|| {}, true), (1, 1));
    }

    // E. ARM|ARM_SOL raw: QEMU's one arm; next under IBTA too.
    let got = step("raw ARM|ARM_SOL", &|| raw(DoorbellOp::CqArmNext, ArmEncoding::Qemu72), false);
    assert_eq!(got, (0, 1), "{side:?}");

    // F. The kernel's own page arms the user CQ (raw, as the driver's arms go).
    let kernel = || pv(dev).kernel_doorbells().cq_arm_next(&hc, ArmEncoding::Qemu72).unwrap();
    assert_eq!(step("raw kernel page arm of a user CQ", &kernel, false), (0, 1), "{side:?}");

    // G. Ownership: another context's page rings this CQ's arm. The model refuses it; QEMU arms
    // the CQ, so an interrupt comes (carrying no event: the driver never armed).
    // The driver's typed doorbells refuse it before the device sees it; a hostile user writes
    // the page anyway.
    let refused = t.refused_doorbells();
    assert_eq!(doorbells(&other).cq_arm_next(&hc, ArmEncoding::Qemu72), Err(DoorbellError::NotOwner));
    let got = step(
        "another context's page arms",
        &|| raw_doorbell(dev, uar_page(&other), DoorbellOp::CqArmNext, h, ArmEncoding::Qemu72),
        false,
    );
    if side.differs(Difference::OwnershipChecks) {
        assert_eq!(got, (0, 1), "{side:?}: QEMU accepts any handle on any page");
        assert_eq!(t.refused_doorbells(), refused);
    } else {
        assert_eq!(got, (0, 0), "{side:?}: the model refuses a foreign context's doorbell");
        assert_eq!(t.refused_doorbells(), refused + 1);
    }
    assert!(!dev.is_fatal());
    report
}

/// A CQ that fills up: the IBTA model reports Overrun (CQ_ERR) after the queued CQEs; QEMU 7.2
/// drops the new CQEs silently and the QP carries on.
pub fn cq_overflow(t: &Target) {
    let dev = &t.dev;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    dev.set_async_event_handler(move |e| {
        sink.lock().unwrap().push((e.event_type, e.cq().map(|c| c.handle())));
    });
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(1, None).unwrap();
    let rcq = dev.create_cq(32, None).unwrap();
    let p = pair(dev, &pd, (&scq, &rcq), (&scq, &rcq));
    // One message at a time, so QEMU's backend CQ (rxe's, as small as the guest's) is drained by
    // QEMU between them: only the guest's ring overflows. The first send CQE fills the CQ, the
    // second does not fit.
    for i in 0..2 {
        p.recv_b(i, 0, 64);
        p.send_a(i, 0, b"o", WrOpcode::Send, false);
        t.poll_n(&rcq, 1);
    }
    let mut wc = [Wc::default(); 4];
    if t.side.differs(Difference::CqOverflowReporting) {
        std::thread::sleep(t.settle);
        assert_eq!(scq.poll(&mut wc), Ok(1), "{:?}", t.side);
        assert_eq!(scq.poll(&mut wc), Ok(0), "{:?}: QEMU drops the CQEs that did not fit", t.side);
        assert!(events.lock().unwrap().is_empty(), "{:?}: {:?}", t.side, events.lock().unwrap());
        // The QP is still usable: the next send completes into the drained CQ.
        p.recv_b(9, 0, 64);
        p.send_a(9, 0, b"after", WrOpcode::Send, false);
        assert_eq!(t.poll_n(&scq, 1)[0].status, WcStatus::Success);
        t.poll_n(&rcq, 1);
    } else {
        // The driver counts the event before the core hands it to the handler: wait for the
        // handler itself.
        let deadline = Instant::now() + t.wait;
        while events.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(scq.poll(&mut wc), Ok(1));
        assert_eq!(scq.poll(&mut wc), Err(Error::CqOverrun));
        assert_eq!(events.lock().unwrap().as_slice(), &[(AsyncEventType::CqErr, Some(scq.handle()))]);
    }
    assert_eq!(rcq.poll(&mut wc), Ok(0));
}

/// A command whose DMA address is outside guest memory: the device refuses it (one command
/// interrupt, `REG_ERR` and the response's `err` set), stays usable, and the next commands succeed.
/// Returns the statuses of the refused CREATE_CQ and CREATE_MR.
pub fn bad_dma_address(t: &Target) -> (firmware_cmd::DeviceStatus, firmware_cmd::DeviceStatus) {
    use pvrdma_abi::cmd::{CreateCq, CreateMr};
    let dev = &t.dev;
    let status = |e: Error| {
        hca::device_status(&e).unwrap_or_else(|| panic!("{:?}: expected a device refusal, got {e:?}", t.side))
    };
    // Far above any guest RAM these targets have (the model's 1 GiB, QEMU's 128 MiB).
    let bad = 0xdead_b000u64 << 4;
    let irq0 = stats(dev).interrupts[0];
    let cq = CreateCq { pdir_dma: bad.into(), cqe: 16.into(), nchunks: 2.into(), ..Default::default() };
    let cq_status = status(pv(dev).post_command(cq).unwrap_err());
    assert_ne!(t.platform.reg_read(pvrdma_abi::regs::REG_ERR), 0, "{:?}: REG_ERR", t.side);
    let pd = dev.alloc_pd().unwrap();
    let mr = CreateMr {
        start: bad.into(),
        length: 4096u64.into(),
        pdir_dma: (bad + 0x1000).into(),
        pd_handle: pd.handle().into(),
        nchunks: 1.into(),
        ..Default::default()
    };
    let mr_status = status(pv(dev).post_command(mr).unwrap_err());
    // QEMU 7.2 answers EINVAL when it cannot map a page; so does the model.
    let einval = firmware_cmd::DeviceStatus::InvalidArgument;
    assert_eq!((cq_status, mr_status), (einval, einval), "{:?}", t.side);
    // Three commands, one of them good: three interrupts, failures included.
    assert_eq!(stats(dev).interrupts[0] - irq0, 3, "{:?}", t.side);
    assert!(!dev.is_fatal());
    let cq = dev.create_cq(8, None).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    t.one_message(&p, &cq, 1, false);
    (cq_status, mr_status)
}

/// The full QP attribute interface through the device: every attribute a modify sets reaches it
/// (nothing hard-coded by the driver), QUERY_QP reads the state and attributes back from it, and
/// IBTA's posting rules: work requests posted to a QP in ERR are taken and complete with
/// `WR_FLUSH_ERR` and their `wr_id`.
pub fn qp_attributes(t: &Target) {
    let dev = &t.dev;
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(32, None).unwrap();
    let (a, b) = (rc_qp(&pd, &cq, &cq), rc_qp(&pd, &cq, &cq));
    let gid = dev.query_gid(1, 0).unwrap();
    for (me, peer, (rq_psn, sq_psn)) in [(&a, &b, (0x111, 0x222)), (&b, &a, (0x222, 0x111))] {
        me.modify_to_init(1, access::LOCAL_WRITE).unwrap();
        let grh = GlobalRoute { dgid: gid, sgid_index: 0, hop_limit: 9, traffic_class: 0, flow_label: 0 };
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Mtu::MTU_512,
            dest_qp_num: peer.qpn(),
            rq_psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 14,
            ah_attr: AhAttr { grh, is_global: true, port_num: 1, ..Default::default() },
            ..Default::default()
        };
        let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        me.modify_qp(&rtr, m).unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn,
            timeout: 17,
            retry_cnt: 5,
            rnr_retry: 6,
            max_rd_atomic: 1,
            ..Default::default()
        };
        me.modify_qp(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC)
            .unwrap();
    }
    let q = a.query_qp(M::ALL).unwrap();
    let side = t.side;
    assert_eq!((q.qp_state, q.dest_qp_num), (QpState::Rts, b.qpn()), "{side:?}");
    assert_eq!((q.rq_psn, q.sq_psn), (0x111, 0x222), "{side:?}: PSNs read back");
    if side.differs(Difference::QueryQpLayout) {
        // QEMU's backend chose the MTU itself (its port's); it reads back as a valid code.
        assert!(q.path_mtu.bytes().is_some(), "{side:?}: {q:?}");
    } else {
        assert_eq!(q.path_mtu, Mtu::MTU_512, "{side:?}");
        assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry, q.min_rnr_timer), (17, 5, 6, 14), "{side:?}");
        assert_eq!((q.ah_attr.grh.hop_limit, q.ah_attr.grh.dgid), (9, gid), "{side:?}");
    }
    // The data path works with these attributes.
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let sge = |off: u64| [ib_core::Sge { addr: mr.addr() + off, length: 8, lkey: mr.lkey() }];
    b.post_recv(&ib_core::RecvWr { wr_id: 70, sg_list: &sge(0) }).unwrap();
    let out = sge(64);
    let send =
        |id| ib_core::SendWr { wr_id: id, sg_list: &out, opcode: WrOpcode::Send, signaled: true, solicited: false };
    a.post_send(&send(71)).unwrap();
    t.poll_n(&cq, 2);
    // ERR: the device flushes what is posted, work requests included that come after.
    b.post_recv(&ib_core::RecvWr { wr_id: 72, sg_list: &sge(0) }).unwrap();
    b.modify_to_err().unwrap();
    if side.differs(Difference::ErrStateNotPassedOn) {
        assert_eq!(b.state(), Ok(QpState::Rts), "{side:?}: QEMU's backend QP never left RTS");
        return;
    }
    assert_eq!(b.state(), Ok(QpState::Err), "{side:?}: QUERY_QP");
    b.post_recv(&ib_core::RecvWr { wr_id: 73, sg_list: &sge(0) }).unwrap();
    b.post_send(&send(74)).unwrap();
    let mut got: Vec<(u64, WcStatus)> = t.poll_n(&cq, 3).iter().map(|w| (w.wr_id, w.status)).collect();
    got.sort_by_key(|g| g.0);
    let flushed = WcStatus::WrFlushErr;
    assert_eq!(got, [(72, flushed), (73, flushed), (74, flushed)], "{side:?}");
    assert_eq!(a.state(), Ok(QpState::Rts), "{side:?}");
}
