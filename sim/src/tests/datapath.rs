//! The data path: RC SEND over the loopback port, CQ arming, ownership, overflow, errors.

use crate::testutil::minidrv::*;
use crate::{ArmState, Profile, SimConfig};
use pvrdma_abi::uar::*;
use pvrdma_abi::verbs::{access, qp_state, send_flags};
use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status, wr_opcode, Cqe};
use std::time::Duration;
use zerocopy::little_endian::{U32, U64};

#[test]
fn rc_send_lands_the_payload_and_both_cqes() {
    let p = Pair::new(SimConfig::default(), 16);
    let d = &p.d;
    // A message spanning a page boundary of both MRs (their starts are not page-aligned).
    let msg: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    p.post_recv(7, 100, 6000);
    p.send_msg(9, 0, &msg, 50);
    let rx = d.wait_cqes(&p.cq_b, 1);
    let tx = d.wait_cqes(&p.cq_a, 1);
    assert_eq!((rx.len(), tx.len()), (1, 1));
    let (r, s) = (rx[0], tx[0]);
    assert_eq!(r.status.get(), wc_status::SUCCESS);
    assert_eq!(r.opcode.get(), wc_opcode::RECV);
    assert_eq!(r.wr_id.get(), 7);
    assert_eq!(r.byte_len.get(), 5000);
    assert_eq!(r.src_qp.get(), 0, "RC: no source QP, as rxe (issue 21 §5)");
    assert_eq!(r.qp.get(), u64::from(p.b.qpn));
    assert_eq!(r.wc_flags.get() & wc_flags::WITH_IMM, 0);
    assert_eq!(s.status.get(), wc_status::SUCCESS);
    assert_eq!(s.opcode.get(), wc_opcode::SEND);
    assert_eq!(s.wr_id.get(), 9);
    assert_eq!(s.qp.get(), u64::from(p.a.qpn));
    let mut got = vec![0u8; 5000];
    d.dev.mem().read(p.dst.iova + 100, &mut got).unwrap();
    assert_eq!(got, msg);

    // SEND_WITH_IMM, unsignaled: the receiver sees the immediate, the sender no CQE.
    p.post_recv(8, 0, 64);
    d.dev.mem().write(p.src.iova, b"imm!").unwrap();
    let sg = [sge(p.src.va, 4, p.src.lkey)];
    d.post_send_wqe(&p.a, 10, wr_opcode::SEND_WITH_IMM, 0, 0xdead_beef, &sg);
    d.qp_doorbell(&p.a, UAR_QP_SEND);
    let r = d.wait_cqes(&p.cq_b, 1)[0];
    assert_eq!(r.imm_data.get(), 0xdead_beef);
    assert_eq!(r.wc_flags.get() & wc_flags::WITH_IMM, wc_flags::WITH_IMM);
    assert_eq!(r.byte_len.get(), 4);
    d.settle();
    assert!(d.poll(&p.cq_a).is_none());
    let s = d.dev.stats();
    assert_eq!((s.packets_sent, s.packets_delivered), (2, 2));
    assert_eq!(s.cqes_written, 3);
}

#[test]
fn a_send_waits_for_a_receive_and_per_qp_order_holds() {
    let p = Pair::new(SimConfig { link_latency: Duration::from_millis(1), ..Default::default() }, 16);
    let d = &p.d;
    for i in 0..3u64 {
        p.send_msg(i, 0, &[i as u8; 8], 8 * i);
    }
    d.settle();
    assert_eq!(d.dev.parked_packets(p.b.qpn), 3);
    assert!(d.poll(&p.cq_a).is_none() && d.poll(&p.cq_b).is_none());
    for i in 0..3u64 {
        p.post_recv(100 + i, 8 * i, 8);
    }
    let rx = d.wait_cqes(&p.cq_b, 3);
    let tx = d.wait_cqes(&p.cq_a, 3);
    assert_eq!(rx.iter().map(|c| c.wr_id.get()).collect::<Vec<_>>(), vec![100, 101, 102]);
    assert_eq!(tx.iter().map(|c| c.wr_id.get()).collect::<Vec<_>>(), vec![0, 1, 2]);
    let mut got = [0u8; 24];
    d.dev.mem().read(p.dst.iova, &mut got).unwrap();
    assert_eq!(got[..8], [0; 8]);
    assert_eq!(got[8..16], [1; 8]);
    assert_eq!(got[16..], [2; 8]);
}

