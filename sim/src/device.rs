//! The device: BAR1 registers, BAR2 doorbells, MSI-X, and [`Core`], the registers and the RoCE
//! port on top of the data path's [`Backend`] (which the port threads share).
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
//! 2. a QP's state lock (`qp/mod.rs`) — one QP at a time; then, on the RoCE port, that QP's
//!    requester lock (`roce/`: the SQ drain posts under the QP's lock; nobody takes a QP's lock
//!    while holding a requester's).
//!    An SRQ's lock (`srq.rs`) is taken under a QP's (a receive takes a WQE), never the other way.
//! 3. a CQ's state lock (`cq.rs`) — one CQ at a time; publishing a CQE and the arm doorbell both
//!    hold it.
//! 4. `Ctx::events` — the async-event and CQ-notification rings.
//! 5. leaves, held briefly with nothing taken inside: `Backend::objects`, `Backend::gids`,
//!    `Core::regs`, `Ctx::stats`, the port queue, the RoCE port's requester map, link and
//!    capture, [`MsixVectors`]' and [`GuestMemory`]'s own locks.
//!
//! Work that needs another QP's lock (moving a CQ's QPs to ERR after an overflow, waking the
//! port) is collected in [`Effects`] and done by [`Backend::settle`] once the locks are released.

use crate::backend::{Backend, Transport};
use crate::cmd;
use crate::config::SimConfig;
use crate::cq::CqStatus;
use crate::ctx::{Ctx, Effects};
use crate::dsr::{self, DsrInfo, DEFAULT_MAC};
use crate::eq::MsixVectors;
use crate::mem::GuestMemory;
use crate::port;
use crate::roce::RocePort;
use crate::stats::SimStats;
use crate::table::Objects;
use crate::wire::PortQueue;
use parking_lot::Mutex;
use pvrdma_abi::cmd::RespHdr;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::regs::*;
use pvrdma_abi::wqe::Cqe;
use pvrdma_abi::PVRDMA_ROCEV1_VERSION;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use crate::limits::UAR_BASE_PFN;

/// `REG_ERR` before `ACTIVATE` (as QEMU initializes it).
const ERR_INACTIVE: u32 = 0xffff;

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

/// The device's shared state: the data path's [`Backend`] (shared with the port threads), the
/// RoCE port, and the registers. Dereferences to the [`Backend`] it extends.
pub(crate) struct Core {
    backend: Arc<Backend>,
    /// The RoCE v2 port, when [`SimConfig::roce`] is set (also `backend.roce`).
    roce: Option<Arc<RocePort>>,
    regs: Mutex<Regs>,
    cmd: Mutex<CmdState>,
}

impl std::ops::Deref for Core {
    type Target = Backend;
    fn deref(&self) -> &Backend {
        &self.backend
    }
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
        let (roce, roce_error) = match &cfg.roce {
            None => (None, None),
            Some(rc) => match RocePort::open(rc) {
                Ok(p) => (Some(Arc::new(p)), None),
                Err(e) => (Some(Arc::new(RocePort::unbound(rc))), Some(e)),
            },
        };
        let backend = Arc::new(Backend {
            ctx: Ctx::new(cfg),
            objects: Mutex::new(Objects::new(seed)),
            gids: Mutex::new(vec![None; crate::limits::GID_TBL_LEN as usize]),
            port,
            roce: roce.clone().map(|r| r as Arc<dyn Transport>),
        });
        let thread_backend = backend.clone();
        let port_thread =
            std::thread::Builder::new().name("pvrdma-port".into()).spawn(move || port::run(thread_backend)).ok();
        let roce_thread = match &roce {
            Some(r) if r.is_bound() => {
                let (b, r) = (backend.clone(), r.clone());
                std::thread::Builder::new().name("pvrdma-roce".into()).spawn(move || crate::roce::run(b, r)).ok()
            }
            _ => None,
        };
        let core = Arc::new(Core {
            backend,
            roce,
            regs: Mutex::new(Regs {
                dsr_low: 0,
                dsr_high: 0,
                err: ERR_INACTIVE,
                mac: DEFAULT_MAC,
                state: DeviceState::Inactive,
            }),
            cmd: Mutex::new(CmdState::default()),
        });
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
        self.core.stats()
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
        let err_reg = pvrdma_abi::errno::reg_value(out.err);
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
