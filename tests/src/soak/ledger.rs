//! Bookkeeping of the soak test (`tests/tests/soak.rs`): the ledger of one QP's outstanding work
//! requests, the record of the messages one QP sends to its peer, and the payload each message
//! carries. Pure logic, no device: every check a completion or a delivered message must pass is
//! here, so a lost, duplicated, reordered or corrupted completion is named by the first check it
//! fails (unit tests below show each check failing).

use ib_core::{Wc, WcOpcode, WcStatus};
use std::collections::VecDeque;

/// Bytes of one buffer slot: the largest message, and the room each receive is given.
pub const SLOT: u32 = 4096;
/// Smallest message: its first 8 bytes are the send's `wr_id`, which names it at the receiver.
pub const MIN_MSG: u32 = 8;

/// The `wr_id` of request number `seq` of worker `thread`: unique in the run, even for receives
/// (bit 0 tells a receive from a send, so an error completion, whose opcode IBTA leaves
/// undefined, still names its queue).
pub fn wr_id(thread: u8, seq: u64, recv: bool) -> u64 {
    (u64::from(thread) << 56) | ((seq & ((1 << 55) - 1)) << 1) | u64::from(recv)
}

/// Whether `wr_id` (from [`wr_id`]) names a receive.
pub fn is_recv(wr_id: u64) -> bool {
    wr_id & 1 == 1
}

/// The immediate data a SEND_WITH_IMM of send `wr_id` carries.
pub fn imm_of(wr_id: u64) -> u32 {
    (wr_id >> 1) as u32 ^ 0x5eed_1234
}

/// The payload of send `wr_id`, `len` bytes (at least [`MIN_MSG`]): its `wr_id` then bytes
/// derived from it (splitmix64 of the word index), so any corruption shows.
pub fn payload(wr_id: u64, len: u32, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&wr_id.to_le_bytes());
    let mut k = 0u64;
    while out.len() < len as usize {
        k += 1;
        out.extend_from_slice(&splitmix(wr_id ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes());
    }
    out.truncate(len as usize);
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A send work request posted and not yet seen complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRec {
    /// Its `wr_id` ([`wr_id`]).
    pub wr_id: u64,
    /// Posted signaled (a successful unsignaled send has no CQE).
    pub signaled: bool,
    /// Its buffer slot in the QP's MR.
    pub slot: u32,
    /// Posted after the test moved the QP to ERR: it must complete with WR_FLUSH_ERR.
    pub after_err: bool,
}

/// A receive work request posted and not yet seen complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvRec {
    /// Its `wr_id` ([`wr_id`]).
    pub wr_id: u64,
    /// Its buffer slot in the QP's MR.
    pub slot: u32,
    /// Posted after the test moved the QP to ERR: it must complete with WR_FLUSH_ERR.
    pub after_err: bool,
}

/// What one completion took off a QP's ledger.
#[derive(Debug, PartialEq, Eq)]
pub enum Done {
    /// A send, with the unsignaled sends posted before it that completed silently (IBTA: an
    /// unsignaled request is complete once a later one on its queue is).
    Send { rec: SendRec, silent: Vec<SendRec> },
    /// A receive.
    Recv(RecvRec),
}

/// The outstanding work requests of one QP, in posting order. Completions must come in that
/// order per queue (RC), each exactly once.
#[derive(Debug, Default)]
pub struct QpLedger {
    /// The QP's number.
    pub qpn: u32,
    /// Outstanding sends, oldest first.
    pub sq: VecDeque<SendRec>,
    /// Outstanding receives, oldest first.
    pub rq: VecDeque<RecvRec>,
}

impl QpLedger {
    /// An empty ledger of QP `qpn`.
    pub fn new(qpn: u32) -> Self {
        Self { qpn, ..Default::default() }
    }

    /// Whether every request posted has completed.
    pub fn is_empty(&self) -> bool {
        self.sq.is_empty() && self.rq.is_empty()
    }

    /// Whether send `wr_id` is still outstanding.
    pub fn has_send(&self, wr_id: u64) -> bool {
        self.sq.iter().any(|s| s.wr_id == wr_id)
    }