#[test]
fn an_arm_is_one_shot_and_unarmed_cqs_stay_silent() {
    let p = Pair::new(SimConfig::default(), 64);
    let d = &p.d;
    // Unarmed: completions but no event.
    p.post_recv(1, 0, 64);
    p.send_msg(1, 0, b"x", 0);
    assert_eq!(d.wait_cqes(&p.cq_b, 1).len(), 1);
    d.settle();
    assert_eq!(d.irqs(2), 0);
    assert!(d.notifications().is_empty());

    // CQEs queued before the arm raise nothing; one arm -> one event however many CQEs follow.
    p.post_recv(2, 0, 64);
    p.send_msg(2, 0, b"y", 0);
    d.settle();
    d.cq_doorbell(0, p.cq_b.handle, UAR_CQ_ARM);
    d.cq_doorbell(0, p.cq_b.handle, UAR_CQ_ARM); // repeated arms are harmless
    assert_eq!(d.irqs(2), 0, "the queued CQE does not fire the new arm");
    for i in 0..5 {
        p.post_recv(10 + i, 0, 64);
        p.send_msg(10 + i, 0, b"z", 0);
    }
    d.settle();
    assert_eq!(d.wait_cqes(&p.cq_b, 6).len(), 6);
    assert_eq!(d.irqs(2), 1);
    assert_eq!(d.notifications(), vec![p.cq_b.handle]);
    assert_eq!(d.dev.cq_status(p.cq_b.handle).unwrap().arm, ArmState::Disarmed);
    // The sender's CQ was never armed.
    assert!(d.dev.cq_status(p.cq_a.handle).unwrap().arm == ArmState::Disarmed);
    assert_eq!(d.dev.stats().interrupts[2], 1);
}

#[test]
fn a_solicited_arm_fires_only_on_the_solicited_receive() {
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    // One CQ for both QPs: it sees the sender's and the receiver's CQEs.
    let cq = d.create_cq(0, 64);
    let a = d.create_qp(pd, cq.handle, cq.handle, 8);
    let b = d.create_qp(pd, cq.handle, cq.handle, 8);
    d.connect(a.qpn, b.qpn);
    d.connect(b.qpn, a.qpn);
    let src = d.create_mr(pd, 0x5000, 4096, 0);
    let dst = d.create_mr(pd, 0x9000, 4096, access::LOCAL_WRITE);
    d.cq_doorbell(0, cq.handle, UAR_CQ_ARM_SOL);
    assert_eq!(d.dev.cq_status(cq.handle).unwrap().arm, ArmState::Solicited);
    let exchange = |flags: u32, n: u64| {
        d.recv(&b, n, &[sge(dst.va, 16, dst.lkey)]);
        d.send(&a, n, flags, &[sge(src.va, 16, src.lkey)]);
        assert_eq!(d.wait_cqes(&cq, 2).len(), 2);
        d.settle();
    };
    exchange(0, 1);
    assert_eq!(d.irqs(2), 0, "neither an unsolicited receive nor a send fires SOLICITED");
    exchange(send_flags::SOLICITED, 2);
    assert_eq!(d.irqs(2), 1);
    assert_eq!(d.notifications(), vec![cq.handle]);
    // NEXT dominates SOLICITED: ARM then ARM_SOL stays NEXT.
    d.cq_doorbell(0, cq.handle, UAR_CQ_ARM);
    d.cq_doorbell(0, cq.handle, UAR_CQ_ARM_SOL);
    assert_eq!(d.dev.cq_status(cq.handle).unwrap().arm, ArmState::Next);
    exchange(0, 3);
    assert_eq!(d.irqs(2), 1);
    // An error CQE satisfies SOLICITED.
    d.cq_doorbell(0, cq.handle, UAR_CQ_ARM_SOL);
    let bad = Cqe { status: U32::new(wc_status::WR_FLUSH_ERR), ..Default::default() };
    assert!(d.dev.post_cqe(cq.handle, &bad, false));
    assert_eq!(d.irqs(2), 1);
}

