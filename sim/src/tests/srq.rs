//! SRQs at the device: a WQE a QP took for a message in progress (the RoCE responder's first
//! packet) is the only one flushed when the QP goes to ERR, and QEMU 7.2's swapped
//! MODIFY_SRQ/QUERY_SRQ table as the profile reproduces it.

use crate::ctx::Effects;
use crate::testutil::minidrv::{build_pdir, sge, Drv, TestQp, GID0, PAGE};
use crate::{Profile, SimConfig};
use pvrdma_abi::cmd::*;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::ring::idx_inc;
use pvrdma_abi::verbs::{access, qp_attr_mask as m, qp_state, srq_attr_mask, QpAttr, SrqAttr};
use pvrdma_abi::wqe::{wc_status, RqWqeHdr};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// An SRQ of 8 one-SGE WQEs (stride 32): its handle and ring-state page (WQEs on the next page).
pub(super) fn create_srq(d: &mut Drv, pd: u32) -> (u32, u64) {
    let base = d.dev.mem().alloc(2 * PAGE).unwrap();
    let req = CreateSrq {
        pdir_dma: U64::new(build_pdir(&d.dev, &[base, base + PAGE])),
        pd_handle: U32::new(pd),
        nchunks: U32::new(2),
        attrs: SrqAttr { max_wr: U32::new(8), max_sge: U32::new(1), ..Default::default() },
        ..Default::default()
    };
    (d.ok(req).srqn.get(), base)
}

/// Posts a receive WQE of `len` bytes to the SRQ whose ring state is at `state`.
pub(super) fn post_srq(d: &Drv, state: u64, wr_id: u64, len: u32) {
    let mem = d.dev.mem();
    let prod = mem.load_u32(state + 8).unwrap();
    let hdr = RqWqeHdr { wr_id: U64::new(wr_id), num_sge: U32::new(1), total_len: U32::ZERO };
    let at = state + PAGE + u64::from(prod % 8) * 32;
    mem.write(at, hdr.as_bytes()).unwrap();
    mem.write(at + 16, sge(0x7100_0000_0000, len, 1).as_bytes()).unwrap();
    mem.store_u32(state + 8, idx_inc(prod, 8)).unwrap();
}

/// A QP on SRQ `srq` (no RQ pages, no receive WRs).
pub(super) fn srq_qp(d: &mut Drv, pd: u32, cq: u32, srq: u32) -> TestQp {
    let (mut req, mut qp) = d.qp_request(pd, cq, cq, 8, 1);
    req.max_recv_wr = U32::new(0);
    req.max_recv_sge = U32::new(0);
    req.is_srq = 1;
    req.srq_handle = U32::new(srq);
    req.total_chunks = U16::new(1 + req.send_chunks.get());
    qp.qpn = d.ok(req).qpn.get();
    qp
}

#[test]
fn a_qp_in_error_flushes_only_the_srq_wqe_it_took() {
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16);
    let (srq, state) = create_srq(&mut d, pd);
    let b = srq_qp(&mut d, pd, cq.handle, srq);
    let a = d.create_qp(pd, cq.handle, cq.handle, 8);
    d.connect_access(b.qpn, a.qpn, access::LOCAL_WRITE);
    for w in 0..4 {
        post_srq(&d, state, w, 100 + w as u32);
    }
    // The responder's first packet: the WQE is taken (its length bounds the message) and held.
    let qp = d.dev.core().qp(b.qpn).unwrap();
    let mut fx = Effects::default();
    assert_eq!(qp.recv_capacity(d.dev.core(), &mut fx), Some(100));
    assert_eq!(qp.recv_capacity(d.dev.core(), &mut fx), Some(100), "held, not taken again");
    assert_eq!(d.dev.mem().load_u32(state + 12).unwrap(), 1, "one WQE consumed");
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::ERR);
    assert_eq!(d.modify(b.qpn, m::STATE, a), 0);
    let cqes = d.wait_cqes(&cq, 1);
    assert_eq!((cqes[0].wr_id.get(), cqes[0].status.get()), (0, wc_status::WR_FLUSH_ERR));
    d.settle();
    assert!(d.poll(&cq).is_none(), "the SRQ's other WQEs are not flushed");
    assert_eq!(d.dev.mem().load_u32(state + 12).unwrap(), 1, "and stay posted");
    let last = (EqeType::QpLastWqeReached as u32, b.qpn);
    assert!(d.async_events().contains(&last));
}

#[test]
fn qemu_72_runs_query_for_modify_and_modify_for_query() {
    let mut d = Drv::new(SimConfig { profile: Profile::Qemu72, ..Default::default() });
    let pd = d.create_pd(0);
    let (srq, _) = create_srq(&mut d, pd);
    let mut raw = |opcode: u32, body: &[u8]| {
        let mut req = body.to_vec();
        req[8..12].copy_from_slice(&opcode.to_le_bytes());
        d.post_raw(&req, 32)
    };
    // MODIFY_SRQ (18) runs the query: QUERY_SRQ's ack, the attributes in the response.
    let modify =
        ModifySrq { srq_handle: U32::new(srq), attr_mask: U32::new(srq_attr_mask::LIMIT), ..Default::default() };
    let (resp, hdr) = raw(opcode::MODIFY_SRQ, modify.as_bytes());
    assert_eq!((hdr.ack.get(), hdr.err), (ack_for(opcode::QUERY_SRQ), 0));
    let attrs = QuerySrqResp::read_from_bytes(&resp).unwrap().attrs;
    assert_eq!((attrs.max_wr.get(), attrs.max_sge.get()), (8, 1));
    // QUERY_SRQ (19) runs the modify on the query's bytes: no LIMIT in the mask, EINVAL.
    let query = QuerySrq { srq_handle: U32::new(srq), ..Default::default() };
    let (_, hdr) = raw(opcode::QUERY_SRQ, query.as_bytes());
    assert_eq!((hdr.ack.get(), hdr.err), (ack_for(opcode::MODIFY_SRQ), 22));
}

