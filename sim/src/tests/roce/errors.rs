//! RNR, retry exhaustion, and ports that cannot serve a QP.

use super::*;
use crate::errno::Errno;
use crate::SimDevice;
use pvrdma_abi::cmd::DestroyQp;
use pvrdma_abi::wqe::wc_status;

/// Statuses and wr_ids of `n` CQEs.
fn statuses(d: &Drv, e: &End, n: usize) -> Vec<(u64, u32)> {
    wait(d, e, n, LONG).iter().map(|c| (c.wr_id.get(), c.status.get())).collect()
}

#[test]
fn a_send_rnr_nakked_until_the_receiver_posts_late_then_arrives() {
    let o = Opts { min_rnr_timer: 14, ..Opts::default() };
    let (a, ea, b, eb) = pair(&o, LinkFaults::default());
    send(&a, &ea, 1, &pattern(1, 3000), 0, None);
    std::thread::sleep(Duration::from_millis(30));
    assert!(a.poll(&ea.cq).is_none() && b.poll(&eb.cq).is_none());
    assert!(b.dev.stats().roce_rnr_naks_sent >= 1);
    recv(&b, &eb, 9, 0, 4096);
    assert_eq!(statuses(&b, &eb, 1), vec![(9, wc_status::SUCCESS)]);
    assert_eq!(statuses(&a, &ea, 1), vec![(1, wc_status::SUCCESS)]);
    assert_eq!(received(&b, &eb, 0, 3000), pattern(1, 3000));
    assert!(a.dev.stats().roce_rnr_naks_received >= 1);
}

#[test]
fn rnr_retry_exhausted_completes_rnr_retry_exc_err_and_flushes_the_rest() {
    let o = Opts { rnr_retry: 2, min_rnr_timer: 1, ..Opts::default() };
    let (a, ea, b, _eb) = pair(&o, LinkFaults::default());
    send(&a, &ea, 1, &pattern(1, 10), 0, None);
    send(&a, &ea, 2, &pattern(2, 10), 64, None);
    assert_eq!(statuses(&a, &ea, 2), vec![(1, wc_status::RNR_RETRY_EXC_ERR), (2, wc_status::WR_FLUSH_ERR)]);
    assert_eq!(a.dev.qp_state(ea.qp.qpn), Some(qp_state::ERR));
    // The first try and two retries were RNR NAKed (a stale PSN sequence error NAK of the
    // second message may cost one more try).
    assert!((3..=4).contains(&a.dev.stats().roce_rnr_naks_received));
    assert!(b.dev.stats().roce_rnr_naks_sent >= 3);
}

#[test]
fn retries_exhausted_towards_an_address_nobody_listens_on_complete_retry_exc_err() {
    let mut a = device(LinkFaults::default());
    let ea = end(&mut a, 16);
    let nobody = peer_socket();
    connect(&mut a, ea.qp.qpn, 5, nobody.local_addr().unwrap().ip(), &Opts { retry_cnt: 2, ..Opts::default() });
    send(&a, &ea, 1, &pattern(1, 100), 0, None);
    send(&a, &ea, 2, &pattern(2, 100), 128, None);
    assert_eq!(statuses(&a, &ea, 2), vec![(1, wc_status::RETRY_EXC_ERR), (2, wc_status::WR_FLUSH_ERR)]);
    assert_eq!(a.dev.qp_state(ea.qp.qpn), Some(qp_state::ERR));
    let s = a.dev.stats();
    assert_eq!(s.roce_timeouts, 3, "the first try and two retries each timed out");
    assert_eq!(s.roce_retransmits, 2 * 2, "two retries of both messages");
}

#[test]
fn a_destroyed_peer_qp_drops_what_comes_and_the_sender_exhausts_its_retries() {
    let (a, ea, mut b, eb) = pair(&Opts { retry_cnt: 1, ..Opts::default() }, LinkFaults::default());
    b.ok(DestroyQp { qp_handle: U32::new(eb.qp.qpn), ..Default::default() });
    send(&a, &ea, 1, &pattern(1, 100), 0, None);
    assert_eq!(statuses(&a, &ea, 1), vec![(1, wc_status::RETRY_EXC_ERR)]);
    assert_eq!(b.dev.stats().roce_rx_dropped_qp, 2);
}

