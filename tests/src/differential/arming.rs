//! How each side arms CQs and reports a full one.

use super::{Difference, Target};
use crate::fixture::{cq_handle, doorbells, pair, pv, raw_doorbell, stats, uar_page};
use doorbell::{ArmEncoding, DoorbellError, DoorbellOp};
use ib_core::{AsyncEventType, Error};
use ib_core::{NotifyFlags, Wc};
use ib_core::{WcStatus, WrOpcode};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What [`cq_arming`] saw, step by step: (events, CQ interrupts) per step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArmingReport {
    /// Steps as (name, events delivered, CQ interrupts taken by the driver).
    pub steps: Vec<(&'static str, u64, u64)>,
}

/// CQ arming and the CQ-notification interrupt: no arm no interrupt, one arm one event, the
/// kernel's arm of a user CQ, and — through raw doorbells, which are the device's arms and not
/// the driver's, so they raise interrupts but never events — QEMU's doorbell encoding against
/// IBTA's and another context's doorbell.
pub fn cq_arming(t: &Target) -> ArmingReport {
    let dev = &t.dev;
    let side = t.side;
    let mut report = ArmingReport::default();
    let ctx = dev.alloc_ucontext().unwrap();
    let other = dev.alloc_ucontext().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, Some(&ch)).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    let h = cq.handle();
    let hc = cq_handle(&cq);
    // Raw device arms through the context's own page: IBTA's `ARM` (next) or `ARM_SOL`
    // (solicited), or QEMU's `ARM|ARM_SOL` (next there).
    let raw = |op: DoorbellOp, enc: ArmEncoding| match op {
        DoorbellOp::CqArmNext => doorbells(&ctx).cq_arm_next(&hc, enc).unwrap(),
        _ => doorbells(&ctx).cq_arm_solicited(&hc, enc).unwrap(),
    };
    let mut irq0 = t.cq_interrupts();
    let mut id = 0;
    // One step: ring `arm`, send one message (solicited or not), poll both CQEs from the ring, then
    // count events and CQ interrupts.
    let mut step = |name: &'static str, arm: &dyn Fn(), solicited: bool| -> (u64, u64) {
        arm();
        id += 1;
        t.one_message(&p, &cq, id, solicited);
        std::thread::sleep(t.settle);
        let mut events = 0;
        while let Some(e) = ch.try_get_cq_event() {
            assert_eq!(e.handle(), h);
            e.ack_events(1);
            events += 1;
        }
        let irq = t.cq_interrupts();
        let got = (events, irq - irq0);
        irq0 = irq;
        report.steps.push((name, got.0, got.1));
        got
    };

    // A. Unarmed: CQEs, no event, no interrupt. QEMU writes a notification entry per CQE anyway.
    let spurious0 = stats(dev).spurious_cq_notifications;
    assert_eq!(step("unarmed", &|| {}, false), (0, 0), "{side:?}: an unarmed CQ signalled");
    let entries = stats(dev).spurious_cq_notifications - spurious0;
    if side.differs(Difference::NotificationPerCqe) {
        assert_eq!(entries, 2, "{side:?}: QEMU writes an entry per CQE, armed or not");
    } else {
        assert_eq!(entries, 0, "{side:?}: the IBTA model writes an entry only when an arm fires");
    }

    // B. Armed for next (twice: a repeated arm is harmless), one message: one event, one
    // interrupt. The CQ is a user context's: the driver arms it through the kernel's UAR page
    // (the arm doorbell mthca never gave a user CQ).
    let arm_next = || {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    };
    assert_eq!(step("req_notify(NEXT) x2, user CQ", &arm_next, false), (1, 1), "{side:?}");
    // The arm is one-shot: the next message raises nothing.
    assert_eq!(step("after the arm fired", &|| {}, false), (0, 0), "{side:?}");

    // C. IBTA arming, raw: ARM|ARM_SOL then ARM alone, through the owner's page.
    let got = step(
        "raw ARM|ARM_SOL, then raw ARM",
        &|| {
            raw(DoorbellOp::CqArmNext, ArmEncoding::Qemu72);
            raw(DoorbellOp::CqArmNext, ArmEncoding::Ibta);
        },
        false,
    );
    if side.differs(Difference::IbtaArming) {
        assert_eq!(got, (0, 0), "{side:?}: ARM alone clears QEMU's arm");
    } else {
        assert_eq!(got, (0, 1), "{side:?}: ARM arms for next under IBTA (a device arm: no event)");
    }

    // D. IBTA arming: ARM_SOL alone (raw), then a solicited message.
    let got = step("raw ARM_SOL, solicited send", &|| raw(DoorbellOp::CqArmSolicited, ArmEncoding::Ibta), true);
    if side.differs(Difference::IbtaArming) {
        assert_eq!(got, (0, 0), "{side:?}: QEMU ignores ARM_SOL alone");
        assert!(matches!(cq.req_notify(NotifyFlags::SOLICITED), Err(Error::Unsupported(_))));
    } else {
        assert_eq!(got, (0, 1), "{side:?}: the solicited receive fires a solicited arm");
        // A solicited arm ignores an unsolicited message (the sender's CQE never satisfies it).
        cq.req_notify(NotifyFlags::SOLICITED).unwrap();
        assert_eq!(step("req_notify(SOLICITED), plain send", &|| {}, false), (0, 0));
        assert_eq!(step("... then a solicited send", &|| {}, true), (1, 1));
    }

    // E. ARM|ARM_SOL raw: QEMU's one arm; next under IBTA too.
    let got = step("raw ARM|ARM_SOL", &|| raw(DoorbellOp::CqArmNext, ArmEncoding::Qemu72), false);
    assert_eq!(got, (0, 1), "{side:?}");

    // F. The kernel's own page arms the user CQ (raw, as the driver's arms go).
    let kernel = || pv(dev).kernel_doorbells().cq_arm_next(&hc, ArmEncoding::Qemu72).unwrap();
    assert_eq!(step("raw kernel page arm of a user CQ", &kernel, false), (0, 1), "{side:?}");

    // G. Ownership: another context's page rings this CQ's arm. The model refuses it; QEMU arms
    // the CQ, so an interrupt comes (carrying no event: the driver never armed).
    // The driver's typed doorbells refuse it before the device sees it; a hostile user writes
    // the page anyway.
    let refused = t.refused_doorbells();
    assert_eq!(doorbells(&other).cq_arm_next(&hc, ArmEncoding::Qemu72), Err(DoorbellError::NotOwner));
    let got = step(
        "another context's page arms",
        &|| raw_doorbell(dev, uar_page(&other), DoorbellOp::CqArmNext, h, ArmEncoding::Qemu72),
        false,
    );
    if side.differs(Difference::OwnershipChecks) {
        assert_eq!(got, (0, 1), "{side:?}: QEMU accepts any handle on any page");
        assert_eq!(t.refused_doorbells(), refused);
    } else {
        assert_eq!(got, (0, 0), "{side:?}: the model refuses a foreign context's doorbell");
        assert_eq!(t.refused_doorbells(), refused + 1);
    }
    assert!(!dev.is_fatal());
    report
}

