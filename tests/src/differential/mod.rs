//! One set of test bodies for three devices: the model with its IBTA profile, the model with its
//! QEMU 7.2 profile, and QEMU 7.2's real pvrdma (over qtest, `tests/tests/qemu_real.rs`). Each body
//! checks what every side does; where the sides differ on purpose the body says so by name
//! ([`Difference`]) and checks each side's own behaviour. Any other disagreement is a model bug.
//!
//! Rules these bodies follow (`docs/decisions.md`, decision 13): interrupts are the driver's count
//! (`Pvrdma::stats`), never a sticky mailbox; "no event" is asserted only after the CQE has been
//! polled from the ring; capabilities are compared by rule, not by value (QEMU's come from rxe).
//! Every target is probed the default way: how the device arms CQs is found by the driver's
//! self-test, never declared.
//!
//! The bodies, by subject: [`objects`](mod@objects) (bring-up, the objects and their limits, QP attributes, a
//! bad DMA address), [`data_path`] (RC SEND/RECV, a user context's data path), [`arming`] (CQ
//! arming and overflow), [`atomics`](mod@atomics), [`cq`] (RESIZE_CQ), [`srq`](mod@srq) and [`ud`]; each is re-exported
//! here.

use crate::fixture::{stats, Pair};
use crate::qemu::{backend_gid, QemuPeer};
use hca::{Platform, ProbeOptions};
use ib_core::Wc;
use ib_core::WrOpcode;
use ib_core::{CompChannel, Cq, Device};
use pvrdma_sim::Profile;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod arming;
pub mod atomics;
pub mod cq;
pub mod data_path;
pub mod objects;
pub mod srq;
pub mod ud;

pub use arming::{cq_arming, cq_overflow, ArmingReport};
pub use atomics::atomics;
pub use cq::cq_resize;
pub use data_path::{rc_send_recv, user_context_data_path};
pub use objects::{bad_dma_address, bring_up, objects, qp_attributes};
pub use srq::srq;
pub use ud::ud_send_recv;

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
