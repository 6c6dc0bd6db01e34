//! The `driver_parsing` target: the driver's handling of everything the device writes.
//!
//! The first byte picks one of two modes:
//! - **pure** (even): the parsers themselves on the input bytes — every typed command of
//!   `pvrdma-abi` through `firmware_cmd::CmdChannel::post` over a transport whose "device"
//!   answers with the input (ack and cookie optionally made right, so the fields behind them are
//!   reached), and `hca::wc::translate` on each 64-byte CQE.
//! - **driver** (odd): the whole driver over a hostile model ([`crate::hostile`]).
//!
//! Invariants: no panic or hang; errors are `Err` values; a command is accepted only with the
//! right ack, cookie and status; a successful work completion names a QP of its CQ with a known
//! opcode.

use arbitrary::Unstructured;
use firmware_cmd::{CmdChannel, CmdTransport, StdClock, WaitMode};
use ib_core::{WcOpcode, WcStatus};
use parking_lot::Mutex;
use pvrdma_abi::cmd::{self, ack_for, CmdRequest, RespHdr};
use pvrdma_abi::wqe::Cqe;
use std::time::Duration;
use zerocopy::{FromBytes, IntoBytes};

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 1 == 0 {
        pure(rest);
    } else {
        crate::hostile::run(rest);
    }
}

/// The pure parsers on `data`.
fn pure(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(flags) = u.arbitrary::<u8>() else { return };
    let answer = u.take_rest();
    let dev = Answering { answer, flags, slots: Mutex::new(([0; cmd::SLOT_SIZE], [0; cmd::SLOT_SIZE])) };
    let wait = if flags & 4 != 0 { WaitMode::Polling } else { WaitMode::Interrupt };
    // No waiting: the answer is there at once or never (a zero timeout still polls twice).
    let chan = CmdChannel::with_timeout(&dev, StdClock, wait, Duration::ZERO);
    post_all(&chan);
    for chunk in answer.chunks_exact(core::mem::size_of::<Cqe>()) {
        let cqe = Cqe::read_from_bytes(chunk).expect("64 bytes");
        let wc = hca::wc::translate(&cqe, &FakeCq);
        if wc.status == WcStatus::Success {
            assert_eq!(wc.qp_num & 1, 0, "a successful completion names a QP not on its CQ");
            assert!(!matches!(wc.opcode, WcOpcode::Other(_)), "a successful completion of an unknown opcode");
            assert_eq!(cqe.wr_id.get() & 1, 0, "a successful completion of work never posted");
        }
    }
}

/// A device that answers every command with the same bytes: `flags` bit 0 puts the command's
/// ack, bit 1 its cookie over them; bit 3 makes the interrupt never come.
struct Answering<'a> {
    answer: &'a [u8],
    flags: u8,
    /// The command and response slots.
    slots: Mutex<([u8; cmd::SLOT_SIZE], [u8; cmd::SLOT_SIZE])>,
}

impl CmdTransport for &Answering<'_> {
    fn write_cmd_slot(&self, bytes: &[u8]) -> Result<(), &'static str> {
        let mut s = self.slots.lock();
        s.0.get_mut(..bytes.len()).ok_or("command too long")?.copy_from_slice(bytes);
        Ok(())
    }

    fn write_resp_slot(&self, offset: u64, bytes: &[u8]) -> Result<(), &'static str> {
        let mut s = self.slots.lock();
        let at = usize::try_from(offset).map_err(|_| "offset")?;
        s.1.get_mut(at..at + bytes.len()).ok_or("response slot overrun")?.copy_from_slice(bytes);
        Ok(())
    }

    fn read_resp_slot(&self, buf: &mut [u8]) -> Result<(), &'static str> {
        buf.copy_from_slice(self.slots.lock().1.get(..buf.len()).ok_or("response slot overrun")?);
        Ok(())
    }

    fn load_resp_u32(&self, offset: u64) -> Result<u32, &'static str> {
        let s = self.slots.lock();
        let at = usize::try_from(offset).map_err(|_| "offset")?;
        let w = s.1.get(at..at + 4).ok_or("response slot overrun")?;
        Ok(u32::from_le_bytes(w.try_into().expect("4 bytes")))
    }

    /// Plays the device: the answer into the response slot, with the right ack and cookie if
    /// asked.
    fn ring_request(&self) {
        let mut s = self.slots.lock();
        let (req, resp) = &mut *s;
        let n = self.answer.len().min(resp.len());
        resp[..n].copy_from_slice(&self.answer[..n]);
        if self.flags & 1 != 0 {
            let op = u32::from_le_bytes(req[8..12].try_into().expect("4 bytes"));
            resp[8..12].copy_from_slice(&ack_for(op).to_le_bytes());
        }
        if self.flags & 2 != 0 {
            resp[..8].copy_from_slice(&req[..8]);
        }
    }

    fn wait_response_irq(&self, _timeout: Duration) -> bool {
        self.flags & 8 == 0
    }
}

/// Posts one command of every type and checks what the channel accepted.
fn post_all(chan: &CmdChannel<&Answering<'_>, StdClock>) {
    post(chan, cmd::QueryPort::default());
    post(chan, cmd::QueryPkey::default());
    post(chan, cmd::CreateUc::default());
    post(chan, cmd::DestroyUc::default());
    post(chan, cmd::CreatePd::default());
    post(chan, cmd::DestroyPd::default());
    post(chan, cmd::CreateMr::default());
    post(chan, cmd::DestroyMr::default());
    post(chan, cmd::CreateCq::default());
    post(chan, cmd::ResizeCq::default());
    post(chan, cmd::DestroyCq::default());
    post(chan, cmd::CreateQp::default());
    post(chan, cmd::ModifyQp::default());
    post(chan, cmd::QueryQp::default());
    post(chan, cmd::DestroyQp::default());
    post(chan, cmd::CreateBind::default());
    post(chan, cmd::DestroyBind::default());
}

/// Posts `req`; an accepted response must carry the command's ack, the request's cookie and no
/// error; a refused one must say why in words (its `Display` is exercised).
fn post<C: CmdRequest>(chan: &CmdChannel<&Answering<'_>, StdClock>, req: C) {
    match chan.post(req) {
        Ok(resp) => {
            let (hdr, _) = RespHdr::read_from_prefix(resp.as_bytes()).expect("header");
            let sent = chan.transport().slots.lock().0;
            assert_eq!(hdr.ack.get(), ack_for(C::OPCODE), "accepted a wrong ack");
            assert_eq!(hdr.response.as_bytes(), &sent[..8], "accepted a wrong cookie");
            assert_eq!(hdr.err, 0, "accepted a failed command");
        }
        Err(e) => {
            let _ = e.is_fatal();
            assert!(!format!("{e}").is_empty(), "an error without words");
        }
    }
}

/// A CQ whose QPs are the even-numbered ones, owing every even `wr_id` (a buffer of
/// `wr_id & 0xffff` bytes) on either queue, and nothing else.
struct FakeCq;

impl hca::wc::Owed for FakeCq {
    fn on_cq(&self, qp: u32) -> bool {
        qp & 1 == 0
    }

    fn retire(
        &self,
        _qp: u32,
        _queue: hca::wc::Queue,
        wr_id: u64,
        _success: Option<ib_core::WcOpcode>,
    ) -> hca::wc::Verdict {
        if wr_id & 1 == 0 {
            hca::wc::Verdict::Posted((wr_id & 0xffff) as u32)
        } else {
            hca::wc::Verdict::NotOwed
        }
    }
}
