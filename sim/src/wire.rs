//! The loopback wire's queue (`PortQueue`): the packets in flight with their due times, the
//! packets held back with their senders' retry timers (`stall.rs`), the device-wide wire
//! budget, and who holds the port (a doorbell's thread at link latency 0, else the port thread).
//! Its lock is a leaf.

pub(crate) mod stall;

use crate::ctx::Effects;
use crate::packet::Packet;
use parking_lot::{Condvar, Mutex};
use stall::Stall;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Longest the port thread sleeps before re-checking its stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Most jobs a doorbell's thread delivers before it leaves the rest to the port thread.
pub(crate) const INLINE_JOBS: usize = 8;

#[derive(Default)]
struct Wire {
    /// Packets in flight, with the instant each arrives (monotonic: constant latency).
    in_flight: VecDeque<(Instant, Packet)>,
    /// QPs whose held-back packets to look at again ([`Stall::kicked_by`]).
    kicks: VecDeque<u32>,
    /// Packets held back (waiting for a receive WQE or for an answer), per sender uid.
    stalls: HashMap<u64, Stall>,
    /// Packets on the wire (reserved, in flight, held back, or held by the port thread).
    packets: usize,
    /// Their payload bytes.
    bytes: u64,
    /// QPs whose SQ drain the device budget refused; resumed when a packet leaves the wire.
    starved: Vec<u32>,
    /// A thread (the port thread, or a doorbell's thread at latency 0) is delivering a job.
    busy: bool,
    /// At latency 0: work was left due with nobody to deliver it; the port thread takes it.
    handoff: bool,
    /// The port thread waits for the port, a stall's timer having run out.
    wanted: bool,
    /// Times the wire was cleared; and its value when the port was last claimed (a stall taken
    /// before a clear is not held again after it).
    clears: u64,
    claimed_at: u64,
    stop: bool,
}

/// The wire's queue, shared by the senders (doorbells) and the port thread. Its lock is a leaf.
pub struct PortQueue {
    wire: Mutex<Wire>,
    /// Wakes the port thread.
    cond: Condvar,
    /// Wakes [`PortQueue::wait_idle`] callers.
    idle: Condvar,
    max_packets: usize,
    max_bytes: u64,
    /// Link latency 0: doorbells' threads deliver; the port thread takes only hand-offs.
    inline: bool,
    /// When every packet is due at latency 0 (so that path reads no clock).
    epoch: Instant,
}

/// One unit of the port's work, taken by whoever holds the port.
pub(crate) enum Job {
    /// A packet due.
    Packet(Packet),
    /// QP `qpn` was kicked: the stalls it concerns.
    Kick(u32, Vec<Stall>),
    /// A stall whose timer ran out (taken by the port thread only).
    Timer(Stall),
}

impl PortQueue {
    /// An empty wire holding at most `max_packets` packets and `max_bytes` payload bytes;
    /// `inline` for a link latency of 0 (see the module docs).
    pub fn new(max_packets: usize, max_bytes: u64, inline: bool) -> Self {
        Self {
            wire: Mutex::default(),
            cond: Condvar::new(),
            idle: Condvar::new(),
            max_packets,
            max_bytes,
            inline,
            epoch: Instant::now(),
        }
    }

    /// Reserves room on the wire for one message of `len` bytes that QP `qpn` is about to send
    /// (the device-wide budget). `false` if the wire is at its budget: the caller leaves the WQE
    /// posted and `qpn` is resumed ([`Effects::resume_starved`]) when a packet leaves the wire.
    /// An empty wire always takes one message.
    pub fn try_reserve(&self, qpn: u32, len: u64) -> bool {
        let mut w = self.wire.lock();
        let room = w.packets < self.max_packets && w.bytes.checked_add(len).is_some_and(|b| b <= self.max_bytes);
        if w.packets == 0 || room {
            w.packets += 1;
            w.bytes = w.bytes.saturating_add(len);
            return true;
        }
        if !w.starved.contains(&qpn) {
            w.starved.push(qpn);
        }
        false
    }

    /// Returns a reservation whose message was never sent (its WQE failed).
    pub fn unreserve(&self, len: u64, fx: &mut Effects) {
        self.release(len, fx);
    }

    /// A packet of `len` bytes left the wire (delivered, failed or dropped).
    pub(crate) fn release(&self, len: u64, fx: &mut Effects) {
        let mut w = self.wire.lock();
        w.packets = w.packets.saturating_sub(1);
        w.bytes = w.bytes.saturating_sub(len);
        if !w.starved.is_empty() {
            fx.resume_starved = true;
        }
    }

