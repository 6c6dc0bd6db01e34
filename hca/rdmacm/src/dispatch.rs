//! What the CM raised, as RDMA CM events on the ids' channels, in the kernel's order and with
//! its values (Linux `drivers/infiniband/core/cma.c` `cma_ib_handler`, `cma_ib_req_handler`,
//! `cma_sidr_rep_handler`, and librdmacm's `rdma_get_cm_event`, which turns a
//! CONNECT_RESPONSE for an id with a QP into ESTABLISHED after moving the QP to RTS and sending
//! the RTU).

use crate::abi::*;
use crate::channel::Event;
use crate::devices;
use crate::qpattr;
use crate::world::{cma, IdState, Phase, Remote, World};
use rdma_cm::cm::{RepEvent, ReqEvent, SidrRepEvent, SidrReqEvent, REJ_CONSUMER_DEFINED};
use rdma_cm::mad::ip_cm::{IpCmHeader, IP_CM_HDR_LEN};
use rdma_cm::{CmEvent, CmId, MadAddr};
use std::net::SocketAddr;
use std::time::Instant;

/// Connection parameters of an event (`rdma_conn_param`), private data copied into it.
#[derive(Default)]
pub struct Conn<'a> {
    pub private_data: &'a [u8],
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub qp_num: u32,
}

/// An event with connection parameters.
pub fn conn_event(id: usize, kind: u32, status: i32, c: &Conn<'_>) -> *mut Event {
    let e = Event::new(id, kind, status);
    // SAFETY: a fresh event box, ours until delivered.
    let ev = unsafe { &mut *e };
    let (pd, len) = ev.set_private_data(c.private_data);
    ev.ev.param.conn = rdma_conn_param {
        private_data: pd,
        private_data_len: len,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        flow_control: u8::from(c.flow_control),
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: u8::from(c.srq),
        qp_num: c.qp_num,
    };
    e
}

/// An event with UD parameters: the address handle attributes reaching `to`.
pub fn ud_event(id: usize, kind: u32, status: i32, data: &[u8], to: &MadAddr, qpn: u32, qkey: u32) -> *mut Event {
    let e = Event::new(id, kind, status);
    // SAFETY: a fresh event box, ours until delivered.
    let ev = unsafe { &mut *e };
    let (pd, len) = ev.set_private_data(data);
    let ah_attr = ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: to.gid },
            flow_label: to.flow_label,
            sgid_index: to.sgid_index,
            hop_limit: to.hop_limit,
            traffic_class: to.traffic_class,
        },
        is_global: 1,
        port_num: devices::PORT,
        ..Default::default()
    };
    ev.ev.param.ud = rdma_ud_param { private_data: pd, private_data_len: len, ah_attr, qp_num: qpn, qkey };
    e
}

/// Maps the CM's events of device `dev` to the ids'.
pub fn events(w: &mut World, dev: usize, events: Vec<(CmId, CmEvent)>) {
    for (cm_id, ev) in events {
        one(w, dev, cm_id, ev);
    }
}

fn one(w: &mut World, dev: usize, cm_id: CmId, ev: CmEvent) {
    match ev {
        CmEvent::ReqReceived { listen_id, req } => request(w, dev, cm_id, listen_id, &req),
        CmEvent::SidrReqReceived { listen_id, req } => sidr_request(w, dev, cm_id, listen_id, &req),
        other => {
            let Some(&id) = w.by_cm.get(&(dev, cm_id)) else { return };
            on_id(w, dev, id, other);
        }
    }
}

