//! The model targets' driver: the mini-driver of `pvrdma-sim` ([`minidrv::Drv`], its
//! `test-utils` feature) with the fuzz configuration, and the checks of what the fuzz input
//! controls.
//!
//! Set-up goes through [`Model::drv`]; its failures are model bugs and panic (the fuzzer reports
//! them). Everything the fuzz input controls goes through [`Model::post_raw`], [`Model::post`],
//! [`Model::mem`] and [`pvrdma_sim::SimDevice::uar_write`], whose outcomes are checked against
//! the device's contract instead ([`check_answer`]).

use pvrdma_abi::cmd::{self, ack_for, CmdRequest, RespHdr};
use pvrdma_abi::regs::{DeviceCtl, REG_CTL};
use pvrdma_abi::verbs::access;
use pvrdma_sim::testutil::minidrv::{connect_steps, Drv, Retries};
use pvrdma_sim::{DeviceState, Profile, SimConfig, SimDevice};
use std::time::Duration;
use zerocopy::little_endian::{U32, U64};
use zerocopy::FromBytes;

pub use pvrdma_sim::testutil::minidrv::{GID0, PAGE};

/// Bytes of guest memory the fuzzed model may hand out: small, so a run that grows it is seen.
pub const MEM_LIMIT: u64 = 64 << 20;
/// Bound on the port going idle after a doorbell (the model delivers on the ringing thread at
/// link latency 0; anything near this bound is a hang).
pub const SETTLE: Duration = Duration::from_secs(5);
/// The QPs' access flags: what the ring target's RDMA WRITEs need at the responder.
const QP_ACCESS: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE;
/// No retries (`timeout` 0: no retransmit timer; `rnr_retry` 0: an RNR NAK fails at once), so
/// the port goes idle whatever the input posted.
const NO_RETRIES: Retries = Retries { timeout: 0, retry_cnt: 0, rnr_retry: 0, min_rnr_timer: 0 };

/// A model configuration for fuzzing: the default one with [`MEM_LIMIT`] bytes of guest memory and
/// small wire budgets.
pub fn config() -> SimConfig {
    SimConfig {
        mem_limit: MEM_LIMIT,
        qp_bytes_in_flight: 1 << 20,
        device_packets_in_flight: 256,
        device_bytes_in_flight: 4 << 20,
        ..SimConfig::default()
    }
}

/// What a command did, as the driver sees it in the response slot.
#[derive(Debug)]
pub struct Answer {
    /// The response header (`ack` 0 if the device wrote none).
    pub hdr: RespHdr,
    /// The whole response slot's first bytes (the largest response).
    pub bytes: Vec<u8>,
    /// Command interrupts raised by the request.
    pub irqs: u64,
}

/// Bytes of the largest response (QUERY_QP's).
pub const MAX_RESPONSE: usize = core::mem::size_of::<cmd::QueryQpResp>();

/// The mini-driver over a model with a loaded, activated DSR (device rings of two pages each).
pub struct Model {
    /// The mini-driver, for set-up.
    pub drv: Drv,
}

impl Model {
    /// A new device of the IBTA profile.
    pub fn new() -> Self {
        Self::with_profile(Profile::Ibta)
    }

    /// [`Model::new`] with `profile`.
    pub fn with_profile(profile: Profile) -> Self {
        Self::with_config(SimConfig { profile, ..config() })
    }

    /// [`Model::new`] with `cfg`.
    pub fn with_config(cfg: SimConfig) -> Self {
        let drv = Drv::new(cfg);
        assert_eq!(drv.dev.state(), DeviceState::Active, "a valid DSR did not activate the device");
        Self { drv }
    }

    /// The device.
    pub fn dev(&self) -> &SimDevice {
        &self.drv.dev
    }

    /// Guest memory.
    pub fn mem(&self) -> &pvrdma_sim::mem::GuestMemory {
        self.drv.dev.mem()
    }

    /// Posts `bytes` as they are ([`Drv::post_unchecked`]) and reads the response slot back.
    pub fn post_raw(&mut self, bytes: &[u8]) -> Answer {
        let (bytes, irqs) = self.drv.post_unchecked(bytes, MAX_RESPONSE);
        let hdr = RespHdr::read_from_prefix(&bytes).expect("header").0;
        Answer { hdr, bytes, irqs }
    }

