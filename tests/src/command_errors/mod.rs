//! Command errors and hostile counts, sent below the driver ([`crate::raw_device`]) to the model
//! and to QEMU 7.2's pvrdma: spoiled DSRs, destroys of handles that do not exist, an unknown
//! opcode, CQ sizes and chunk counts that disagree with what they describe, SGE counts above the
//! caps, a read of the UAR BAR and the interrupt mask register.
//!
//! One function per case ([`CASES`]); each records what the device answered step by step
//! ([`Step`]). On QEMU each case runs in a QEMU of its own, every qtest round trip bounded by
//! [`QEMU_IO_BOUND`]: a crash (QEMU exited) or a hang (no answer within the bound) is the
//! recorded answer, not a failure, and the stage prints the record (`QEMU-CASE` lines). On the
//! model every step must match its [`Expect`]: the model refuses cleanly (response `err` 22,
//! `REG_ERR` = -22) and stays usable; a refused DSR leaves it broken (`REG_ERR` 0xffff, requests
//! unanswered and counted in `ignored_requests`).

mod cases;

pub use cases::*;

use crate::differential::{report_line, Side};
use crate::qemu::QemuPeer;
use crate::raw_device::{RawDevice, Reply};
use hca::platform::sim::SimPlatform;
use hca::Platform;
use ib_core::WcStatus;
use pvrdma_abi::cmd::{ack_for, opcode as op, CmdRequest, CreateCq, CreatePd};
use pvrdma_abi::wqe::Cqe;
use pvrdma_abi::PAGE_SIZE;
use pvrdma_sim::Profile;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound on each qtest round trip of a case on QEMU: a QEMU that does not answer within it is
/// recorded as hung.
pub const QEMU_IO_BOUND: Duration = Duration::from_secs(5);
/// A handle no object has (the devices hand out small handles).
pub const NO_SUCH_HANDLE: u32 = 0x1234;
/// An opcode past every command either device knows.
pub const UNKNOWN_OPCODE: u32 = 0x40;
/// `errno` EINVAL, the model's answer to every refused command.
pub use pvrdma_abi::errno::EINVAL;

/// What the device did at one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Obs {
    /// A register read.
    Reg(u32),
    /// A command's answer.
    Reply(Reply),
    /// A work request's completion status (`None`: no completion within the bound).
    Completion(Option<WcStatus>),
    /// A model counter's increase.
    Count(u64),
    /// The model has no BAR2 read: the platform interface offers UAR writes only.
    NoReadPath,
    /// QEMU exited (how) — its answer to this step.
    Crashed(String),
    /// QEMU stopped answering qtest within [`QEMU_IO_BOUND`] while still running.
    Hung(String),
    /// qtest refused the access or answered something unreadable (the connection still up).
    QtestError(String),
}

fn hex_errno(v: u32) -> String {
    if v >= 0x8000_0000 {
        format!("{v:#x} ({})", v as i32)
    } else {
        format!("{v:#x}")
    }
}

impl fmt::Display for Obs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let irq = |b: bool| if b { "irq" } else { "no irq" };
        match self {
            Obs::Reg(v) => write!(f, "{}", hex_errno(*v)),
            Obs::Reply(r) if r.ack == 0 => {
                write!(f, "no response, REG_ERR {}, {}", hex_errno(r.reg_err), irq(r.irq))
            }
            Obs::Reply(r) => {
                write!(f, "ack {:#x} err {} REG_ERR {}, {}", r.ack, r.err, hex_errno(r.reg_err), irq(r.irq))
            }
            Obs::Completion(Some(s)) => write!(f, "CQE {s:?}"),
            Obs::Completion(None) => write!(f, "no CQE"),
            Obs::Count(n) => write!(f, "+{n}"),
            Obs::NoReadPath => write!(f, "no read path"),
            Obs::Crashed(how) => write!(f, "QEMU CRASHED ({how})"),
            Obs::Hung(why) => write!(f, "QEMU HUNG ({why})"),
            Obs::QtestError(e) => write!(f, "qtest error ({e})"),
        }
    }
}

