//! Issue 13's commands from a hostile driver: each test a bug once found here.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::*;
use zerocopy::little_endian::U32;

/// RESIZE_CQ charges the host budget for the new ring's page list, as CREATE_CQ charges the
/// first: before the fix a driver could create many one-page CQs (each charged for one entry
/// page) and resize each to `MAX_CQE` entries over aliased pages, holding page lists the budget
/// never saw. A resize the budget cannot pay for is refused (ENOMEM) and the CQ keeps its ring.
#[test]
fn resize_cq_charges_the_new_ring_to_the_host_budget() {
    let cfg = SimConfig::default();
    let mut d = Drv::new(cfg);
    let (req, ring) = d.cq_request(0, 1);
    let h = d.ok(req).cq_handle.get();
    let dir = req.pdir_dma.get();
    let before = d.dev.stats().host_bytes;
    // 4096 CQEs over 64 entry pages, every one the same guest page.
    let page = d.dev.mem().alloc(PAGE).unwrap();
    let mut list = vec![ring.state];
    list.extend([page; 64]);
    let fresh = build_pdir(&d.dev, &list);
    let mut entries = vec![0u8; PAGE as usize];
    d.dev.mem().read(fresh, &mut entries).unwrap();
    d.dev.mem().write(dir, &entries).unwrap();
    let resize = ResizeCq { cq_handle: U32::new(h), cqe: U32::new(4096), ..Default::default() };
    assert_eq!(d.ok(resize).cqe.get(), 4096);
    let after = d.dev.stats().host_bytes;
    assert!(after >= before + 64 * 8, "the new page list is charged: {before} -> {after}");
    d.ok(DestroyCq { cq_handle: U32::new(h), ..Default::default() });
    assert!(d.dev.stats().host_bytes < before, "and released with the CQ");

    // A budget that holds the CQ but not its resize.
    let mut tight = Drv::new(SimConfig { host_budget: before + 256, ..SimConfig::default() });
    let (req, ring) = tight.cq_request(0, 1);
    let h = tight.ok(req).cq_handle.get();
    let fresh = build_pdir(&tight.dev, &{
        let page = tight.dev.mem().alloc(PAGE).unwrap();
        let mut l = vec![ring.state];
        l.extend([page; 64]);
        l
    });
    let mut entries = vec![0u8; PAGE as usize];
    tight.dev.mem().read(fresh, &mut entries).unwrap();
    tight.dev.mem().write(req.pdir_dma.get(), &entries).unwrap();
    let resize = ResizeCq { cq_handle: U32::new(h), cqe: U32::new(4096), ..Default::default() };
    assert_eq!(tight.err(resize), 12, "ENOMEM");
    assert_eq!(tight.dev.cq_status(h).unwrap().entries, 1, "the old ring stays");
}

/// A QP of an SRQ holding a WQE for a message in progress (the RoCE responder's first packet)
/// and then reset or destroyed completes that WQE with WR_FLUSH_ERR, so the driver (which
/// removes the QP's CQEs) retires it rather than owing it a completion forever; before the fix
/// the device dropped it silently. A full CQ gets no such CQE: it is owed to no verb, and must
/// not overflow the CQ (and fail its other QPs).
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
