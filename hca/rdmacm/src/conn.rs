//! Connections over the IB CM: `rdma_listen`, `rdma_connect` (REQ, or SIDR_REQ for UD ids),
//! `rdma_accept` (REP/SIDR_REP), `rdma_reject`, `rdma_disconnect`, `rdma_establish`,
//! `rdma_get_request`, `rdma_notify`. The REQ's private data starts with the RDMA IP CM
//! Service header (IBTA Annex A11) and its service ID is the port space's and port's, as
//! Linux's `cma.c` sends them; the kernel's limits on private data are kept (56 bytes after the
//! header in a REQ, 180 in a SIDR_REQ, 196 in a REP, 148 in a REJ).

use crate::abi::*;
use crate::devices;
use crate::dispatch::{self, request_data};
use crate::engine::{cm_of, wake};
use crate::events::{complete, get_event};
use crate::ffi::{err, guard, ret};
use crate::qpattr;
use crate::world::{cma, lock, Phase};
use rdma_cm::cm::{RepParam, ReqParam, SidrRepParam, SidrReqParam, SidrStatus, REJ_CONSUMER_DEFINED};
use rdma_cm::mad::ip_cm::{service_id, IP_CM_HDR_LEN};
use std::net::SocketAddr;
use std::time::Instant;

/// `CMA_CM_RESPONSE_TIMEOUT` and `CMA_MAX_CM_RETRIES` of Linux's `cma.c`.
const CM_RESPONSE_TIMEOUT: u8 = 20;
const MAX_CM_RETRIES: u8 = 15;
/// Private data after the header: REQ 92, SIDR_REQ 216 bytes in all.
const REQ_DATA: usize = 92 - IP_CM_HDR_LEN;
const SIDR_REQ_DATA: usize = 216 - IP_CM_HDR_LEN;
const REP_DATA: usize = 196;
const REJ_DATA: usize = 148;

/// The program's connection parameters' private data.
///
/// # Safety
/// `p` is NULL or the program's valid `rdma_conn_param`.
unsafe fn private_data<'a>(p: *const rdma_conn_param) -> &'a [u8] {
    // SAFETY: the caller's promise; the data pointer is the program's, of its length.
    unsafe {
        match p.as_ref() {
            Some(c) if !c.private_data.is_null() && c.private_data_len > 0 => {
                std::slice::from_raw_parts(c.private_data.cast(), usize::from(c.private_data_len))
            }
            _ => &[],
        }
    }
}

fn listen(id: *mut rdma_cm_id, backlog: i32) -> Result<(), i32> {
    let p = id as usize;
    let mut w = lock();
    if w.id(id)?.phase == Phase::Idle {
        crate::addr::bind(&mut w, p, SocketAddr::from(([0, 0, 0, 0], 0)))?;
    }
    let s = w.id(id)?;
    if s.phase != Phase::Bound {
        return Err(libc::EINVAL);
    }
    let (src, dev) = (s.src.ok_or(libc::EINVAL)?, s.dev);
    // SAFETY: a live id box.
    let ps = unsafe { (*cma(p)).id.ps };
    let sid = service_id(ps as u16, src.port());
    let devs: Vec<usize> = match dev {
        Some(d) => vec![d],
        None => (0..devices::all().len()).filter(|&d| !devices::all()[d].addrs.is_empty()).collect(),
    };
    let backlog = if backlog <= 0 { 1024 } else { backlog as u32 };
    let mut listens = Vec::new();
    for d in devs {
        let cm = cm_of(&mut w, d)?;
        let c = cm.create_id();
        if cm.listen(c, sid, backlog).is_err() {
            let _ = cm.destroy_id(c, Instant::now());
            for (d, c) in listens {
                if let Some(cm) = w.cm(d) {
                    let _ = cm.destroy_id(c, Instant::now());
                }
            }
            return Err(libc::EADDRINUSE);
        }
        listens.push((d, c));
    }
    for &(d, c) in &listens {
        w.by_cm.insert((d, c), p);
    }
    let s = w.id(id)?;
    s.listens = listens;
    s.phase = Phase::Listen;
    // A REQ that came before this listener is held by the CM (rdma-cm's `recv::held`): the
    // engine looks at its deadline again and delivers it.
    wake();
    Ok(())
}