#[test]
fn a_qp_whose_source_gid_is_not_a_bound_roce_v2_address_fails_its_send() {
    let (mut a, _ea, b, eb) = pair(&Opts::default(), LinkFaults::default());
    // Index 2: a RoCE v2 GID whose address the port did not bind (GIDs may change after RTR).
    // (A documentation address, TEST-NET-1: no host has it, and the port never binds it.)
    bind_v2(&mut a, 2, IpAddr::from([192, 0, 2, 77]));
    let e = end(&mut a, 16);
    assert_eq!(connect_from(&mut a, e.qp.qpn, eb.qp.qpn, ip(&b), 2), 0);
    send(&a, &e, 1, b"x", 0, None);
    assert_eq!(statuses(&a, &e, 1), vec![(1, wc_status::LOC_QP_OP_ERR)]);
    assert_eq!(a.dev.qp_state(e.qp.qpn), Some(qp_state::ERR));
}

/// Index 0, the link-local RoCE v1 GID, cannot source a QP on the RoCE v2 port: RTR refuses it.
#[test]
fn rtr_from_the_roce_v1_gid_is_refused_on_a_roce_v2_port() {
    let (mut a, _ea, b, eb) = pair(&Opts::default(), LinkFaults::default());
    let e = end(&mut a, 16);
    assert_eq!(connect_from(&mut a, e.qp.qpn, eb.qp.qpn, ip(&b), 0), Errno::EINVAL.0);
    assert_eq!(a.dev.qp_state(e.qp.qpn), Some(qp_state::INIT));
}

/// [`connect`] with another source GID index; the RTR step's answer (0, or the device's
/// `err`), RTS only after a successful RTR.
fn connect_from(d: &mut Drv, qp: u32, dest: u32, dest_ip: IpAddr, sgid_index: u8) -> u8 {
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::INIT);
    a.port_num = 1;
    assert_eq!(d.modify(qp, m::STATE | m::PORT | m::PKEY_INDEX | m::ACCESS_FLAGS, a), 0);
    a.qp_state = U32::new(qp_state::RTR);
    a.dest_qp_num = U32::new(dest);
    a.path_mtu = U32::new(3);
    a.ah_attr.grh.dgid = ip_gid(dest_ip);
    a.ah_attr.grh.sgid_index = sgid_index;
    a.ah_attr.ah_flags = pvrdma_abi::verbs::AH_GRH;
    a.ah_attr.port_num = 1;
    let rtr = d.modify(qp, m::STATE | m::AV | m::DEST_QPN | m::PATH_MTU, a);
    if rtr == 0 {
        a.qp_state = U32::new(qp_state::RTS);
        assert_eq!(d.modify(qp, m::STATE, a), 0);
    }
    rtr
}

#[test]
fn a_port_that_cannot_bind_its_address_fails_device_creation() {
    // The first device holds an address of its own; the second is pointed at the same one.
    let first = device(LinkFaults::default());
    let ip = ip(&first);
    let cfg = || SimConfig { roce: Some(RoceConfig::new(vec![ip])), ..SimConfig::default() };
    let err = SimDevice::try_new(cfg()).err().expect("the address is taken");
    assert!(matches!(err, crate::roce::RoceError::Bind { .. }), "{err}");
    assert!(netlease::is_taken(&err), "{err}");
    assert!(err.to_string().contains(&format!("{ip}:4791")), "{err}");
    let second = SimDevice::new(cfg());
    assert!(second.roce_error().is_some());
    assert!(first.dev.roce_error().is_none());
    let none = SimConfig { roce: Some(RoceConfig::new(vec![])), ..SimConfig::default() };
    assert!(matches!(SimDevice::try_new(none).err(), Some(crate::roce::RoceError::NoAddress)));
}

