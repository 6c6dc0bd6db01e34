//! The command channel over the platform: [`firmware_cmd::CmdTransport`] implemented with the two
//! DSR slot pages, `REG_REQUEST` and MSI-X vector 0 (Linux `pvrdma_cmd.c`, mthca `mthca_cmd.c`),
//! and [`Commands`], the one entry point every object uses to post a typed command.

use crate::dma::DmaBuf;
use crate::eq::SERVICE_INTERVAL;
use crate::error::from_cmd;
use crate::health::Health;
use crate::platform::Platform;
use firmware_cmd::{CmdChannel, CmdError, CmdTransport, StdClock, WaitMode};
use ib_core::{Error, Result};
use parking_lot::Mutex;
use pvrdma_abi::cmd::CmdRequest;
use pvrdma_abi::regs::{IntrVector, REG_ERR, REG_REQUEST};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `REG_ERR` after a command QEMU 7.2 does not implement (its initial `err = 0xFFFF`).
const NOT_IMPLEMENTED: u32 = 0xffff;

/// The command and response slots (one DMA page each) plus the command interrupt.
///
/// `Platform::wait_vector` hands back every pending interrupt at once; `pending` keeps the ones
/// not yet matched to a command so that each command consumes exactly one (design decision 10).
pub struct PlatformTransport {
    platform: Arc<dyn Platform>,
    cmd_slot: DmaBuf,
    resp_slot: DmaBuf,
    pending: Mutex<u32>,
    health: Arc<Health>,
    next_liveness_check: Mutex<Instant>,
}

impl PlatformTransport {
    /// Allocates both slots.
    pub fn new(platform: &Arc<dyn Platform>, health: Arc<Health>) -> Result<Self> {
        Ok(Self {
            platform: platform.clone(),
            cmd_slot: DmaBuf::pages(platform, 1)?,
            resp_slot: DmaBuf::pages(platform, 1)?,
            pending: Mutex::new(0),
            health,
            next_liveness_check: Mutex::new(Instant::now()),
        })
    }

    /// Device address of the command slot (for the DSR).
    pub fn cmd_slot_dma(&self) -> u64 {
        self.cmd_slot.iova()
    }

    /// Device address of the response slot (for the DSR).
    pub fn resp_slot_dma(&self) -> u64 {
        self.resp_slot.iova()
    }
}

impl CmdTransport for PlatformTransport {
    fn write_cmd_slot(&self, bytes: &[u8]) -> std::result::Result<(), &'static str> {
        self.cmd_slot.write(0, bytes).map_err(|_| "command slot unreachable")
    }

    fn write_resp_slot(&self, offset: u64, bytes: &[u8]) -> std::result::Result<(), &'static str> {
        self.resp_slot.write(offset, bytes).map_err(|_| "response slot unreachable")
    }

    fn read_resp_slot(&self, buf: &mut [u8]) -> std::result::Result<(), &'static str> {
        self.resp_slot.read(0, buf).map_err(|_| "response slot unreachable")
    }

    fn load_resp_u32(&self, offset: u64) -> std::result::Result<u32, &'static str> {
        self.resp_slot.load_u32(offset).map_err(|_| "response slot unreachable")
    }

    /// Fatal already, or the registers read all-ones: checked at most once per
    /// [`SERVICE_INTERVAL`], as a register read may cost a round trip (qtest).
    fn device_gone(&self) -> bool {
        let mut next = self.next_liveness_check.lock();
        if Instant::now() >= *next {
            self.health.check_registers(self.platform.as_ref());
            *next = ib_core::time::deadline_after(SERVICE_INTERVAL);
        }
        self.health.is_fatal()
    }

    fn ring_request(&self) {
        // QEMU runs the command only when REQUEST is written with 0.
        self.platform.reg_write(REG_REQUEST, 0);
    }

    /// Waits in slices of at most [`SERVICE_INTERVAL`], so a device found fatal meanwhile (a
    /// DEVICE_FATAL event, the health check) ends the wait instead of the full timeout.
    fn wait_response_irq(&self, timeout: Duration) -> bool {
        let deadline = ib_core::time::deadline_after(timeout);
        let mut pending = self.pending.lock();
        loop {
            if *pending > 0 {
                *pending -= 1;
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.health.is_fatal() {
                return false;
            }
            let n = self.platform.wait_vector(IntrVector::Response as u16, left.min(SERVICE_INTERVAL));
            self.health.count_interrupts(IntrVector::Response as u16, n);
            if n == 0 {
                self.health.check_registers(self.platform.as_ref());
            }
            *pending = pending.saturating_add(n);
        }
    }
}

/// The device's command channel as the objects see it: refuses every command once the device is
/// fatal, and makes the device fatal on a transport fault (timeout, wrong ack or cookie).
pub struct Commands {
    chan: CmdChannel<PlatformTransport, StdClock>,
    health: Arc<Health>,
}

impl Commands {
    /// A channel over `transport` waiting in `mode`, with commands timing out after `timeout`.
    pub fn new(transport: PlatformTransport, mode: WaitMode, timeout: Duration) -> Self {
        let health = transport.health.clone();
        Self { chan: CmdChannel::with_timeout(transport, StdClock, mode, timeout), health }
    }

    /// Posts `req` and returns the device's response.
    ///
    /// Errors: [`Error::DeviceFatal`] if the device is or went fatal; [`Error::Device`] holding
    /// the [`firmware_cmd::CmdError`] if the device refused the command or the transport faulted
    /// (a fault also makes the device fatal).
    pub fn post<C: CmdRequest>(&self, req: C) -> Result<C::Response> {
        if self.health.is_fatal() {
            return Err(Error::DeviceFatal);
        }
        self.chan.post(req).map_err(|e| self.failed::<C>(e))
    }

    /// Posts a command the device may lack (RESIZE_CQ). QEMU 7.2 answers a command its table
    /// names without a handler with no response at all: the slot's ack stays 0 and `REG_ERR`
    /// reads 0xffff (QEMU's `pvrdma_exec_cmd`). That non-answer is [`Error::Unsupported`] here and
    /// leaves the device healthy; anything else is as [`Commands::post`]. Interrupt waits only:
    /// a polling wait sees a missing answer as a timeout (fatal).
    pub fn post_optional<C: CmdRequest>(&self, req: C) -> Result<C::Response> {
        if self.health.is_fatal() {
            return Err(Error::DeviceFatal);
        }
        match self.chan.post(req) {
            Err(CmdError::WrongAck { got: 0, .. }) if self.unanswered() => {
                tracing::debug!(opcode = C::OPCODE, "command not implemented by the device");
                Err(Error::Unsupported("command not implemented by the device"))
            }
            other => other.map_err(|e| self.failed::<C>(e)),
        }
    }

    /// Whether `REG_ERR` holds QEMU's "no handler" value.
    fn unanswered(&self) -> bool {
        self.chan.transport().platform.reg_read(REG_ERR) == NOT_IMPLEMENTED
    }

    /// A failed post as the caller sees it (a transport fault makes the device fatal).
    fn failed<C: CmdRequest>(&self, e: CmdError) -> Error {
        // A dead device answers a stormed wait with garbage: look before blaming the answer.
        let transport = self.chan.transport();
        if e.is_fatal() {
            self.health.check_registers(transport.platform.as_ref());
        }
        // The device went fatal while the command waited: that, not the cut wait, is why.
        if self.health.is_fatal() {
            return Error::DeviceFatal;
        }
        if e.is_fatal() {
            self.health.set_fatal("command transport fault");
        }
        tracing::debug!(opcode = C::OPCODE, error = %e, "command failed");
        from_cmd(e)
    }
}
