//! REQs that came before their listener. A REQ for a service ID nobody listens on is held for
//! [`LISTEN_GRACE`] (at most half the requester's Remote CM Response Timeout, within which
//! IBTA 12.9.5.1 lets the passive side answer) before it is rejected with reason 8, Invalid
//! Service ID: a listener created meanwhile receives it as a new REQ. Programs that let the
//! peer go (a handshake over another connection) before they listen, as perftest's
//! `rdma_cm_server_connection` after `ctx_hand_shake` (perftest `src/perftest_communication.c`),
//! otherwise lose that race to a fast requester. At most [`MAX_HELD`] are held; beyond that a
//! REQ is rejected at once, as Linux's `cm_match_req` does for every one.

use super::common::{response_addr, Rx};
use crate::cm::conn::RemoteKey;
use crate::cm::format;
use crate::cm::params::REJ_INVALID_SERVICE_ID;
use crate::cm::table::{HeldReq, Inner};
use crate::cm::timing::{iba_time_ms, LISTEN_GRACE};
use crate::mad::msg::msg_response;
use crate::mad::Req;
use std::time::{Duration, Instant};

/// REQs held at once.
pub const MAX_HELD: usize = 64;

/// Holds `req` (nobody listens for its service ID); false when it must be rejected now (the
/// hold is full). A retry of a held REQ is a duplicate, dropped.
pub fn hold(g: &mut Inner, rx: &Rx, req: &Req, key: RemoteKey, now: Instant) -> bool {
    if g.held.iter().any(|h| h.key == key) {
        g.stats.duplicates += 1;
        return true;
    }
    if g.held.len() >= MAX_HELD {
        return false;
    }
    let half_response = Duration::from_millis(iba_time_ms(req.remote_cm_response_timeout) / 2);
    let until = now + LISTEN_GRACE.min(half_response);
    let (mad, service_id, tid) = (rx.mad.clone(), req.service_id, rx.tid);
    g.held.push(HeldReq { mad, key, service_id, tid, since: now, until });
    true
}

/// Runs the held REQs: those whose listener now exists are received again (as new REQs), the
/// expired ones rejected with Invalid Service ID.
pub fn on_timer(g: &mut Inner, now: Instant) {
    let held = std::mem::take(&mut g.held);
    for h in held {
        if g.listeners.contains_key(&h.service_id) {
            super::recv_req(g, &h.mad, now);
        } else if h.until <= now {
            g.stats.rejected_no_listener += 1;
            let mad = format::issue_rej(h.tid, 0, h.key.0, msg_response::REQ, REJ_INVALID_SERVICE_ID);
            g.send(response_addr(&h.mad.from), mad);
        } else {
            g.held.push(h);
        }
    }
}
