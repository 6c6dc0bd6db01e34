//! Received answers to a REQ or REP: REP (`cm_rep_handler`, `cm_dup_rep_handler`), RTU
//! (`cm_rtu_handler`), MRA (`cm_mra_handler`) and REJ (`cm_rej_handler`) of `cm.c`, IBTA 12.9.5
//! and 12.9.8.

use super::common::{response_addr, unmatched, Rx};
use crate::cm::conn::State;
use crate::cm::format;
use crate::cm::params::{RepEvent, REJ_STALE_CONN, REJ_TIMEOUT};
use crate::cm::table::Inner;
use crate::cm::timing::iba_time_ms;
use crate::cm::types::{CmEvent, CmId};
use crate::cm::verbs;
use crate::mad::msg::msg_response;
use crate::mad::{Mra, Rej, Rep, Rtu};
use std::time::{Duration, Instant};

pub fn on_rep(g: &mut Inner, rx: &Rx, rep: &Rep, now: Instant) {
    let Some(id) = g.acquire(rep.remote_comm_id, 0) else {
        return duplicate_rep(g, rep);
    };
    if !matches!(g.ids.get(&id).map(|c| c.state), Some(State::ReqSent | State::MraReqRcvd)) {
        g.stats.dropped_state += 1;
        return;
    }
    if g.insert_remote_id(id, (rep.local_comm_id, rep.local_ca_guid)).is_some() {
        g.stats.dropped_state += 1;
        return;
    }
    if let Some(other) = g.insert_remote_qpn(id, (rep.local_qpn, rep.local_ca_guid)) {
        // The replying QP is connected here already: a stale connection (`cm_rep_handler`).
        if let Some(key) = g.conn(id).and_then(|c| c.remote_id_key.take()) {
            g.remote_ids.remove(&key);
        }
        g.stats.rejected_stale += 1;
        let mad = format::issue_rej(rx.tid, rep.remote_comm_id, rep.local_comm_id, msg_response::REP, REJ_STALE_CONN);
        g.send(response_addr(rx.from), mad);
        let _ = verbs::send_dreq(g, other, &[], now);
        return;
    }
    let Some(c) = g.conn(id) else { return };
    c.state = State::RepRcvd;
    c.remote_id = rep.local_comm_id;
    c.remote_ca_guid = rep.local_ca_guid;
    c.remote_qpn = rep.local_qpn;
    c.av_timeout = verbs::ack_after_rep(c.av_timeout, rep.target_ack_delay);
    c.retry = None;
    let ev = RepEvent {
        remote_ca_guid: rep.local_ca_guid,
        remote_qpn: rep.local_qpn,
        starting_psn: rep.starting_psn,
        responder_resources: rep.initiator_depth,
        initiator_depth: rep.responder_resources,
        target_ack_delay: rep.target_ack_delay,
        failover_accepted: rep.failover_accepted,
        flow_control: rep.end_to_end_flow_control,
        rnr_retry_count: rep.rnr_retry_count,
        srq: rep.srq,
        private_data: rep.private_data.to_vec(),
    };
    g.event(id, CmEvent::RepReceived(Box::new(ev)));
}

/// A REP for an ID that has its REP already: the RTU resent if established, the MRA if one
/// was sent (`cm_dup_rep_handler`).
fn duplicate_rep(g: &mut Inner, rep: &Rep) {
    let Some(id) = g.acquire(rep.remote_comm_id, rep.local_comm_id) else {
        return unmatched(g, rep.remote_comm_id);
    };
    g.stats.duplicates += 1;
    let Some(c) = g.ids.get(&id) else { return };
    let mad = match c.state {
        State::Established => format::rtu(id, c, &c.private_data),
        State::MraRepSent => format::mra(id, c, msg_response::REP, c.service_timeout, &c.private_data),
        _ => return,
    };
    let to = c.dest;
    g.send(to, mad);
}