/// `rdma_listen`: an unbound id listens on the IPv4 wildcard and an ephemeral port; a wildcard
/// id on every device's addresses.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: i32) -> i32 {
    guard(-1, || ret(listen(id, backlog)))
}

/// `ucma_valid_param` and the depth/resources choice of `rdma_connect`/`rdma_accept`.
fn depths(
    s: &mut crate::world::IdState,
    dev: usize,
    param: *const rdma_conn_param,
    has_qp: bool,
    ps: u32,
    accept: bool,
) -> Result<(), i32> {
    let d = &devices::all()[dev];
    // SAFETY: the program's parameters or NULL.
    let c = unsafe { param.as_ref() };
    if ps == RDMA_PS_TCP {
        match c {
            None if !has_qp => return Err(libc::EINVAL),
            Some(c)
                if c.responder_resources != RDMA_MAX_RESP_RES && c.responder_resources > d.max_responder_resources =>
            {
                return Err(libc::EINVAL)
            }
            Some(c) if c.initiator_depth != RDMA_MAX_INIT_DEPTH && c.initiator_depth > d.max_initiator_depth => {
                return Err(libc::EINVAL)
            }
            _ => {}
        }
    }
    let pick = |v: Option<u8>, max: u8, mine: u8| match v {
        Some(v) if v != 0xff => v,
        _ if accept => mine.min(max),
        _ => max,
    };
    s.initiator_depth = pick(c.map(|c| c.initiator_depth), d.max_initiator_depth, s.initiator_depth);
    s.responder_resources = pick(c.map(|c| c.responder_resources), d.max_responder_resources, s.responder_resources);
    if let Some(c) = c {
        if !accept {
            s.retry_count = c.retry_count;
        }
        s.rnr_retry_count = c.rnr_retry_count;
    }
    Ok(())
}

fn connect(id: *mut rdma_cm_id, param: *const rdma_conn_param) -> Result<(), i32> {
    let p = id as usize;
    // SAFETY: the program's parameters or NULL.
    let data = unsafe { private_data(param) };
    let mut w = lock();
    let s = w.id(id)?;
    if s.phase != Phase::RouteResolved {
        return Err(libc::EINVAL);
    }
    let dev = s.dev.ok_or(libc::EINVAL)?;
    // SAFETY: a live id box.
    let (qp, ps, qp_type) = unsafe { ((*cma(p)).id.qp, (*cma(p)).id.ps, (*cma(p)).id.qp_type) };
    let ud = qp_type == IBV_QPT_UD;
    if data.len() > if ud { SIDR_REQ_DATA } else { REQ_DATA } {
        return Err(libc::EINVAL);
    }
    if !ud {
        depths(s, dev, param, !qp.is_null(), ps, false)?;
    }
    let s = w.id(id)?;
    let (src, dst, path) = (s.src.ok_or(libc::EINVAL)?, s.dst.ok_or(libc::EINVAL)?, s.path.ok_or(libc::EINVAL)?);
    let dest = dispatch::dest(s);
    let sid = service_id(ps as u16, dst.port());
    let pdata = request_data(src, dst, data);
    let cm = cm_of(&mut w, dev)?;
    let c = cm.create_id();
    let now = Instant::now();
    let s = w.id(id)?;
    let r = if ud {
        let req = SidrReqParam {
            dest,
            pkey: 0xffff,
            service_id: sid,
            private_data: pdata,
            timeout_ms: 1 << (CM_RESPONSE_TIMEOUT - 8),
            max_cm_retries: MAX_CM_RETRIES,
        };
        cm.send_sidr_req(c, &req, now)
    } else {
        // SAFETY: the program's parameters or NULL; its QP if it made one.
        let (qp_num, srq, flow) = unsafe {
            match (qp.as_ref(), param.as_ref()) {
                (Some(q), c) => (q.qp_num, !q.srq.is_null(), c.is_some_and(|c| c.flow_control != 0)),
                (None, Some(c)) => (c.qp_num, c.srq != 0, c.flow_control != 0),
                (None, None) => (0, false, false),
            }
        };
        let req = ReqParam {
            path,
            dest,
            service_id: sid,
            qp_num,
            qp_type: qp_type as u8,
            starting_psn: s.psn,
            private_data: pdata,
            responder_resources: s.responder_resources,
            initiator_depth: s.initiator_depth,
            remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            flow_control: flow,
            retry_count: s.retry_count,
            rnr_retry_count: s.rnr_retry_count,
            max_cm_retries: MAX_CM_RETRIES,
            srq,
        };
        cm.send_req(c, &req, now)
    };
    if r.is_err() {
        let _ = cm.destroy_id(c, now);
        return Err(libc::EINVAL);
    }
    s.cm = Some((dev, c));
    s.phase = Phase::Connect;
    w.by_cm.insert((dev, c), p);
    wake();
    Ok(())
}

