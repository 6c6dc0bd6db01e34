//! Completion events: one event per arm whatever the device writes, the kernel arm of a user CQ,
//! missed-event reporting, solicited arming, and QEMU 7.2's profile.

use doorbell::{ArmEncoding, DoorbellError, DoorbellOp};
use ib_core::{AsyncEventType, Error, NotifyFlags, WrOpcode};
use pvrdma_sim::{Profile, SimConfig};
use tests::fixture::*;

#[test]
fn one_arm_one_event_no_arm_no_event() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(32, None).unwrap();
    let rcq = dev.create_cq(32, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&scq, &rcq), (&scq, &rcq));
    // No arm: CQEs arrive, no event.
    p.recv_b(1, 0, 64);
    p.send_a(1, 0, b"x", WrOpcode::Send, false);
    poll_n(&rcq, 1);
    assert_no_event(&ch);
    // One arm, five CQEs: exactly one event.
    assert!(!rcq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap());
    for i in 0..5 {
        p.recv_b(10 + i, 0, 64);
        p.send_a(10 + i, 0, b"y", WrOpcode::Send, false);
    }
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(rcq.handle()));
    poll_n(&rcq, 5);
    assert_no_event(&ch);
    assert_eq!((rcq.events(), rcq.unacked_events()), (1, 1));
    rcq.ack_events(1);
    assert_eq!(rcq.unacked_events(), 0);
    // Re-arm, then poll once more: a CQE queued before the arm is reported, not lost.
    p.recv_b(20, 0, 64);
    p.send_a(20, 0, b"z", WrOpcode::Send, false);
    poll_n(&scq, 7);
    std::thread::sleep(SETTLE);
    let missed = rcq.req_notify(NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS);
    assert_eq!(missed, Ok(true));
    poll_n(&rcq, 1);
    assert_eq!(rcq.req_notify(NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS), Ok(false));
    assert!(stats(&dev).interrupts[2] >= 1, "{:?}", stats(&dev));
}

#[test]
fn solicited_arm_ignores_unsolicited_sends() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(32, None).unwrap();
    let rcq = dev.create_cq(32, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&scq, &rcq), (&scq, &rcq));
    rcq.req_notify(NotifyFlags::SOLICITED).unwrap();
    p.recv_b(1, 0, 64);
    p.send_a(1, 0, b"plain", WrOpcode::Send, false);
    poll_n(&rcq, 1);
    assert_no_event(&ch);
    p.recv_b(2, 0, 64);
    p.send_a(2, 0, b"urgent", WrOpcode::Send, true);
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(rcq.handle()));
    poll_n(&rcq, 1);
    rcq.ack_events(1);
}

#[test]
fn user_cq_armed_through_the_kernel_page_gets_its_event() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    // The driver's arm of a user CQ goes through the kernel's page (page 0), which may arm any
    // CQ: the model refuses nothing, and the event comes.
    let refused = sim.device().stats().refused_doorbells;
    for id in 1..=2 {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        p.recv_b(id, 0, 64);
        p.send_a(id, 0, b"k", WrOpcode::Send, false);
        assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
        poll_n(&cq, 2);
    }
    assert_no_event(&ch);
    cq.ack_events(2);
    assert_eq!(sim.device().stats().refused_doorbells, refused);
    // A raw arm through the kernel page reaches the user CQ too (an interrupt, no event: the
    // driver did not arm).
    let irqs = stats(&dev).interrupts[2];
    pv(&dev).kernel_doorbells().cq_arm_next(&cq_handle(&cq), ArmEncoding::Ibta).unwrap();
    p.recv_b(3, 0, 64);
    p.send_a(3, 0, b"r", WrOpcode::Send, false);
    poll_n(&cq, 2);
    tests::events::wait_for(WAIT, "the raw arm's interrupt", || stats(&dev).interrupts[2] > irqs);
    assert_no_event(&ch);
}

#[test]
fn qemu72_profile_one_event_per_arm_despite_an_entry_per_cqe() {
    let dev = open_with(SimConfig { profile: Profile::Qemu72, ..Default::default() });
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(32, None).unwrap();
    let rcq = dev.create_cq(32, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&scq, &rcq), (&scq, &rcq));
    assert!(matches!(rcq.req_notify(NotifyFlags::SOLICITED), Err(Error::Unsupported(_))));
    rcq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    for i in 0..4 {
        p.recv_b(i, 0, 64);
        p.send_a(i, 0, b"q", WrOpcode::Send, false);
    }
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(rcq.handle()));
    poll_n(&rcq, 4);
    poll_n(&scq, 4);
    assert_no_event(&ch);
    assert!(stats(&dev).spurious_cq_notifications > 0, "{:?}", stats(&dev));
    rcq.ack_events(1);
}

#[test]
fn a_context_page_cannot_arm_another_owners_cq() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let kcq = dev.create_cq(8, None).unwrap();
    let before = sim.device().stats().refused_doorbells;
    // The driver's typed doorbells refuse it; written anyway, the device refuses it too.
    assert_eq!(doorbells(&ctx).cq_arm_next(&cq_handle(&kcq), ArmEncoding::Ibta), Err(DoorbellError::NotOwner));
    raw_doorbell(&dev, uar_page(&ctx), DoorbellOp::CqArmNext, kcq.handle(), ArmEncoding::Ibta);
    assert_eq!(kcq.armed(), None, "the driver must not believe a raw arm");
    assert_eq!(sim.device().stats().refused_doorbells, before + 1);
    // The driver's arm (through the kernel page) arms it, and the device takes it.
    kcq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    assert_eq!(kcq.armed(), Some(ib_core::ArmKind::Next));
    assert_eq!(sim.device().stats().refused_doorbells, before + 1);
    assert_eq!(sim.device().cq_status(kcq.handle()).unwrap().arm, pvrdma_sim::ArmState::Next);
}

#[test]
fn cq_overflow_is_overrun_after_the_queued_cqes() {
    let dev = open();
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    dev.set_async_event_handler(move |e| sink.lock().unwrap().push(ev(e)));
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(1, None).unwrap();
    let rcq = dev.create_cq(32, None).unwrap();
    let p = pair(&dev, &pd, (&scq, &rcq), (&scq, &rcq));
    for i in 0..3 {
        p.recv_b(i, 0, 64);
        p.send_a(i, 0, b"o", WrOpcode::Send, false);
    }
    poll_n(&rcq, 3);
    let deadline = std::time::Instant::now() + WAIT;
    while stats(&dev).async_events == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut wc = [ib_core::Wc::default(); 4];
    assert_eq!(scq.poll(&mut wc), Ok(1));
    assert_eq!(scq.poll(&mut wc), Err(Error::CqOverrun));
    assert_eq!(events.lock().unwrap().as_slice(), &[(AsyncEventType::CqErr, Some(scq.handle()))]);
    // The other CQ is unaffected.
    assert_eq!(rcq.poll(&mut wc), Ok(0));
}