pub fn on_rtu(g: &mut Inner, rtu: &Rtu) {
    let Some(id) = g.acquire(rtu.remote_comm_id, rtu.local_comm_id) else {
        return unmatched(g, rtu.remote_comm_id);
    };
    let Some(c) = g.conn(id) else { return };
    if !matches!(c.state, State::RepSent | State::MraRepRcvd) {
        g.stats.duplicates += 1;
        return;
    }
    c.state = State::Established;
    c.retry = None;
    g.event(id, CmEvent::RtuReceived { private_data: rtu.private_data.to_vec() });
}

pub fn on_mra(g: &mut Inner, mra: &Mra, now: Instant) {
    let remote = match mra.message_mraed {
        msg_response::REQ => 0,
        msg_response::REP | msg_response::OTHER => mra.local_comm_id,
        _ => {
            g.stats.dropped_state += 1;
            return;
        }
    };
    let Some(id) = g.acquire(mra.remote_comm_id, remote) else {
        return unmatched(g, mra.remote_comm_id);
    };
    let Some(c) = g.conn(id) else { return };
    let next = match (c.state, mra.message_mraed) {
        (State::ReqSent, msg_response::REQ) => State::MraReqRcvd,
        (State::RepSent, msg_response::REP) => State::MraRepRcvd,
        (State::MraReqRcvd | State::MraRepRcvd, _) => {
            g.stats.duplicates += 1;
            return;
        }
        _ => {
            g.stats.dropped_state += 1;
            return;
        }
    };
    // The peer asks for its service timeout more; the wait is that plus the path's ACK
    // timeout, and the retries left stay as they were (`ib_modify_mad`).
    let wait = Duration::from_millis(iba_time_ms(mra.service_timeout) + iba_time_ms(c.av_timeout));
    if let Some(r) = c.retry.as_mut() {
        r.timeout = wait;
        r.deadline = now + wait;
    }
    c.state = next;
    let ev = CmEvent::MraReceived { service_timeout: mra.service_timeout, private_data: mra.private_data.to_vec() };
    g.event(id, ev);
}

/// The ID a REJ names (`cm_acquire_rejected_id`): a REJ Timeout by the rejecter's CA GUID
/// (its ARI) and communication ID, a REJ of our REQ by our ID alone (we know no remote ID
/// yet), any other by both IDs.
fn rejected_id(g: &Inner, rej: &Rej) -> Option<CmId> {
    if rej.reason == REJ_TIMEOUT {
        let guid = u64::from_be_bytes(rej.ari[..8].try_into().ok()?);
        let &id = g.remote_ids.get(&(rej.local_comm_id, guid))?;
        return g.acquire(id.0, rej.local_comm_id);
    }
    if rej.message_rejected == msg_response::REQ {
        return g.acquire(rej.remote_comm_id, 0);
    }
    g.acquire(rej.remote_comm_id, rej.local_comm_id)
}

pub fn on_rej(g: &mut Inner, rej: &Rej, now: Instant) {
    let Some(id) = rejected_id(g, rej) else {
        return unmatched(g, rej.remote_comm_id);
    };
    let Some(state) = g.ids.get(&id).map(|c| c.state) else { return };
    match state {
        State::ReqSent
        | State::MraReqRcvd
        | State::RepSent
        | State::MraRepRcvd
        | State::ReqRcvd
        | State::MraReqSent => {
            if rej.reason == REJ_STALE_CONN {
                g.enter_timewait(id, now);
            } else {
                g.reset_to_idle(id);
            }
        }
        State::DreqSent | State::RepRcvd | State::MraRepSent | State::Established => g.enter_timewait(id, now),
        _ => {
            g.stats.dropped_state += 1;
            return;
        }
    }
    let ev =
        CmEvent::RejReceived { reason: rej.reason, ari: rej.ari().to_vec(), private_data: rej.private_data.to_vec() };
    g.event(id, ev);
}
