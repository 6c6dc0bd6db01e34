//! A CQ's arm through every layer (verbs -> driver -> platform -> model; the first conformance
//! checks of the stack): interrupts only for armed CQs, and the kernel's arm of a user CQ with
//! the refusal of a foreign context's doorbell. (A command with a DMA address outside guest memory, then a good one:
//! `tests::differential::bad_dma_address`, run against the model and against QEMU 7.2.)

use doorbell::{ArmEncoding, DoorbellOp};
use ib_core::{Device, NotifyFlags, WrOpcode};
use pvrdma_sim::SimConfig;
use tests::fixture::*;

/// Vector 2 as the device raised it and as the driver counted it, since `base` (the probe's
/// self-test raises some of its own).
fn cq_interrupts(dev: &Device, sim: &hca::platform::sim::SimPlatform, base: (u64, u64)) -> (u64, u64) {
    (sim.device().vectors().raised(2) - base.0, stats(dev).interrupts[2] - base.1)
}

#[test]
fn an_unarmed_cq_raises_no_interrupt_and_one_arm_gives_one_event() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    let base = cq_interrupts(&dev, &sim, (0, 0));
    let cq_events = stats(&dev).cq_events;

    p.recv_b(1, 0, 64);
    p.send_a(1, 0, b"unarmed", WrOpcode::Send, false);
    poll_n(&cq, 2); // both CQEs have reached the ring: only now can "no interrupt" be asserted
    assert_no_event(&ch);
    assert_eq!(cq_interrupts(&dev, &sim, base), (0, 0), "an unarmed CQ raised an interrupt");

    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap(); // a repeated arm is harmless
    for i in 0..8 {
        p.recv_b(10 + i, 0, 64);
        p.send_a(10 + i, 0, b"armed", WrOpcode::Send, false);
    }
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    poll_n(&cq, 16);
    assert_no_event(&ch);
    assert_eq!(cq_interrupts(&dev, &sim, base), (1, 1), "one arm, sixteen CQEs: one interrupt");
    assert_eq!(stats(&dev).cq_events - cq_events, 1);
    cq.ack_events(1);
}

#[test]
fn the_kernel_arms_a_user_cq_and_another_context_cannot() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let owner = dev.alloc_ucontext().unwrap();
    let other = dev.alloc_ucontext().unwrap();
    let ch = owner.create_comp_channel().unwrap();
    let pd = owner.alloc_pd().unwrap();
    let cq = owner.create_cq(16, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    let base = cq_interrupts(&dev, &sim, (0, 0));

    // Another context's page: refused by the device and counted; no event follows.
    let refused = sim.device().stats().refused_doorbells;
    raw_doorbell(&dev, uar_page(&other), DoorbellOp::CqArmNext, cq.handle(), ArmEncoding::Ibta);
    raw_doorbell(&dev, uar_page(&other), DoorbellOp::CqArmSolicited, cq.handle(), ArmEncoding::Ibta);
    assert_eq!(sim.device().stats().refused_doorbells, refused + 2);
    p.recv_b(1, 0, 64);
    p.send_a(1, 0, b"foreign", WrOpcode::Send, false);
    poll_n(&cq, 2);
    assert_no_event(&ch);
    assert_eq!(cq_interrupts(&dev, &sim, base), (0, 0));

    // The driver arms this user CQ through the kernel's page (the arm doorbell mthca never
    // allocated for a user CQ).
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    p.recv_b(2, 0, 64);
    p.send_a(2, 0, b"kernel", WrOpcode::Send, false);
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    poll_n(&cq, 2);
    cq.ack_events(1);
    assert_eq!(sim.device().stats().refused_doorbells, refused + 2);
}