fn on_id(w: &mut World, dev: usize, id: usize, ev: CmEvent) {
    let timeout = -libc::ETIMEDOUT;
    let e = match ev {
        CmEvent::RepReceived(rep) => return reply(w, dev, id, &rep),
        CmEvent::RtuReceived { .. } => {
            set_phase(w, id, Phase::Connected);
            conn_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &Conn::default())
        }
        CmEvent::RejReceived { reason, private_data, .. } => {
            to_error(w, id);
            set_phase(w, id, Phase::Disconnect);
            let c = Conn { private_data: &private_data, ..Default::default() };
            conn_event(id, RDMA_CM_EVENT_REJECTED, i32::from(reason), &c)
        }
        CmEvent::ReqError | CmEvent::RepError | CmEvent::SidrReqError => {
            to_error(w, id);
            set_phase(w, id, Phase::Disconnect);
            conn_event(id, RDMA_CM_EVENT_UNREACHABLE, timeout, &Conn::default())
        }
        CmEvent::DreqReceived { private_data } | CmEvent::DrepReceived { private_data } => {
            if !take_connected(w, id) {
                return;
            }
            let c = Conn { private_data: &private_data, ..Default::default() };
            conn_event(id, RDMA_CM_EVENT_DISCONNECTED, 0, &c)
        }
        CmEvent::DreqError => {
            if !take_connected(w, id) {
                return;
            }
            conn_event(id, RDMA_CM_EVENT_DISCONNECTED, 0, &Conn::default())
        }
        CmEvent::TimewaitExit => conn_event(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, &Conn::default()),
        CmEvent::SidrRepReceived(rep) => sidr_reply(w, id, &rep),
        CmEvent::MraReceived { .. } | CmEvent::ReqReceived { .. } | CmEvent::SidrReqReceived { .. } => return,
    };
    let _ = dev;
    w.deliver(e);
}

fn set_phase(w: &mut World, id: usize, phase: Phase) {
    if let Some(s) = w.ids.get_mut(&id) {
        s.phase = phase;
    }
}

/// Connected (or still connecting) to Disconnect: whether this is the change that reports
/// DISCONNECTED (the kernel reports it once).
fn take_connected(w: &mut World, id: usize) -> bool {
    match w.ids.get_mut(&id) {
        Some(s) if matches!(s.phase, Phase::Connected | Phase::Accepted | Phase::Response) => {
            s.phase = Phase::Disconnect;
            true
        }
        _ => false,
    }
}

/// The id's QP to ERR (librdmacm's `ucma_modify_qp_err` on REJECTED).
fn to_error(w: &World, id: usize) {
    if let Some(s) = w.ids.get(&id) {
        // SAFETY: a live id box (in `ids`).
        let (qp, qp_type) = unsafe { ((*cma(id)).id.qp, (*cma(id)).id.qp_type) };
        let _ = qpattr::modify(qp, s, qp_type, IBV_QPS_ERR);
    }
}

/// A REP for our REQ: with a QP, RTR/RTS and the RTU, then ESTABLISHED; without, CONNECT_RESPONSE.
fn reply(w: &mut World, dev: usize, id: usize, rep: &RepEvent) {
    let Some(s) = w.ids.get_mut(&id) else { return };
    s.remote.qpn = rep.remote_qpn;
    s.remote.psn = rep.starting_psn;
    // SAFETY: a live id box.
    let (qp, qp_type) = unsafe { ((*cma(id)).id.qp, (*cma(id)).id.qp_type) };
    let c = Conn {
        private_data: &rep.private_data,
        responder_resources: rep.responder_resources,
        initiator_depth: rep.initiator_depth,
        flow_control: rep.flow_control,
        rnr_retry_count: rep.rnr_retry_count,
        srq: rep.srq,
        qp_num: rep.remote_qpn,
        ..Default::default()
    };
    let cm = w.cm(dev);
    let Some(cm) = cm else { return };
    let s = &w.ids[&id];
    let cm_id = s.cm.map(|c| c.1);
    let e = if qp.is_null() {
        set_phase(w, id, Phase::Response);
        conn_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &c)
    } else {
        let r = qpattr::to_rts(qp, s, qp_type);
        let now = Instant::now();
        match (r, cm_id) {
            (Ok(()), Some(cm_id)) if cm.send_rtu(cm_id, &[], now).is_ok() => {
                set_phase(w, id, Phase::Connected);
                conn_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &c)
            }
            (r, cm_id) => {
                if let Some(cm_id) = cm_id {
                    let _ = cm.send_rej(cm_id, REJ_CONSUMER_DEFINED, &[], &[], now);
                }
                to_error(w, id);
                set_phase(w, id, Phase::Disconnect);
                conn_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -r.err().unwrap_or(libc::EINVAL), &c)
            }
        }
    };
    w.deliver(e);
}

