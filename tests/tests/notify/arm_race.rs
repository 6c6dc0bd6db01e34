//! Deterministic arm races: a CQE injected (the model's `post_cqe`, from the test thread) exactly
//! between a consumer's last empty poll and its arm — the window of the kDAPL thread and of
//! Linux's `IB_CQ_REPORT_MISSED_EVENTS` — for one CQ and for two CQs armed together, through
//! `req_notify` (the completion channel) and through notify requests.

use ib_core::{NotifyFlags, NotifyKind, NotifyStatus, Wc};
use pvrdma_sim::{ArmState, SimConfig};
use tests::events::cqe;
use tests::fixture::*;

fn polls_empty(cq: &ib_core::Cq) {
    assert_eq!(cq.poll(&mut [Wc::default(); 4]), Ok(0), "the consumer's last poll must be empty");
}

fn polls_wr_ids(cq: &ib_core::Cq) -> Vec<u64> {
    let mut wc = [Wc::default(); 8];
    let n = cq.poll(&mut wc).unwrap();
    wc[..n].iter().map(|w| w.wr_id).collect()
}

#[test]
fn one_cq_channel_cqe_between_last_poll_and_arm() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Disarmed, "a new CQ is disarmed");

    // Without REPORT_MISSED_EVENTS: the arm says nothing and, as IBTA says, the CQE that came
    // before it raises no event. A consumer that slept now would sleep beside it.
    polls_empty(&cq);
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    assert_eq!(cq.req_notify(NotifyFlags::NEXT_COMPLETION), Ok(false));
    assert_no_event(&ch);
    assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Next, "the arm is still set");
    assert_eq!(polls_wr_ids(&cq), vec![1], "only a poll after the arm finds it");

    // That arm is still set: the next CQE raises its one event.
    assert!(d.post_cqe(cq.handle(), &cqe(2), false));
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    assert_no_event(&ch);
    cq.ack_events(1);
    assert_eq!(polls_wr_ids(&cq), vec![2]);

    // With REPORT_MISSED_EVENTS (on a CQ whose arm is spent): the arm reports the CQE, and the
    // consumer polls again instead of sleeping.
    polls_empty(&cq);
    assert!(d.post_cqe(cq.handle(), &cqe(3), false));
    let flags = NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS;
    assert_eq!(cq.req_notify(flags), Ok(true));
    assert_no_event(&ch);
    assert_eq!(polls_wr_ids(&cq), vec![3]);
    // The arm holds for the next CQE: one event.
    assert!(d.post_cqe(cq.handle(), &cqe(4), false));
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    assert_no_event(&ch);
    cq.ack_events(1);
    assert_eq!(polls_wr_ids(&cq), vec![4]);
}

#[test]
fn one_cq_notify_request_cqe_between_last_poll_and_arm() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();

    polls_empty(&cq);
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    let blind = cq.notify(NotifyKind::Next, false).unwrap();
    let checked = cq.notify(NotifyKind::Next, true).unwrap();
    assert_eq!(checked.status(), Some(NotifyStatus::Success), "the missed-events check completes it");
    std::thread::sleep(SETTLE);
    assert_eq!(blind.status(), None, "a CQE queued before the arm raises no event");
    assert_eq!(polls_wr_ids(&cq), vec![1]);
    // The next CQE completes the request that is still outstanding.
    assert!(d.post_cqe(cq.handle(), &cqe(2), false));
    assert_eq!(blind.wait(WAIT), Ok(NotifyStatus::Success));
}

#[test]
fn two_cqs_armed_together_one_cqe_slips_in() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let ch = dev.create_comp_channel().unwrap();
    let a = dev.create_cq(16, Some(&ch)).unwrap();
    let b = dev.create_cq(16, Some(&ch)).unwrap();
    let flags = NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS;

    // Poll both (empty); a CQE reaches A before either is armed; arm both.
    polls_empty(&a);
    polls_empty(&b);
    assert!(d.post_cqe(a.handle(), &cqe(10), false));
    assert_eq!(a.req_notify(flags), Ok(true), "A reports its missed CQE");
    assert_eq!(b.req_notify(flags), Ok(false));
    assert_no_event(&ch);
    assert_eq!(polls_wr_ids(&a), vec![10]);

    // Now one CQE between A's arm and B's arm, the other way round.
    polls_empty(&a);
    polls_empty(&b);
    assert!(d.post_cqe(b.handle(), &cqe(20), false));
    // A is still armed from above (no event since): a repeated arm is harmless.
    assert_eq!(a.req_notify(flags), Ok(false));
    assert_eq!(b.req_notify(flags), Ok(true), "B was armed before its CQE came: it also fires");
    // B's arm was set (by the first round) when its CQE came: that one did raise B's event.
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(b.handle()));
    b.ack_events(1);
    assert_no_event(&ch);
    assert_eq!(polls_wr_ids(&b), vec![20]);

    // Both armed, each gets one CQE afterwards: exactly one event each.
    assert!(d.post_cqe(a.handle(), &cqe(11), false));
    assert!(d.post_cqe(b.handle(), &cqe(21), false));
    let mut got =
        vec![ch.get_cq_event(WAIT).map(|c| c.handle()).unwrap(), ch.get_cq_event(WAIT).map(|c| c.handle()).unwrap()];
    got.sort_unstable();
    let mut want = vec![a.handle(), b.handle()];
    want.sort_unstable();
    assert_eq!(got, want);
    assert_no_event(&ch);
    a.ack_events(1);
    b.ack_events(1);
}

#[test]
fn two_cqs_notify_requests_made_together() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let a = dev.create_cq(16, None).unwrap();
    let b = dev.create_cq(16, None).unwrap();
    polls_empty(&a);
    polls_empty(&b);
    assert!(d.post_cqe(b.handle(), &cqe(1), false));
    let (ra, rb) = (a.notify(NotifyKind::Next, true).unwrap(), b.notify(NotifyKind::Next, true).unwrap());
    assert_eq!(rb.status(), Some(NotifyStatus::Success), "B's missed CQE completes its request");
    assert_eq!(ra.status(), None);
    assert!(d.post_cqe(a.handle(), &cqe(2), false));
    assert_eq!(ra.wait(WAIT), Ok(NotifyStatus::Success));
    assert_eq!(polls_wr_ids(&a), vec![2]);
    assert_eq!(polls_wr_ids(&b), vec![1]);
}
