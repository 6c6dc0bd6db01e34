//! The protocol against a scripted fake device.

use super::*;
use crate::error::errno;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use osdep::Mutex as PMutex;
use osdep::StdClock;
use pvrdma_abi::cmd::{CreatePd, CreatePdResp, QueryPkey};
extern crate std;
use std::vec;
use std::vec::Vec;

/// How the fake answers the next request.
#[derive(Clone, Copy)]
enum Script {
    Ok,
    Err(u8),
    WrongAck,
    WrongCookie,
    Silent,
}

struct Fake {
    cmd: PMutex<Vec<u8>>,
    resp: PMutex<Vec<u8>>,
    script: PMutex<Script>,
    irqs: AtomicU32,
}

impl Fake {
    fn new(script: Script) -> Self {
        Self {
            cmd: PMutex::new(vec![0; 4096]),
            resp: PMutex::new(vec![0xaa; 4096]),
            script: PMutex::new(script),
            irqs: AtomicU32::new(0),
        }
    }
}

impl CmdTransport for &Fake {
    fn write_cmd_slot(&self, bytes: &[u8]) -> Result<(), &'static str> {
        self.cmd.lock()[..bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
    fn write_resp_slot(&self, offset: u64, bytes: &[u8]) -> Result<(), &'static str> {
        let o = offset as usize;
        self.resp.lock()[o..o + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
    fn read_resp_slot(&self, buf: &mut [u8]) -> Result<(), &'static str> {
        buf.copy_from_slice(&self.resp.lock()[..buf.len()]);
        Ok(())
    }
    fn load_resp_u32(&self, offset: u64) -> Result<u32, &'static str> {
        let r = self.resp.lock();
        let o = offset as usize;
        Ok(u32::from_le_bytes(r[o..o + 4].try_into().unwrap()))
    }
    fn ring_request(&self) {
        let cmd = self.cmd.lock().clone();
        let (hdr, _) = pvrdma_abi::cmd::CmdHdr::read_from_prefix(&cmd).unwrap();
        let mut resp = CreatePdResp::default();
        resp.hdr.response = hdr.response;
        resp.hdr.ack.set(ack_for(hdr.cmd.get()));
        resp.pd_handle.set(7);
        match *self.script.lock() {
            Script::Ok => {}
            Script::Err(e) => resp.hdr.err = e,
            Script::WrongAck => resp.hdr.ack.set(0x8000_0001),
            Script::WrongCookie => resp.hdr.response.set(hdr.response.get() + 1),
            Script::Silent => return,
        }
        self.resp.lock()[..resp.as_bytes().len()].copy_from_slice(resp.as_bytes());
        self.irqs.fetch_add(1, Ordering::SeqCst);
    }
    fn wait_response_irq(&self, _timeout: Duration) -> bool {
        self.irqs.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }
}

fn post_pd(fake: &Fake, mode: WaitMode) -> Result<CreatePdResp, CmdError> {
    let ch = CmdChannel::with_timeout(fake, StdClock, mode, Duration::from_millis(20));
    ch.post(CreatePd::default())
}

#[test]
fn a_good_response_is_returned_in_both_modes() {
    for mode in [WaitMode::Interrupt, WaitMode::Polling] {
        let fake = Fake::new(Script::Ok);
        assert_eq!(post_pd(&fake, mode).unwrap().pd_handle.get(), 7);
        let left = u32::from(mode == WaitMode::Polling);
        assert_eq!(fake.irqs.load(Ordering::SeqCst), left, "interrupt mode consumes exactly one");
    }
}

#[test]
fn device_status_maps_through_the_table() {
    let fake = Fake::new(Script::Err(errno::EINVAL));
    let err = post_pd(&fake, WaitMode::Interrupt).unwrap_err();
    assert_eq!(err, CmdError::Device { opcode: 2, status: DeviceStatus::InvalidArgument });
    assert!(!err.is_fatal());
}