/// `rdma_connect`: ESTABLISHED (or CONNECT_RESPONSE for an id without a QP, REJECTED,
/// UNREACHABLE) follows.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> i32 {
    guard(-1, || ret(connect(id, conn_param).and_then(|()| complete(id))))
}

fn accept(id: *mut rdma_cm_id, param: *const rdma_conn_param) -> Result<bool, i32> {
    let p = id as usize;
    // SAFETY: the program's parameters or NULL.
    let data = unsafe { private_data(param) };
    let mut w = lock();
    let s = w.id(id)?;
    if s.phase != Phase::Request {
        return Err(libc::EINVAL);
    }
    let (dev, c) = s.cm.ok_or(libc::EINVAL)?;
    // SAFETY: a live id box.
    let (qp, ps, qp_type) = unsafe { ((*cma(p)).id.qp, (*cma(p)).id.ps, (*cma(p)).id.qp_type) };
    let ud = qp_type == IBV_QPT_UD;
    if data.len() > if ud { 136 } else { REP_DATA } {
        return Err(libc::EINVAL);
    }
    let cm = w.cm(dev).ok_or(libc::EINVAL)?;
    let now = Instant::now();
    let s = w.id(id)?;
    // SAFETY: the program's QP or parameters.
    let (qp_num, srq) = unsafe {
        match (qp.as_ref(), param.as_ref()) {
            (Some(q), _) => (q.qp_num, !q.srq.is_null()),
            (None, Some(c)) => (c.qp_num, c.srq != 0),
            (None, None) => return Err(libc::EINVAL),
        }
    };
    if ud {
        let rep = SidrRepParam {
            qp_num,
            qkey: RDMA_UDP_QKEY,
            status: SidrStatus::Success,
            info: Vec::new(),
            private_data: data.to_vec(),
        };
        cm.send_sidr_rep(c, &rep, now).map_err(|_| libc::EINVAL)?;
        s.phase = Phase::Connected;
        return Ok(true);
    }
    depths(s, dev, param, !qp.is_null(), ps, true)?;
    let s = w.id(id)?;
    if let Err(e) = qpattr::to_rts(qp, s, qp_type) {
        let _ = qpattr::modify(qp, s, qp_type, IBV_QPS_ERR);
        return Err(e);
    }
    // SAFETY: the program's parameters or NULL.
    let flow = unsafe { param.as_ref() }.is_some_and(|c| c.flow_control != 0);
    let rep = RepParam {
        qp_num,
        starting_psn: s.psn,
        private_data: data.to_vec(),
        responder_resources: s.responder_resources,
        initiator_depth: s.initiator_depth,
        failover_accepted: false,
        flow_control: flow,
        rnr_retry_count: s.rnr_retry_count,
        srq,
    };
    cm.send_rep(c, &rep, now).map_err(|_| libc::EINVAL)?;
    s.phase = Phase::Accepted;
    wake();
    Ok(false)
}