#[test]
fn doorbells_honour_page_ownership() {
    let mut d = Drv::new(SimConfig::default());
    let ctx1 = d.create_uc(1);
    let ctx2 = d.create_uc(2);
    let cq1 = d.create_cq(ctx1, 8);
    let cq2 = d.create_cq(ctx2, 8);
    let kcq = d.create_cq(0, 8);
    let base = d.dev.stats().refused_doorbells;
    // ctx2's page ringing ctx1's CQ: refused and counted, the arm unchanged.
    d.cq_doorbell(2, cq1.handle, UAR_CQ_ARM);
    assert_eq!(d.dev.cq_status(cq1.handle).unwrap().arm, ArmState::Disarmed);
    // A user page ringing the kernel's CQ; an unowned page; an unknown handle; SRQ; past BAR2.
    d.cq_doorbell(1, kcq.handle, UAR_CQ_ARM);
    d.cq_doorbell(5, cq1.handle, UAR_CQ_ARM);
    d.cq_doorbell(1, 999, UAR_CQ_ARM);
    d.dev.uar_write(4096 + 8, UAR_SRQ_RECV | 1);
    d.dev.uar_write(UAR_BAR_SIZE, UAR_CQ_ARM | cq1.handle);
    assert_eq!(d.dev.stats().refused_doorbells, base + 6);
    assert_eq!(d.dev.cq_status(kcq.handle).unwrap().arm, ArmState::Disarmed);
    // The owner's page arms its CQ; the kernel's page arms a user CQ.
    d.cq_doorbell(1, cq1.handle, UAR_CQ_ARM);
    d.cq_doorbell(0, cq2.handle, UAR_CQ_ARM_SOL);
    assert_eq!(d.dev.cq_status(cq1.handle).unwrap().arm, ArmState::Next);
    assert_eq!(d.dev.cq_status(cq2.handle).unwrap().arm, ArmState::Solicited);
    assert_eq!(d.dev.stats().refused_doorbells, base + 6);

    // QP doorbells too: ctx2's page cannot make ctx1's QP send.
    d.bind_gid(0, GID0);
    let pd1 = d.create_pd(ctx1);
    let mut qp = d.create_qp(pd1, cq1.handle, cq1.handle, 4);
    d.connect(qp.qpn, qp.qpn);
    let mr = d.create_mr(pd1, 0x4000, 4096, access::LOCAL_WRITE);
    qp.page = 2;
    d.post_send_wqe(&qp, 1, wr_opcode::SEND, send_flags::SIGNALED, 0, &[sge(mr.va, 4, mr.lkey)]);
    d.qp_doorbell(&qp, UAR_QP_SEND);
    assert_eq!(d.dev.stats().refused_doorbells, base + 7);
    assert_eq!(d.dev.stats().packets_sent, 0);
    qp.page = 1;
    d.recv(&qp, 2, &[sge(mr.va + 100, 4, mr.lkey)]);
    d.qp_doorbell(&qp, UAR_QP_SEND);
    // Loopback to itself: receive then send CQE; cq1 was armed NEXT by its owner.
    let cqes = d.wait_cqes(&cq1, 2);
    assert_eq!(cqes.iter().map(|c| c.opcode.get()).collect::<Vec<_>>(), vec![wc_opcode::RECV, wc_opcode::SEND]);
    d.settle();
    assert_eq!(d.irqs(2), 1);
    // After DESTROY_UC the page is nobody's.
    let uc2_cq = cq2.handle;
    d.ok(pvrdma_abi::cmd::DestroyCq { cq_handle: U32::new(uc2_cq), ..Default::default() });
    d.ok(pvrdma_abi::cmd::DestroyUc { ctx_handle: U32::new(ctx2), ..Default::default() });
    d.cq_doorbell(2, cq1.handle, UAR_CQ_POLL);
    assert_eq!(d.dev.stats().refused_doorbells, base + 8);
    d.cq_doorbell(1, cq1.handle, UAR_CQ_POLL);
    assert_eq!(d.dev.stats().cq_polls, 1);
}