/// What the model must answer at a step.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// The register reads this value.
    Reg(u32),
    /// Success for this opcode: its ack, err 0, `REG_ERR` 0, the interrupt.
    Ok(u32),
    /// [`Expect::Ok`] with the interrupt present or masked as given.
    OkIrq(u32, bool),
    /// Refused: the opcode's ack, err 22, `REG_ERR` -22, the interrupt.
    Refused(u32),
    /// No response written and no interrupt (a broken device).
    NoReply,
    /// The counter rose by this much.
    Count(u64),
    /// A completion with an error status.
    CqeError,
    /// A successful completion.
    CqeSuccess,
    /// Nothing to compare (the model cannot take this step).
    NotApplicable,
}

impl Expect {
    /// Whether `obs` is what the model must answer.
    pub fn matches(self, obs: &Obs) -> bool {
        let ok = |r: &Reply, o: u32| r.ack == ack_for(o) && r.err == 0 && r.reg_err == 0;
        match (self, obs) {
            (Expect::Reg(v), Obs::Reg(got)) => v == *got,
            (Expect::Ok(o), Obs::Reply(r)) => ok(r, o) && r.irq,
            (Expect::OkIrq(o, irq), Obs::Reply(r)) => ok(r, o) && r.irq == irq,
            (Expect::Refused(o), Obs::Reply(r)) => {
                r.ack == ack_for(o) && r.err == EINVAL && r.reg_err == (-i32::from(EINVAL)) as u32 && r.irq
            }
            (Expect::NoReply, Obs::Reply(r)) => r.ack == 0 && !r.irq,
            (Expect::Count(n), Obs::Count(got)) => n == *got,
            (Expect::CqeError, Obs::Completion(Some(s))) => *s != WcStatus::Success,
            (Expect::CqeSuccess, Obs::Completion(Some(s))) => *s == WcStatus::Success,
            (Expect::NotApplicable, Obs::NoReadPath) => true,
            _ => false,
        }
    }
}

/// One step of a case: what was done, what the device did, what the model must do.
#[derive(Clone, Debug)]
pub struct Step {
    /// The step.
    pub what: &'static str,
    /// The device's answer.
    pub obs: Obs,
    /// The model's required answer.
    pub model: Expect,
}

/// The case stopped: the device crashed or hung (recorded as its last step).
#[derive(Debug)]
pub struct Stopped;

/// A case's result so far.
pub type Outcome = Result<(), Stopped>;

/// One device for one case, and the steps recorded on it. Fields drop in order: the raw device,
/// then the model or QEMU.
pub struct Run {
    /// The side.
    pub side: Side,
    /// The device, driven by hand.
    pub dev: RawDevice,
    sim: Option<SimPlatform>,
    peer: Option<QemuPeer>,
    steps: Vec<Step>,
}

impl Run {
    /// A fresh model with `profile`.
    pub fn model(profile: Profile) -> Run {
        let sim = SimPlatform::new(pvrdma_sim::SimConfig { profile, ..Default::default() });
        let dev = RawDevice::new(Arc::new(sim.clone())).expect("model DMA memory");
        Run { side: Side::Model(profile), dev, sim: Some(sim), peer: None, steps: Vec::new() }
    }

    /// A fresh QEMU 7.2 for case `name`. Panics with QEMU's output if it does not start.
    pub fn qemu(name: &str) -> Run {
        let peer = QemuPeer::start_bounded(name, QEMU_IO_BOUND).unwrap_or_else(|e| panic!("{e}"));
        let platform: Arc<dyn Platform> = peer.platform().clone();
        let dev = RawDevice::new(platform).unwrap_or_else(|e| panic!("QEMU DMA memory: {e}"));
        Run { side: Side::Qemu72, dev, sim: None, peer: Some(peer), steps: Vec::new() }
    }

