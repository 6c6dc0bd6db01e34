//! Probe, queries, object lifetimes and the arm-encoding self-test against the model.

use ib_core::access;
use ib_core::{Error, PortState, Wc};
use tests::fixture::*;

#[test]
fn probe_and_query() {
    let dev = open();
    assert!(dev.name().starts_with("vmw_pvrdma"));
    assert_eq!(dev.location(), "sim");
    assert_eq!(pv(&dev).arm_encoding(), doorbell::ArmEncoding::Ibta, "found by the probe's self-test");
    let attr = dev.query_device();
    assert_eq!((attr.vendor_id, attr.vendor_part_id), (0x15ad, 0x0820));
    assert!(attr.phys_port_cnt >= 1 && attr.max_qp > 0 && attr.max_cqe > 0 && attr.max_sge > 0);
    let port = dev.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert!(port.active_mtu >= 256 && port.active_mtu <= port.max_mtu);
    assert!(matches!(dev.query_port(2), Err(Error::InvalidArgument(_))));
    let g = dev.query_gid(1, 0).unwrap();
    assert_eq!(&g[..2], &[0xfe, 0x80]);
    assert_eq!(g, gid(&dev));
    assert!(dev.query_gid(1, attr.gid_tbl_len).is_err());
    assert_eq!(dev.query_pkey(1, 0).unwrap(), 0xffff);
    // The driver's counters start when the probe hands the device out; then QUERY_PORT and
    // QUERY_PKEY: one command interrupt each, counted by the driver.
    assert_eq!(stats(&dev).interrupts[0], 2, "{:?}", stats(&dev));
}

#[test]
fn probe_with_a_chosen_gid_and_polling_commands() {
    let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15];
    let opts = hca::ProbeOptions { gid: Some(gid), cmd_wait: hca::WaitMode::Polling, ..Default::default() };
    let (dev, _sim) = hca::open_sim_with(Default::default(), opts).unwrap();
    assert_eq!(dev.query_gid(1, 0).unwrap(), gid);
    dev.alloc_pd().unwrap();
}

#[test]
fn objects_create_and_destroy_in_any_order() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.alloc_mr(10_000, access::LOCAL_WRITE).unwrap();
    assert_eq!(mr.len(), 10_000);
    mr.write(9_990, b"0123456789").unwrap();
    let mut b = [0u8; 10];
    mr.read(9_990, &mut b).unwrap();
    assert_eq!(&b, b"0123456789");
    assert!(matches!(mr.write(9_991, b"0123456789"), Err(Error::InvalidArgument(_))));
    assert!(matches!(mr.read(usize::MAX, &mut b), Err(Error::InvalidArgument(_))));
    assert!(pd.alloc_mr(0, 0).is_err());
    let cq = dev.create_cq(100, None).unwrap();
    assert_eq!(cq.cqe(), 128);
    assert!(dev.create_cq(0, None).is_err());
    let qp = rc_qp(&pd, &cq, &cq);
    assert_eq!(qp.state(), Ok(ib_core::QpState::Reset));
    // The QP holds its CQ and PD: dropping them first is safe.
    drop(cq);
    drop(pd);
    drop(mr);
    let mut wc = [Wc::default(); 4];
    let cq2 = dev.create_cq(1, None).unwrap();
    assert_eq!(cq2.poll(&mut wc).unwrap(), 0);
    drop(qp);
    let ctx = dev.alloc_ucontext().unwrap();
    let upd = ctx.alloc_pd().unwrap();
    let ucq = ctx.create_cq(8, None).unwrap();
    assert!(ucq.is_user());
    // A user PD cannot take a kernel CQ.
    let attr = ib_core::QpInitAttr {
        send_cq: &cq2,
        recv_cq: &ucq,
        cap: cap(),
        qp_type: ib_core::QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    assert!(matches!(upd.create_qp(&attr), Err(Error::InvalidArgument(_))));
    drop(ctx);
    drop(upd);
    drop(ucq);
}

