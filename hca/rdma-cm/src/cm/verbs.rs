//! What the consumer asks of an ID (`ib_cm_listen`, `ib_send_cm_req`, `ib_send_cm_rep`, ...
//! of Linux's `drivers/infiniband/core/cm.c`), each checked against the ID's state and its
//! private data against the MAD's room, run under the CM's lock.

use super::conn::State;
use super::format;
use super::params::{RepParam, ReqParam, SidrRepParam, SidrReqParam};
use super::table::Inner;
use super::timing::{ack_timeout, req_timeout, MAX_CM_RETRIES, MRA_FLAG_DELAY};
use super::types::{CmEvent, CmId, Error};
use crate::mad::fields::*;
use crate::mad::msg::msg_response;
use crate::transport::{MadAddr, GSI_QKEY, GSI_QPN};
use std::time::{Duration, Instant};

/// A listener's backlog when the consumer gives 0 or more than this (the bound Linux's
/// `ucma` applies to `rdma_listen`).
pub const MAX_BACKLOG: u32 = 1024;

fn room(data: &[u8], max: usize) -> Result<(), Error> {
    if data.len() > max {
        return Err(Error::PrivateDataTooLong { len: data.len(), max });
    }
    Ok(())
}

/// The live ID's state.
fn state(g: &Inner, id: CmId) -> Result<State, Error> {
    match g.ids.get(&id) {
        Some(c) if !c.destroyed => Ok(c.state),
        _ => Err(Error::NoId),
    }
}

/// Where a MAD to a remote CM goes: its QP1 with the GSI Q_Key unless the caller says otherwise.
fn gsi(mut a: MadAddr) -> MadAddr {
    if a.qpn == 0 {
        a.qpn = GSI_QPN;
    }
    if a.qkey == 0 {
        a.qkey = GSI_QKEY;
    }
    a
}

pub fn listen(g: &mut Inner, id: CmId, service_id: u64, backlog: u32) -> Result<(), Error> {
    if state(g, id)? != State::Idle {
        return Err(Error::InvalidState);
    }
    if g.listeners.contains_key(&service_id) {
        return Err(Error::Busy);
    }
    g.listeners.insert(service_id, id);
    let c = g.conn(id).ok_or(Error::NoId)?;
    c.state = State::Listen;
    c.service_id = service_id;
    c.backlog = if backlog == 0 || backlog > MAX_BACKLOG { MAX_BACKLOG } else { backlog };
    Ok(())
}

pub fn send_req(g: &mut Inner, id: CmId, p: &ReqParam, now: Instant) -> Result<(), Error> {
    room(&p.private_data, REQ_PRIVATE_DATA)?;
    let transport = format::transport_of(p.qp_type).ok_or(Error::Invalid("REQ QP type is not RC, UC or XRC"))?;
    if p.max_cm_retries > MAX_CM_RETRIES {
        return Err(Error::Invalid("max_cm_retries exceeds the REQ's 4 bits"));
    }
    if state(g, id)? != State::Idle {
        return Err(Error::InvalidState);
    }
    let (tid, guid) = (g.tid(id), g.local_ca_guid);
    let mad = format::req(id, tid, guid, p, transport);
    let c = g.conn(id).ok_or(Error::NoId)?;
    c.state = State::ReqSent;
    c.service_id = p.service_id;
    c.tid = tid;
    c.dest = gsi(p.dest);
    c.local_qpn = p.qp_num & 0xFF_FFFF;
    c.timeout = req_timeout(p.path.packet_life_time, p.remote_cm_response_timeout);
    c.max_cm_retries = p.max_cm_retries;
    c.av_timeout = p.path.packet_life_time.min(30) + 1;
    g.send_retried(id, mad, now);
    Ok(())
}

pub fn send_rep(g: &mut Inner, id: CmId, p: &RepParam, now: Instant) -> Result<(), Error> {
    room(&p.private_data, REP_PRIVATE_DATA)?;
    if !matches!(state(g, id)?, State::ReqRcvd | State::MraReqSent) {
        return Err(Error::InvalidState);
    }
    let guid = g.local_ca_guid;
    let c = g.conn(id).ok_or(Error::NoId)?;
    let mad = format::rep(id, c, guid, p);
    c.state = State::RepSent;
    c.local_qpn = p.qp_num & 0xFF_FFFF;
    g.send_retried(id, mad, now);
    Ok(())
}

pub fn send_rtu(g: &mut Inner, id: CmId, private_data: &[u8]) -> Result<(), Error> {
    room(private_data, RTU_PRIVATE_DATA)?;
    if !matches!(state(g, id)?, State::RepRcvd | State::MraRepSent) {
        return Err(Error::InvalidState);
    }
    let c = g.conn(id).ok_or(Error::NoId)?;
    let mad = format::rtu(id, c, private_data);
    c.state = State::Established;
    c.private_data = private_data.to_vec();
    let to = c.dest;
    g.send(to, mad);
    Ok(())
}