#[test]
fn create_qp_on_an_srq_and_max_srq_are_enforced() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16).handle;
    let (srq, _) = create_srq(&mut d, pd);
    // Another context's SRQ: EPERM (as another context's CQ).
    let ctx = d.create_uc(1);
    let upd = d.create_pd(ctx);
    let (user_srq, _) = create_srq(&mut d, upd);
    let (mut req, _) = d.qp_request(pd, cq, cq, 8, 1);
    (req.max_recv_wr, req.max_recv_sge, req.is_srq) = (U32::new(0), U32::new(0), 1);
    req.total_chunks = U16::new(1 + req.send_chunks.get());
    req.srq_handle = U32::new(user_srq);
    assert_eq!(d.err(req), 1, "EPERM");
    // Receive WRs with an SRQ, an unknown SRQ: EINVAL.
    req.srq_handle = U32::new(srq);
    req.max_recv_wr = U32::new(8);
    assert_eq!(d.err(req), 22);
    req.max_recv_wr = U32::new(0);
    req.srq_handle = U32::new(0x00ff_fff0);
    assert_eq!(d.err(req), 22);
    req.srq_handle = U32::new(srq);
    assert_eq!(d.err(req), 0);
    // max_srq SRQs, then ENOMEM.
    for _ in 2..crate::limits::MAX_SRQ {
        create_srq(&mut d, pd);
    }
    let base = d.dev.mem().alloc(2 * PAGE).unwrap();
    let one_more = CreateSrq {
        pdir_dma: U64::new(build_pdir(&d.dev, &[base, base + PAGE])),
        pd_handle: U32::new(pd),
        nchunks: U32::new(2),
        attrs: SrqAttr { max_wr: U32::new(8), max_sge: U32::new(1), ..Default::default() },
        ..Default::default()
    };
    assert_eq!(d.err(one_more), 12, "ENOMEM past max_srq");
    assert_eq!(d.dev.live_objects().srqs, crate::limits::MAX_SRQ as usize);
}

/// A QP of an SRQ holding a WQE for a message in progress (the RoCE responder's first packet)
/// and then reset or destroyed completes that WQE with WR_FLUSH_ERR, so the driver (which
/// removes the QP's CQEs) retires it rather than owing it a completion forever; before the fix
/// the device dropped it silently. A full CQ gets no such CQE: it is owed to no verb, and must
/// not overflow the CQ (and fail its other QPs).
///
/// From issue 13's hostile-driver review of its commands.
#[test]
fn a_held_srq_wqe_is_flushed_at_reset_and_destroy_without_overflowing_the_cq() {
    use super::srq::{create_srq, post_srq, srq_qp};
    use crate::ctx::Effects;
    use pvrdma_abi::verbs::{access, qp_attr_mask as m, qp_state, QpAttr};
    use pvrdma_abi::wqe::{wc_status, Cqe};
    use zerocopy::FromZeros;
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 2);
    let (srq, state) = create_srq(&mut d, pd);
    let a = d.create_qp(pd, cq.handle, cq.handle, 8);
    let mut reset = QpAttr::new_zeroed();
    reset.qp_state = U32::new(qp_state::RESET);
    for w in 0..4 {
        post_srq(&d, state, w, 100);
    }
    let hold = |d: &mut Drv| {
        let b = srq_qp(d, pd, cq.handle, srq);
        d.connect_access(b.qpn, a.qpn, access::LOCAL_WRITE);
        let qp = d.dev.core().qp(b.qpn).unwrap();
        assert_eq!(qp.recv_capacity(d.dev.core(), &mut Effects::default()), Some(100));
        b
    };
    // Reset with room: the held WQE completes with WR_FLUSH_ERR.
    let b = hold(&mut d);
    assert_eq!(d.modify(b.qpn, m::STATE, reset), 0);
    let got = d.wait_cqes(&cq, 1);
    assert_eq!((got[0].wr_id.get(), got[0].status.get()), (0, wc_status::WR_FLUSH_ERR));
    // Destroy with room: the same.
    let b = hold(&mut d);
    d.ok(DestroyQp { qp_handle: U32::new(b.qpn), ..Default::default() });
    let got = d.wait_cqes(&cq, 1);
    assert_eq!((got[0].wr_id.get(), got[0].status.get()), (1, wc_status::WR_FLUSH_ERR));
    // A full CQ (2 of 2): nothing is published, and the CQ does not overflow.
    let b = hold(&mut d);
    for id in [50, 51] {
        assert!(d.dev.post_cqe(
            cq.handle,
            &Cqe { wr_id: zerocopy::little_endian::U64::new(id), ..Cqe::new_zeroed() },
            false
        ));
    }
    assert_eq!(d.modify(b.qpn, m::STATE, reset), 0);
    d.ok(DestroyQp { qp_handle: U32::new(b.qpn), ..Default::default() });
    let status = d.dev.cq_status(cq.handle).unwrap();
    assert!(!status.error, "a reset or destroy never overflows the CQ");
    assert_eq!(d.dev.stats().cq_overflows, 0);
}