    /// Takes the request `wc` names off the ledger, checking: the QP, the order, that it was
    /// outstanding (a duplicate or unknown `wr_id` fails), that an unsignaled send never
    /// completes successfully with a CQE of its own, the opcode of a success, and that a request
    /// posted after the QP was put in ERR is flushed.
    pub fn complete(&mut self, wc: &Wc) -> Result<Done, String> {
        if wc.qp_num != self.qpn {
            return Err(format!("completion {wc:?} checked against QP {}", self.qpn));
        }
        if is_recv(wc.wr_id) {
            let front = self.rq.front().map(|r| r.wr_id);
            if front != Some(wc.wr_id) {
                return Err(format!("receive completion {wc:?}: expected the oldest outstanding {front:?}"));
            }
            let rec = self.rq.pop_front().expect("front exists");
            if wc.status == WcStatus::Success && wc.opcode != WcOpcode::Recv {
                return Err(format!("receive completed with opcode {:?}", wc.opcode));
            }
            check_flush(rec.after_err, wc)?;
            return Ok(Done::Recv(rec));
        }
        let Some(pos) = self.sq.iter().position(|s| s.wr_id == wc.wr_id) else {
            return Err(format!("send completion {wc:?} names no outstanding send (duplicate or unknown)"));
        };
        if let Some(s) = self.sq.iter().take(pos).find(|s| s.signaled) {
            return Err(format!("send completion {wc:?} before the signaled send {:#x} posted earlier", s.wr_id));
        }
        let silent: Vec<SendRec> = self.sq.drain(..pos).collect();
        if let Some(s) = silent.iter().find(|s| s.after_err) {
            return Err(format!("send {:#x}, posted to a QP in ERR, completed without its flush CQE", s.wr_id));
        }
        let rec = self.sq.pop_front().expect("found");
        if wc.status == WcStatus::Success {
            if !rec.signaled {
                return Err(format!("unsignaled send {:#x} completed successfully with a CQE", rec.wr_id));
            }
            if wc.opcode != WcOpcode::Send {
                return Err(format!("send completed with opcode {:?}", wc.opcode));
            }
        }
        check_flush(rec.after_err, wc)?;
        Ok(Done::Send { rec, silent })
    }
}

fn check_flush(after_err: bool, wc: &Wc) -> Result<(), String> {
    if after_err && wc.status != WcStatus::WrFlushErr {
        return Err(format!("request posted to a QP in ERR completed {:?}, not WR_FLUSH_ERR: {wc:?}", wc.status));
    }
    Ok(())
}

/// A message sent and not yet matched by a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireRec {
    /// The send's `wr_id`.
    pub wr_id: u64,
    /// Payload bytes.
    pub len: u32,
    /// Sent as SEND_WITH_IMM carrying [`imm_of`] of its `wr_id`.
    pub imm: bool,
    /// The send completed successfully (so the message was delivered).
    pub ok: bool,
}

/// The messages one QP sent to its peer, in sending order, until a receive matches them. RC
/// delivers in order, at most once: a receive must match a message still here, and the messages
/// before it were never delivered (and will not be: their sends must not succeed).
#[derive(Debug, Default)]
pub struct Wire {
    q: VecDeque<WireRec>,
    /// What became of the last messages to leave `q` (for the failure message).
    history: VecDeque<(u64, &'static str)>,
}

/// Messages [`Wire`] remembers after they left it.
const HISTORY: usize = 256;

impl Wire {
    /// Records a message posted.
    pub fn sent(&mut self, rec: WireRec) {
        self.q.push_back(rec);
    }

    /// A receive got message `wr_id`: returns it and the messages skipped before it. Errors: it
    /// is not here (delivered twice, out of order, or never sent), or a skipped one's send
    /// succeeded.
    pub fn delivered(&mut self, wr_id: u64) -> Result<(WireRec, Vec<WireRec>), String> {
        let Some(pos) = self.q.iter().position(|m| m.wr_id == wr_id) else {
            let past = self.history.iter().rev().find(|h| h.0 == wr_id).map_or("never sent, or long ago", |h| h.1);
            return Err(format!(
                "message {wr_id:#x} delivered but not outstanding: {past}; outstanding {:x?}",
                self.q.iter().map(|m| m.wr_id).collect::<Vec<_>>()
            ));
        };
        let skipped: Vec<WireRec> = self.q.drain(..pos).collect();
        for m in &skipped {
            self.remember(m.wr_id, "skipped by a later message (delivered out of order?)");
        }
        self.remember(wr_id, "delivered before (twice?)");
        if let Some(m) = skipped.iter().find(|m| m.ok) {
            return Err(format!("send {:#x} succeeded but its message was never delivered", m.wr_id));
        }
        Ok((self.q.pop_front().expect("found"), skipped))
    }

    fn remember(&mut self, wr_id: u64, what: &'static str) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((wr_id, what));
    }

    /// Send `wr_id` succeeded: marks its message if it has not been received yet.
    pub fn send_succeeded(&mut self, wr_id: u64) {
        if let Some(m) = self.q.iter_mut().find(|m| m.wr_id == wr_id) {
            m.ok = true;
        }
    }

