//! A soak worker: its step loop, posting send and receive lists, polling, and the checks every
//! completion and every received message must pass.

use super::group::{self, End, Group, Pair, CQS, PAIRS};
use super::ledger::{self, Done, RecvRec, SendRec, WireRec, MIN_MSG, SLOT};
use super::Stats;
use ib_core::{Device, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// Groups per worker: the first on the kernel's context, the others on user contexts.
pub const GROUPS: usize = 3;

/// What the workers share: the goal, the messages received so far, and when to stop.
pub struct Shared {
    /// Messages to receive in all.
    pub goal: u64,
    /// Messages received so far, by every worker.
    pub messages: AtomicU64,
    /// Set when a worker failed: the others stop.
    pub stop: AtomicBool,
    /// The time bound: workers stop here, goal met or not.
    pub deadline: Instant,
    /// Recover half the pairs held in error through RESET and reconnect (else every one is
    /// destroyed and replaced).
    pub reset_pairs: bool,
}

impl Shared {
    /// Whether the workers should stop.
    pub fn done(&self) -> bool {
        self.messages.load(Relaxed) >= self.goal || self.stop.load(Relaxed) || Instant::now() >= self.deadline
    }
}

/// Who is failing, for the failure message: with the seed, a failure can be replayed.
#[derive(Clone, Copy)]
pub(super) struct Who {
    thread: u8,
    seed: u64,
    step: u64,
}

impl Who {
    pub(super) fn fail(self, msg: impl std::fmt::Display) -> ! {
        panic!("soak worker {} at step {} (SOAK_SEED={}): {msg}", self.thread, self.step, self.seed)
    }
}

/// The random draws of one step: the same number whatever the step does, so the sequence of
/// steps derives from the seed alone (what a step finds, e.g. what a poll returns, depends on
/// the threads' timing).
pub(super) type Draws = [u32; 12];

/// One worker: its groups, its ledgers and its counters. Everything it creates it polls, checks
/// and destroys itself (no object is shared between workers; the device and its port are).
pub struct Worker<'a> {
    pub(super) dev: &'a Device,
    pub(super) shared: &'a Shared,
    thread: u8,
    seed: u64,
    rng: fastrand::Rng,
    seq: u64,
    pub(super) step: u64,
    pub(super) groups: Vec<Group>,
    checks: Checks,
    /// What it did.
    pub stats: Stats,
}

