//! A MAD from QP1, decoded and handed to the handler of its attribute. Bytes that are not a
//! CM MAD this CM takes are counted and dropped (`CmStats::dropped_malformed`, or
//! `dropped_unsupported` for ClassPortInfo, LAP and APR).

mod common;
mod disconnect;
mod held;
mod reply;
mod req;
mod sidr;

use super::table::Inner;
use crate::mad::header::attr;
use crate::mad::{decode, CmMad, MadError};
use crate::transport::ReceivedMad;
use common::Rx;
use std::time::Instant;

pub fn recv(g: &mut Inner, mad: &ReceivedMad, now: Instant) {
    g.stats.mads_received += 1;
    let d = match decode(&mad.mad) {
        Ok(d) => d,
        Err(MadError::Attribute(attr::CLASS_PORT_INFO | attr::LAP | attr::APR)) => {
            g.stats.dropped_unsupported += 1;
            return;
        }
        Err(_) => {
            g.stats.dropped_malformed += 1;
            return;
        }
    };
    let rx = Rx { from: &mad.from, tid: d.header.tid.get(), mad };
    match &d.msg {
        CmMad::Req(m) => req::on_req(g, &rx, m, now),
        CmMad::Mra(m) => reply::on_mra(g, m, now),
        CmMad::Rej(m) => reply::on_rej(g, m, now),
        CmMad::Rep(m) => reply::on_rep(g, &rx, m, now),
        CmMad::Rtu(m) => reply::on_rtu(g, m),
        CmMad::Dreq(m) => disconnect::on_dreq(g, &rx, m),
        CmMad::Drep(m) => disconnect::on_drep(g, m, now),
        CmMad::SidrReq(m) => sidr::on_sidr_req(g, &rx, m),
        CmMad::SidrRep(m) => sidr::on_sidr_rep(g, m),
    }
}

/// A held REQ whose listener now exists, received again (`held`).
fn recv_req(g: &mut Inner, mad: &ReceivedMad, now: Instant) {
    if let Ok(d) = decode(&mad.mad) {
        if let CmMad::Req(m) = &d.msg {
            let rx = Rx { from: &mad.from, tid: d.header.tid.get(), mad };
            req::on_req(g, &rx, m, now);
        }
    }
}

/// The held REQs' timer: those whose listener appeared are received, the expired rejected.
pub fn on_timer(g: &mut Inner, now: Instant) {
    held::on_timer(g, now);
}
