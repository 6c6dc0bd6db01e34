//! The requester of one RC QP (IBTA 9.7, C9-*): numbers the packets of each message from
//! `sq_psn`, keeps every message until it is acknowledged, and retransmits on a PSN sequence
//! error NAK, on an RNR NAK once its timer ran out, and on the local ACK timeout, within
//! `retry_cnt` and `rnr_retry` (reset whenever an acknowledgement makes progress, IBTA
//! 9.7.6.1.3). Its decisions are completions `(seq, status)` the caller hands to
//! `Qp::complete_send` once the requester's lock is released.
//!
//! A READ or an atomic waits to be sent while `max_rd_atomic` earlier READs and atomics wait for
//! their responses. An atomic completes through its ATOMIC Acknowledge, which carries the
//! original value (IBTA 9.4.5).
//!
//! ACKs are matched by PSN: a coalesced ACK acknowledges every packet up to its PSN, a NAK every
//! packet before its PSN (the AETH's MSN is not needed to tell which messages completed), and a
//! READ's first response acknowledges every message before the READ (IBTA 9.7.5.1.x implicit
//! ACK). A READ completes only through its last response.

use super::message::{Kind, Message};
use super::path::Path;
use super::RocePort;
use crate::backend::Backend;
use crate::limits;
use crate::timers::{rnr_delay, Retry, RNR_RETRY_INFINITE};
use pvrdma_abi::verbs::QpAttr;
use pvrdma_abi::wqe::wc_status;
use roce_wire::{opcode as op, psn, Aeth, Headers, NakCode, Syndrome};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Completions decided: `(seq, wc status)`, in the order to apply them.
pub type Done = Vec<(u64, u32)>;

/// Most PSNs a requester has sent and not seen acknowledged: past it, packets wait for ACKs
/// (with [`super::message::ACK_EVERY`], a long message is acknowledged as it goes), so a lost
/// packet costs at most a window of retransmissions and a burst stays within what a socket
/// buffer takes.
const WINDOW: i32 = 128;

/// One QP's requester state.
#[derive(Debug)]
pub struct Requester {
    pub path: Path,
    timeout: Option<Duration>,
    retry_cnt: u8,
    rnr_retry: u8,
    retries: u8,
    rnr_retries: u8,
    /// Most READs outstanding: `max_rd_atomic` (IBTA: the consumer sets it no higher than the
    /// responder's `max_dest_rd_atomic`, the READs a responder remembers to answer again), at
    /// least 1 and at most the device's `max_qp_rd_atom` (what the model's responder remembers).
    max_reads: usize,
    /// The PSN of the next new packet.
    next_psn: u32,
    /// The PSN of the next packet to transmit (behind `next_psn` while the window is full or
    /// after going back to retransmit).
    sent_to: u32,
    /// One past the highest PSN ever transmitted (what lies before it is a retransmission).
    max_sent: u32,
    /// The last PSN acknowledged.
    acked: u32,
    msgs: VecDeque<Message>,
    /// The local ACK timer: when the oldest unacknowledged packet is sent again.
    deadline: Option<Instant>,
    /// After an RNR NAK: when to send again from the NAKed PSN.
    rnr_until: Option<Instant>,
    /// The READ response PSN last asked for again after a gap.
    regap: Option<u32>,
    /// Payload lengths of messages removed, not yet returned to the device's wire budget.
    freed: Vec<u64>,
}

impl Requester {
    /// The state of a QP that just reached RTS with attributes `a`.
    pub fn new(path: Path, a: &QpAttr) -> Self {
        let sq_psn = a.sq_psn.get() & 0xff_ffff;
        let Retry { timeout, retry_cnt, rnr_retry } = Retry::of(a);
        Self {
            path,
            timeout,
            retry_cnt,
            rnr_retry,
            retries: retry_cnt,
            rnr_retries: rnr_retry,
            max_reads: max_reads(a),
            next_psn: sq_psn,
            sent_to: sq_psn,
            max_sent: sq_psn,
            acked: psn::add(sq_psn, 0xff_ffff),
            msgs: VecDeque::new(),
            deadline: None,
            rnr_until: None,
            regap: None,
            freed: Vec::new(),
        }
    }