#[test]
fn faults_are_separate_from_device_status() {
    let fake = Fake::new(Script::WrongAck);
    assert!(matches!(post_pd(&fake, WaitMode::Interrupt), Err(CmdError::WrongAck { .. })));
    let fake = Fake::new(Script::WrongCookie);
    assert!(matches!(post_pd(&fake, WaitMode::Polling), Err(CmdError::WrongCookie { .. })));
    let fake = Fake::new(Script::Silent);
    let err = post_pd(&fake, WaitMode::Polling).unwrap_err();
    assert!(matches!(err, CmdError::Timeout { opcode: 2, .. }) && err.is_fatal());
}

#[test]
fn a_stale_response_is_not_taken_for_the_next_command() {
    let fake = Fake::new(Script::Ok);
    let ch = CmdChannel::with_timeout(&fake, StdClock, WaitMode::Polling, Duration::from_millis(20));
    ch.post(CreatePd::default()).unwrap();
    *fake.script.lock() = Script::Silent;
    // The slot still holds the previous response; zeroing it first makes this a timeout.
    assert!(matches!(ch.post(QueryPkey::default()), Err(CmdError::Timeout { .. })));
}

#[test]
fn huge_timeouts_saturate_instead_of_panicking() {
    let fake = Fake::new(Script::Ok);
    let ch = CmdChannel::with_timeout(&fake, StdClock, WaitMode::Polling, Duration::MAX);
    ch.post(CreatePd::default()).unwrap();
}

/// A clock that only moves when the channel relaxes: 1 ms per pause.
#[derive(Default)]
struct Scripted {
    ms: AtomicU64,
    pauses: AtomicU32,
}

impl Clock for &Scripted {
    fn now(&self) -> Duration {
        Duration::from_millis(self.ms.load(Ordering::SeqCst))
    }
    fn relax(&self, _round: u32) {
        self.pauses.fetch_add(1, Ordering::SeqCst);
        self.ms.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn polling_waits_on_the_injected_clock() {
    let fake = Fake::new(Script::Silent);
    let clock = Scripted::default();
    let ch = CmdChannel::with_timeout(&fake, &clock, WaitMode::Polling, Duration::from_millis(30));
    let err = ch.post(CreatePd::default()).unwrap_err();
    assert_eq!(err, CmdError::Timeout { opcode: 2, timeout_ms: 30 });
    assert_eq!(clock.pauses.load(Ordering::SeqCst), 30, "one pause per scripted millisecond, no host time");
}

/// A device whose response slot cannot be read.
struct Unreachable;

impl CmdTransport for Unreachable {
    fn write_cmd_slot(&self, _bytes: &[u8]) -> Result<(), &'static str> {
        Ok(())
    }
    fn write_resp_slot(&self, _offset: u64, _bytes: &[u8]) -> Result<(), &'static str> {
        Ok(())
    }
    fn read_resp_slot(&self, _buf: &mut [u8]) -> Result<(), &'static str> {
        Err("gone")
    }
    fn load_resp_u32(&self, _offset: u64) -> Result<u32, &'static str> {
        Err("gone")
    }
    fn ring_request(&self) {}
    fn wait_response_irq(&self, _timeout: Duration) -> bool {
        false
    }
}

/// A clock that never moves.
struct Frozen;

impl Clock for Frozen {
    fn now(&self) -> Duration {
        Duration::from_secs(7)
    }
    fn relax(&self, _round: u32) {}
}

#[test]
fn an_unreachable_ack_word_is_a_transport_fault_and_a_frozen_clock_still_times_out() {
    let ch = CmdChannel::with_timeout(Unreachable, Frozen, WaitMode::Polling, Duration::from_secs(1));
    let err = ch.post(CreatePd::default()).unwrap_err();
    assert_eq!(err, CmdError::Transport { opcode: 2, what: "gone" });
    let fake = Fake::new(Script::Silent);
    let ch = CmdChannel::with_timeout(&fake, Frozen, WaitMode::Polling, Duration::from_secs(1));
    assert!(matches!(ch.post(CreatePd::default()), Err(CmdError::Timeout { .. })));
}