/// SIDR_REP: ESTABLISHED with the remote QP and Q_Key, or UNREACHABLE with its status.
fn sidr_reply(w: &mut World, id: usize, rep: &SidrRepEvent) -> *mut Event {
    let Some(s) = w.ids.get_mut(&id) else { return Event::new(id, RDMA_CM_EVENT_UNREACHABLE, -libc::EINVAL) };
    if rep.status != 0 {
        s.phase = Phase::Disconnect;
        return ud_event(id, RDMA_CM_EVENT_UNREACHABLE, i32::from(rep.status), &[], &MadAddr::default(), 0, 0);
    }
    s.phase = Phase::Connected;
    let to = dest(s);
    ud_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, &rep.private_data, &to, rep.qpn, rep.qkey)
}

/// The QP1 address of the id's peer, as its path reaches it.
pub fn dest(s: &IdState) -> MadAddr {
    let p = s.path.unwrap_or_default();
    MadAddr {
        gid: p.dgid,
        qpn: rdma_cm::transport::GSI_QPN,
        qkey: rdma_cm::transport::GSI_QKEY,
        pkey_index: 0,
        sgid_index: p.sgid_index,
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        flow_label: p.flow_label,
    }
}

/// The listener a request is for, and its header, when the header's addresses pass the checks
/// Linux's `cma.c` makes (`cma_save_net_info`, `validate_net_dev`): a valid RDMA IP CM header,
/// a destination address the device holds and the listener's bound address (or its wildcard,
/// loopback included as `crate::addr::any_addr` has it, of the same family unless it takes
/// both).
fn listener_for(w: &World, dev: usize, listen_id: CmId, data: &[u8], service_id: u64) -> Option<(usize, IpCmHeader)> {
    let &lid = w.by_cm.get(&(dev, listen_id))?;
    let l = w.ids.get(&lid)?;
    let hdr = IpCmHeader::decode_for(data, service_id)?;
    let dst = hdr.dst.ip();
    if !devices::all()[dev].addrs.iter().any(|(_, a)| *a == dst) {
        return None;
    }
    let bound = l.src?.ip();
    let ok = bound == dst
        || (crate::addr::any_addr(bound) && (bound.is_ipv4() == dst.is_ipv4() || (bound.is_ipv6() && !l.afonly)));
    ok.then_some((lid, hdr))
}

/// The new id of a request: on the listener's channel (or a private one if the listener is a
/// sync id, as librdmacm's `ucma_process_conn_req` migrates it), with the request's addresses.
fn new_request_id(w: &mut World, dev: usize, lid: usize, hdr: &IpCmHeader, cm_id: CmId) -> Option<usize> {
    let l = w.ids.get(&lid)?;
    let (sync, lchannel, afonly, tos) = (l.sync, l.channel, l.afonly, l.tos);
    // SAFETY: a live id box.
    let (context, ps, qp_type) = unsafe { ((*cma(lid)).id.context, (*cma(lid)).id.ps, (*cma(lid)).id.qp_type) };
    let channel = if sync { crate::channel::Channel::create().ok()? as usize } else { lchannel };
    let mut s = IdState::new(channel, sync);
    s.dev = Some(dev);
    s.src = Some(hdr.dst);
    s.dst = Some(hdr.src);
    s.afonly = afonly;
    s.tos = tos;
    s.cm = Some((dev, cm_id));
    s.phase = Phase::Request;
    s.sgid_index = devices::all()[dev].addrs.iter().find(|(_, a)| *a == hdr.dst.ip()).map_or(0, |(g, _)| *g);
    let id = w.new_id(s, context, ps, qp_type) as usize;
    w.by_cm.insert((dev, cm_id), id);
    w.publish_addrs(id);
    Some(id)
}