    /// Whether the device is the model.
    pub fn is_model(&self) -> bool {
        self.sim.is_some()
    }

    /// The steps recorded.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// QEMU's crash or hang, if the qtest connection is gone.
    fn fault(&self) -> Option<Obs> {
        let peer = self.peer.as_ref()?;
        let q = peer.platform();
        if !q.is_dead() {
            return None;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Some(st) = peer.exit_status() {
                return Some(Obs::Crashed(st));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Obs::Hung(q.dead_reason().unwrap_or_default()))
    }

    /// Records `obs` for step `what` (or QEMU's crash or hang instead, which stops the case).
    pub fn record(&mut self, what: &'static str, obs: Obs, model: Expect) -> Outcome {
        match self.fault() {
            Some(f) => {
                self.steps.push(Step { what, obs: f, model });
                Err(Stopped)
            }
            None => {
                self.steps.push(Step { what, obs, model });
                Ok(())
            }
        }
    }

    /// Posts `req` and records its answer.
    pub fn post<C: CmdRequest>(&mut self, what: &'static str, req: C, model: Expect) -> Outcome {
        let (reply, _) = self.dev.post(req);
        self.record(what, Obs::Reply(reply), model)
    }

    /// The model's `ignored_requests` (0 on QEMU, which has no such counter).
    pub fn ignored_requests(&self) -> u64 {
        self.sim.as_ref().map_or(0, |s| s.device().stats().ignored_requests)
    }

    /// Panics with `what` and the device's answer unless `reply` is a success.
    fn must(&self, what: &str, reply: Reply, opcode: u32) {
        assert!(
            reply.ack == ack_for(opcode) && reply.err == 0 && self.fault().is_none(),
            "{:?}: setup step {what} failed: {}",
            self.side,
            Obs::Reply(reply)
        );
    }

    /// Loads a correct DSR and activates (setup: panics if the device refuses).
    pub fn up(&mut self) {
        self.dev.load_dsr(|_, _| {});
        let err = self.dev.activate();
        assert_eq!(err, 0, "{:?}: REG_ERR after a good DSR and ACTIVATE", self.side);
    }

    /// A PD of the kernel (setup).
    pub fn pd(&self) -> u32 {
        let (r, resp) = self.dev.post(CreatePd::default());
        self.must("CREATE_PD", r, op::CREATE_PD);
        resp.map_or(0, |p| p.pd_handle.get())
    }

    /// A CQ of 16 entries in exactly the pages it needs (setup).
    pub fn cq(&self) -> u32 {
        let (r, resp) = self.dev.post(self.create_cq(16, cq_chunks(16), u64::from(cq_chunks(16))));
        self.must("CREATE_CQ", r, op::CREATE_CQ);
        resp.map_or(0, |c| c.cq_handle.get())
    }

    /// CREATE_CQ of `cqe` entries claiming `nchunks` pages, its directory listing `listed`.
    pub fn create_cq(&self, cqe: u32, nchunks: u32, listed: u64) -> CreateCq {
        CreateCq {
            pdir_dma: self.listed(listed).into(),
            cqe: cqe.into(),
            nchunks: nchunks.into(),
            ..Default::default()
        }
    }

    /// A page directory over `n` fresh pages.
    pub fn listed(&self, n: u64) -> u64 {
        let pages = self.dev.pages(n.max(1));
        let list: Vec<u64> = (0..n).map(|i| pages.page(i)).collect();
        self.dev.pdir(&list)
    }

    /// Records that a following good command (CREATE_PD) works.
    pub fn still_usable(&mut self) -> Outcome {
        self.post("then CREATE_PD", CreatePd::default(), Expect::Ok(op::CREATE_PD))
    }

    /// Reads 32 bits at byte `offset` of BAR2: a qtest `readl` on QEMU; the model has no path.
    pub fn uar_read(&self, offset: u64) -> Obs {
        let Some(peer) = &self.peer else {
            return Obs::NoReadPath;
        };
        let q = peer.platform();
        let line = format!("readl {:#x}", q.bar_addresses()[2] + offset);
        match q.raw_command(&line) {
            Ok(v) => u32::from_str_radix(v.trim().trim_start_matches("0x"), 16)
                .map_or_else(|_| Obs::QtestError(format!("readl answered {v:?}")), Obs::Reg),
            Err(e) => Obs::QtestError(e.to_string()),
        }
    }

    /// The steps as `what = answer; ...`.
    pub fn render(&self) -> String {
        let steps: Vec<String> = self.steps.iter().map(|s| format!("{} = {}", s.what, s.obs)).collect();
        steps.join("; ")
    }

    /// Asserts every step is what the model must answer.
    pub fn check_model(&self, name: &str) {
        for s in &self.steps {
            assert!(
                s.model.matches(&s.obs),
                "{:?} {name}: step `{}` answered {} but the model must answer {:?}\n\
                 all steps: {:#?}",
                self.side,
                s.what,
                s.obs,
                s.model,
                self.steps
            );
        }
    }
}

/// Pages (ring state included) a CQ of `cqe` entries needs.
pub fn cq_chunks(cqe: u32) -> u32 {
    1 + (u64::from(cqe) * size_of::<Cqe>() as u64).div_ceil(PAGE_SIZE as u64) as u32
}

fn case(name: &str) -> &'static Case {
    CASES.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"))
}

