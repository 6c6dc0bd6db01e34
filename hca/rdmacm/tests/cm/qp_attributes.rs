//! The QP attributes `rdma_init_qp_attr` gives a connection, against a peer that plays the
//! kernel's IB CM (the forged peer of `forged_mads`): the PSNs each way, the peer's QPN. Linux's
//! `cm.c` keeps the Starting PSN an end sends in its own REQ or REP as that end's `rq_psn`
//! (`ib_send_cm_req`, `ib_send_cm_rep`) and the peer's as its `sq_psn` (`cm_req_handler`,
//! `cm_rep_handler`); `cm_init_qp_rtr_attr` / `cm_init_qp_rts_attr` give them. A library that sent
//! from its own Starting PSN instead met a PSN sequence error NAK from rdma_rxe on its first
//! packet and nothing more (the soft-RoCE stage's `cm_rping_rxe_server`).

use crate::fixture::*;
use crate::forged_mads::{Peer, FIRST_REQ_QPN, PS_TCP, REQ_PSN};
use rdma_cm::cm::RepParam;
use rdma_cm::mad::ip_cm::service_id;
use rdma_cm::CmEvent;
use rdmacm_compat::abi::*;
use rdmacm_compat::*;
use std::net::SocketAddr;
use std::time::Instant;

/// `rdma_init_qp_attr` for `state`: the attributes and mask.
fn init_attr(id: *mut rdma_cm_id, state: u32) -> (ibv_qp_attr, i32) {
    let mut a = ibv_qp_attr { qp_state: state, ..Default::default() };
    let mut mask = 0;
    // SAFETY: an id of ours; attr and mask on the stack.
    assert_eq!(unsafe { rdma_init_qp_attr(id, &mut a, &mut mask) }, 0, "rdma_init_qp_attr: errno {}", errno());
    (a, mask)
}

/// RTR's `rq_psn` and `dest_qp_num`, and RTS's `sq_psn`, of `id` (each in its mask).
fn psns(id: *mut rdma_cm_id) -> (u32, u32, u32) {
    let (rtr, m) = init_attr(id, IBV_QPS_RTR);
    assert_eq!(m & (IBV_QP_RQ_PSN | IBV_QP_DEST_QPN), IBV_QP_RQ_PSN | IBV_QP_DEST_QPN, "RTR mask {m:#x}");
    let (rts, m) = init_attr(id, IBV_QPS_RTS);
    assert_eq!(m & IBV_QP_SQ_PSN, IBV_QP_SQ_PSN, "RTS mask {m:#x}");
    (rtr.rq_psn, rtr.dest_qp_num, rts.sq_psn)
}

#[test]
fn a_passive_connection_receives_at_its_rep_psn_and_sends_at_the_req_psn() {
    run(|a, _| {
        let ch = channel();
        let (l, laddr) = listener(ch, RDMA_PS_TCP, a);
        let peer = Peer::new(a);
        let pid = peer.req(laddr.port());
        let s = next_with(ch, |e| {
            assert_eq!(name(e.event), name(RDMA_CM_EVENT_CONNECT_REQUEST));
            e.id
        });
        let mut sp = conn_param(0x61);
        // SAFETY: a request id of ours; parameters on the stack.
        assert_eq!(unsafe { rdma_accept(s, &mut sp) }, 0, "rdma_accept: errno {}", errno());
        let rep = match peer.until(|e| matches!(e, CmEvent::RepReceived(_))) {
            Some((id, CmEvent::RepReceived(r))) if id == pid => r,
            other => panic!("no REP for the peer's REQ: {other:?}"),
        };
        let (rq_psn, dest_qp, sq_psn) = psns(s);
        assert_eq!(rq_psn, rep.starting_psn, "RTR rq_psn: the REP's own Starting PSN");
        assert_eq!(sq_psn, REQ_PSN, "RTS sq_psn: the REQ's Starting PSN");
        assert_eq!(dest_qp, FIRST_REQ_QPN, "RTR dest_qp_num: the REQ's Local QPN");
        // SAFETY: ids and a channel of ours, their events acknowledged.
        unsafe {
            assert_eq!(rdma_destroy_id(s), 0);
            assert_eq!(rdma_destroy_id(l), 0);
            rdma_destroy_event_channel(ch);
        }
    })
}

#[test]
fn an_active_connection_receives_at_its_req_psn_and_sends_at_the_rep_psn() {
    run(|a, _| {
        let peer = Peer::new(a);
        // A service ID of the peer's own CM: no socket holds it.
        let port = 7471;
        let lid = peer.cm.create_id();
        peer.cm.listen(lid, service_id(PS_TCP, port), 8).expect("the peer listens");
        let ch = channel();
        let c = routed(ch, RDMA_PS_TCP, a, SocketAddr::new(peer.ip(), port));
        let mut cp = conn_param(0x71);
        // SAFETY: an id of ours; parameters on the stack.
        assert_eq!(unsafe { rdma_connect(c, &mut cp) }, 0, "rdma_connect: errno {}", errno());
        let (pid, req) = match peer.until(|e| matches!(e, CmEvent::ReqReceived { .. })) {
            Some((id, CmEvent::ReqReceived { req, .. })) => (id, req),
            other => panic!("no REQ at the peer: {other:?}"),
        };
        const REP_PSN: u32 = 0xab_cdef;
        const REP_QPN: u32 = 0x4321;
        let rep = RepParam { qp_num: REP_QPN, starting_psn: REP_PSN, rnr_retry_count: 7, ..Default::default() };
        peer.cm.send_rep(pid, &rep, Instant::now()).expect("send_rep");
        expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
        let (rq_psn, dest_qp, sq_psn) = psns(c);
        assert_eq!(rq_psn, req.starting_psn, "RTR rq_psn: the REQ's own Starting PSN");
        assert_eq!(sq_psn, REP_PSN, "RTS sq_psn: the REP's Starting PSN");
        assert_eq!(dest_qp, REP_QPN, "RTR dest_qp_num: the REP's Local QPN");
        // SAFETY: an id and a channel of ours, their events acknowledged.
        unsafe {
            assert_eq!(rdma_destroy_id(c), 0);
            rdma_destroy_event_channel(ch);
        }
    })
}