    /// Posts a typed request and returns its response and `err`, checking the protocol
    /// ([`check_answer`]: a device the input broke may leave it unanswered).
    pub fn post<C: CmdRequest>(&mut self, mut req: C) -> (C::Response, u8) {
        let cookie = self.drv.next_cookie();
        req.hdr_mut().response = U64::new(cookie);
        req.hdr_mut().cmd = U32::new(C::OPCODE);
        let a = self.post_raw(req.as_bytes());
        check_answer(self.dev(), C::OPCODE, cookie, &a, DeviceState::Active);
        let resp = C::Response::read_from_prefix(&a.bytes).expect("response").0;
        (resp, a.hdr.err)
    }

    /// RESET -> INIT -> RTR -> RTS towards `dest` (set-up: each step must succeed).
    pub fn connect(&mut self, qpn: u32, dest: u32) {
        self.drv.connect_with(qpn, dest, QP_ACCESS, NO_RETRIES);
    }

    /// [`Model::connect`] that stops at the first step the device refuses and returns its errno
    /// (0: connected). A QP can fail legitimately between steps: its CQ may overflow on the port
    /// thread meanwhile (with a link latency), which moves it to ERR.
    pub fn try_connect(&mut self, qpn: u32, dest: u32) -> u8 {
        for (mask, attrs) in connect_steps(dest, QP_ACCESS, NO_RETRIES) {
            let req =
                cmd::ModifyQp { qp_handle: U32::new(qpn), attr_mask: U32::new(mask), attrs, ..Default::default() };
            let err = self.post(req).1;
            if err != 0 {
                return err;
            }
        }
        0
    }

    /// Waits (bounded) until the port has nothing in flight; a port that never gets there is a
    /// hang and panics.
    pub fn settle(&self) {
        assert!(self.dev().wait_port_idle(SETTLE), "the model's port did not go idle within {SETTLE:?}");
    }

    /// `CTL = RESET` (every object destroyed, the DSR forgotten): the device must end Inactive.
    pub fn reset(&self) {
        self.dev().reg_write(REG_CTL, DeviceCtl::Reset as u32);
        assert_eq!(self.dev().state(), DeviceState::Inactive, "RESET did not leave the device Inactive");
    }

    /// Checks the invariants every run ends with: guest memory within its limit.
    pub fn check_bounded(&self) {
        let used = self.mem().used();
        assert!(used <= MEM_LIMIT, "guest memory {used} beyond its limit {MEM_LIMIT}");
    }
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

/// The command protocol as the driver relies on it (design decision 10): a device that was
/// `before` (not Broken) answers every `REQUEST` with the opcode's ack, the request's cookie, and
/// exactly one command interrupt; a Broken one answers nothing. The one exception is QEMU 7.2's
/// RESIZE_CQ, which its profile leaves unanswered as QEMU does (no response, the interrupt
/// raised; the driver's probe reads that as "no RESIZE_CQ").
pub fn check_answer(dev: &SimDevice, opcode: u32, cookie: u64, a: &Answer, before: DeviceState) {
    let ack = a.hdr.ack.get();
    if ack == 0 {
        let broken = before == DeviceState::Broken || dev.state() == DeviceState::Broken;
        let unanswered = opcode == cmd::opcode::RESIZE_CQ && dev.config().profile == Profile::Qemu72;
        assert!(
            broken || unanswered,
            "no response to opcode {opcode:#x} from a device that is not Broken ({before:?})"
        );
        if !broken {
            assert_eq!(a.irqs, 1, "command interrupts for QEMU 7.2's unanswered RESIZE_CQ");
        }
        return;
    }
    assert_eq!(ack, expected_ack(dev, opcode), "ack of opcode {opcode:#x}");
    assert_eq!(a.hdr.response.get(), cookie, "cookie of opcode {opcode:#x}");
    assert_eq!(a.irqs, 1, "command interrupts for opcode {opcode:#x}");
}

/// The ack `opcode` gets: its own, except on the QEMU 7.2 profile, whose command table lists
/// QUERY_SRQ and MODIFY_SRQ swapped as QEMU 7.2's does (each answers with the other's ack).
fn expected_ack(dev: &SimDevice, opcode: u32) -> u32 {
    use cmd::opcode::{MODIFY_SRQ, QUERY_SRQ};
    match opcode {
        MODIFY_SRQ if dev.config().profile == Profile::Qemu72 => ack_for(QUERY_SRQ),
        QUERY_SRQ if dev.config().profile == Profile::Qemu72 => ack_for(MODIFY_SRQ),
        _ => ack_for(opcode),
    }
}
