//! The CM's timers (`ib_mad`'s send timeouts and `cm.c`'s time-wait work): a MAD waiting for
//! its answer is resent when its wait ends while retries are left, then its ID times out as
//! `cm_process_send_error` says (REQ: IDLE and `ReqError`; REP: IDLE and `RepError`; DREQ:
//! time-wait and `DreqError`; SIDR_REQ: IDLE and `SidrReqError`); a time-wait ends in IDLE with
//! `TimewaitExit`, or, for an ID the consumer destroyed meanwhile, its removal.

use super::conn::State;
use super::table::Inner;
use super::types::{CmEvent, CmId};
use std::time::Instant;

pub fn on_timer(g: &mut Inner, now: Instant) {
    let due: Vec<CmId> =
        g.ids.iter().filter(|(_, c)| c.deadline().is_some_and(|d| d <= now)).map(|(&id, _)| id).collect();
    for id in due {
        retry_due(g, id, now);
        timewait_due(g, id, now);
    }
}

fn retry_due(g: &mut Inner, id: CmId, now: Instant) {
    let Some(c) = g.conn(id) else { return };
    let Some(r) = c.retry.as_mut().filter(|r| r.deadline <= now) else { return };
    if r.retries_left > 0 {
        r.retries_left -= 1;
        r.deadline = now + r.timeout;
        let (to, mad) = (r.to, r.mad);
        g.stats.retries += 1;
        g.send(to, mad);
        return;
    }
    c.retry = None;
    let state = c.state;
    g.stats.timeouts += 1;
    let ev = match state {
        State::ReqSent | State::MraReqRcvd => {
            g.reset_to_idle(id);
            CmEvent::ReqError
        }
        State::RepSent | State::MraRepRcvd => {
            g.reset_to_idle(id);
            CmEvent::RepError
        }
        State::DreqSent => {
            g.enter_timewait(id, now);
            CmEvent::DreqError
        }
        State::SidrReqSent => {
            g.reset_to_idle(id);
            CmEvent::SidrReqError
        }
        _ => return,
    };
    g.event(id, ev);
}

fn timewait_due(g: &mut Inner, id: CmId, now: Instant) {
    let Some(c) = g.conn(id) else { return };
    if c.state != State::Timewait || c.timewait_until.is_none_or(|t| t > now) {
        return;
    }
    if c.destroyed {
        g.remove(id);
        return;
    }
    g.reset_to_idle(id);
    g.event(id, CmEvent::TimewaitExit);
}