/// `rdma_accept`: a REP (ESTABLISHED follows with the RTU), or for UD a SIDR_REP.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> i32 {
    guard(-1, || {
        ret(accept(id, conn_param).and_then(|ud| {
            if !ud {
                return complete(id);
            }
            // A sync UD id's request event is done with (librdmacm's `rdma_accept`).
            let mut w = lock();
            if w.id(id)?.sync {
                // SAFETY: a live id box.
                let e = unsafe { std::mem::replace(&mut (*cma(id as usize)).id.event, std::ptr::null_mut()) };
                drop(w);
                if !e.is_null() {
                    let _ = crate::events::ack(e);
                }
            }
            Ok(())
        }))
    })
}

fn reject(id: *mut rdma_cm_id, data: &[u8], reason: u16) -> Result<(), i32> {
    let mut w = lock();
    let s = w.id(id)?;
    let (dev, c) = s.cm.ok_or(libc::EINVAL)?;
    if s.phase != Phase::Request {
        return Err(libc::EINVAL);
    }
    let cm = w.cm(dev).ok_or(libc::EINVAL)?;
    // SAFETY: a live id box.
    let ud = unsafe { (*cma(id as usize)).id.qp_type } == IBV_QPT_UD;
    let now = Instant::now();
    let r = if ud {
        let rep = SidrRepParam { status: SidrStatus::Reject, private_data: data.to_vec(), ..Default::default() };
        cm.send_sidr_rep(c, &rep, now)
    } else {
        if data.len() > REJ_DATA {
            return Err(libc::EINVAL);
        }
        cm.send_rej(c, reason, &[], data, now)
    };
    r.map_err(|_| libc::EINVAL)?;
    w.id(id)?.phase = Phase::Disconnect;
    wake();
    Ok(())
}

fn reject_with(id: *mut rdma_cm_id, data: *const libc::c_void, len: u8, reason: u16) -> i32 {
    guard(-1, || {
        let data = if data.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: the program's private data of `len` bytes.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len)) }
        };
        ret(reject(id, data, reason))
    })
}

/// `rdma_reject`: a REJ with reason consumer-defined (28) and the private data.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(id: *mut rdma_cm_id, private_data: *const libc::c_void, len: u8) -> i32 {
    reject_with(id, private_data, len, REJ_CONSUMER_DEFINED)
}

/// `rdma_reject_ece`: a REJ with reason 35 (vendor option not supported), as librdmacm.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const libc::c_void, len: u8) -> i32 {
    reject_with(id, private_data, len, 35)
}

fn disconnect(id: *mut rdma_cm_id) -> Result<(), i32> {
    let mut w = lock();
    let s = w.id(id)?;
    let (dev, c) = s.cm.ok_or(libc::EINVAL)?;
    // SAFETY: a live id box.
    let (qp, qp_type, verbs) =
        unsafe { ((*cma(id as usize)).id.qp, (*cma(id as usize)).id.qp_type, (*cma(id as usize)).id.verbs) };
    if verbs.is_null() {
        return Err(libc::EINVAL);
    }
    qpattr::modify(qp, s, qp_type, IBV_QPS_ERR)?;
    let cm = w.cm(dev).ok_or(libc::EINVAL)?;
    let now = Instant::now();
    if cm.send_dreq(c, &[], now).is_err() && cm.send_drep(c, &[], now).is_err() {
        return Err(libc::EINVAL);
    }
    wake();
    Ok(())
}

/// `rdma_disconnect`: the QP to ERR, then a DREQ (or the DREP of a DREQ received);
/// DISCONNECTED follows.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> i32 {
    guard(-1, || ret(disconnect(id).and_then(|()| complete(id))))
}