/// Runs case `name` on the model with both profiles and checks every step.
pub fn on_model(name: &str) {
    for profile in [Profile::Ibta, Profile::Qemu72] {
        let mut r = Run::model(profile);
        let _ = (case(name).run)(&mut r);
        eprintln!("MODEL-CASE {name} {profile:?}: {}", r.render());
        r.check_model(name);
    }
}

/// Runs case `name` on a QEMU of its own and reports the record. A crash or a hang is an answer;
/// any other answer must be the one recorded ([`Case::qemu72`]). Panics also if QEMU does not
/// start or a setup step fails.
pub fn on_qemu(name: &str) -> Vec<Step> {
    let c = case(name);
    let t0 = Instant::now();
    let mut r = Run::qemu(name);
    let started = t0.elapsed();
    let _ = (c.run)(&mut r);
    let pkg = std::env::var("PVRDMA_QEMU_PACKAGE").unwrap_or_else(|_| "?".into());
    report_line(&format!(
        "QEMU-CASE {name} [qemu-system-x86 {pkg}; start {} ms, case {} ms]: {}\n",
        started.as_millis(),
        (t0.elapsed() - started).as_millis(),
        r.render()
    ));
    let fault = r.steps.iter().any(|s| matches!(s.obs, Obs::Crashed(_) | Obs::Hung(_)));
    if !fault {
        let got: Vec<String> = r.steps.iter().map(|s| s.obs.to_string()).collect();
        assert_eq!(got, c.qemu72, "{name}: QEMU answered other than recorded (update the case table and docs/qemu.md)");
    }
    r.steps
}

/// Calls `$m!(case, case, ...)` with the name of every case of [`CASES`], in its order: the test
/// files (`qemu_model`, `qemu_real`) build one test per case from this one list, and each checks
/// it against [`CASES`].
#[macro_export]
macro_rules! with_command_cases {
    ($m:ident) => {
        $m!(
            dsr_ring_zero_pages,
            dsr_ring_513_pages,
            destroy_unknown_cq,
            destroy_unknown_qp,
            destroy_unknown_mr,
            destroy_unknown_pd,
            unknown_opcode,
            create_cq_zero_cqe,
            create_cq_cqe_over_max,
            create_cq_zero_chunks,
            create_cq_one_chunk,
            create_cq_600_chunks,
            create_qp_600_chunks,
            create_mr_two_chunks_for_one_page,
            create_qp_send_sge_over_caps,
            create_qp_recv_sge_over_caps,
            wqe_num_sge_over_qp,
            uar_bar_read,
            imr_register,
        );
    };
}