    /// Takes the attributes MODIFY_QP changed in SQD (`a`; IBTA 10.3.1 lets SQD -> SQD change
    /// them): the retry attributes apply from the next progress and to the timers armed next,
    /// `max_rd_atomic` to the READs sent next, and `path` (the new address vector's, if the port
    /// can serve it) to the packets sent next — as the loopback port, which reads them when it
    /// needs them.
    pub fn reconfigure(&mut self, a: &QpAttr, path: Option<Path>) {
        Retry { timeout: self.timeout, retry_cnt: self.retry_cnt, rnr_retry: self.rnr_retry } = Retry::of(a);
        self.max_reads = max_reads(a);
        if let Some(path) = path {
            self.path = path;
        }
    }

    /// Queues a new message and sends what the window allows of it (nothing while an RNR NAK's
    /// timer runs: it goes out with the retransmission).
    pub fn post(&mut self, port: &RocePort, core: &Backend, seq: u64, kind: Kind, payload: Vec<u8>, solicited: bool) {
        let m = Message::new(seq, self.next_psn, kind, payload, solicited, self.path.mtu);
        self.next_psn = psn::add(m.psn, m.npkts);
        self.msgs.push_back(m);
        if self.rnr_until.is_none() {
            self.pump(port, core, Instant::now());
        }
    }