/// A CQ that fills up: the IBTA model reports Overrun (CQ_ERR) after the queued CQEs; QEMU 7.2
/// drops the new CQEs silently and the QP carries on.
pub fn cq_overflow(t: &Target) {
    let dev = &t.dev;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    dev.set_async_event_handler(move |e| {
        sink.lock().unwrap().push((e.event_type, e.cq().map(|c| c.handle())));
    });
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(1, None).unwrap();
    let rcq = dev.create_cq(32, None).unwrap();
    let p = pair(dev, &pd, (&scq, &rcq), (&scq, &rcq));
    // One message at a time, so QEMU's backend CQ (rxe's, as small as the guest's) is drained by
    // QEMU between them: only the guest's ring overflows. The first send CQE fills the CQ, the
    // second does not fit.
    for i in 0..2 {
        p.recv_b(i, 0, 64);
        p.send_a(i, 0, b"o", WrOpcode::Send, false);
        t.poll_n(&rcq, 1);
    }
    let mut wc = [Wc::default(); 4];
    if t.side.differs(Difference::CqOverflowReporting) {
        std::thread::sleep(t.settle);
        assert_eq!(scq.poll(&mut wc), Ok(1), "{:?}", t.side);
        assert_eq!(scq.poll(&mut wc), Ok(0), "{:?}: QEMU drops the CQEs that did not fit", t.side);
        assert!(events.lock().unwrap().is_empty(), "{:?}: {:?}", t.side, events.lock().unwrap());
        // The QP is still usable: the next send completes into the drained CQ.
        p.recv_b(9, 0, 64);
        p.send_a(9, 0, b"after", WrOpcode::Send, false);
        assert_eq!(t.poll_n(&scq, 1)[0].status, WcStatus::Success);
        t.poll_n(&rcq, 1);
    } else {
        // The driver counts the event before the core hands it to the handler: wait for the
        // handler itself.
        let deadline = Instant::now() + t.wait;
        while events.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(scq.poll(&mut wc), Ok(1));
        assert_eq!(scq.poll(&mut wc), Err(Error::CqOverrun));
        assert_eq!(events.lock().unwrap().as_slice(), &[(AsyncEventType::CqErr, Some(scq.handle()))]);
    }
    assert_eq!(rcq.poll(&mut wc), Ok(0));
}