#[test]
fn overflow_posts_cq_err_and_never_overwrites() {
    let p = Pair::new(SimConfig::default(), 4);
    let d = &p.d;
    for i in 0..6 {
        p.post_recv(100 + i, 0, 64);
    }
    d.settle();
    // Six sends into a 4-entry CQ (cq_a holds A's send completions).
    for i in 0..6 {
        p.send_msg(i, 0, b"m", 0);
        d.settle();
        while d.poll(&p.cq_b).is_some() {}
    }
    assert_eq!(d.queued(&p.cq_a.ring), 4);
    assert_eq!(d.irqs(1), 1);
    assert_eq!(d.async_events(), vec![(0, p.cq_a.handle)]);
    let st = d.dev.cq_status(p.cq_a.handle).unwrap();
    assert!(st.error);
    assert_eq!(d.dev.qp_state(p.a.qpn), Some(qp_state::ERR));
    let got: Vec<u64> = (0..4).map(|_| d.poll(&p.cq_a).unwrap().wr_id.get()).collect();
    assert_eq!(got, vec![0, 1, 2, 3], "the queued CQEs were not overwritten");
    // The CQ stays in error: later CQEs are dropped and counted.
    p.send_msg(9, 0, b"m", 0);
    d.settle();
    assert!(d.poll(&p.cq_a).is_none());
    let s = d.dev.stats();
    assert_eq!(s.cq_overflows, 1);
    assert!(s.cqes_dropped_overflow >= 2);
    assert_eq!(s.async_events, 1);
}

#[test]
fn sge_and_memory_errors_complete_with_errors_and_flush() {
    let p = Pair::new(SimConfig::default(), 32);
    let d = &p.d;
    // A bad lkey on the sender: LOC_PROT_ERR, QP to ERR, the next WQE flushed.
    p.post_recv(1, 0, 64);
    d.post_send_wqe(&p.a, 1, wr_opcode::SEND, 0, 0, &[sge(p.src.va, 4, p.src.lkey ^ 1)]);
    d.post_send_wqe(&p.a, 2, wr_opcode::SEND, 0, 0, &[sge(p.src.va, 4, p.src.lkey)]);
    d.qp_doorbell(&p.a, UAR_QP_SEND);
    let c = d.wait_cqes(&p.cq_a, 2);
    assert_eq!(c[0].status.get(), wc_status::LOC_PROT_ERR);
    assert_eq!(c[0].wr_id.get(), 1);
    assert_eq!(c[1].status.get(), wc_status::WR_FLUSH_ERR);
    assert_eq!(c[1].wr_id.get(), 2);
    assert_eq!(d.dev.qp_state(p.a.qpn), Some(qp_state::ERR));
    // Posting to a QP in ERR flushes.
    d.send(&p.a, 3, 0, &[sge(p.src.va, 4, p.src.lkey)]);
    assert_eq!(d.wait_cqes(&p.cq_a, 1)[0].status.get(), wc_status::WR_FLUSH_ERR);
}

