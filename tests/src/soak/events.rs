//! Arming and waiting: random arms (NEXT or SOLICITED, with or without REPORT_MISSED_EVENTS)
//! that nobody waits for, and event rounds — arm a CQ, poll once more, make a completion for it,
//! then wait (bounded) on the group's channel or on a notify request for the event that arm must
//! raise. A round that times out is a lost wake-up. Every event taken is acknowledged at once
//! and counted against its CQ: a CQ never gets more events than arms.

use super::group::{CQS, PAIRS};
use super::worker::{Draws, Worker};
use super::WAIT;
use ib_core::{CqRef, Error, NotifyFlags, NotifyKind, NotifyStatus};
use std::time::{Duration, Instant};

impl Worker<'_> {
    /// Arms a random CQ of group `gi` and leaves it.
    pub(super) fn random_arm(&mut self, gi: usize, d: &Draws) {
        let ci = d[2] as usize % CQS;
        let missed = NotifyFlags::REPORT_MISSED_EVENTS;
        let flags = [NotifyFlags::NEXT_COMPLETION, NotifyFlags::SOLICITED][(d[3] & 1) as usize];
        let flags = if d[3] & 2 == 0 { flags } else { flags | missed };
        self.arm(gi, ci, flags);
    }

    /// `req_notify` on CQ `ci`, counted.
    fn arm(&mut self, gi: usize, ci: usize, flags: NotifyFlags) -> bool {
        let who = self.who();
        let slot = &mut self.groups[gi].cqs[ci];
        let missed = match slot.cq.req_notify(flags) {
            Ok(m) => m,
            Err(e) => who.fail(format!("req_notify({flags:?}) on CQ {}: {e}", slot.cq.handle())),
        };
        slot.arms += 1;
        self.stats.arms += 1;
        self.stats.missed_reported += u64::from(missed);
        missed
    }

    /// An event round on a random pair: arm the CQ a send from one end will complete into (its
    /// receive CQ at the peer, or its own send CQ), poll once more, post the sends, and wait for
    /// the event. On a pair the test holds in error the send's error CQE (a flush, or
    /// RETRY_EXC_ERR towards a peer in ERR) is the completion, which satisfies SOLICITED too.
    pub(super) fn event_round(&mut self, gi: usize, d: &Draws) {
        let pi = d[2] as usize % PAIRS;
        let Some(pair) = &self.groups[gi].pairs[pi] else { return };
        let (s, r) = ((d[3] & 1) as usize, 1 - (d[3] & 1) as usize);
        let solicited = d[4] & 3 == 0;
        let request = d[5] & 3 == 0;
        let errored = pair.errored();
        let k = if errored { 1 } else { 1 + (d[6] % 3) as usize };
        if pair.ends[s].send_free.len() < k {
            return;
        }
        let (scq, rcq) = (pair.ends[s].scq, pair.ends[r].rcq);
        let target = if !errored && (solicited || d[7] & 1 == 0) { rcq } else { scq };
        if !errored {
            // Every message already on its way to the receiver, and ours, must find a receive
            // (else it waits on the wire for one, and no CQE comes): take what completed, then
            // top the receives up.
            self.poll_empty(gi, scq);
            self.poll_empty(gi, rcq);
            let ends = &self.pair(gi, pi).ends;
            let need = (ends[s].ledger.sq.len() + k).saturating_sub(ends[r].ledger.rq.len());
            if need > ends[r].recv_free.len() {
                return;
            }
            self.post_recvs(gi, pi, r, need, d[8]);
        }
        self.take_events(gi);
        self.poll_empty(gi, target);
        let kind = if solicited { NotifyKind::Solicited } else { NotifyKind::Next };
        let req = if request {
            let cq = &self.groups[gi].cqs[target].cq;
            let req = cq.notify(kind, true).unwrap_or_else(|e| self.who().fail(format!("notify: {e}")));
            self.stats.notify_requests += 1;
            Some(req)
        } else {
            let flags = if solicited { NotifyFlags::SOLICITED } else { NotifyFlags::NEXT_COMPLETION };
            self.arm(gi, target, flags | NotifyFlags::REPORT_MISSED_EVENTS);
            None
        };
        // IBTA: CQEs queued before the arm raise no event; poll once more after arming.
        self.poll_empty(gi, target);
        self.post_sends(gi, pi, s, k, u64::from(d[9]) << 32 | u64::from(d[10]), solicited);
        match req {
            Some(req) => match req.wait(WAIT) {
                Ok(NotifyStatus::Success) => {}
                other => self.lost_wake_up(gi, target, &format!("notify request ({kind:?}): {other:?}")),
            },
            None => self.wait_event(gi, target),
        }
        self.stats.waits += 1;
        self.poll_empty(gi, target);
    }

    /// Takes events from the group's channel until one for CQ `target` comes, within [`WAIT`].
    fn wait_event(&mut self, gi: usize, target: usize) {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.groups[gi].ch.get_cq_event(left) {
                Ok(ev) => {
                    if self.on_event(gi, ev) == target {
                        return;
                    }
                }
                Err(Error::Timeout) => self.lost_wake_up(gi, target, "completion channel"),
                Err(e) => self.who().fail(format!("get_cq_event: {e}")),
            }
        }
    }

    fn lost_wake_up(&self, gi: usize, target: usize, how: &str) -> ! {
        let slot = &self.groups[gi].cqs[target];
        self.who().fail(format!(
            "lost wake-up ({how}): CQ {} was armed, a completion was made for it, and no event came within \
             {WAIT:?} (core arm state {:?}, {} arms, {} events taken)",
            slot.cq.handle(),
            slot.cq.armed(),
            slot.arms,
            slot.events
        ))
    }

    /// Acknowledges event `ev` and counts it on its CQ; returns the CQ's index.
    fn on_event(&mut self, gi: usize, ev: CqRef) -> usize {
        let h = ev.handle();
        ev.ack_events(1);
        let Some(ci) = self.groups[gi].cqs.iter().position(|c| c.cq.handle() == h) else {
            self.who().fail(format!("an event for CQ {h}, which is not on this channel"))
        };
        let who = self.who();
        let slot = &mut self.groups[gi].cqs[ci];
        slot.events += 1;
        self.stats.events += 1;
        if slot.events > slot.arms {
            who.fail(format!("CQ {h}: {} events for {} arms", slot.events, slot.arms));
        }
        ci
    }

    /// Takes every event pending on group `gi`'s channel.
    pub(super) fn take_events(&mut self, gi: usize) {
        while let Some(ev) = self.groups[gi].ch.try_get_cq_event() {
            self.on_event(gi, ev);
        }
    }

    /// Takes and acknowledges every async event pending on group `gi`'s context. None may say a
    /// CQ is in error (no CQ can overflow) or the device failed.
    pub(super) fn take_async_events(&mut self, gi: usize) {
        loop {
            match self.groups[gi].ctx.get_async_event(Duration::ZERO) {
                Ok(ev) => {
                    use ib_core::AsyncEventType::{CqErr, DeviceFatal};
                    if matches!(ev.event_type, CqErr | DeviceFatal) {
                        self.who().fail(format!("async event {:?}", ev.event_type));
                    }
                    ev.ack();
                    self.stats.async_events += 1;
                }
                Err(Error::Timeout | Error::WouldBlock) => return,
                Err(e) => self.who().fail(format!("get_async_event: {e}")),
            }
        }
    }
}
