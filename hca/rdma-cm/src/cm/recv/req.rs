//! A received REQ (IBTA 12.9.5.1 and 12.9.8; `cm_req_handler`, `cm_match_req`,
//! `cm_dup_req_handler` of `cm.c`): a duplicate of a REQ an ID already holds, a REQ from a
//! remote QP still connected here (stale), a REQ nobody listens for, a listener's full backlog,
//! the CM's ID limit, or a new passive ID in REQ_RCVD. A REQ nobody listens for yet is held a
//! while first (`held`).

use super::common::{response_addr, Rx};
use crate::cm::conn::{Conn, State};
use crate::cm::format;
use crate::cm::params::{Path, ReqEvent, REJ_INVALID_SERVICE_ID, REJ_STALE_CONN};
use crate::cm::table::Inner;
use crate::cm::timing::{iba_time_ms, MAX_IDS};
use crate::cm::types::{CmEvent, CmId};
use crate::cm::verbs;
use crate::mad::msg::msg_response;
use crate::mad::Req;
use std::time::{Duration, Instant};

/// IBTA Table 112 reason 9, Invalid Transport Service Type: a REQ for RD or an unknown type.
pub const REJ_INVALID_TRANSPORT_TYPE: u16 = 9;

pub fn on_req(g: &mut Inner, rx: &Rx, req: &Req, now: Instant) {
    let key = (req.local_comm_id, req.local_ca_guid);
    if let Some(&id) = g.remote_ids.get(&key) {
        return duplicate(g, id);
    }
    let reply = |g: &mut Inner, reason| {
        let mad = format::issue_rej(rx.tid, 0, req.local_comm_id, msg_response::REQ, reason);
        g.send(response_addr(rx.from), mad);
    };
    if let Some(&other) = g.remote_qpns.get(&(req.local_qpn, req.local_ca_guid)) {
        // The remote QP is connected here under another communication ID: the peer lost that
        // connection. Refuse the REQ and end the old one (`cm_match_req`).
        g.stats.rejected_stale += 1;
        reply(g, REJ_STALE_CONN);
        let _ = verbs::send_dreq(g, other, &[], now);
        return;
    }
    let Some(&listen_id) = g.listeners.get(&req.service_id) else {
        if super::held::hold(g, rx, req, key, now) {
            return;
        }
        g.stats.rejected_no_listener += 1;
        return reply(g, REJ_INVALID_SERVICE_ID);
    };
    let Some(qp_type) = format::qp_type_of(req.transport_service_type, req.extended_transport_type) else {
        return reply(g, REJ_INVALID_TRANSPORT_TYPE);
    };
    if !admit(g, listen_id) {
        return;
    }
    let id = g.alloc_id();
    let from = response_addr(rx.from);
    if let Some(c) = g.conn(id) {
        *c = passive_conn(req, rx.tid, from, listen_id);
    }
    g.insert_remote_id(id, key);
    g.insert_remote_qpn(id, (req.local_qpn, req.local_ca_guid));
    let ev = req_event(req, &from, qp_type);
    g.event(id, CmEvent::ReqReceived { listen_id, req: Box::new(ev) });
}

/// Room for one more passive ID of `listen_id`: its backlog and the CM's ID limit (each
/// refusal is a drop, counted; the peer's retries come back later).
pub fn admit(g: &mut Inner, listen_id: CmId) -> bool {
    let backlog = g.ids.get(&listen_id).map_or(0, |c| c.backlog) as usize;
    if g.pending(listen_id) >= backlog {
        g.stats.dropped_backlog += 1;
        return false;
    }
    if g.ids.len() >= MAX_IDS {
        g.stats.dropped_id_limit += 1;
        return false;
    }
    true
}

/// A REQ whose remote communication ID and CA GUID an ID already holds (`cm_dup_req_handler`):
/// ignored while the consumer has not answered, the MRA resent after one, the REP resent while
/// it waits for its RTU (cm.c leaves that to the REP's own retries; resending at once answers
/// the requester sooner and costs one MAD), REJ Stale Connection in time-wait.
fn duplicate(g: &mut Inner, id: CmId) {
    g.stats.duplicates += 1;
    let Some(c) = g.ids.get(&id) else { return };
    let to = c.dest;
    let mad = match c.state {
        State::MraReqSent => format::mra(id, c, msg_response::REQ, c.service_timeout, &c.private_data),
        State::RepSent | State::MraRepRcvd => match &c.retry {
            Some(r) => r.mad,
            None => return,
        },
        State::Timewait => format::rej(id, c, REJ_STALE_CONN, &[], &[]),
        _ => return,
    };
    g.send(to, mad);
}

fn passive_conn(req: &Req, tid: u64, dest: crate::transport::MadAddr, listen_id: CmId) -> Conn {
    Conn {
        state: State::ReqRcvd,
        remote_id: req.local_comm_id,
        remote_ca_guid: req.local_ca_guid,
        remote_qpn: req.local_qpn,
        service_id: req.service_id,
        tid,
        dest,
        timeout: Duration::from_millis(iba_time_ms(req.local_cm_response_timeout)),
        max_cm_retries: req.max_cm_retries,
        av_timeout: req.primary.local_ack_timeout,
        listen_id: Some(listen_id),
        ..Conn::idle()
    }
}

/// `cm_format_paths_from_req` and `cm_format_req_event`: the path seen from the passive side
/// (our GID is the REQ's remote one), and the requester's parameters with initiator depth and
/// responder resources, local and remote response timeouts swapped to this side's view.
fn req_event(req: &Req, from: &crate::transport::MadAddr, qp_type: u8) -> ReqEvent {
    let p = &req.primary;
    let path = Path {
        sgid: p.remote_port_gid,
        dgid: p.local_port_gid,
        sgid_index: from.sgid_index,
        flow_label: p.flow_label,
        traffic_class: p.traffic_class,
        hop_limit: p.hop_limit,
        mtu: req.path_mtu,
        rate: p.packet_rate,
        packet_life_time: p.local_ack_timeout.saturating_sub(1),
        pkey: req.partition_key,
        sl: p.sl,
    };
    ReqEvent {
        path,
        from: *from,
        service_id: req.service_id,
        remote_ca_guid: req.local_ca_guid,
        remote_qpn: req.local_qpn,
        remote_qkey: req.local_qkey,
        qp_type,
        starting_psn: req.starting_psn,
        responder_resources: req.initiator_depth,
        initiator_depth: req.responder_resources,
        local_cm_response_timeout: req.remote_cm_response_timeout,
        remote_cm_response_timeout: req.local_cm_response_timeout,
        flow_control: req.end_to_end_flow_control,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        srq: req.srq,
        max_cm_retries: req.max_cm_retries,
        private_data: req.private_data.to_vec(),
    }
}