#[test]
fn receiver_errors_reach_both_sides() {
    // Too small a receive buffer: receiver LOC_LEN_ERR, sender REM_INV_REQ_ERR.
    let p = Pair::new(SimConfig::default(), 32);
    let d = &p.d;
    p.post_recv(1, 0, 4);
    p.post_recv(2, 0, 4);
    p.send_msg(1, 0, b"too long", 0);
    let r = d.wait_cqes(&p.cq_b, 2);
    assert_eq!(r[0].status.get(), wc_status::LOC_LEN_ERR);
    assert_eq!((r[1].status.get(), r[1].wr_id.get()), (wc_status::WR_FLUSH_ERR, 2));
    let s = d.wait_cqes(&p.cq_a, 1);
    assert_eq!(s[0].status.get(), wc_status::REM_INV_REQ_ERR);
    assert_eq!(d.dev.qp_state(p.b.qpn), Some(qp_state::ERR));
    assert_eq!(d.dev.qp_state(p.a.qpn), Some(qp_state::ERR));

    // A receive MR without LOCAL_WRITE, a range outside the MR, a DMA MR.
    for case in 0..3 {
        let mut p = Pair::new(SimConfig::default(), 32);
        let sg = match case {
            0 => {
                let ro = p.d.create_mr(p.pd, 0x8000, 4096, 0);
                sge(ro.va, 64, ro.lkey)
            }
            1 => sge(p.dst.va + 3 * PAGE - 2, 64, p.dst.lkey),
            _ => {
                let dma = p.d.ok(pvrdma_abi::cmd::CreateMr {
                    pd_handle: U32::new(p.pd),
                    access_flags: U32::new(access::LOCAL_WRITE),
                    flags: U32::new(pvrdma_abi::verbs::mr_flags::DMA),
                    ..Default::default()
                });
                sge(0x1000, 64, dma.lkey.get())
            }
        };
        p.d.recv(&p.b, 5, &[sg]);
        p.send_msg(6, 0, b"data", 0);
        let r = p.d.wait_cqes(&p.cq_b, 1);
        assert_eq!(r[0].status.get(), wc_status::LOC_PROT_ERR, "case {case}");
        assert_eq!(p.d.wait_cqes(&p.cq_a, 1)[0].status.get(), wc_status::REM_OP_ERR);
    }

    // A destination that does not point back, or is not ready: RETRY_EXC_ERR.
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16);
    let a = d.create_qp(pd, cq.handle, cq.handle, 4);
    let b = d.create_qp(pd, cq.handle, cq.handle, 4);
    let mr = d.create_mr(pd, 0x4000, 4096, access::LOCAL_WRITE);
    d.connect(a.qpn, b.qpn);
    d.send(&a, 1, 0, &[sge(mr.va, 4, mr.lkey)]);
    assert_eq!(d.wait_cqes(&cq, 1)[0].status.get(), wc_status::RETRY_EXC_ERR);
}

#[test]
fn qemu72_profile_arms_with_both_bits_and_notifies_every_cqe() {
    let p = Pair::new(SimConfig { profile: Profile::Qemu72, ..Default::default() }, 16);
    let d = &p.d;
    let cqe = |n: u64| Cqe { wr_id: U64::new(n), ..Default::default() };
    let h = p.cq_a.handle;
    // ARM alone does not arm (it clears); ARM_SOL alone is ignored.
    d.cq_doorbell(0, h, UAR_CQ_ARM);
    d.cq_doorbell(0, h, UAR_CQ_ARM_SOL);
    assert!(d.dev.post_cqe(h, &cqe(1), false));
    assert_eq!(d.irqs(2), 0);
    // ARM|ARM_SOL: one-shot, any completion.
    d.cq_doorbell(0, h, UAR_CQ_ARM | UAR_CQ_ARM_SOL);
    assert!(d.dev.post_cqe(h, &cqe(2), false));
    assert!(d.dev.post_cqe(h, &cqe(3), false));
    assert_eq!(d.irqs(2), 1);
    // A notification entry for every CQE, armed or not.
    assert_eq!(d.notifications(), vec![h, h, h]);
    // ARM alone clears a pending arm.
    d.cq_doorbell(0, h, UAR_CQ_ARM | UAR_CQ_ARM_SOL);
    d.cq_doorbell(0, h, UAR_CQ_ARM);
    assert!(d.dev.post_cqe(h, &cqe(4), false));
    assert_eq!(d.irqs(2), 0);
    // Overflow drops the newest CQE silently.
    for n in 5..30 {
        d.dev.post_cqe(h, &cqe(n), false);
    }
    assert_eq!(d.queued(&p.cq_a.ring), 16);
    assert_eq!(d.irqs(1), 0);
    assert!(!d.dev.cq_status(h).unwrap().error);
    assert_eq!(d.poll(&p.cq_a).unwrap().wr_id.get(), 1);
}

#[test]
fn ibta_full_notification_ring_still_interrupts() {
    let p = Pair::new(SimConfig::default(), 4096);
    let d = &p.d;
    let h = p.cq_a.handle;
    // The notification ring has 1024 entries (one page of Cqne); fill it without draining.
    for _ in 0..1030 {
        d.cq_doorbell(0, h, UAR_CQ_ARM);
        assert!(d.dev.post_cqe(h, &Cqe::default(), false));
    }
    assert_eq!(d.irqs(2), 1030);
    let s = d.dev.stats();
    assert_eq!((s.cq_notifications, s.notifications_dropped), (1024, 6));
    assert_eq!(d.notifications().len(), 1024);
}

