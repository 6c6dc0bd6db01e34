//! The device: BAR1 registers, BAR2 doorbells, MSI-X, and the [`Core`] every module works on.
//!
//! # Time and threads (design decision 2)
//! A register or UAR write takes effect before it returns, as in QEMU (which runs MMIO under its
//! big lock): a command runs to completion inside the `REQUEST` write, a doorbell drains its queue
//! in the writer's thread. Only packet delivery runs on the device's `pvrdma-port` thread (and,
//! with [`SimConfig::roce`], what arrives on the wire and the transport's timers on its
//! `pvrdma-roce` thread).
//! Raising an interrupt only bumps a counter ([`MsixVectors`]).
//!
//! # State machine
//! The device is [`DeviceState::Inactive`] until `CTL = ACTIVATE` after a good DSR load, then
//! [`DeviceState::Active`]; a DSR that fails to load, or [`SimDevice::inject_fatal`], leaves it
//! [`DeviceState::Broken`] until `CTL = RESET`. Broken ignores `REQUEST` (no response, no
//! interrupt) and refuses doorbells. Objects have their own error states (a CQ in error, a QP in
//! ERR). Hostile values never panic, hang, or reach memory outside [`GuestMemory`].
//!
//! # Lock order (outer to inner; never two locks of the same kind at once)
//! 1. `Core::cmd` — serializes register writes with side effects (DSR load, CTL, REQUEST).
//! 2. a QP's state lock (`qp.rs`) — one QP at a time; then, on the RoCE port, that QP's
//!    requester lock (`roce/`: the SQ drain posts under the QP's lock; nobody takes a QP's lock
//!    while holding a requester's).
//!    An SRQ's lock (`srq.rs`) is taken under a QP's (a receive takes a WQE), never the other way.
//! 3. a CQ's state lock (`cq.rs`) — one CQ at a time; publishing a CQE and the arm doorbell both
//!    hold it.
//! 4. `Core::events` — the async-event and CQ-notification rings.
//! 5. leaves, held briefly with nothing taken inside: `Core::objects`, `Core::gids`,
//!    `Core::regs`, `Core::stats`, the port queue, the RoCE port's requester map, link and
//!    capture, [`MsixVectors`]' and [`GuestMemory`]'s own locks.
//!
//! Work that needs another QP's lock (moving a CQ's QPs to ERR after an overflow, waking the
//! port) is collected in [`Effects`] and done by [`Core::settle`] once the locks are released.

use crate::budget::HostBudget;
use crate::cmd;
use crate::cq::CqStatus;
use crate::dsr::{self, DsrInfo, DEFAULT_MAC};
use crate::event::EventRings;
use crate::intr::MsixVectors;
use crate::mem::GuestMemory;
use crate::port::{self, GidEntry, PortQueue};
use crate::qp::Qp;
use crate::table::Objects;
use parking_lot::Mutex;
use pvrdma_abi::cmd::RespHdr;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::regs::*;
use pvrdma_abi::wqe::Cqe;
use pvrdma_abi::PVRDMA_ROCEV1_VERSION;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Page frame number of BAR2 (the UAR pages) as the model places it: the kernel's UAR page (index
/// 0) has this pfn, page `i` has `UAR_BASE_PFN + i`.
pub const UAR_BASE_PFN: u64 = 0xfe000;

/// `REG_ERR` before `ACTIVATE` (as QEMU initializes it).
const ERR_INACTIVE: u32 = 0xffff;

/// Which observable behaviour the model follows where QEMU 7.2 departs from IBTA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Profile {
    /// IBTA semantics (the default): one-shot NEXT and SOLICITED arms, a notification only when an
    /// arm fires, CQ overflow reported as CQ_ERR.
    #[default]
    Ibta,
    /// QEMU 7.2's quirks where they are safe: `ARM|ARM_SOL` is the only arm (one-shot, any
    /// completion), `ARM` alone disarms, a notification entry for every CQE, overflow drops the
    /// newest CQE silently.
    Qemu72,
}

