//! The generic command post: one implementation of the protocol for every command type.

use crate::error::{CmdError, DeviceStatus};
use core::time::Duration;
use osdep::{poll_until, Clock, Mutex};
use pvrdma_abi::cmd::{ack_for, CmdRequest, RespHdr};
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// How long a command may take before [`CmdError::Timeout`]: QEMU runs a command inside the
/// `REQUEST` write, so anything near this bound means the device is gone.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Byte offset of `ack` in the response slot.
const ACK_OFFSET: u64 = core::mem::offset_of!(RespHdr, ack) as u64;

/// What the channel needs from the platform: the two DSR slots, the `REQUEST` register and the
/// command-completion interrupt (vector 0). `hca` implements it over its platform interface.
pub trait CmdTransport: Send + Sync {
    /// Copies `bytes` to the start of the command slot.
    fn write_cmd_slot(&self, bytes: &[u8]) -> Result<(), &'static str>;
    /// Copies `bytes` to `offset` in the response slot (used to zero it).
    fn write_resp_slot(&self, offset: u64, bytes: &[u8]) -> Result<(), &'static str>;
    /// Copies the start of the response slot into `buf`.
    fn read_resp_slot(&self, buf: &mut [u8]) -> Result<(), &'static str>;
    /// Loads the 32-bit word at `offset` in the response slot with acquire ordering.
    fn load_resp_u32(&self, offset: u64) -> Result<u32, &'static str>;
    /// Writes `REG_REQUEST`.
    fn ring_request(&self);
    /// Consumes one command-completion interrupt, waiting up to `timeout`; `false` on timeout.
    fn wait_response_irq(&self, timeout: Duration) -> bool;
    /// Whether the device is known to be gone (a liveness check the transport may rate-limit).
    /// A polling wait asks between reads of the ack word and ends with a transport fault when it
    /// says so, instead of waiting out its timeout. By default never.
    fn device_gone(&self) -> bool {
        false
    }
}

/// How [`CmdChannel::post`] waits for the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Sleep until vector 0 fires (the normal mode once MSI-X is set up).
    Interrupt,
    /// Poll the response's `ack` word (bring-up, or a platform without interrupts).
    Polling,
}

/// The command channel: serializes commands (there is one command slot) and runs the protocol,
/// waiting on the clock `K` it was given.
pub struct CmdChannel<T: CmdTransport, K: Clock> {
    transport: T,
    clock: K,
    state: Mutex<ChannelState>,
    timeout: Duration,
}

struct ChannelState {
    next_cookie: u64,
    mode: WaitMode,
}

impl<T: CmdTransport, K: Clock> CmdChannel<T, K> {
    /// A channel over `transport`, waiting in `mode` on `clock`, with [`DEFAULT_TIMEOUT`].
    pub fn new(transport: T, clock: K, mode: WaitMode) -> Self {
        Self::with_timeout(transport, clock, mode, DEFAULT_TIMEOUT)
    }

    /// A channel whose commands time out after `timeout` on `clock`.
    pub fn with_timeout(transport: T, clock: K, mode: WaitMode, timeout: Duration) -> Self {
        let state = ChannelState { next_cookie: 1, mode };
        Self { transport, clock, state: Mutex::new(state), timeout }
    }

    /// The transport (for the platform's other users of the same slots).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Switches between interrupt and polling waits.
    pub fn set_mode(&self, mode: WaitMode) {
        self.state.lock().mode = mode;
    }

    /// Posts `req` and returns its response.
    ///
    /// Errors: [`CmdError::Device`] if the device refused it (`err` != 0); [`CmdError::Timeout`],
    /// [`CmdError::WrongAck`], [`CmdError::WrongCookie`] and [`CmdError::Transport`] for faults.
    pub fn post<C: CmdRequest>(&self, mut req: C) -> Result<C::Response, CmdError> {
        let op = C::OPCODE;
        let fault = |what| CmdError::Transport { opcode: op, what };
        let mut state = self.state.lock();
        let cookie = state.next_cookie;
        state.next_cookie = state.next_cookie.wrapping_add(1).max(1);
        let hdr = req.hdr_mut();
        hdr.response = U64::new(cookie);
        hdr.cmd.set(op);

        let zero = [0u8; core::mem::size_of::<RespHdr>()];
        self.transport.write_resp_slot(0, &zero).map_err(fault)?;
        self.transport.write_cmd_slot(req.as_bytes()).map_err(fault)?;
        self.transport.ring_request();
        self.wait(state.mode, op)?;

        let mut resp = <C::Response as FromZeros>::new_zeroed();
        self.transport.read_resp_slot(resp.as_mut_bytes()).map_err(fault)?;
        let (hdr, _) = RespHdr::read_from_prefix(resp.as_bytes()).map_err(|_| fault("short"))?;
        check_response(op, cookie, &hdr)?;
        Ok(resp)
    }

    /// Polling ends on the first unreachable read of the ack word, or when the transport finds the
    /// device gone, as a transport fault.
    fn wait(&self, mode: WaitMode, op: u32) -> Result<(), CmdError> {
        let timeout = self.timeout;
        let mut fault = None;
        let ok = match mode {
            WaitMode::Interrupt => self.transport.wait_response_irq(timeout),
            WaitMode::Polling => poll_until(&self.clock, timeout, || {
                if self.transport.device_gone() {
                    fault = Some("the device is gone");
                    return true;
                }
                match self.transport.load_resp_u32(ACK_OFFSET) {
                    Ok(ack) => ack != 0,
                    Err(what) => {
                        fault = Some(what);
                        true
                    }
                }
            }),
        };
        if let Some(what) = fault {
            return Err(CmdError::Transport { opcode: op, what });
        }
        if ok {
            Ok(())
        } else {
            let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            Err(CmdError::Timeout { opcode: op, timeout_ms })
        }
    }
}

fn check_response(op: u32, cookie: u64, hdr: &RespHdr) -> Result<(), CmdError> {
    let ack = hdr.ack.get();
    if ack != ack_for(op) {
        return Err(CmdError::WrongAck { opcode: op, expected: ack_for(op), got: ack });
    }
    if hdr.response.get() != cookie {
        return Err(CmdError::WrongCookie { opcode: op, expected: cookie, got: hdr.response.get() });
    }
    match DeviceStatus::from_err(hdr.err) {
        None => Ok(()),
        Some(status) => Err(CmdError::Device { opcode: op, status }),
    }
}

#[cfg(test)]
mod tests;
