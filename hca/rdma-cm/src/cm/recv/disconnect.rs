//! Received DREQ and DREP (IBTA 12.9.5.3 and 12.9.8.4; `cm_dreq_handler`, `cm_issue_drep`,
//! `cm_drep_handler` of `cm.c`).

use super::common::{response_addr, unmatched, Rx};
use crate::cm::conn::State;
use crate::cm::format;
use crate::cm::table::Inner;
use crate::cm::types::{CmEvent, CmId};
use crate::mad::{Drep, Dreq};
use std::time::Instant;

pub fn on_dreq(g: &mut Inner, rx: &Rx, dreq: &Dreq) {
    let id = CmId(dreq.remote_comm_id);
    let Some(c) = g.ids.get(&id).filter(|c| c.remote_id == dreq.local_comm_id) else {
        // No ID: the connection is gone (or never was); a DREP lets the peer finish its
        // disconnect (`cm_issue_drep`). Counted as an unknown ID.
        g.stats.dropped_unknown_id += 1;
        let mad = format::drep_for(rx.tid, dreq.remote_comm_id, dreq.local_comm_id, &[]);
        g.send(response_addr(rx.from), mad);
        return;
    };
    if c.local_qpn != dreq.remote_qpn {
        g.stats.dropped_state += 1;
        return;
    }
    match c.state {
        State::RepSent | State::DreqSent | State::Established | State::MraRepRcvd => {}
        State::Timewait => {
            // The peer missed our DREP: resend it, with its private data.
            g.stats.duplicates += 1;
            let (mad, to) = (format::drep(id, c, &c.private_data), c.dest);
            g.send(to, mad);
            return;
        }
        State::DreqRcvd => {
            g.stats.duplicates += 1;
            return;
        }
        _ => {
            g.stats.dropped_state += 1;
            return;
        }
    }
    let Some(c) = g.conn(id) else { return };
    c.state = State::DreqRcvd;
    c.tid = rx.tid;
    c.retry = None;
    g.event(id, CmEvent::DreqReceived { private_data: dreq.private_data.to_vec() });
}

pub fn on_drep(g: &mut Inner, drep: &Drep, now: Instant) {
    let id = CmId(drep.remote_comm_id);
    // An ID destroyed in time-wait still knows its peer: a late DREP to it is a duplicate.
    let Some(c) = g.ids.get(&id).filter(|c| c.remote_id == drep.local_comm_id) else {
        return unmatched(g, drep.remote_comm_id);
    };
    match c.state {
        State::DreqSent | State::DreqRcvd => {}
        State::Timewait => {
            g.stats.duplicates += 1;
            return;
        }
        _ => {
            g.stats.dropped_state += 1;
            return;
        }
    }
    g.enter_timewait(id, now);
    g.event(id, CmEvent::DrepReceived { private_data: drep.private_data.to_vec() });
}
