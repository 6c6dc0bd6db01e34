//! Received SIDR_REQ and SIDR_REP (IBTA 12.11; `cm_sidr_req_handler`, `cm_sidr_rep_handler`
//! of `cm.c`).

use super::common::{response_addr, unmatched, Rx};
use super::req::admit;
use crate::cm::conn::State;
use crate::cm::format;
use crate::cm::params::{SidrRepEvent, SidrRepParam, SidrReqEvent, SidrStatus};
use crate::cm::table::Inner;
use crate::cm::types::CmEvent;
use crate::mad::{SidrRep, SidrReq};

pub fn on_sidr_req(g: &mut Inner, rx: &Rx, req: &SidrReq) {
    let key = (req.request_id, rx.from.gid);
    if g.sidr.contains_key(&key) {
        g.stats.duplicates += 1;
        return;
    }
    let from = response_addr(rx.from);
    let Some(&listen_id) = g.listeners.get(&req.service_id) else {
        // Nobody listens: SIDR_REP status Unsupported Service (`cm_reject_sidr_req`).
        g.stats.rejected_no_listener += 1;
        let p = SidrRepParam { status: SidrStatus::UnsupportedService, ..Default::default() };
        g.send(from, format::sidr_rep(rx.tid, req.request_id, req.service_id, &p));
        return;
    };
    if !admit(g, listen_id) {
        return;
    }
    let id = g.alloc_id();
    if let Some(c) = g.conn(id) {
        c.state = State::SidrReqRcvd;
        c.remote_id = req.request_id;
        c.service_id = req.service_id;
        c.tid = rx.tid;
        c.dest = from;
        c.listen_id = Some(listen_id);
        c.sidr_key = Some(key);
    }
    g.sidr.insert(key, id);
    let ev = SidrReqEvent {
        from,
        pkey: req.partition_key,
        service_id: req.service_id,
        private_data: req.private_data.to_vec(),
    };
    g.event(id, CmEvent::SidrReqReceived { listen_id, req: Box::new(ev) });
}

pub fn on_sidr_rep(g: &mut Inner, rep: &SidrRep) {
    let Some(id) = g.acquire(rep.request_id, 0) else {
        return unmatched(g, rep.request_id);
    };
    let Some(c) = g.conn(id) else { return };
    if c.state != State::SidrReqSent {
        g.stats.dropped_state += 1;
        return;
    }
    c.state = State::Idle;
    c.retry = None;
    let ev = SidrRepEvent {
        status: rep.status,
        qkey: rep.qkey,
        qpn: rep.qpn,
        info: rep.info().to_vec(),
        private_data: rep.private_data.to_vec(),
    };
    g.event(id, CmEvent::SidrRepReceived(Box::new(ev)));
}