#[test]
fn a_receive_posted_while_the_port_parks_is_never_lost() {
    let p = Pair::new(SimConfig::default(), 64);
    let d = &p.d;
    for i in 0..400u64 {
        // Send first, so the receive races the port's search for a receive WQE.
        p.send_msg(i, 0, b"r", 0);
        if i % 3 == 0 {
            std::thread::yield_now();
        }
        p.post_recv(i, 0, 8);
        let r = d.wait_cqes(&p.cq_b, 1);
        assert_eq!(r.len(), 1, "message {i} stuck: parked {}", d.dev.parked_packets(p.b.qpn));
        assert_eq!(r[0].wr_id.get(), i);
        assert_eq!(d.wait_cqes(&p.cq_a, 1)[0].wr_id.get(), i);
    }
}

#[test]
fn dropping_the_device_stops_the_port_promptly() {
    let p = Pair::new(SimConfig { link_latency: Duration::from_secs(30), ..Default::default() }, 8);
    p.post_recv(1, 0, 8);
    p.send_msg(1, 0, b"slow", 0);
    assert!(!p.d.dev.wait_port_idle(Duration::from_millis(20)));
    let t = std::time::Instant::now();
    drop(p);
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_qp_with_too_many_bytes_on_the_wire_pauses_its_sq() {
    let cfg = SimConfig { qp_bytes_in_flight: 100, ..Default::default() };
    let p = Pair::new(cfg, 16);
    let d = &p.d;
    for i in 0..3u64 {
        p.send_msg(i, 0, &[i as u8; 60], 60 * i);
    }
    d.settle();
    // One message on the wire (parked at B), the other two still posted in A's SQ.
    assert_eq!(d.dev.parked_packets(p.b.qpn), 1);
    assert_eq!(d.dev.mem().load_u32(p.a.state + 4).unwrap(), 1, "SQ cons_head");
    assert!(d.dev.stats().sq_throttled >= 1);
    for i in 0..3u64 {
        p.post_recv(i, 60 * i, 60);
    }
    let tx = d.wait_cqes(&p.cq_a, 3);
    assert_eq!(tx.iter().map(|c| c.wr_id.get()).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(d.wait_cqes(&p.cq_b, 3).len(), 3);
    let mut got = [0u8; 180];
    d.dev.mem().read(p.dst.iova, &mut got).unwrap();
    assert!(got.chunks(60).enumerate().all(|(i, c)| c.iter().all(|b| *b == i as u8)));
}

#[test]
fn zero_length_sends_are_bounded_by_the_sq_depth() {
    let p = Pair::new(SimConfig::default(), 64);
    let d = &p.d;
    // B has no receive WQE: every send parks. A's SQ is 16 deep.
    for i in 0..16u64 {
        d.send(&p.a, i, 0, &[]);
    }
    d.settle();
    assert_eq!(d.dev.parked_packets(p.b.qpn), 16);
    // Another SQ's worth: the device leaves them posted (16 sends outstanding already).
    for i in 16..32u64 {
        d.send(&p.a, i, 0, &[]);
    }
    d.settle();
    assert_eq!(d.dev.parked_packets(p.b.qpn), 16);
    assert_eq!(d.dev.mem().load_u32(p.a.state + 4).unwrap(), 16, "SQ cons_head");
    assert!(d.dev.stats().sq_throttled >= 1);
    // Receives drain the parked sends, which lets the SQ drain resume, in order.
    for i in 0..32u64 {
        p.post_recv(i, 0, 8);
        if i == 15 {
            assert_eq!(d.wait_cqes(&p.cq_b, 16).len(), 16);
        }
    }
    let tx = d.wait_cqes(&p.cq_a, 32);
    assert_eq!(tx.iter().map(|c| c.wr_id.get()).collect::<Vec<_>>(), (0..32).collect::<Vec<_>>());
    assert_eq!(d.wait_cqes(&p.cq_b, 16).len(), 16);
}

#[test]
fn the_device_wire_budget_pauses_and_resumes_sq_drains() {
    let cfg = SimConfig { device_packets_in_flight: 4, ..Default::default() };
    let p = Pair::new(cfg, 64);
    let d = &p.d;
    for i in 0..16u64 {
        d.send(&p.a, i, 0, &[]);
    }
    d.settle();
    assert_eq!(d.dev.parked_packets(p.b.qpn), 4);
    assert_eq!(d.dev.mem().load_u32(p.a.state + 4).unwrap(), 4, "SQ cons_head");
    for i in 0..16u64 {
        p.post_recv(i, 0, 8);
    }
    let tx = d.wait_cqes(&p.cq_a, 16);
    assert_eq!(tx.iter().map(|c| c.wr_id.get()).collect::<Vec<_>>(), (0..16).collect::<Vec<_>>());
    assert!(tx.iter().all(|c| c.status.get() == wc_status::SUCCESS));
    assert_eq!(d.wait_cqes(&p.cq_b, 16).len(), 16);
}

/// Issue 21 §3: a request nobody answers, from a QP whose `timeout` 0 never runs out, keeps its
/// place in the device's wire budget (a QP it starves waits); moving its sender to ERR,
/// resetting or destroying it lets the packet go, and the starved QP resumes.
#[test]
fn an_unanswered_packet_holds_the_wire_budget_until_its_sender_lets_go() {
    use pvrdma_abi::cmd::DestroyQp;
    use pvrdma_abi::verbs::{qp_attr_mask as m, QpAttr};
    use zerocopy::FromZeros;
    for how in [qp_state::ERR, qp_state::RESET, u32::MAX] {
        let mut p = Pair::new(SimConfig { device_packets_in_flight: 1, ..Default::default() }, 16);
        let cq_x = p.d.create_cq(0, 16);
        let x = p.d.create_qp(p.pd, cq_x.handle, cq_x.handle, 4);
        // B answers only A: X's request waits for an answer for ever.
        let forever = Retries { timeout: 0, retry_cnt: 7, rnr_retry: 7, min_rnr_timer: 12 };
        p.d.connect_with(x.qpn, p.b.qpn, 0, forever);
        p.d.send(&x, 7, 0, &[sge(p.src.va, 8, p.src.lkey)]);
        p.post_recv(1, 0, 8);
        p.send_msg(1, 0, b"starved", 0);
        let waited = osdep::poll_until(&osdep::StdClock, Duration::from_millis(50), || p.d.queued(&p.cq_a.ring) > 0);
        assert!(!waited, "A's send went out past X's packet (device budget 1)");
        if how == u32::MAX {
            p.d.ok(DestroyQp { qp_handle: U32::new(x.qpn), ..Default::default() });
        } else {
            let mut a = QpAttr::new_zeroed();
            a.qp_state = U32::new(how);
            assert_eq!(p.d.modify(x.qpn, m::STATE, a), 0);
        }
        let tx = p.d.wait_cqes(&p.cq_a, 1);
        assert_eq!(tx.first().map(|c| c.status.get()), Some(wc_status::SUCCESS), "how {how}");
        assert_eq!(p.d.wait_cqes(&p.cq_b, 1).len(), 1, "how {how}");
        let flushed: Vec<_> =
            p.d.wait_cqes(&cq_x, usize::from(how == qp_state::ERR)).iter().map(|c| c.status.get()).collect();
        assert_eq!(flushed, if how == qp_state::ERR { vec![wc_status::WR_FLUSH_ERR] } else { vec![] });
    }
}

#[test]
fn unrepresentable_latencies_and_timeouts_do_not_panic() {
    let idle = Pair::new(SimConfig::default(), 8);
    assert!(idle.d.dev.wait_port_idle(Duration::MAX));
    let p = Pair::new(SimConfig { link_latency: Duration::MAX, ..Default::default() }, 8);
    p.post_recv(1, 0, 8);
    p.send_msg(1, 0, b"never", 0);
    assert!(!p.d.dev.wait_port_idle(Duration::from_millis(20)));
}