    /// Takes the QPs the budget refused (to resume their SQ drains).
    pub fn take_starved(&self) -> Vec<u32> {
        std::mem::take(&mut self.wire.lock().starved)
    }

    /// Puts `pkt` (reserved with [`PortQueue::try_reserve`]) on the wire; it arrives `latency`
    /// from now (saturating: a latency too long to represent never arrives).
    pub fn transmit(&self, pkt: Packet, latency: Duration) {
        let mut w = self.wire.lock();
        let at = if self.inline { self.epoch } else { osdep::deadline_after(latency) };
        w.in_flight.push_back((at, pkt));
        if !self.inline {
            self.cond.notify_all();
        }
    }

    /// Asks the port to look again at the packets held back that QP `qpn` concerns, if any: those
    /// waiting for a receive WQE there are tried again, those `qpn` sent are dropped if it no
    /// longer waits for them. While the port is busy its holder may be about to hold a packet
    /// for `qpn` (it found no receive WQE just before the caller posted one), so a busy port is
    /// always kicked: no lost wake-up.
    pub fn kick_if_parked(&self, qpn: u32) {
        let mut w = self.wire.lock();
        let waiting = w.busy || w.stalls.values().any(|s| s.kicked_by(qpn));
        if waiting && !w.kicks.contains(&qpn) {
            w.kicks.push_back(qpn);
            if !self.inline {
                self.cond.notify_all();
            }
        }
    }

    /// Drops everything on the wire (device reset). Packets the port's holder has right now
    /// stay counted until it finishes them (and a stall it took is dropped rather than held
    /// again, [`PortQueue::hold`]).
    pub fn clear(&self) {
        let mut w = self.wire.lock();
        let in_flight = std::mem::take(&mut w.in_flight);
        let stalls = std::mem::take(&mut w.stalls);
        let held = stalls.values().flat_map(|s| &s.pkts);
        let dropped = in_flight.iter().map(|(_, p)| p).chain(held);
        Self::forget(&mut w, dropped);
        w.clears += 1;
        w.kicks.clear();
        w.starved.clear();
        self.cond.notify_all();
        self.idle.notify_all();
    }

    /// Tells the port thread to exit.
    pub fn stop(&self) {
        self.wire.lock().stop = true;
        self.cond.notify_all();
        self.idle.notify_all();
    }