#[test]
fn state_rules() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let qp = rc_qp(&pd, &cq, &cq);
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    let sge = [ib_core::Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    let wr =
        ib_core::SendWr { wr_id: 1, sg_list: &sge, opcode: ib_core::WrOpcode::Send, signaled: true, solicited: false };
    assert_eq!(qp.post_send(&wr), Err(Error::InvalidState));
    assert_eq!(qp.post_recv(&ib_core::RecvWr { wr_id: 1, sg_list: &sge }), Err(Error::InvalidState));
    assert_eq!(qp.modify_to_rts(0), Err(Error::InvalidState));
    qp.modify_to_init(1, access::LOCAL_WRITE).unwrap();
    qp.post_recv(&ib_core::RecvWr { wr_id: 1, sg_list: &sge }).unwrap();
    let three = [sge[0]; 3];
    assert!(matches!(qp.post_recv(&ib_core::RecvWr { wr_id: 2, sg_list: &three }), Err(Error::InvalidArgument(_))));
    assert!(matches!(qp.modify_to_rtr(qp.qpn(), gid(&dev), 0, 1000), Err(Error::InvalidArgument(_))));
    qp.modify_to_err().unwrap();
    assert_eq!(qp.state(), Ok(ib_core::QpState::Err));
}

/// How the device arms CQs is the device's, found at probe by a self-test (both model profiles,
/// undeclared); an explicit override wins without a test.
#[test]
fn the_arm_encoding_is_found_by_self_test_or_declared() {
    use doorbell::ArmEncoding;
    use pvrdma_sim::{Profile, SimConfig};
    for (profile, found) in [(Profile::Ibta, ArmEncoding::Ibta), (Profile::Qemu72, ArmEncoding::Qemu72)] {
        let dev = open_with(SimConfig { profile, ..Default::default() });
        assert_eq!(pv(&dev).arm_encoding(), found, "{profile:?}");
        let ch = dev.create_comp_channel().unwrap();
        let cq = dev.create_cq(8, Some(&ch)).unwrap();
        assert_eq!(cq.req_notify(ib_core::NotifyFlags::SOLICITED).is_ok(), found == ArmEncoding::Ibta);
        let s = stats(&dev);
        assert_eq!(
            (s.spurious_cq_notifications, s.cq_events),
            (0, 0),
            "{profile:?}: the self-test left nothing behind"
        );
    }
    let opts = hca::ProbeOptions { arm_encoding: Some(ArmEncoding::Qemu72), ..Default::default() };
    let (dev, sim) = hca::open_sim_with(SimConfig::default(), opts).unwrap();
    assert_eq!(pv(&dev).arm_encoding(), ArmEncoding::Qemu72, "the override wins");
    assert_eq!(sim.device().stats().cqes_written, 0, "and no self-test ran");
}