    /// The next instant [`Requester::tick`] has work.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.rnr_until.or(self.deadline)
    }

    /// Runs the timers due at `now`: the RNR wait's end, the local ACK timeout.
    pub fn tick(&mut self, port: &RocePort, core: &Backend, now: Instant, done: &mut Done) {
        if let Some(t) = self.rnr_until {
            if now >= t {
                self.rnr_until = None;
                self.resend(port, core, self.first_unacked(), now);
            }
            return;
        }
        match self.deadline {
            Some(d) if now >= d && !self.msgs.is_empty() => {
                core.count(|c| &c.roce_timeouts);
                if self.retries == 0 {
                    return self.fail(wc_status::RETRY_EXC_ERR, done);
                }
                self.retries -= 1;
                self.resend(port, core, self.first_unacked(), now);
            }
            Some(_) if self.msgs.is_empty() => self.deadline = None,
            _ => {}
        }
    }

    /// An ACKNOWLEDGE packet with PSN `p`: an ACK, an RNR NAK or a NAK (IBTA 9.7.5.2).
    pub fn on_ack(&mut self, port: &RocePort, core: &Backend, p: u32, aeth: Aeth, done: &mut Done) {
        // Only PSNs this requester sent can be acknowledged, and a NAK names a PSN sent and not
        // yet acknowledged (one already acknowledged is stale: the loss it reports was
        // recovered, and it must cost neither a retry nor a work request). A PSN sequence error
        // NAK may name the next PSN to send (the responder has all the others).
        let syndrome = aeth.syndrome();
        let nak = matches!(syndrome, Syndrome::Nak(_) | Syndrome::RnrNak { .. });
        let stale = nak && psn::diff(p, self.acked) <= 0;
        let next = matches!(syndrome, Syndrome::Nak(NakCode::PsnSequenceError)) as i32;
        if psn::diff(p, self.max_sent) >= next || stale {
            return core.count(|c| &c.roce_rx_dropped_psn);
        }
        let now = Instant::now();
        let before = psn::add(p, 0xff_ffff);
        match syndrome {
            Syndrome::Ack { .. } => {
                self.ack_through(p, now, done);
                self.pump(port, core, now);
            }
            Syndrome::RnrNak { timer } => {
                core.count(|c| &c.roce_rnr_naks_received);
                self.ack_through(before, now, done);
                if self.msgs.is_empty() {
                    return;
                }
                if self.rnr_retry != RNR_RETRY_INFINITE {
                    if self.rnr_retries == 0 {
                        return self.fail(wc_status::RNR_RETRY_EXC_ERR, done);
                    }
                    self.rnr_retries -= 1;
                }
                self.rnr_until = Some(now + rnr_delay(timer));
                self.deadline = None;
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                core.count(|c| &c.roce_naks_received);
                self.ack_through(before, now, done);
                if self.msgs.is_empty() || self.rnr_until.is_some() {
                    return;
                }
                if self.retries == 0 {
                    return self.fail(wc_status::RETRY_EXC_ERR, done);
                }
                self.retries -= 1;
                self.resend(port, core, p, now);
            }
            Syndrome::Nak(code) => {
                core.count(|c| &c.roce_naks_received);
                self.ack_through(before, now, done);
                self.fail(nak_status(code), done);
            }
            Syndrome::Reserved(_) => core.count(|c| &c.roce_rx_dropped_malformed),
        }
    }

    /// A READ response (`hdr`, `len` payload bytes). Returns where its data goes, `(seq, byte
    /// offset)`, if it is the response awaited next; anything else (a duplicate, a response
    /// past a lost one, a length the READ does not allow, one at the PSN of an atomic) is
    /// dropped and counted.
    pub fn on_read_response(
        &mut self,
        port: &RocePort,
        core: &Backend,
        hdr: &Headers,
        len: usize,
        done: &mut Done,
    ) -> Option<(u64, u32)> {
        let p = hdr.bth.psn;
        // A response to a READ request not sent yet (the window holds it back) is forged.
        if psn::diff(p, self.max_sent) >= 0 {
            core.count(|c| &c.roce_rx_dropped_psn);
            return None;
        }
        let Some(i) = self.msgs.iter().position(|m| m.is_pending_read() && m.holds(p)) else {
            core.count(|c| &c.roce_rx_duplicates);
            return None;
        };
        if self.msgs.iter().take(i).any(Message::is_pending_read) {
            core.count(|c| &c.roce_rx_duplicates);
            return None;
        }
        let expected = self.msgs[i].read_next;
        if psn::diff(p, expected) < 0 {
            core.count(|c| &c.roce_rx_duplicates);
            return None;
        }
        if expected != p {
            // A response past a lost one: ask again for the rest of the READ, once per gap
            // (IBTA 9.7.5.1.x: the requester re-sends the READ request from the missing PSN).
            core.count(|c| &c.roce_rx_dropped_psn);
            if self.regap != Some(expected) {
                self.regap = Some(expected);
                self.resend(port, core, expected, Instant::now());
            }
            return None;
        }
        let m = &self.msgs[i];
        let k = psn::diff(p, m.psn) as u32;
        let last = k + 1 == m.npkts;
        let Kind::Read { len: total, .. } = m.kind else {
            // A READ response at an atomic's PSN: the wrong kind of answer.
            core.count(|c| &c.roce_rx_dropped_malformed);
            return None;
        };
        let offset = u64::from(k) * u64::from(self.path.mtu);
        let want = if last { u64::from(total).saturating_sub(offset) } else { u64::from(self.path.mtu) };
        let last_op = matches!(hdr.bth.opcode, op::RC_RDMA_READ_RESPONSE_LAST | op::RC_RDMA_READ_RESPONSE_ONLY);
        if len as u64 != want || last != last_op {
            core.count(|c| &c.roce_rx_dropped_malformed);
            return None;
        }
        let seq = m.seq;
        // Every message before the READ is acknowledged by its response.
        for _ in 0..i {
            if let Some(m) = self.pop() {
                done.push((m.seq, wc_status::SUCCESS));
            }
        }
        self.msgs[0].read_next = psn::add(p, 1);
        self.progress(p, Instant::now());
        if last {
            self.pop();
            done.push((seq, wc_status::SUCCESS));
            self.rearm(Instant::now());
        }
        self.pump(port, core, Instant::now());
        Some((seq, offset as u32))
    }

    /// An ATOMIC Acknowledge (`hdr`, with its AETH and AtomicAckETH). Returns `(seq, original
    /// value)` if it answers the atomic awaited next (every message before it is acknowledged
    /// too); anything else (a duplicate, an answer to no atomic, one past a lost response) is
    /// dropped and counted. An AETH that is no ACK is malformed here (a NAK travels in an
    /// Acknowledge).
    pub fn on_atomic_ack(
        &mut self,
        port: &RocePort,
        core: &Backend,
        hdr: &Headers,
        done: &mut Done,
    ) -> Option<(u64, u64)> {
        let p = hdr.bth.psn;
        let acked = matches!(hdr.aeth.map(|a| a.syndrome()), Some(Syndrome::Ack { .. }));
        let (Some(orig), true) = (hdr.atomic_ack, acked) else {
            core.count(|c| &c.roce_rx_dropped_malformed);
            return None;
        };
        if psn::diff(p, self.max_sent) >= 0 {
            core.count(|c| &c.roce_rx_dropped_psn);
            return None;
        }
        let i = self.msgs.iter().position(|m| m.is_pending_read() && m.holds(p));
        let first = self.msgs.iter().position(Message::is_pending_read);
        let atomic = i.filter(|&i| Some(i) == first && matches!(self.msgs[i].kind, Kind::Atomic { .. }));
        let Some(i) = atomic else {
            core.count(|c| &c.roce_rx_duplicates);
            return None;
        };
        let seq = self.msgs[i].seq;
        for _ in 0..=i {
            if let Some(m) = self.pop() {
                done.push((m.seq, wc_status::SUCCESS));
            }
        }
        let now = Instant::now();
        self.progress(p, now);
        self.rearm(now);
        self.pump(port, core, now);
        Some((seq, orig))
    }

    /// Acknowledges every packet up to PSN `p`: completes the messages it covers (a READ waits
    /// for its responses).
    fn ack_through(&mut self, p: u32, now: Instant, done: &mut Done) {
        // An acknowledgement past a READ still missing responses means they were sent and lost:
        // the READ's PSNs stay unacknowledged, to be asked for again (IBTA 9.7.5.1.x).
        let p = match self.pending_read() {
            Some(r) if psn::diff(p, r) >= 0 => psn::add(r, 0xff_ffff),
            _ => p,
        };
        if psn::diff(p, self.acked) <= 0 {
            return;
        }
        while let Some(m) = self.msgs.front() {
            if psn::diff(m.last_psn(), p) > 0 || m.is_pending_read() {
                break;
            }
            done.push((m.seq, wc_status::SUCCESS));
            self.pop();
        }
        self.progress(p, now);
        self.rearm(now);
    }

    /// Forward progress up to PSN `p`: the retry counters start over (IBTA 9.7.6.1.3) and the
    /// window moves (the caller sends what it now allows).
    fn progress(&mut self, p: u32, now: Instant) {
        self.acked = p;
        self.retries = self.retry_cnt;
        self.rnr_retries = self.rnr_retry;
        self.deadline = self.timeout.map(|t| now + t);
    }

    /// Stops the local ACK timer when nothing is outstanding.
    fn rearm(&mut self, _now: Instant) {
        if self.msgs.is_empty() {
            self.deadline = None;
        }
    }

    /// Removes the oldest message; its payload's length joins [`Requester::freed`].
    fn pop(&mut self) -> Option<Message> {
        let m = self.msgs.pop_front()?;
        self.freed.push(m.payload.len() as u64);
        Some(m)
    }

    /// Forgets every message (the QP left RTS or was reset): [`Requester::take_freed`] then
    /// returns all their reservations.
    pub fn forget_all(&mut self) {
        while self.pop().is_some() {}
        self.deadline = None;
        self.rnr_until = None;
    }

    /// The payload lengths of the messages removed since the last call: the device's wire
    /// budget they reserved (`PortQueue::try_reserve`) is the caller's to return.
    pub fn take_freed(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.freed)
    }

    /// The PSN of the next response of the oldest READ still missing responses, if any.
    fn pending_read(&self) -> Option<u32> {
        self.msgs.iter().find(|m| m.is_pending_read()).map(|m| m.read_next)
    }

    /// How many READs before PSN `at` still wait for responses.
    fn reads_before(&self, at: u32) -> usize {
        self.msgs.iter().take_while(|m| psn::diff(m.psn, at) < 0).filter(|m| m.is_pending_read()).count()
    }

    /// The oldest PSN not yet acknowledged.
    fn first_unacked(&self) -> u32 {
        match self.msgs.front() {
            Some(m) if m.is_pending_read() => m.read_next,
            Some(m) if psn::diff(self.acked, m.psn) < 0 => m.psn,
            _ => psn::add(self.acked, 1),
        }
    }

    /// Completes the oldest message with `status` (the QP then goes to ERR, flushing the rest)
    /// and forgets every message.
    fn fail(&mut self, status: u32, done: &mut Done) {
        if let Some(m) = self.msgs.front() {
            done.push((m.seq, status));
        }
        while self.pop().is_some() {}
        self.deadline = None;
        self.rnr_until = None;
    }

    /// Sends again from PSN `from` on (what the window allows), and restarts the local ACK
    /// timer.
    fn resend(&mut self, port: &RocePort, core: &Backend, from: u32, now: Instant) {
        let first = self.first_unacked();
        self.sent_to = match self.pending_read() {
            _ if psn::diff(from, first) < 0 => first,
            Some(r) if psn::diff(r, from) < 0 => r,
            _ => from,
        };
        self.deadline = None;
        self.pump(port, core, now);
    }

    /// Sends packets from `sent_to` on while fewer than [`WINDOW`] PSNs are unacknowledged (a
    /// READ request goes whole: its responses are the responder's to pace). Starts the local
    /// ACK timer if it is not running.
    fn pump(&mut self, port: &RocePort, core: &Backend, now: Instant) {
        if psn::diff(self.sent_to, self.acked) <= 0 {
            self.sent_to = psn::add(self.acked, 1);
        }
        let path = self.path;
        let mut sent = false;
        while psn::diff(self.sent_to, self.next_psn) < 0 && psn::diff(self.sent_to, self.acked) <= WINDOW {
            let at = self.sent_to;
            let Some(m) = self.msgs.iter().find(|m| m.holds(at)) else {
                self.sent_to = self.next_psn;
                break;
            };
            let new = psn::diff(at, self.max_sent) >= 0;
            if !new {
                core.count(|c| &c.roce_retransmits);
            } else if m.is_read() && self.reads_before(at) >= self.max_reads {
                // The READ waits for an earlier one's last response.
                break;
            }
            self.sent_to = match m.kind {
                Kind::Read { .. } => {
                    let from = if psn::diff(at, m.read_next) > 0 { at } else { m.read_next };
                    if let Some(hdr) = m.read_request(from, path.dest_qp, path.mtu) {
                        port.send(core, &path, &hdr, &[]);
                    }
                    psn::add(m.last_psn(), 1)
                }
                Kind::Atomic { .. } => {
                    if let Some(hdr) = m.atomic_request(path.dest_qp) {
                        port.send(core, &path, &hdr, &[]);
                    }
                    psn::add(at, 1)
                }
                _ => {
                    let k = psn::diff(at, m.psn) as u32;
                    let (hdr, range) = m.packet(k, path.dest_qp, path.mtu);
                    port.send(core, &path, &hdr, &m.payload[range]);
                    psn::add(at, 1)
                }
            };
            if psn::diff(self.sent_to, self.max_sent) > 0 {
                self.max_sent = self.sent_to;
            }
            sent = true;
        }
        if sent && self.deadline.is_none() {
            self.deadline = self.timeout.map(|t| now + t);
        }
    }
}

/// The READs and atomics a requester with attributes `a` keeps outstanding: `max_rd_atomic`, at
/// least 1 and at most the device's `max_qp_rd_atom`.
fn max_reads(a: &QpAttr) -> usize {
    usize::from(a.max_rd_atomic).clamp(1, limits::MAX_QP_RD_ATOM as usize)
}

/// The completion status of a message a NAK refused (IBTA 9.7.5.2.3 and libibverbs'
/// `ibv_wc_status`).
fn nak_status(code: NakCode) -> u32 {
    match code {
        NakCode::InvalidRequest => wc_status::REM_INV_REQ_ERR,
        NakCode::RemoteAccessError => wc_status::REM_ACCESS_ERR,
        NakCode::InvalidRdRequest => wc_status::REM_INV_RD_REQ_ERR,
        _ => wc_status::REM_OP_ERR,
    }
}