/// Model configuration.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Conformance profile.
    pub profile: Profile,
    /// Modelled one-way wire latency of the loopback port. Zero: the thread that rings the send
    /// doorbell delivers the packet before the write returns (`port.rs`).
    pub link_latency: Duration,
    /// Bytes of guest memory the driver may allocate.
    pub mem_limit: u64,
    /// Most payload bytes one QP may have on the wire (sent, not yet completed). Past it the
    /// device stops consuming that QP's SQ until a send completes (one message is always
    /// allowed), so a hostile driver cannot make the model buffer unbounded memory. Default
    /// 64 MiB. (A QP also never has more sends outstanding than its SQ depth, whatever their
    /// size: zero-length sends are bounded by count.)
    pub qp_bytes_in_flight: u64,
    /// Most packets the whole device holds on its wire (in flight, parked for a receive WQE, or
    /// being delivered). Past it every QP's SQ drain pauses until a packet leaves the wire (an
    /// empty wire always takes one). Default 16384. On the RoCE port a message counts, as one
    /// packet, from its post until it is acknowledged or failed (its requester keeps a copy).
    pub device_packets_in_flight: usize,
    /// Most payload bytes on the whole device's wire, likewise. Default 256 MiB, a quarter of
    /// the default `mem_limit`: what the model buffers for all QPs together stays well under the
    /// guest memory the driver may allocate.
    pub device_bytes_in_flight: u64,
    /// Most host memory the device's objects may cost (`budget.rs`): page lists, resolved ring
    /// pages, queues and the structures themselves. A create that would pass it fails with
    /// `ENOMEM`. Default 256 MiB, a quarter of the default `mem_limit`.
    pub host_budget: u64,
    /// RoCE v2 on the wire instead of the in-process loopback (`roce/`); `None` (the default):
    /// the loopback.
    pub roce: Option<crate::roce::RoceConfig>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            profile: Profile::Ibta,
            link_latency: Duration::ZERO,
            mem_limit: 1 << 30,
            qp_bytes_in_flight: 64 << 20,
            device_packets_in_flight: 16 << 10,
            device_bytes_in_flight: 256 << 20,
            host_budget: 256 << 20,
            roce: None,
        }
    }
}