    /// Waits up to `timeout` until nothing is in flight and the thread is idle (packets held
    /// back for a receive WQE or an answer do not count). Returns whether it became idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = osdep::deadline_after(timeout);
        let mut w = self.wire.lock();
        while w.busy || !w.in_flight.is_empty() || !w.kicks.is_empty() {
            if w.stop || self.idle.wait_until(&mut w, deadline).timed_out() {
                return !w.busy && w.in_flight.is_empty() && w.kicks.is_empty();
            }
        }
        true
    }

    /// Packets held back behind a packet that waits for a receive WQE at QP `qpn` (for tests).
    pub fn parked(&self, qpn: u32) -> usize {
        let w = self.wire.lock();
        w.stalls.values().filter(|s| s.waits_at(qpn)).map(|s| s.pkts.len()).sum()
    }

    /// Holds `stall` back (the port's holder took it, or made it, and it still waits), unless
    /// it is empty or the wire was cleared since the port was claimed (its packets then leave
    /// the wire). The port thread, which runs the timers, is woken to wait for its timer (a
    /// doorbell's thread may be holding it, with the port thread asleep for longer).
    pub(crate) fn hold(&self, stall: Stall) {
        let mut w = self.wire.lock();
        if stall.pkts.is_empty() {
            return;
        }
        if w.claimed_at != w.clears {
            return Self::forget(&mut w, stall.pkts.iter());
        }
        if stall.due.is_some() {
            self.cond.notify_all();
        }
        w.stalls.insert(stall.uid, stall);
    }

    /// Holds `pkt` back behind its sender's packets already held, if any; gives it back if none
    /// are.
    pub(crate) fn hold_behind(&self, pkt: Packet) -> Option<Packet> {
        let mut w = self.wire.lock();
        match w.stalls.get_mut(&pkt.src_uid) {
            Some(s) => {
                s.pkts.push_back(pkt);
                None
            }
            None => Some(pkt),
        }
    }

    /// Un-counts packets dropped from the wire.
    fn forget<'a>(w: &mut Wire, dropped: impl Iterator<Item = &'a Packet>) {
        let (n, bytes) = dropped.fold((0usize, 0u64), |(n, b), p| (n + 1, b + p.payload.len() as u64));
        w.packets = w.packets.saturating_sub(n);
        w.bytes = w.bytes.saturating_sub(bytes);
    }

    /// The port thread's next job, waiting for one (and for the port to be free). `None` once
    /// stopped.
    pub(crate) fn next_job(&self) -> Option<Job> {
        let mut w = self.wire.lock();
        loop {
            if w.stop {
                self.idle.notify_all();
                return None;
            }
            let now = Instant::now();
            if !w.busy && (!self.inline || w.handoff) {
                if let Some(job) = Self::take_due(&mut w, now) {
                    return Some(job);
                }
                w.handoff = false;
            }
            if !w.busy {
                if let Some(job) = Self::take_timer(&mut w, now) {
                    return Some(job);
                }
            }
            // At latency 0 a packet in flight is its sender's to deliver until handed off (a
            // notify): waiting for its due time would spin. A timer that ran out while another
            // thread holds the port waits for it to be given back.
            let mut wait_until = match w.in_flight.front() {
                Some((at, _)) if !w.busy && !self.inline => (*at).min(now + IDLE_WAIT),
                _ => now + IDLE_WAIT,
            };
            let timer = w.stalls.values().filter_map(|s| s.due).min();
            w.wanted = w.busy && timer.is_some_and(|t| t <= now);
            if let Some(t) = timer.filter(|_| !w.wanted) {
                wait_until = wait_until.min(t);
            }
            self.idle.notify_all();
            self.cond.wait_until(&mut w, wait_until);
        }
    }

    /// Claims the port for the calling thread and takes a job due now, if nobody else holds the
    /// port and one is due. The caller delivers it with `port::run_job` and then calls
    /// [`PortQueue::give_back`].
    pub(crate) fn claim_due(&self) -> Option<Job> {
        let mut w = self.wire.lock();
        if w.busy || w.stop {
            return None;
        }
        Self::take_due(&mut w, self.now())
    }

    /// Gives the port back after a job and the effects it had; the port thread takes whatever is
    /// left due.
    pub(crate) fn give_back(&self) {
        let mut w = self.wire.lock();
        w.busy = false;
        self.mark_handoff(&mut w);
        if (self.inline && w.handoff) || w.wanted {
            self.cond.notify_all();
        }
        self.idle.notify_all();
    }

    /// At latency 0, hands whatever is due to the port thread if nobody holds the port (whoever
    /// holds it looks again when it gives it back).
    pub(crate) fn hand_off(&self) {
        if !self.inline {
            return;
        }
        let mut w = self.wire.lock();
        if self.mark_handoff(&mut w) {
            self.cond.notify_all();
        }
    }

    /// The time packets are due against: any, at latency 0 (every packet is due when sent).
    fn now(&self) -> Instant {
        if self.inline {
            self.epoch
        } else {
            Instant::now()
        }
    }

    /// Marks work left due with the port free as the port thread's; whether it newly did.
    fn mark_handoff(&self, w: &mut Wire) -> bool {
        let due = !w.kicks.is_empty() || w.in_flight.front().is_some_and(|(at, _)| *at <= self.now());
        let newly = !w.handoff && !w.busy && due;
        w.handoff |= newly;
        newly
    }

    /// A kicked QP with the stalls it concerns, else the first packet due by `now`; claims the
    /// port.
    fn take_due(w: &mut Wire, now: Instant) -> Option<Job> {
        let job = if let Some(qpn) = w.kicks.pop_front() {
            let uids: Vec<u64> = w.stalls.iter().filter(|(_, s)| s.kicked_by(qpn)).map(|(u, _)| *u).collect();
            Job::Kick(qpn, uids.iter().filter_map(|u| w.stalls.remove(u)).collect())
        } else if w.in_flight.front().is_some_and(|(at, _)| *at <= now) {
            Job::Packet(w.in_flight.pop_front()?.1)
        } else {
            return None;
        };
        Self::claim(w);
        Some(job)
    }

    /// A stall whose timer ran out by `now`, if any; claims the port.
    fn take_timer(w: &mut Wire, now: Instant) -> Option<Job> {
        let uid = *w.stalls.iter().find(|(_, s)| s.due.is_some_and(|t| t <= now))?.0;
        let stall = w.stalls.remove(&uid)?;
        Self::claim(w);
        Some(Job::Timer(stall))
    }

    fn claim(w: &mut Wire) {
        w.busy = true;
        w.claimed_at = w.clears;
    }
}