impl<'a> Worker<'a> {
    /// Worker `thread` with the run's `seed`, and its groups.
    pub fn new(dev: &'a Device, shared: &'a Shared, thread: u8, seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed ^ (u64::from(thread) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut pick = fastrand::Rng::with_seed(rng.u64(..));
        let groups = (0..GROUPS).map(|i| group::new_group(dev, i == 0, &mut pick)).collect();
        Self {
            dev,
            shared,
            thread,
            seed,
            rng,
            seq: 0,
            step: 0,
            groups,
            checks: Checks::default(),
            stats: Stats::default(),
        }
    }

    pub(super) fn who(&self) -> Who {
        Who { thread: self.thread, seed: self.seed, step: self.step }
    }

    /// Runs steps until the goal, the time bound or another worker's failure, then destroys
    /// everything it made.
    pub fn run(&mut self) {
        while !self.shared.done() {
            self.step += 1;
            let d: Draws = std::array::from_fn(|_| self.rng.u32(..));
            let gi = d[1] as usize % self.groups.len();
            match d[0] % 100_000 {
                0..200 => self.inject_error(gi, &d),
                200..220 => self.churn_cq(gi, &d),
                220..230 => self.churn_group(gi, &d),
                230..8_000 => self.event_round(gi, &d),
                8_000..12_000 => self.random_arm(gi, &d),
                12_000..45_000 => {
                    self.poll(gi, d[2] as usize % CQS, 1 + d[3] as usize % 32);
                }
                _ => self.traffic(gi, &d),
            }
            if self.step & 63 == 0 {
                self.take_events(gi);
                self.take_async_events(gi);
            }
        }
        self.teardown();
    }

    pub(super) fn pair(&mut self, gi: usize, pi: usize) -> &mut Pair {
        self.groups[gi].pairs[pi].as_mut().expect("pair present")
    }

    /// Receives on the receiver, then a list of sends from the sender, on a random pair (a pair
    /// the test holds in error is recovered once its time is up).
    fn traffic(&mut self, gi: usize, d: &Draws) {
        let pi = d[2] as usize % PAIRS;
        let Some(pair) = &self.groups[gi].pairs[pi] else { return };
        if pair.recover_at.is_some_and(|at| self.step >= at) {
            return self.recover(gi, pi, d);
        }
        let s = (d[3] & 1) as usize;
        self.post_recvs(gi, pi, 1 - s, (d[4] % 9) as usize, d[5]);
        let ends = &self.pair(gi, pi).ends;
        let credit = ends[1 - s].ledger.rq.len().saturating_sub(ends[s].ledger.sq.len());
        let mut n = 1 + (d[6] % 8) as usize;
        if d[7] & 15 != 0 {
            // Mostly no more than the receiver has receives for; now and then more, which wait
            // on the wire for a receive (RNR) or are flushed.
            n = n.min(credit);
        }
        self.post_sends(gi, pi, s, n, u64::from(d[8]) << 32 | u64::from(d[9]), false);
    }

    /// Posts up to `n` receives (as many as free slots allow) on end `e` of pair `pi` as one
    /// list; `bits` chooses which scatter into two SGEs.
    pub(super) fn post_recvs(&mut self, gi: usize, pi: usize, e: usize, n: usize, bits: u32) {
        let who = self.who();
        let end = &mut self.groups[gi].pairs[pi].as_mut().expect("pair present").ends[e];
        let n = n.min(end.recv_free.len());
        if n == 0 {
            return;
        }
        let (addr, lkey) = (end.mr.addr(), end.mr.lkey());
        let mut recs = Vec::with_capacity(n);
        let mut sges = Vec::with_capacity(n);
        for i in 0..n {
            let slot = end.recv_free.pop().expect("counted");
            let wr_id = ledger::wr_id(self.thread, self.seq, true);
            self.seq += 1;
            let at = addr + End::recv_off(slot);
            let split = if bits >> (i % 32) & 1 == 1 { SLOT / 2 } else { SLOT };
            sges.push([
                Sge { addr: at, length: split, lkey },
                Sge { addr: at + u64::from(split), length: SLOT - split, lkey },
            ]);
            recs.push(RecvRec { wr_id, slot, after_err: end.in_err });
        }
        let wrs: Vec<RecvWr> = recs
            .iter()
            .zip(&sges)
            .map(|(r, sg)| RecvWr { wr_id: r.wr_id, sg_list: &sg[..if sg[1].length > 0 { 2 } else { 1 }] })
            .collect();
        if let Err((k, e)) = end.qp.post_recv_list(&wrs) {
            who.fail(format!("post_recv_list of {n} on QP {} failed at {k}: {e}", end.qp.qpn()));
        }
        end.ledger.rq.extend(recs);
        self.stats.recvs_posted += n as u64;
    }

    /// Posts up to `n` sends (as many as free slots allow) from end `s` of pair `pi` as one
    /// list, sizes and flags drawn from `bits`; the last is signaled (so no unsignaled send is
    /// left without a later completion), and solicited if `solicit_last`.
    pub(super) fn post_sends(&mut self, gi: usize, pi: usize, s: usize, n: usize, bits: u64, solicit_last: bool) {
        let who = self.who();
        let mut r = fastrand::Rng::with_seed(bits);
        let end = &mut self.groups[gi].pairs[pi].as_mut().expect("pair present").ends[s];
        let n = n.min(end.send_free.len());
        if n == 0 {
            return;
        }
        let (addr, lkey) = (end.mr.addr(), end.mr.lkey());
        let mut recs = Vec::with_capacity(n);
        let mut msgs = Vec::with_capacity(n);
        let mut sges = Vec::with_capacity(n);
        for i in 0..n {
            let slot = end.send_free.pop().expect("counted");
            let wr_id = ledger::wr_id(self.thread, self.seq, false);
            self.seq += 1;
            let len = match r.u32(..100) {
                0..70 => r.u32(MIN_MSG..=64),
                70..95 => r.u32(65..=512),
                _ => r.u32(513..=SLOT),
            };
            ledger::payload(wr_id, len, &mut self.checks.buf);
            let off = End::send_off(slot);
            end.mr.write(off as usize, &self.checks.buf).unwrap_or_else(|e| who.fail(format!("MR write: {e}")));
            let split = if r.u8(..4) == 0 { len / 2 } else { len };
            sges.push([
                Sge { addr: addr + off, length: split, lkey },
                Sge { addr: addr + off + u64::from(split), length: len - split, lkey },
            ]);
            let last = i + 1 == n;
            let signaled = last || r.u8(..4) == 0;
            let solicited = (last && solicit_last) || r.u8(..8) == 0;
            let imm = r.u8(..4) == 0;
            recs.push((SendRec { wr_id, signaled, slot, after_err: end.in_err }, solicited));
            msgs.push(WireRec { wr_id, len, imm, ok: false });
        }
        let wrs: Vec<SendWr> = recs
            .iter()
            .zip(&sges)
            .zip(&msgs)
            .map(|(((rec, solicited), sg), m)| SendWr {
                wr_id: rec.wr_id,
                sg_list: &sg[..if sg[1].length > 0 { 2 } else { 1 }],
                opcode: if m.imm { WrOpcode::SendWithImm(ledger::imm_of(rec.wr_id)) } else { WrOpcode::Send },
                signaled: rec.signaled,
                solicited: *solicited,
            })
            .collect();
        if let Err((k, e)) = end.qp.post_send_list(&wrs) {
            who.fail(format!("post_send_list of {n} on QP {} failed at {k}: {e}", end.qp.qpn()));
        }
        end.ledger.sq.extend(recs.iter().map(|(rec, _)| *rec));
        for m in msgs {
            end.wire.sent(m);
        }
        self.stats.sends_posted += n as u64;
    }

    /// Polls CQ `ci` in batches of `batch` (at most 8 batches); returns the CQEs taken.
    pub(super) fn poll(&mut self, gi: usize, ci: usize, batch: usize) -> usize {
        let mut wc = [Wc::default(); 32];
        let batch = batch.clamp(1, wc.len());
        let mut total = 0;
        for _ in 0..8 {
            let n = match self.groups[gi].cqs[ci].cq.poll(&mut wc[..batch]) {
                Ok(n) => n,
                Err(e) => self.who().fail(format!("poll of CQ {}: {e}", self.groups[gi].cqs[ci].cq.handle())),
            };
            for w in &wc[..n] {
                self.complete(gi, w);
            }
            total += n;
            if n < batch {
                break;
            }
        }
        total
    }

    /// Polls CQ `ci` until it is empty.
    pub(super) fn poll_empty(&mut self, gi: usize, ci: usize) {
        while self.poll(gi, ci, 32) > 0 {}
    }

    /// Checks one completion against the ledgers and, for a message received, its payload.
    fn complete(&mut self, gi: usize, wc: &Wc) {
        let who = self.who();
        self.stats.cqes += 1;
        let g = &mut self.groups[gi];
        let Some(&(pi, e)) = g.qpns.get(&wc.qp_num) else {
            who.fail(format!("CQE {wc:?} names no QP of its CQ's context"))
        };
        let pair = g.pairs[pi].as_mut().expect("indexed pair");
        let done = pair.ends[e].ledger.complete(wc).unwrap_or_else(|m| who.fail(m));
        let (st, lost) = (&mut self.stats, &mut self.checks.lost);
        match done {
            Done::Recv(rec) => {
                pair.ends[e].recv_free.push(rec.slot);
                match wc.status {
                    WcStatus::Success => {
                        st.undelivered += check_message(who, pair, e, rec, wc, &mut self.checks);
                        st.messages += 1;
                        self.shared.messages.fetch_add(1, Relaxed);
                    }
                    WcStatus::WrFlushErr => st.recvs_flushed += 1,
                    s => who.fail(format!("receive completed {s:?}: {wc:?}")),
                }
            }
            Done::Send { rec, silent } => {
                let peer_in_err = pair.ends[1 - e].in_err;
                let end = &mut pair.ends[e];
                for s in &silent {
                    end.send_free.push(s.slot);
                    sent_ok(who, end, s.wr_id, lost, st);
                }
                end.send_free.push(rec.slot);
                match wc.status {
                    WcStatus::Success => sent_ok(who, end, rec.wr_id, lost, st),
                    WcStatus::WrFlushErr => {
                        lost.remove(&rec.wr_id);
                        st.sends_flushed += 1;
                    }
                    WcStatus::RetryExcErr if peer_in_err => {
                        lost.remove(&rec.wr_id);
                        st.sends_retry_exc += 1;
                    }
                    s => who.fail(format!("send completed {s:?} (peer in ERR: {peer_in_err}): {wc:?}")),
                }
            }
        }
    }
}

/// A send completed successfully (with a CQE or silently): its message must have arrived or be
/// still to be received, not skipped.
fn sent_ok(who: Who, end: &mut End, wr_id: u64, lost: &mut HashSet<u64>, st: &mut Stats) {
    if lost.remove(&wr_id) {
        who.fail(format!("send {wr_id:#x} succeeded but a later message arrived and this one never did"));
    }
    end.wire.send_succeeded(wr_id);
    st.sends_ok += 1;
}

/// What the message checks keep between completions.
#[derive(Default)]
struct Checks {
    /// Sends still outstanding whose message a receive skipped: they must not succeed.
    lost: HashSet<u64>,
    /// A payload as sent.
    buf: Vec<u8>,
    /// A payload as received.
    rbuf: Vec<u8>,
}

/// A receive of end `e` succeeded: the message is the next one its peer sent that was not lost,
/// with the length, immediate data and bytes that send carried. Returns how many messages sent
/// before it were skipped (never delivered).
fn check_message(who: Who, pair: &mut Pair, e: usize, rec: RecvRec, wc: &Wc, c: &mut Checks) -> u64 {
    let Checks { lost, buf, rbuf } = c;
    if wc.qp_num != pair.ends[e].qp.qpn() || wc.src_qp != 0 {
        // RC: the receiving QP, and no source QP (IBTA defines it for UD; Linux rxe reports 0).
        who.fail(format!("receive {wc:?} on QP {}: another QP, or a source QP on RC", pair.ends[e].qp.qpn()));
    }
    let len = wc.byte_len;
    if !(MIN_MSG..=SLOT).contains(&len) {
        who.fail(format!("receive {wc:?}: byte_len {len} outside what was sent ({MIN_MSG}..={SLOT})"));
    }
    rbuf.resize(len as usize, 0);
    let me = &pair.ends[e];
    me.mr.read(End::recv_off(rec.slot) as usize, rbuf).unwrap_or_else(|e| who.fail(format!("MR read: {e}")));
    let w = u64::from_le_bytes(rbuf[..8].try_into().expect("8 bytes"));
    let peer = &mut pair.ends[1 - e];
    let (m, skipped) = peer.wire.delivered(w).unwrap_or_else(|m| who.fail(format!("{m} (receive {wc:?})")));
    for k in &skipped {
        if peer.ledger.has_send(k.wr_id) {
            lost.insert(k.wr_id);
        }
    }
    if m.len != len {
        who.fail(format!("message {w:#x} of {} bytes received as {len}", m.len));
    }
    let imm = m.imm.then(|| ledger::imm_of(w));
    if wc.imm_data != imm {
        who.fail(format!("message {w:#x}: immediate data {:?}, sent {imm:?}", wc.imm_data));
    }
    ledger::payload(w, len, buf);
    if buf != rbuf {
        let at = buf.iter().zip(rbuf.iter()).position(|(a, b)| a != b).unwrap_or(0);
        who.fail(format!("message {w:#x} ({len} bytes) corrupted from byte {at}"));
    }
    skipped.len() as u64
}
