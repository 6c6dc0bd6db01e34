//! Errors and destroys: moving QPs to ERR under traffic, recovering a pair (every request
//! completes, then RESET and reconnect, or destroy and a new pair), replacing a CQ (refused while
//! QPs use it), replacing a whole group (its user context destroyed), and the final teardown.

use super::group::{self, CqSlot, Group, CQS, PAIRS};
use super::worker::{Draws, Worker};
use super::WAIT;
use ib_core::{Error, QpAttr, QpAttrMask, QpState};
use std::time::{Duration, Instant};

impl Worker<'_> {
    /// Moves one or both QPs of a random pair to ERR; the pair carries on (its later requests
    /// flush) until its recovery step.
    pub(super) fn inject_error(&mut self, gi: usize, d: &Draws) {
        let pi = d[2] as usize % PAIRS;
        let who = self.who();
        let step = self.step;
        let Some(pair) = self.groups[gi].pairs[pi].as_mut() else { return };
        if pair.errored() {
            return;
        }
        let which = d[3] % 3;
        for (e, end) in pair.ends.iter_mut().enumerate() {
            if which == 2 || which as usize == e {
                end.qp.modify_to_err().unwrap_or_else(|err| who.fail(format!("modify_qp(ERR): {err}")));
                end.in_err = true;
                self.stats.qp_errors += 1;
            }
        }
        pair.recover_at = Some(step + 16 + u64::from(d[4] % 512));
    }

    /// Moves both QPs of pair `pi` to ERR and polls until every request of both completed
    /// (bounded: a request still outstanding after [`WAIT`] is a lost completion), then closes
    /// the record of their messages.
    fn quiesce(&mut self, gi: usize, pi: usize) {
        let who = self.who();
        for end in &mut self.pair(gi, pi).ends {
            if !end.in_err {
                end.qp.modify_to_err().unwrap_or_else(|err| who.fail(format!("modify_qp(ERR): {err}")));
                end.in_err = true;
            }
        }
        let cqs = {
            let e = &self.pair(gi, pi).ends;
            [e[0].scq, e[0].rcq, e[1].scq, e[1].rcq]
        };
        let deadline = Instant::now() + WAIT;
        while !self.pair(gi, pi).is_idle() {
            if Instant::now() > deadline {
                let e = &self.pair(gi, pi).ends;
                who.fail(format!(
                    "lost completions: after {WAIT:?} in ERR, QP {} still has {:?} and QP {} {:?} outstanding",
                    e[0].ledger.qpn,
                    (&e[0].ledger.sq, &e[0].ledger.rq),
                    e[1].ledger.qpn,
                    (&e[1].ledger.sq, &e[1].ledger.rq)
                ));
            }
            let got: usize = cqs.iter().map(|&ci| self.poll(gi, ci, 32)).sum();
            if got == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let mut undelivered = 0;
        for end in &mut self.pair(gi, pi).ends {
            undelivered += end.wire.close().unwrap_or_else(|m| who.fail(m));
        }
        self.stats.undelivered += undelivered as u64;
    }

    /// Ends the error of pair `pi`: every request completes, then RESET and reconnect, or
    /// destroy and a new pair in its slot.
    pub(super) fn recover(&mut self, gi: usize, pi: usize, d: &Draws) {
        self.quiesce(gi, pi);
        if self.shared.reset_pairs && d[10] & 1 == 0 {
            let who = self.who();
            let reset = QpAttr { qp_state: QpState::Reset, ..Default::default() };
            let dev = self.dev;
            let pair = self.pair(gi, pi);
            for end in &mut pair.ends {
                end.qp.modify_qp(&reset, QpAttrMask::STATE).unwrap_or_else(|e| who.fail(format!("RESET: {e}")));
                end.in_err = false;
            }
            group::connect(dev, &pair.ends);
            pair.recover_at = None;
            self.stats.pair_resets += 1;
        } else {
            self.destroy_pair(gi, pi);
            self.new_pair(gi, pi, d[11]);
        }
    }

    fn new_pair(&mut self, gi: usize, pi: usize, seed: u32) {
        let mut pick = fastrand::Rng::with_seed(u64::from(seed));
        let p = group::new_pair(self.dev, &self.groups[gi], &mut pick);
        self.groups[gi].put_pair(pi, p);
    }

    /// Quiesces pair `pi` and destroys its QPs and MRs.
    fn destroy_pair(&mut self, gi: usize, pi: usize) {
        self.quiesce(gi, pi);
        let who = self.who();
        let pair = self.groups[gi].take_pair(pi);
        for end in pair.ends {
            let qpn = end.qp.qpn();
            end.qp.destroy(Some(WAIT)).unwrap_or_else(|(_, e)| who.fail(format!("destroy QP {qpn}: {e}")));
            end.mr.dereg();
            self.stats.qps_destroyed += 1;
        }
    }

    /// Replaces a random CQ of group `gi`: a destroy while QPs use it is refused, then those
    /// pairs are destroyed, the CQ too, and a new CQ and new pairs take their places.
    pub(super) fn churn_cq(&mut self, gi: usize, d: &Draws) {
        let ci = d[2] as usize % CQS;
        let who = self.who();
        let g = &mut self.groups[gi];
        let users: Vec<usize> = (0..PAIRS).filter(|&pi| g.pairs[pi].as_ref().is_some_and(|p| p.uses_cq(ci))).collect();
        if !users.is_empty() {
            let CqSlot { cq, arms, events } = g.cqs.remove(ci);
            match cq.destroy(Some(WAIT)) {
                Err((cq, Error::Busy(_))) => g.cqs.insert(ci, CqSlot { cq, arms, events }),
                Ok(()) => who.fail("a CQ its QPs complete into was destroyed"),
                Err((_, e)) => who.fail(format!("destroy of a busy CQ: {e}, not EBUSY")),
            }
            self.stats.busy_refused += 1;
        }
        for &pi in &users {
            self.destroy_pair(gi, pi);
        }
        self.take_events(gi);
        let g = &mut self.groups[gi];
        let CqSlot { cq, .. } = g.cqs.remove(ci);
        let h = cq.handle();
        cq.destroy(Some(WAIT)).unwrap_or_else(|(_, e)| who.fail(format!("destroy CQ {h}: {e}")));
        self.stats.cqs_destroyed += 1;
        let mut pick = fastrand::Rng::with_seed(u64::from(d[11]));
        let fresh = group::new_cq(&g.ctx, &g.ch, &mut pick);
        g.cqs.insert(ci, fresh);
        for (k, &pi) in users.iter().enumerate() {
            self.new_pair(gi, pi, d[11].wrapping_add(k as u32));
        }
    }

    /// Replaces group `gi` whole (on the kernel's context for group 0, else a new user context).
    pub(super) fn churn_group(&mut self, gi: usize, d: &Draws) {
        self.destroy_group(gi);
        let mut pick = fastrand::Rng::with_seed(u64::from(d[11]));
        let g = group::new_group(self.dev, gi == 0, &mut pick);
        self.groups.insert(gi, g);
    }

    /// Quiesces and destroys every object of group `gi` (QPs, MRs, CQs, channel, PD, and the
    /// context if it is a user context) and removes it.
    fn destroy_group(&mut self, gi: usize) {
        for pi in 0..PAIRS {
            if self.groups[gi].pairs[pi].is_some() {
                self.destroy_pair(gi, pi);
            }
        }
        self.take_events(gi);
        self.take_async_events(gi);
        let who = self.who();
        let Group { ctx, pd, ch, cqs, .. } = self.groups.remove(gi);
        for CqSlot { cq, .. } in cqs {
            let h = cq.handle();
            cq.destroy(Some(WAIT)).unwrap_or_else(|(_, e)| who.fail(format!("destroy CQ {h}: {e}")));
            self.stats.cqs_destroyed += 1;
        }
        ch.destroy().unwrap_or_else(|(_, e)| who.fail(format!("destroy channel: {e}")));
        pd.dealloc().unwrap_or_else(|(_, e)| who.fail(format!("dealloc PD: {e}")));
        if ctx.is_user() {
            self.stats.contexts_destroyed += 1;
        }
    }

    /// Destroys every group.
    pub(super) fn teardown(&mut self) {
        while !self.groups.is_empty() {
            self.destroy_group(self.groups.len() - 1);
        }
    }
}