    /// At the end of a connection (every request completed): what was never received must not
    /// have succeeded. Empties the record.
    pub fn close(&mut self) -> Result<usize, String> {
        if let Some(m) = self.q.iter().find(|m| m.ok) {
            return Err(format!("send {:#x} succeeded but its message was never delivered", m.wr_id));
        }
        let n = self.q.len();
        for m in std::mem::take(&mut self.q) {
            self.remember(m.wr_id, "never delivered when its connection was closed (every request had completed)");
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(qpn: u32, wr_id: u64, status: WcStatus) -> Wc {
        let opcode = if is_recv(wr_id) { WcOpcode::Recv } else { WcOpcode::Send };
        Wc { wr_id, status, opcode, qp_num: qpn, ..Default::default() }
    }

    fn ledger() -> QpLedger {
        let mut l = QpLedger::new(7);
        for (seq, signaled) in [(1, false), (2, true), (3, true)] {
            l.sq.push_back(SendRec { wr_id: wr_id(0, seq, false), signaled, slot: 0, after_err: false });
        }
        for seq in [4, 5] {
            l.rq.push_back(RecvRec { wr_id: wr_id(0, seq, true), slot: 0, after_err: seq == 5 });
        }
        l
    }

    #[test]
    fn completions_in_order_empty_the_ledger() {
        let mut l = ledger();
        let d = l.complete(&wc(7, wr_id(0, 2, false), WcStatus::Success)).unwrap();
        assert!(matches!(d, Done::Send { silent, .. } if silent.len() == 1));
        l.complete(&wc(7, wr_id(0, 3, false), WcStatus::WrFlushErr)).unwrap();
        l.complete(&wc(7, wr_id(0, 4, true), WcStatus::Success)).unwrap();
        l.complete(&wc(7, wr_id(0, 5, true), WcStatus::WrFlushErr)).unwrap();
        assert!(l.is_empty());
    }

    #[test]
    fn duplicates_reorders_and_strays_fail() {
        let mut l = ledger();
        l.complete(&wc(7, wr_id(0, 2, false), WcStatus::Success)).unwrap();
        assert!(l.complete(&wc(7, wr_id(0, 2, false), WcStatus::Success)).is_err(), "duplicate");
        assert!(l.complete(&wc(7, wr_id(0, 5, true), WcStatus::WrFlushErr)).is_err(), "reordered receive");
        assert!(l.complete(&wc(8, wr_id(0, 3, false), WcStatus::Success)).is_err(), "another QP");
        assert!(l.complete(&wc(7, wr_id(1, 3, false), WcStatus::Success)).is_err(), "unknown");
        let mut l = ledger();
        assert!(l.complete(&wc(7, wr_id(0, 3, false), WcStatus::Success)).is_err(), "skips a signaled send");
        let mut l = ledger();
        assert!(l.complete(&wc(7, wr_id(0, 1, false), WcStatus::Success)).is_err(), "unsignaled CQE");
        let mut l = ledger();
        l.sq[0].after_err = true;
        assert!(l.complete(&wc(7, wr_id(0, 2, false), WcStatus::WrFlushErr)).is_err(), "flush CQE missing");
        let mut l = ledger();
        l.complete(&wc(7, wr_id(0, 4, true), WcStatus::Success)).unwrap();
        assert!(l.complete(&wc(7, wr_id(0, 5, true), WcStatus::Success)).is_err(), "not flushed after ERR");
    }

    #[test]
    fn the_wire_delivers_in_order_once_and_success_means_delivered() {
        let mut w = Wire::default();
        for id in [2, 4, 6] {
            w.sent(WireRec { wr_id: id, len: 8, imm: false, ok: false });
        }
        let (m, skipped) = w.delivered(4).unwrap();
        assert_eq!((m.wr_id, skipped.len()), (4, 1));
        assert!(w.delivered(4).is_err(), "twice");
        assert!(w.delivered(2).is_err(), "out of order");
        w.send_succeeded(6);
        assert!(w.close().is_err(), "succeeded, never delivered");
        w.sent(WireRec { wr_id: 8, len: 8, imm: false, ok: true });
        w.sent(WireRec { wr_id: 10, len: 8, imm: false, ok: false });
        assert!(w.delivered(10).is_err(), "skips a delivered one");
    }

    #[test]
    fn payloads_differ_by_request_and_start_with_its_id() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        payload(wr_id(1, 9, false), 100, &mut a);
        payload(wr_id(1, 10, false), 100, &mut b);
        assert_eq!(a.len(), 100);
        assert_eq!(a[..8], wr_id(1, 9, false).to_le_bytes());
        assert_ne!(a[8..], b[8..]);
        assert!(is_recv(wr_id(3, 1, true)) && !is_recv(wr_id(3, 1, false)));
        assert_ne!(wr_id(0, 1, false), wr_id(1, 1, false));
    }
}