fn refuse(w: &World, dev: usize, cm_id: CmId) {
    if let Some(cm) = w.cm(dev) {
        let _ = cm.destroy_id(cm_id, Instant::now());
    }
}

fn request(w: &mut World, dev: usize, cm_id: CmId, listen_id: CmId, req: &ReqEvent) {
    let Some((lid, hdr)) = listener_for(w, dev, listen_id, &req.private_data, req.service_id) else {
        return refuse(w, dev, cm_id);
    };
    let Some(id) = new_request_id(w, dev, lid, &hdr, cm_id) else { return refuse(w, dev, cm_id) };
    let lchannel = w.ids[&lid].channel;
    let s = w.ids.get_mut(&id).expect("just made");
    s.path = Some(req.path);
    s.remote = Remote { from: req.from, qpn: req.remote_qpn, psn: req.starting_psn, qkey: req.remote_qkey };
    // Swapped, as the kernel reports them (`cma_format_req_event`).
    s.responder_resources = req.initiator_depth;
    s.initiator_depth = req.responder_resources;
    s.retry_count = req.retry_count;
    s.rnr_retry_count = req.rnr_retry_count;
    w.publish_path(id);
    let c = Conn {
        private_data: req.private_data.get(IP_CM_HDR_LEN..).unwrap_or(&[]),
        responder_resources: req.initiator_depth,
        initiator_depth: req.responder_resources,
        flow_control: req.flow_control,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        srq: req.srq,
        qp_num: req.remote_qpn,
    };
    let e = conn_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &c);
    // SAFETY: a fresh event box.
    unsafe { (*e).ev.listen_id = lid as *mut rdma_cm_id };
    w.deliver_to(lchannel, e);
}

fn sidr_request(w: &mut World, dev: usize, cm_id: CmId, listen_id: CmId, req: &SidrReqEvent) {
    let Some((lid, hdr)) = listener_for(w, dev, listen_id, &req.private_data, req.service_id) else {
        return refuse(w, dev, cm_id);
    };
    let Some(id) = new_request_id(w, dev, lid, &hdr, cm_id) else { return refuse(w, dev, cm_id) };
    let lchannel = w.ids[&lid].channel;
    let s = w.ids.get_mut(&id).expect("just made");
    s.remote = Remote { from: req.from, ..Default::default() };
    s.path = Some(rdma_cm::cm::Path {
        sgid: rdma_cm::mad::ip_cm::ip_to_gid(hdr.dst.ip()),
        dgid: req.from.gid,
        sgid_index: req.from.sgid_index,
        hop_limit: req.from.hop_limit,
        traffic_class: req.from.traffic_class,
        mtu: devices::all()[dev].active_mtu as u8,
        pkey: 0xffff,
        ..Default::default()
    });
    let to = MadAddr { sgid_index: s.sgid_index, ..req.from };
    w.publish_path(id);
    let data = req.private_data.get(IP_CM_HDR_LEN..).unwrap_or(&[]);
    let e = ud_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, data, &to, 0, 0);
    // SAFETY: a fresh event box.
    unsafe { (*e).ev.listen_id = lid as *mut rdma_cm_id };
    w.deliver_to(lchannel, e);
}

/// The header a REQ or SIDR_REQ of `s` carries, then the program's data.
pub fn request_data(src: SocketAddr, dst: SocketAddr, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; IP_CM_HDR_LEN];
    IpCmHeader { src, dst }.encode(&mut out);
    out.extend_from_slice(data);
    out
}