/// Declares the device's counters once: [`SimStats`], the snapshot a test reads, and the live
/// atomic counters behind it (no lock on the data path).
macro_rules! sim_stats {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Counters a test can read (all since the device was created; RESET does not clear
        /// them).
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct SimStats {
            $($(#[$doc])* pub $name: u64,)*
            /// Interrupts raised per vector (0 command, 1 async, 2 CQ).
            pub interrupts: [u64; MAX_INTERRUPTS as usize],
            /// Host bytes the device's objects cost now (`SimConfig::host_budget`).
            pub host_bytes: u64,
            /// The host-memory budget in bytes.
            pub host_budget: u64,
        }

        /// The live counters, one atomic each.
        #[derive(Default)]
        pub(crate) struct Counters {
            $(pub $name: AtomicU64,)*
            pub interrupts: [AtomicU64; MAX_INTERRUPTS as usize],
        }

        impl Counters {
            fn snapshot(&self) -> SimStats {
                SimStats {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    interrupts: std::array::from_fn(|v| self.interrupts[v].load(Ordering::Relaxed)),
                    host_bytes: 0,
                    host_budget: 0,
                }
            }
        }
    };
}

sim_stats! {
    /// Commands executed (`REQUEST` writes of 0 with a DSR loaded).
    commands,
    /// Commands that answered a nonzero `err` (or whose slot was unreadable).
    failed_commands,
    /// `REQUEST` writes ignored: a value other than 0, no DSR, or the device is broken.
    ignored_requests,
    /// BAR2 writes.
    doorbells,
    /// BAR2 writes refused: unowned page, foreign or unknown handle, unknown offset,
    /// broken device.
    refused_doorbells,
    /// CQ doorbells with the POLL bit.
    cq_polls,
    /// CQEs written to CQ rings.
    cqes_written,
    /// CQEs dropped: the CQ was full (overflow) or already in error.
    cqes_dropped_overflow,
    /// CQ overflows (IBTA profile: each puts a CQ in error and posts CQ_ERR).
    cq_overflows,
    /// CQs put in error by an out-of-range `cons_head`.
    cq_ring_faults,
    /// CQ-notification entries written.
    cq_notifications,
    /// CQ-notification entries dropped (ring full or broken).
    notifications_dropped,
    /// Async events written.
    async_events,
    /// Async events dropped (ring full or broken).
    async_events_dropped,
    /// Interrupts suppressed by `REG_IMR`.
    interrupts_masked,
    /// QP ring faults (an index out of range or ring memory gone): the QP went to ERR.
    qp_ring_faults,
    /// Packets put on the wire.
    packets_sent,
    /// Packets delivered into a receive WQE.
    packets_delivered,
    /// Packets that found no receive WQE (RNR) when first tried, or first tried after an
    /// unanswered try: each then waits (or fails at once with `rnr_retry` 0).
    packets_parked,
    /// Packets whose delivery failed (the sender completed with an error: the responder's, or
    /// its retries ran out).
    packets_failed,
    /// Tries of a packet no responder answered (loopback port; tried again after its sender's
    /// `timeout`).
    packets_unanswered,
    /// Local ACK timeouts of unanswered packets (loopback port: each costs one of the sender's
    /// `retry_cnt`, the one past it fails the packet `RETRY_EXC_ERR`).
    packets_timeouts,
    /// Packets tried again once the RNR timer (the responder's `min_rnr_timer`) ran out
    /// (loopback port).
    packets_rnr_retries,
    /// Packets dropped because their sender was gone or had flushed them.
    packets_dropped,
    /// Times a QP's SQ drain paused: its SQ depth of sends outstanding, `qp_bytes_in_flight`, or
    /// the device's wire budget (`device_packets_in_flight`, `device_bytes_in_flight`) reached.
    sq_throttled,
    /// RoCE port: UDP datagrams sent (after the link's faults: a duplicate counts twice).
    roce_tx_packets,
    /// RoCE port: packets that could not be encoded or whose `send_to` failed (lost).
    roce_tx_errors,
    /// RoCE port: UDP datagrams received.
    roce_rx_packets,
    /// RoCE port: receive errors of a socket.
    roce_rx_errors,
    /// RoCE port: packets dropped for a bad ICRC (IPv6; IPv4 ICRCs cannot be checked).
    roce_rx_dropped_icrc,
    /// RoCE port: packets dropped as truncated or malformed (bad version, opcode, headers,
    /// pad, lengths).
    roce_rx_dropped_malformed,
    /// RoCE port: packets dropped for a P_Key other than 0xffff.
    roce_rx_dropped_pkey,
    /// RoCE port: packets dropped for their destination QP: unknown, not in RTR/RTS, not
    /// connected to the sender's address, or with no requester for an ACK.
    roce_rx_dropped_qp,
    /// RoCE port: requests with a PSN ahead of the expected one, ACKs, NAKs and READ responses
    /// of PSNs never sent, NAKs of PSNs already acknowledged, and duplicate READ requests
    /// outside every READ executed.
    roce_rx_dropped_psn,
    /// RoCE port: duplicate requests (acknowledged again) and duplicate READ responses.
    roce_rx_duplicates,
    /// RoCE port: ACKs sent by responders.
    roce_acks_sent,
    /// RoCE port: NAKs sent (PSN sequence errors and fatal NAKs).
    roce_naks_sent,
    /// RoCE port: RNR NAKs sent (a SEND found no receive WQE).
    roce_rnr_naks_sent,
    /// RoCE port: NAKs received by requesters (RNR NAKs not included).
    roce_naks_received,
    /// RoCE port: RNR NAKs received by requesters.
    roce_rnr_naks_received,
    /// RoCE port: local ACK timeouts of requesters.
    roce_timeouts,
    /// RoCE port: packets sent again (after a timeout, a NAK or an RNR wait).
    roce_retransmits,
    /// RoCE port: packets the link dropped ([`crate::roce::LinkFaults::loss`]).
    roce_injected_loss,
    /// RoCE port: packets the link held back behind the next one.
    roce_injected_reorder,
    /// RoCE port: packets the link sent twice.
    roce_injected_duplicate,
    /// RoCE port: packets the capture file could not take.
    roce_pcap_errors,
    /// UD sends longer than the port's MTU: no packet sent, completed `SUCCESS` (IBTA
    /// C10-93.1.1, as Linux rxe).
    ud_oversize_dropped,
    /// UD datagrams dropped for their destination: no such QP, not UD, not in RTR/RTS, or a
    /// destination GID not on the port.
    ud_dropped_qp,
    /// UD datagrams dropped for a Q_Key other than the receiver's (IBTA 10.2.5).
    ud_dropped_qkey,
    /// UD datagrams dropped because the receiver had no receive WQE posted.
    ud_dropped_no_recv,
    /// UD datagrams delivered into a receive WQE.
    ud_delivered,
    /// Atomics (COMPARE SWAP, FETCH ADD) executed by responders, on either port.
    atomics_executed,
    /// RoCE port: duplicate atomic requests answered from the saved result, not executed again.
    roce_atomic_replays,
}

/// The device's life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceState {
    /// After creation or RESET: not activated (commands run once a DSR is loaded, as on QEMU).
    #[default]
    Inactive,
    /// Activated with a loaded DSR.
    Active,
    /// The DSR failed to load or a fatal error was injected: requests are ignored, doorbells
    /// refused, until RESET.
    Broken,
}

/// Work deferred until the current locks are released (see the module docs).
#[derive(Default)]
pub(crate) struct Effects {
    /// QPNs whose parked packets the port should retry or fail.
    pub kicks: Vec<u32>,
    /// Unique ids of CQs that went into error: their QPs go to ERR.
    pub errored_cqs: Vec<u64>,
    /// A packet left the wire while QPs waited for the device's wire budget: resume them.
    pub resume_starved: bool,
    /// A CQ's arm fired: raise the CQ-notification vector once the locks are released (its
    /// handler may run on this thread, and may ring an arm doorbell).
    pub raise_cq: bool,
}

/// BAR1 register values.
struct Regs {
    dsr_low: u32,
    dsr_high: u32,
    err: u32,
    mac: [u8; 6],
    state: DeviceState,
}

/// What the command lock guards.
#[derive(Default)]
pub(crate) struct CmdState {
    dsr: Option<DsrInfo>,
}

/// The device's shared state, owned jointly by [`SimDevice`] and the port thread.
pub(crate) struct Core {
    pub cfg: SimConfig,
    pub mem: GuestMemory,
    pub vectors: MsixVectors,
    regs: Mutex<Regs>,
    dead: AtomicBool,
    imr: AtomicU32,
    cmd: Mutex<CmdState>,
    pub events: Mutex<Option<EventRings>>,
    pub objects: Mutex<Objects>,
    pub gids: Mutex<Vec<Option<GidEntry>>>,
    pub port: PortQueue,
    /// The RoCE v2 port, when [`SimConfig::roce`] is set.
    pub roce: Option<crate::roce::RocePort>,
    pub budget: Arc<HostBudget>,
    stats: Counters,
    uids: AtomicU64,
}

/// The pvrdma PCI function: a read/write(offset) surface for BAR1 and BAR2, guest memory, and
/// MSI-X vectors as counters. Dropping it stops the port thread.
pub struct SimDevice {
    core: Arc<Core>,
    port_thread: Option<JoinHandle<()>>,
    roce_thread: Option<JoinHandle<()>>,
    /// Why the RoCE port could not open, if it could not.
    roce_error: Option<crate::roce::RoceError>,
}

impl SimDevice {
    /// [`SimDevice::new`], failing if the RoCE port ([`SimConfig::roce`]) cannot bind its
    /// sockets or create its capture file.
    pub fn try_new(cfg: SimConfig) -> Result<Arc<Self>, crate::roce::RoceError> {
        let dev = Self::new(cfg);
        match &dev.roce_error {
            Some(e) => Err(e.clone()),
            None => Ok(dev),
        }
    }

    /// A new device, Inactive, with `cfg.mem_limit` bytes of guest memory and its port thread
    /// running; with [`SimConfig::roce`], its RoCE port's sockets bound and its receive thread
    /// `pvrdma-roce` running. A RoCE port that cannot open is recorded
    /// ([`SimDevice::roce_error`]): the device works, but every send on it completes with
    /// `LOC_QP_OP_ERR`.
    pub fn new(cfg: SimConfig) -> Arc<Self> {
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0x5eed, |d| d.as_nanos() as u64);
        let port = PortQueue::new(cfg.device_packets_in_flight, cfg.device_bytes_in_flight, cfg.link_latency.is_zero());
        let budget = HostBudget::new(cfg.host_budget);
        let (roce, roce_error) = match &cfg.roce {
            None => (None, None),
            Some(rc) => match crate::roce::RocePort::open(rc) {
                Ok(p) => (Some(p), None),
                Err(e) => (Some(crate::roce::RocePort::unbound(rc)), Some(e)),
            },
        };
        let core = Arc::new(Core {
            mem: GuestMemory::new(cfg.mem_limit),
            cfg,
            vectors: MsixVectors::default(),
            regs: Mutex::new(Regs {
                dsr_low: 0,
                dsr_high: 0,
                err: ERR_INACTIVE,
                mac: DEFAULT_MAC,
                state: DeviceState::Inactive,
            }),
            dead: AtomicBool::new(false),
            imr: AtomicU32::new(0),
            cmd: Mutex::new(CmdState::default()),
            events: Mutex::new(None),
            objects: Mutex::new(Objects::new(seed)),
            gids: Mutex::new(vec![None; dsr::limits::GID_TBL_LEN as usize]),
            port,
            roce,
            budget,
            stats: Counters::default(),
            uids: AtomicU64::new(1),
        });
        let thread_core = core.clone();
        let port_thread =
            std::thread::Builder::new().name("pvrdma-port".into()).spawn(move || port::run(thread_core)).ok();
        let roce_thread = match &core.roce {
            Some(r) if r.is_bound() => {
                let thread_core = core.clone();
                std::thread::Builder::new().name("pvrdma-roce".into()).spawn(move || crate::roce::run(thread_core)).ok()
            }
            _ => None,
        };
        Arc::new(Self { core, port_thread, roce_thread, roce_error })
    }

    /// Whether the model has a RoCE v2 port ([`SimConfig::roce`]) that opened.
    pub fn has_roce(&self) -> bool {
        self.core.roce.is_some() && self.roce_error.is_none()
    }

    /// Why the RoCE port could not open (a socket's bind, the capture file), if it could not.
    pub fn roce_error(&self) -> Option<&crate::roce::RoceError> {
        self.roce_error.as_ref()
    }

    /// Reads the 32-bit BAR1 register at byte `offset`: VERSION (17), ERR (0xffff until
    /// ACTIVATE, then the negated errno of the last command), ICR, IMR, MACL, MACH, DSRLOW,
    /// DSRHIGH; 0 elsewhere; all-ones once [`SimDevice::set_dead`].
    pub fn reg_read(&self, offset: u32) -> u32 {
        if self.core.dead.load(Ordering::Acquire) {
            return u32::MAX;
        }
        let r = self.core.regs.lock();
        match offset {
            REG_VERSION => PVRDMA_ROCEV1_VERSION,
            REG_DSRLOW => r.dsr_low,
            REG_DSRHIGH => r.dsr_high,
            REG_ERR => r.err,
            // The interrupt cause register latches causes for INTx only; the model signals
            // through MSI-X, so no cause is ever pending (a write acknowledges nothing).
            REG_ICR => 0,
            REG_IMR => self.core.imr.load(Ordering::Acquire),
            REG_MACL => u32::from_le_bytes([r.mac[0], r.mac[1], r.mac[2], r.mac[3]]),
            REG_MACH => u32::from(r.mac[4]) | u32::from(r.mac[5]) << 8,
            _ => 0,
        }
    }

    /// Writes the 32-bit BAR1 register at byte `offset`; the effect is complete on return.
    /// DSRHIGH loads the DSR at `DSRHIGH:DSRLOW` and fills in its `caps`; CTL activates, resets
    /// (destroying every object and forgetting the DSR) or unquiesces (no-op); REQUEST with value
    /// 0 runs the command in the command slot (nonzero values are ignored, as on QEMU); IMR bit
    /// `n` suppresses vector `n`; ICR, MACL and MACH are stored. Ignored once dead.
    pub fn reg_write(&self, offset: u32, value: u32) {
        let core = &self.core;
        if core.dead.load(Ordering::Acquire) {
            return;
        }
        match offset {
            REG_DSRLOW => core.regs.lock().dsr_low = value,
            REG_DSRHIGH => core.load_dsr(value),
            REG_CTL => match DeviceCtl::try_from(value) {
                Ok(DeviceCtl::Activate) => core.activate(),
                Ok(DeviceCtl::Reset) => core.reset(),
                Ok(DeviceCtl::Unquiesce) | Err(_) => {}
            },
            REG_REQUEST if value == 0 => core.request(),
            // QEMU runs a command only for 0; anything else is dropped, and counted.
            REG_REQUEST => core.count(|c| &c.ignored_requests),
            REG_IMR => core.imr.store(value, Ordering::Release),
            REG_MACL => core.regs.lock().mac[..4].copy_from_slice(&value.to_le_bytes()),
            REG_MACH => core.regs.lock().mac[4..].copy_from_slice(&value.to_le_bytes()[..2]),
            _ => {}
        }
    }

    /// Writes 32 bits at byte `offset` of BAR2 (a UAR doorbell); see `uar.rs` for decoding and
    /// ownership. The doorbell's effect (SQ drained, arm set) is complete on return; delivery
    /// happens on the port thread.
    pub fn uar_write(&self, offset: u64, value: u32) {
        if self.core.dead.load(Ordering::Acquire) {
            return;
        }
        self.core.doorbell(offset, value);
    }

    /// Guest memory (the driver allocates its DMA memory here).
    pub fn mem(&self) -> &GuestMemory {
        &self.core.mem
    }

    /// The MSI-X vectors (0 command, 1 async event, 2 CQ notification).
    pub fn vectors(&self) -> &MsixVectors {
        &self.core.vectors
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SimStats {
        let budget = &self.core.budget;
        SimStats { host_bytes: budget.used(), host_budget: budget.limit(), ..self.core.stats.snapshot() }
    }

    /// The configuration the device was created with.
    pub fn config(&self) -> &SimConfig {
        &self.core.cfg
    }

    /// The device's life-cycle state.
    pub fn state(&self) -> DeviceState {
        self.core.state()
    }

    /// Fault injection: the device fails. Posts a DEVICE_FATAL async event (vector 1), sets ERR
    /// to 0xffff, and goes Broken: later commands get no response (the driver times out) and
    /// doorbells are refused, until RESET.
    pub fn inject_fatal(&self) {
        let _cmd = self.core.cmd.lock();
        {
            let mut r = self.core.regs.lock();
            r.state = DeviceState::Broken;
            r.err = ERR_INACTIVE;
        }
        self.core.post_async_event(EqeType::DeviceFatal, 0);
    }

    /// Fault injection: the function disappears (surprise removal) or comes back. While dead,
    /// every register reads all-ones, writes and doorbells are ignored, and no interrupt is
    /// raised.
    pub fn set_dead(&self, dead: bool) {
        self.core.dead.store(dead, Ordering::Release);
    }

    /// Test hook: posts an async event `kind` with `info` (vector 1), as the device would.
    pub fn inject_async_event(&self, kind: EqeType, info: u32) {
        self.core.post_async_event(kind, info);
    }

    /// Test hook: publishes `cqe` on CQ `cq_handle` through the normal path (space check,
    /// overflow, arm check, notification); `solicited` marks it as a solicited receive. Returns
    /// `false` if there is no such CQ.
    pub fn post_cqe(&self, cq_handle: u32, cqe: &Cqe, solicited: bool) -> bool {
        let Some(cq) = self.core.objects.lock().cqs.get(cq_handle).cloned() else {
            return false;
        };
        let mut fx = Effects::default();
        cq.publish(&self.core, cqe, solicited, &mut fx);
        self.core.settle(fx);
        true
    }

    /// CQ `handle`'s arm and error state, if it exists.
    pub fn cq_status(&self, handle: u32) -> Option<CqStatus> {
        let cq = self.core.objects.lock().cqs.get(handle).cloned();
        cq.map(|c| c.status())
    }

    /// The device's state, for the crate's tests that call the data path's functions directly.
    #[cfg(test)]
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// QP `handle`'s state (a `qp_state` value), if it exists.
    pub fn qp_state(&self, handle: u32) -> Option<u32> {
        self.core.qp(handle).map(|q| q.state())
    }

    /// Packets waiting on QP `qpn` for a receive WQE.
    pub fn parked_packets(&self, qpn: u32) -> usize {
        self.core.port.parked(qpn)
    }

    /// How many objects of each kind the device holds now (read-only: for leak checks).
    pub fn live_objects(&self) -> crate::table::LiveObjects {
        self.core.objects.lock().live()
    }

    /// Waits up to `timeout` until the port has delivered everything in flight (packets waiting
    /// for a receive WQE do not count). Returns whether it got there.
    pub fn wait_port_idle(&self, timeout: Duration) -> bool {
        self.core.port.wait_idle(timeout)
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        self.core.port.stop();
        if let Some(r) = &self.core.roce {
            r.stop();
        }
        for t in [self.port_thread.take(), self.roce_thread.take()].into_iter().flatten() {
            let _ = t.join();
        }
    }
}

impl Core {
    /// The device's life-cycle state.
    pub(crate) fn state(&self) -> DeviceState {
        self.regs.lock().state
    }

    /// Bumps counters.
    pub(crate) fn count(&self, counter: impl FnOnce(&Counters) -> &AtomicU64) {
        counter(&self.stats).fetch_add(1, Ordering::Relaxed);
    }

    /// A number unique over the device's life (objects' `uid`).
    pub(crate) fn next_uid(&self) -> u64 {
        self.uids.fetch_add(1, Ordering::Relaxed)
    }

    /// Reserves room for a message of `len` bytes of QP `qpn` on the device's wire (the loopback's
    /// or the RoCE port's: [`PortQueue::try_reserve`] keeps the budget of both).
    pub(crate) fn wire_reserve(&self, qpn: u32, len: u64) -> bool {
        self.port.try_reserve(qpn, len)
    }

    /// Returns a reservation of [`Core::wire_reserve`] whose message was not sent.
    pub(crate) fn wire_unreserve(&self, len: u64, fx: &mut Effects) {
        self.port.unreserve(len, fx);
    }

    /// Puts the message `pkt` of QP `qp` (attributes `a`, its state lock held) on the port's
    /// wire: the loopback, or the RoCE port. Errors: the completion status of a message the
    /// RoCE port cannot send (no usable source address).
    pub(crate) fn transmit(
        &self,
        qp: &Qp,
        a: &pvrdma_abi::verbs::QpAttr,
        pkt: port::Packet,
        fx: &mut Effects,
    ) -> Result<(), u32> {
        match &self.roce {
            Some(r) => r.post(self, qp, a, pkt, fx),
            None => {
                self.port.transmit(pkt, self.cfg.link_latency);
                Ok(())
            }
        }
    }

    /// The QP named `handle`.
    pub(crate) fn qp(&self, handle: u32) -> Option<Arc<Qp>> {
        self.objects.lock().qps.get(handle).cloned()
    }

    /// Raises `vector` unless the device is dead or `REG_IMR` masks it.
    pub(crate) fn raise(&self, vector: IntrVector) {
        let v = vector as u16;
        if self.dead.load(Ordering::Acquire) {
            return;
        }
        if self.imr.load(Ordering::Acquire) & (1 << v) != 0 {
            self.count(|c| &c.interrupts_masked);
            return;
        }
        self.count(|c| &c.interrupts[v as usize]);
        self.vectors.raise(v);
    }

    /// Does the deferred work ([`Core::settle_effects`]), hands any packet it sent to the port
    /// thread and raises the CQ-notification vector if an arm fired. Call with no lock held
    /// but `cmd`.
    pub(crate) fn settle(&self, mut fx: Effects) {
        self.settle_effects(&mut fx);
        self.port.hand_off();
        self.raise_fired(&mut fx);
    }

    /// [`Core::settle`] for a QP doorbell; with a link latency of 0 it first delivers the packets
    /// now due on this thread, up to [`port::INLINE_JOBS`] jobs, if the port is free (`port.rs`).
    /// Only a QP doorbell does: a driver may ring a CQ's arm doorbell while it holds its
    /// CQ-notification ring, which a delivery's interrupt handler takes (`intr.rs`). Interrupts
    /// are raised once the port is given back: the handler may wake a consumer that preempts
    /// this thread, and that consumer's own doorbell then finds the port free.
    pub(crate) fn settle_and_deliver(&self, mut fx: Effects) {
        self.settle_effects(&mut fx);
        if self.cfg.link_latency.is_zero() {
            for _ in 0..port::INLINE_JOBS {
                let Some(job) = self.port.claim_due() else { break };
                port::run_job(self, job, &mut fx);
                self.settle_effects(&mut fx);
                self.port.give_back();
                self.raise_fired(&mut fx);
            }
        }
        self.settle(fx);
    }

    /// Moves the QPs of CQs that went into error to ERR (which may put more CQs in error),
    /// resumes the SQ drains the wire budget paused once a packet left the wire, then wakes the
    /// port for kicked QPs.
    pub(crate) fn settle_effects(&self, fx: &mut Effects) {
        while !fx.errored_cqs.is_empty() || fx.resume_starved {
            let uids = std::mem::take(&mut fx.errored_cqs);
            let qps: Vec<Arc<Qp>> = self
                .objects
                .lock()
                .qps
                .values()
                .filter(|q| uids.contains(&q.send_cq.uid) || uids.contains(&q.recv_cq.uid))
                .cloned()
                .collect();
            for qp in qps {
                qp.force_error(self, fx);
            }
            if std::mem::take(&mut fx.resume_starved) {
                // Each resumed QP takes what room there is and, if refused again, waits for the
                // next packet to leave: resume_starved is set only when one did.
                for qpn in self.port.take_starved() {
                    if let Some(qp) = self.qp(qpn) {
                        qp.resume_send(self, fx);
                    }
                }
            }
        }
        for qpn in std::mem::take(&mut fx.kicks) {
            self.port.kick_if_parked(qpn);
        }
    }

    /// Raises the CQ-notification vector if an arm fired (its handler may run on this thread).
    pub(crate) fn raise_fired(&self, fx: &mut Effects) {
        if std::mem::take(&mut fx.raise_cq) {
            self.raise(IntrVector::Cq);
        }
    }

    /// REG_DSRHIGH: loads the DSR and writes its caps; a failure leaves the device Broken with
    /// ERR reading 0xffff (even after an earlier ACTIVATE), so ACTIVATE and REQUEST are refused
    /// visibly until RESET.
    fn load_dsr(&self, high: u32) {
        let mut cs = self.cmd.lock();
        let (addr, mac) = {
            let mut r = self.regs.lock();
            r.dsr_high = high;
            (u64::from(high) << 32 | u64::from(r.dsr_low), r.mac)
        };
        match dsr::load(&self.mem, addr) {
            Ok((info, rings)) if dsr::write_caps(&self.mem, addr, &dsr::profile_caps(mac, self.cfg.profile)) => {
                cs.dsr = Some(info);
                *self.events.lock() = Some(rings);
            }
            _ => {
                cs.dsr = None;
                *self.events.lock() = None;
                // ERR must not keep the 0 of an earlier ACTIVATE: the device is not working.
                let mut r = self.regs.lock();
                r.state = DeviceState::Broken;
                r.err = ERR_INACTIVE;
            }
        }
    }

    /// CTL = ACTIVATE: with a loaded DSR and not broken, the device goes Active and ERR reads 0.
    /// Otherwise nothing changes (ERR keeps reading 0xffff), so a driver sees the failure.
    fn activate(&self) {
        let cs = self.cmd.lock();
        let mut r = self.regs.lock();
        if cs.dsr.is_some() && r.state != DeviceState::Broken {
            r.state = DeviceState::Active;
            r.err = 0;
        }
    }

    /// CTL = RESET: destroys every object, empties the GID table and the wire, forgets the DSR;
    /// the device is Inactive with ERR = 0xffff.
    fn reset(&self) {
        let mut cs = self.cmd.lock();
        let (qps, cqs) = {
            let mut objs = self.objects.lock();
            let (qps, cqs) = (objs.qps.take_all(), objs.cqs.take_all());
            *objs = Objects::new(self.next_uid().wrapping_mul(0x2545_f491_4f6c_dd1d));
            (qps, cqs)
        };
        for qp in qps {
            qp.kill();
        }
        for cq in cqs {
            cq.kill();
        }
        self.gids.lock().iter_mut().for_each(|g| *g = None);
        self.port.clear();
        *self.events.lock() = None;
        cs.dsr = None;
        let mut r = self.regs.lock();
        r.state = DeviceState::Inactive;
        r.err = ERR_INACTIVE;
    }

    /// REQUEST = 0: runs the command in the command slot, writes the response (ack last, with
    /// release ordering), sets ERR to the negated errno (0 on success), raises vector 0 — on
    /// failure too.
    fn request(&self) {
        let cs = self.cmd.lock();
        let dsr = match cs.dsr {
            Some(dsr) if self.state() != DeviceState::Broken => dsr,
            _ => return self.count(|c| &c.ignored_requests),
        };
        self.count(|c| &c.commands);
        let mut req = [0u8; cmd::MAX_REQUEST];
        if self.mem.read(dsr.cmd_slot, &mut req).is_err() {
            self.count(|c| &c.failed_commands);
            self.regs.lock().err = crate::errno::Errno::EFAULT.reg_value();
            return self.raise(IntrVector::Response);
        }
        if cmd::unanswered(self, &req) {
            // QEMU 7.2's "not implemented yet": no response, ERR keeps its initial 0xffff.
            self.count(|c| &c.failed_commands);
            self.regs.lock().err = ERR_INACTIVE;
            return self.raise(IntrVector::Response);
        }
        let mut fx = Effects::default();
        let out = cmd::execute(self, &dsr, &req, &mut fx);
        self.settle(fx);
        let err_reg = if out.err == 0 { 0 } else { (-i32::from(out.err)) as u32 };
        let ack_at = dsr.resp_slot + core::mem::offset_of!(RespHdr, ack) as u64;
        // The slot was checked at DSR load; if the driver freed it since, the response is lost,
        // and ERR says so rather than the command's success.
        let err_reg = match self.mem.write(dsr.resp_slot, &out.resp) {
            Ok(()) => err_reg,
            Err(_) => crate::errno::Errno::EFAULT.reg_value(),
        };
        self.regs.lock().err = err_reg;
        let _ = self.mem.store_u32(ack_at, out.ack);
        if out.err != 0 {
            self.count(|c| &c.failed_commands);
        }
        self.raise(IntrVector::Response);
    }
}