#[test]
fn the_device_wire_budget_bounds_what_a_roce_requester_holds() {
    // Room for two 4000-byte messages on A's wire: the SQ drain pauses and resumes as they are
    // acknowledged, and every message arrives.
    let base = SimConfig { device_bytes_in_flight: 8192, ..SimConfig::default() };
    let mut a = device_with(LinkFaults::default(), base);
    let mut b = device(LinkFaults::default());
    let (ea, eb) = (end(&mut a, 64), end(&mut b, 64));
    let o = Opts::default();
    connect(&mut a, ea.qp.qpn, eb.qp.qpn, ip(&b), &o);
    let ob = Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..o };
    connect(&mut b, eb.qp.qpn, ea.qp.qpn, ip(&a), &ob);
    for i in 0..40u64 {
        recv(&b, &eb, i, i * 4096, 4096);
    }
    for i in 0..40u64 {
        send(&a, &ea, i, &pattern(i, 4000), i * 4096, None);
    }
    let tx = statuses(&a, &ea, 40);
    assert_eq!(tx, (0..40).map(|i| (i, wc_status::SUCCESS)).collect::<Vec<_>>());
    assert_eq!(wait(&b, &eb, 40, LONG).len(), 40);
    for i in 0..40u64 {
        assert_eq!(received(&b, &eb, i * 4096, 4000), pattern(i, 4000));
    }
    assert!(a.dev.stats().sq_throttled > 0, "the budget paused the SQ");
}

#[test]
fn ends_that_disagree_on_the_path_mtu_both_complete_and_go_to_err() {
    // As `hca pingpong --roce -m 1024` against a server at -m 512: the sender's first packet
    // is longer than the receiver's path MTU. The receiver NAKs it and must not wait on in
    // silence: its QP goes to ERR and its receives complete (flushed), as rxe's do.
    let mut a = device(LinkFaults::default());
    let mut b = device(LinkFaults::default());
    let (ia, ib) = (ip(&a), ip(&b));
    let (ea, eb) = (end(&mut a, 16), end(&mut b, 16));
    let o = Opts::default();
    connect(&mut a, ea.qp.qpn, eb.qp.qpn, ib, &o);
    let ob = Opts { mtu: 2, sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..o };
    connect(&mut b, eb.qp.qpn, ea.qp.qpn, ia, &ob);
    recv(&b, &eb, 7, 0, 4096);
    recv(&b, &eb, 8, 4096, 4096);
    send(&a, &ea, 1, &pattern(1, 3000), 0, None);
    assert_eq!(statuses(&a, &ea, 1), vec![(1, wc_status::REM_INV_REQ_ERR)]);
    assert_eq!(statuses(&b, &eb, 2), vec![(7, wc_status::WR_FLUSH_ERR), (8, wc_status::WR_FLUSH_ERR)]);
    assert_eq!(b.dev.qp_state(eb.qp.qpn), Some(qp_state::ERR));
}

#[test]
fn the_source_gid_of_a_connected_qp_deleted_fails_both_ends_within_their_retries() {
    // DESTROY_BIND of the GID a connected QP sends from: what it sends and what comes back for
    // it have no address of the port any more. Both ends end in RETRY_EXC_ERR, nothing hangs.
    let (mut a, ea, b, eb) = pair(&Opts::default(), LinkFaults::default());
    recv(&b, &eb, 1, 0, 4096);
    send(&a, &ea, 1, &pattern(1, 100), 0, None);
    assert_eq!(statuses(&a, &ea, 1), vec![(1, wc_status::SUCCESS)]);
    assert_eq!(statuses(&b, &eb, 1), vec![(1, wc_status::SUCCESS)]);
    a.ok(pvrdma_abi::cmd::DestroyBind { index: U32::new(SGID), ..Default::default() });
    send(&a, &ea, 2, &pattern(2, 100), 0, None);
    recv(&a, &ea, 3, 0, 4096);
    send(&b, &eb, 4, &pattern(4, 100), 0, None);
    assert_eq!(statuses(&a, &ea, 2), vec![(2, wc_status::RETRY_EXC_ERR), (3, wc_status::WR_FLUSH_ERR)]);
    assert_eq!(statuses(&b, &eb, 1), vec![(4, wc_status::RETRY_EXC_ERR)]);
}
