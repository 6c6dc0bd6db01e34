//! QPs and SRQs of ids (`rdma_create_qp(_ex)`, `rdma_create_srq(_ex)`, `rdma_create_ep`): made
//! over libibverbs as librdmacm makes them, and XRC refused with `EOPNOTSUPP` at every entry
//! point, as on a kernel whose device has no XRC (Linux's `vmw_pvrdma`). Found by the RDMA CM
//! stage: `rdma_xclient -c x` got `EINVAL` from `rdma_create_ep`, because its XRC send QP has no
//! receive CQ and the libraries checked the CQ before the QP type.

use crate::fixture::*;
use rdmacm_compat::abi::*;
use rdmacm_compat::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::ptr::null_mut;

/// `IBV_QP_INIT_ATTR_CREATE_FLAGS` (verbs.h): an extension our libibverbs does not carry.
const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;

fn init_attr(qp_type: u32, recv: u32) -> ibv_qp_init_attr {
    // SAFETY: plain C data; all-zero is valid.
    let mut a: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    a.qp_type = qp_type;
    a.cap.max_send_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_wr = recv;
    a.cap.max_recv_sge = recv.min(1);
    a
}

/// A passive endpoint of `qp_type` bound to `ip` (as `rdma_xserver -c x` makes its listener).
fn passive_ep(ip: Ipv4Addr, qp_type: u32) -> *mut rdma_cm_id {
    let mut src = sin(ip, 0);
    // SAFETY: plain C data; all-zero is an empty answer.
    let mut res: rdma_addrinfo = unsafe { std::mem::zeroed() };
    res.ai_flags = RAI_PASSIVE;
    res.ai_family = libc::AF_INET;
    res.ai_port_space = RDMA_PS_TCP as i32;
    res.ai_qp_type = qp_type as i32;
    res.ai_src_addr = sa(&mut src);
    res.ai_src_len = std::mem::size_of::<libc::sockaddr_in>() as u32;
    let mut id = null_mut();
    // SAFETY: an answer on the stack; no PD, no QP attributes.
    assert_eq!(unsafe { rdma_create_ep(&mut id, &mut res, null_mut(), null_mut()) }, 0, "errno {}", errno());
    id
}

#[test]
fn an_xrc_send_qp_is_refused_with_eopnotsupp_and_leaves_nothing() {
    run(|a, b| {
        let ch = channel();
        let id = routed(ch, RDMA_PS_TCP, a, SocketAddr::from((b, 4000)));
        let mut attr = init_attr(IBV_QPT_XRC_SEND, 0);
        // SAFETY: an id of ours with its route; attributes on the stack.
        unsafe {
            assert_eq!(rdma_create_qp(id, null_mut(), &mut attr), -1);
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert!((*id).qp.is_null() && (*id).send_cq.is_null() && (*id).send_cq_channel.is_null());
            // The same id still makes the RC QP it can have.
            let mut rc = init_attr(IBV_QPT_RC, 4);
            assert_eq!(rdma_create_qp(id, null_mut(), &mut rc), 0, "errno {}", errno());
            assert!(!(*id).qp.is_null() && !(*id).recv_cq.is_null());
            rdma_destroy_qp(id);
            assert_eq!(rdma_destroy_id(id), 0);
        }
        rdma_destroy_event_channel(ch);
    })
}

#[test]
fn extensions_libibverbs_does_not_carry_answer_eopnotsupp() {
    run(|a, b| {
        let ch = channel();
        let id = routed(ch, RDMA_PS_TCP, a, SocketAddr::from((b, 4000)));
        let attr = init_attr(IBV_QPT_RC, 4);
        // SAFETY: plain C data; all-zero is valid.
        let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        ex.cap = attr.cap;
        ex.qp_type = IBV_QPT_RC;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        // SAFETY: an id of ours; attributes on the stack.
        unsafe {
            ex.pd = (*id).pd;
            assert_eq!(rdma_create_qp_ex(id, &mut ex), -1);
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert!((*id).qp.is_null() && (*id).recv_cq.is_null());
            let mut srq: ibv_srq_init_attr_ex = std::mem::zeroed();
            srq.attr.max_wr = 4;
            srq.attr.max_sge = 1;
            srq.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
            srq.srq_type = IBV_SRQT_XRC;
            assert_eq!(rdma_create_srq_ex(id, &mut srq), -1);
            assert_eq!(errno(), libc::EOPNOTSUPP, "an XRC SRQ needs the XRC domain the device has not");
            srq.srq_type = 2; // IBV_SRQT_TM
            assert_eq!(rdma_create_srq_ex(id, &mut srq), -1);
            assert_eq!(errno(), libc::EOPNOTSUPP, "tag matching");
            srq.comp_mask = 0;
            assert_eq!(rdma_create_srq_ex(id, &mut srq), -1);
            assert_eq!(errno(), libc::EINVAL, "librdmacm wants IBV_SRQ_INIT_ATTR_TYPE");
            srq.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
            srq.srq_type = IBV_SRQT_BASIC;
            assert_eq!(rdma_create_srq_ex(id, &mut srq), 0, "errno {}", errno());
            assert!(!(*id).srq.is_null());
            rdma_destroy_srq(id);
            assert!((*id).srq.is_null());
            assert_eq!(rdma_destroy_id(id), 0);
        }
        rdma_destroy_event_channel(ch);
    })
}

#[test]
fn an_xrc_receive_endpoint_has_no_qp_or_srq() {
    run(|a, _| {
        let id = passive_ep(a, IBV_QPT_XRC_RECV);
        let mut qp = init_attr(IBV_QPT_XRC_RECV, 0);
        // SAFETY: plain C data; all-zero is valid.
        let mut srq: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        srq.attr.max_wr = 4;
        srq.attr.max_sge = 1;
        // SAFETY: an endpoint of ours bound to a device's address; attributes on the stack.
        unsafe {
            assert!(!(*id).verbs.is_null(), "bound to a device's address");
            assert_eq!(rdma_create_srq(id, null_mut(), &mut srq), -1);
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert_eq!(rdma_create_qp(id, null_mut(), &mut qp), -1);
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert!((*id).qp.is_null() && (*id).srq.is_null() && (*id).recv_cq.is_null());
            rdma_destroy_ep(id);
        }
        // An RC endpoint's rdma_create_srq makes a basic SRQ on the id's PD.
        let id = passive_ep(a, IBV_QPT_RC);
        // SAFETY: as above.
        unsafe {
            assert_eq!(rdma_create_srq(id, null_mut(), &mut srq), 0, "errno {}", errno());
            assert!(!(*id).srq.is_null() && !(*id).pd.is_null());
            assert!(srq.attr.max_wr >= 4);
            rdma_destroy_ep(id);
        }
    })
}
