//! `ib_destroy_cm_id` (`cm_destroy_id` of `cm.c`): what an ID sends on its way out, by state —
//! a listener just stops listening; a REQ in flight gets REJ Timeout (ARI: our CA GUID); a REQ
//! or REP not yet settled gets REJ Consumer Reject; an established connection a DREQ (sent once)
//! and time-wait; a DREQ in flight time-wait; a received DREQ its DREP; a received SIDR_REQ a
//! SIDR_REP Reject. An ID in time-wait afterwards stays until it ends (its communication ID
//! reserved, a repeated DREQ still answered), then goes without an event; any other goes now.

use super::conn::State;
use super::params::{SidrRepParam, SidrStatus, REJ_CONSUMER_DEFINED, REJ_TIMEOUT};
use super::table::Inner;
use super::types::CmId;
use super::verbs;
use std::time::Instant;

pub fn destroy(g: &mut Inner, id: CmId, now: Instant) {
    let Some(state) = g.ids.get(&id).filter(|c| !c.destroyed).map(|c| c.state) else { return };
    let guid = g.local_ca_guid.to_be_bytes();
    match state {
        State::SidrReqRcvd => {
            let p = SidrRepParam { status: SidrStatus::Reject, ..Default::default() };
            let _ = verbs::send_sidr_rep(g, id, &p);
        }
        State::ReqSent | State::MraReqRcvd => {
            let _ = verbs::send_rej(g, id, REJ_TIMEOUT, &guid, &[], now);
        }
        State::ReqRcvd
        | State::RepSent
        | State::MraRepRcvd
        | State::MraReqSent
        | State::RepRcvd
        | State::MraRepSent => {
            let _ = verbs::send_rej(g, id, REJ_CONSUMER_DEFINED, &[], &[], now);
        }
        State::Established => {
            if verbs::send_dreq(g, id, &[], now).is_ok() {
                g.enter_timewait(id, now);
            }
        }
        State::DreqSent => g.enter_timewait(id, now),
        State::DreqRcvd => {
            let _ = verbs::send_drep(g, id, &[], now);
        }
        State::Idle | State::Listen | State::Timewait | State::SidrReqSent => {}
    }
    match g.conn(id) {
        Some(c) if c.state == State::Timewait => {
            c.destroyed = true;
            c.retry = None;
        }
        _ => g.remove(id),
    }
}