pub fn send_rej(g: &mut Inner, id: CmId, reason: u16, ari: &[u8], pd: &[u8], now: Instant) -> Result<(), Error> {
    room(pd, REJ_PRIVATE_DATA)?;
    if ari.len() > ARI_LEN {
        return Err(Error::Invalid("REJ ARI longer than 72 bytes"));
    }
    let to_timewait = match state(g, id)? {
        State::ReqSent
        | State::MraReqRcvd
        | State::ReqRcvd
        | State::MraReqSent
        | State::RepRcvd
        | State::MraRepSent => false,
        State::RepSent | State::MraRepRcvd => true,
        _ => return Err(Error::InvalidState),
    };
    let c = g.conn(id).ok_or(Error::NoId)?;
    let mad = format::rej(id, c, reason, ari, pd);
    let to = c.dest;
    if to_timewait {
        g.enter_timewait(id, now);
    } else {
        g.reset_to_idle(id);
    }
    g.send(to, mad);
    Ok(())
}

pub fn send_mra(g: &mut Inner, id: CmId, service_timeout: u8, pd: &[u8]) -> Result<(), Error> {
    room(pd, MRA_PRIVATE_DATA)?;
    let (next, mraed) = match state(g, id)? {
        State::ReqRcvd => (State::MraReqSent, msg_response::REQ),
        State::RepRcvd => (State::MraRepSent, msg_response::REP),
        _ => return Err(Error::InvalidState),
    };
    let c = g.conn(id).ok_or(Error::NoId)?;
    c.state = next;
    c.service_timeout = service_timeout & 0x1F;
    c.private_data = pd.to_vec();
    if service_timeout & MRA_FLAG_DELAY == 0 {
        let mad = format::mra(id, c, mraed, service_timeout, pd);
        let to = c.dest;
        g.send(to, mad);
    }
    Ok(())
}

pub fn send_dreq(g: &mut Inner, id: CmId, pd: &[u8], now: Instant) -> Result<(), Error> {
    room(pd, DREQ_PRIVATE_DATA)?;
    if state(g, id)? != State::Established {
        return Err(Error::InvalidState);
    }
    let tid = g.tid(id);
    let c = g.conn(id).ok_or(Error::NoId)?;
    let mad = format::dreq(id, tid, c, pd);
    c.state = State::DreqSent;
    g.send_retried(id, mad, now);
    Ok(())
}

pub fn send_drep(g: &mut Inner, id: CmId, pd: &[u8], now: Instant) -> Result<(), Error> {
    room(pd, DREP_PRIVATE_DATA)?;
    if state(g, id)? != State::DreqRcvd {
        return Err(Error::InvalidState);
    }
    let c = g.conn(id).ok_or(Error::NoId)?;
    let mad = format::drep(id, c, pd);
    c.private_data = pd.to_vec();
    let to = c.dest;
    g.enter_timewait(id, now);
    g.send(to, mad);
    Ok(())
}

pub fn establish(g: &mut Inner, id: CmId) -> Result<(), Error> {
    match state(g, id)? {
        State::RepSent | State::MraRepRcvd => {}
        _ => return Err(Error::InvalidState),
    }
    let c = g.conn(id).ok_or(Error::NoId)?;
    c.state = State::Established;
    c.retry = None;
    g.event(id, CmEvent::RtuReceived { private_data: Vec::new() });
    Ok(())
}

pub fn send_sidr_req(g: &mut Inner, id: CmId, p: &SidrReqParam, now: Instant) -> Result<(), Error> {
    room(&p.private_data, SIDR_REQ_PRIVATE_DATA)?;
    if p.timeout_ms == 0 {
        return Err(Error::Invalid("SIDR_REQ timeout_ms is 0"));
    }
    if state(g, id)? != State::Idle {
        return Err(Error::InvalidState);
    }
    let tid = g.tid(id);
    let mad = format::sidr_req(id, tid, p);
    let c = g.conn(id).ok_or(Error::NoId)?;
    c.state = State::SidrReqSent;
    c.tid = tid;
    c.service_id = p.service_id;
    c.dest = gsi(p.dest);
    c.timeout = Duration::from_millis(p.timeout_ms.into());
    c.max_cm_retries = p.max_cm_retries;
    g.send_retried(id, mad, now);
    Ok(())
}

pub fn send_sidr_rep(g: &mut Inner, id: CmId, p: &SidrRepParam) -> Result<(), Error> {
    room(&p.private_data, SIDR_REP_PRIVATE_DATA)?;
    if p.info.len() > ARI_LEN {
        return Err(Error::Invalid("SIDR_REP additional information longer than 72 bytes"));
    }
    if state(g, id)? != State::SidrReqRcvd {
        return Err(Error::InvalidState);
    }
    let c = g.conn(id).ok_or(Error::NoId)?;
    let mad = format::sidr_rep(c.tid, c.remote_id, c.service_id, p);
    let to = c.dest;
    g.reset_to_idle(id);
    g.send(to, mad);
    Ok(())
}

/// The path's ACK timeout after the REP told its Target ACK Delay (`cm_rep_handler`).
pub fn ack_after_rep(av_timeout: u8, target_ack_delay: u8) -> u8 {
    ack_timeout(target_ack_delay, av_timeout.saturating_sub(1))
}