/// A device whose CQ interrupt never comes (vector 2 masked here): the self-test reads the
/// CQ-notification ring, not interrupts, so it still finds the IBTA encoding, and events arrive
/// through the periodic drain of the ring.
#[test]
fn without_cq_interrupts_the_self_test_still_decides_and_events_still_come() {
    use ib_core::NotifyFlags;
    let sim = hca::platform::sim::SimPlatform::new(Default::default());
    sim.device().vectors().set_masked(2, true);
    let t = std::time::Instant::now();
    let dev = hca::probe(std::sync::Arc::new(sim.clone()), Default::default()).unwrap();
    assert!(t.elapsed() < std::time::Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(pv(&dev).arm_encoding(), doorbell::ArmEncoding::Ibta);
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    p.recv_b(1, 0, 8);
    p.send_a(1, 0, b"x", ib_core::WrOpcode::Send, false);
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    cq.ack_events(1);
    assert_eq!(stats(&dev).interrupts[2], 0);
}

fn short_timeouts() -> hca::ProbeOptions {
    hca::ProbeOptions { cmd_timeout: std::time::Duration::from_millis(300), ..Default::default() }
}

/// A device that never answers the self-test's CREATE_CQ is not handed out: the probe fails with
/// the device fatal (the command timed out) instead of listing a dead device.
#[test]
fn a_device_dead_during_the_self_test_is_not_handed_out() {
    use pvrdma_abi::cmd::opcode::CREATE_CQ;
    let plat = std::sync::Arc::new(tests::faults::Faults::new(Default::default()));
    plat.swallow_next(CREATE_CQ);
    let r = hca::probe(plat.clone(), short_timeouts());
    assert_eq!(r.map(|d| d.name()).err(), Some(Error::DeviceFatal));
}

/// Registers reading all-ones from some point of the probe on (surprise removal): the probe fails,
/// or hands out a device its health check finds dead within one period; never a hang.
#[test]
fn a_device_removed_during_probe_is_found_dead() {
    for after in [0u64, 1, 3, 5, 8, 40] {
        let plat = std::sync::Arc::new(tests::faults::Faults::new(Default::default()));
        plat.all_ones_after_reads(after);
        let t = std::time::Instant::now();
        let r = hca::probe(plat.clone(), short_timeouts());
        assert!(t.elapsed() < std::time::Duration::from_secs(15), "after {after} reads: {:?}", t.elapsed());
        if let Ok(d) = &r {
            tests::events::wait_for(WAIT, "the health check", || d.is_fatal());
        }
    }
}

/// QEMU 7.2 with its CQ interrupt masked: the self-test reads the CQ-notification ring, finds
/// QEMU 7.2's per-CQE entries, and so arms with `ARM|ARM_SOL` and refuses solicited-only arming;
/// events come through the periodic drain.
#[test]
fn the_self_test_needs_no_interrupt_on_qemu72() {
    use ib_core::{NotifyFlags, WrOpcode};
    use pvrdma_sim::{Profile, SimConfig};
    let sim = hca::platform::sim::SimPlatform::new(SimConfig { profile: Profile::Qemu72, ..Default::default() });
    sim.device().vectors().set_masked(2, true);
    let dev = hca::probe(std::sync::Arc::new(sim.clone()), Default::default()).unwrap();
    assert_eq!(pv(&dev).arm_encoding(), doorbell::ArmEncoding::Qemu72);
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    assert!(cq.req_notify(NotifyFlags::SOLICITED).is_err());
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    p.recv_b(1, 0, 8);
    p.send_a(1, 0, b"x", WrOpcode::Send, false);
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    cq.ack_events(1);
}

/// An IBTA device whose CQ interrupts come late (a host stalled during probe): the self-test does
/// not time interrupts, so it still finds the IBTA encoding.
#[test]
fn late_interrupts_do_not_mislead_the_self_test() {
    let plat = std::sync::Arc::new(tests::faults::Faults::new(Default::default()));
    plat.delay_cq_interrupts(300);
    let dev = hca::probe(plat.clone(), Default::default()).unwrap();
    plat.delay_cq_interrupts(0);
    assert_eq!(pv(&dev).arm_encoding(), doorbell::ArmEncoding::Ibta);
}

/// A device whose messages take 7 s on the wire: the self-test gives up at its bound and falls
/// back to the `ARM|ARM_SOL` encoding (arms for next on every pvrdma); its late CQEs, landing
/// after the probe, reach none of the consumer's CQs.
#[test]
fn a_self_test_that_cannot_finish_falls_back_safely() {
    use ib_core::NotifyFlags;
    use std::time::{Duration, Instant};
    let cfg = pvrdma_sim::SimConfig { link_latency: Duration::from_secs(7), ..Default::default() };
    let t = Instant::now();
    let (dev, _sim) = hca::open_sim(cfg).unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(pv(&dev).arm_encoding(), doorbell::ArmEncoding::Qemu72);
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    std::thread::sleep(Duration::from_secs(3)); // the self-test's message lands meanwhile
    assert_eq!(ch.try_get_cq_event().map(|c| c.handle()), None, "the self-test's late CQE fired a consumer's CQ");
    assert!(!dev.is_fatal());
}

#[test]
fn open_sim_fails_when_the_roce_port_cannot_bind_its_address() {
    // The first model holds an address of its own; the second is pointed at the same one.
    let no = pvrdma_sim::roce::RoceConfig::new(vec![]);
    let (_dev, sim) = tests::fixture::open_roce(no, Default::default());
    let ip = tests::fixture::roce_addr(&sim);
    let cfg = pvrdma_sim::SimConfig { roce: Some(pvrdma_sim::roce::RoceConfig::new(vec![ip])), ..Default::default() };
    let Err(Error::Device(e)) = hca::open_sim(cfg) else { panic!("the second model cannot bind") };
    assert_eq!(e.errno(), libc::EADDRINUSE, "{e}");
    assert!(e.downcast_ref::<pvrdma_sim::roce::RoceError>().is_some());
    assert!(e.to_string().contains(&format!("{ip}:4791")), "{e}");
}