fn establish(id: *mut rdma_cm_id) -> Result<(), i32> {
    let mut w = lock();
    let s = w.id(id)?;
    // SAFETY: a live id box.
    if !unsafe { (*cma(id as usize)).id.qp }.is_null() || s.phase != Phase::Response {
        return Err(libc::EINVAL);
    }
    let (dev, c) = s.cm.ok_or(libc::EINVAL)?;
    let cm = w.cm(dev).ok_or(libc::EINVAL)?;
    cm.send_rtu(c, &[], Instant::now()).map_err(|_| libc::EINVAL)?;
    w.id(id)?.phase = Phase::Connected;
    Ok(())
}

/// `rdma_establish`: the RTU after a CONNECT_RESPONSE, for an id without a QP.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> i32 {
    guard(-1, || ret(establish(id)))
}

fn get_request(listen: *mut rdma_cm_id, out: *mut *mut rdma_cm_id) -> Result<(), i32> {
    let lp = listen as usize;
    let (channel, attrs) = {
        let mut w = lock();
        let s = w.id(listen)?;
        if !s.sync {
            return Err(libc::EINVAL);
        }
        (s.channel, s.qp_init)
    };
    // SAFETY: a live id box (checked above); a sync id is used from one thread.
    let prev = unsafe { std::mem::replace(&mut (*cma(lp)).id.event, std::ptr::null_mut()) };
    if !prev.is_null() {
        let _ = crate::events::ack(prev);
    }
    let e = get_event(channel as *mut rdma_event_channel)?;
    // SAFETY: the delivered event box.
    let (kind, status, id) = unsafe { ((*e).ev.event, (*e).ev.status, (*e).ev.id) };
    let fail = |errno: i32| {
        // SAFETY: as above.
        unsafe { (*cma(lp)).id.event = e.cast() };
        Err(errno)
    };
    if kind == RDMA_CM_EVENT_REJECTED {
        return fail(libc::ECONNREFUSED);
    }
    if status != 0 {
        return fail(status.abs());
    }
    if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
        return fail(libc::EINVAL);
    }
    if let Some(mut a) = attrs {
        // SAFETY: the listener's PD (rdma_create_ep's).
        let pd = unsafe { (*cma(lp)).id.pd };
        // SAFETY: the new id, live; `a` is a copy of the listener's attributes.
        if unsafe { crate::qp::rdma_create_qp(id, pd, &mut a.0) } != 0 {
            return fail(crate::sys::errno());
        }
    }
    // SAFETY: the new id (live) and the program's out-pointer (checked by the caller).
    unsafe {
        (*cma(id as usize)).id.event = e.cast();
        *out = id;
    }
    Ok(())
}

/// `rdma_get_request`: the next connection request of a sync listener, with its QP made from
/// `rdma_create_ep`'s attributes.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> i32 {
    guard(-1, || if id.is_null() { err(libc::EINVAL) } else { ret(get_request(listen, id)) })
}

fn notify(id: *mut rdma_cm_id, event: u32) -> Result<(), i32> {
    let mut w = lock();
    let s = w.id(id)?;
    let (dev, c) = s.cm.ok_or(libc::EINVAL)?;
    match event {
        IBV_EVENT_COMM_EST => {
            let cm = w.cm(dev).ok_or(libc::EINVAL)?;
            let events = cm.establish(c, Instant::now()).map_err(|_| libc::EINVAL)?;
            dispatch::events(&mut w, dev, events);
            Ok(())
        }
        IBV_EVENT_QP_LAST_WQE_REACHED => Ok(()),
        _ => Err(libc::EINVAL),
    }
}

/// `rdma_notify`: `IBV_EVENT_COMM_EST` establishes a passive connection before its RTU
/// (`ib_cm_notify`); others `EINVAL` as the kernel's.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: u32) -> i32 {
    guard(-1, || ret(notify(id, event)))
}
