//! The probe's arm-encoding self-test against slow, broken and hostile devices, through a relay
//! of the CQ-notification ring (`tests::notify_relay`): stale, junk, duplicated, late and dropped
//! entries, a full ring, a bad ring index, many probes at once. Whatever the device does, the
//! verdict is right or the safe fallback (`ARM|ARM_SOL`, which arms for next on every pvrdma), and
//! completion events still arrive.

use doorbell::ArmEncoding;
use ib_core::{NotifyFlags, WrOpcode};
use pvrdma_sim::{Profile, SimConfig};
use std::time::{Duration, Instant};
use tests::fixture::*;
use tests::notify_relay::{NotifyRelay, RelayRules};

fn qemu72() -> SimConfig {
    SimConfig { profile: Profile::Qemu72, ..Default::default() }
}

/// One message a -> b on a CQ armed through the channel; whether the event came within `wait`.
fn armed_event_arrives(dev: &ib_core::Device, wait: Duration) -> bool {
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    p.recv_b(1, 0, 8);
    p.send_a(1, 0, b"x", WrOpcode::Send, false);
    let got = ch.get_cq_event(wait).map(|c| c.handle()) == Ok(cq.handle());
    if got {
        cq.ack_events(1);
    }
    poll_n(&cq, 2);
    got
}

/// The relay alone changes nothing: both profiles found, events arrive.
#[test]
fn the_relay_alone_changes_nothing() {
    for (cfg, enc) in [(SimConfig::default(), ArmEncoding::Ibta), (qemu72(), ArmEncoding::Qemu72)] {
        let plat = NotifyRelay::new(cfg, RelayRules::default());
        let dev = hca::probe(plat.clone(), Default::default()).unwrap();
        assert_eq!(pv(&dev).arm_encoding(), enc);
        assert!(armed_event_arrives(&dev, WAIT));
    }
}

/// A QEMU 7.2 device that writes a stale entry naming the test's armed CQ before its arm is
/// still QEMU 7.2: entries for the armed CQ count only from its arm on, and the unarmed CQ's
/// entries decide. (Taken for IBTA, it would be armed with `ARM` alone, which clears its arm:
/// no CQ interrupt ever, and solicited-only arming offered and firing on unsolicited messages.)
#[test]
fn a_stale_entry_for_the_armed_cq_does_not_make_qemu72_look_ibta() {
    let rules = RelayRules { inject_after_create_cq: Some(1), ..Default::default() };
    let plat = NotifyRelay::new(qemu72(), rules);
    let dev = hca::probe(plat.clone(), Default::default()).unwrap();
    let enc = pv(&dev).arm_encoding();
    // What the consumer then sees: solicited-only arming is offered, and fires on a message sent
    // without the solicited flag (the device never armed anything; its per-CQE entries fire the
    // driver's arm).
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    let sol = cq.req_notify(NotifyFlags::SOLICITED);
    p.recv_b(1, 0, 8);
    p.send_a(1, 0, b"x", WrOpcode::Send, false);
    poll_n(&cq, 2);
    let misfire = ch.get_cq_event(Duration::from_millis(300)).is_ok();
    let irqs = stats(&dev).interrupts[2];
    assert!(
        enc == ArmEncoding::Qemu72,
        "QEMU 7.2 device taken as {enc:?}: req_notify(SOLICITED) = {sol:?}, event for an unsolicited message: {misfire}, CQ interrupts since probe: {irqs}"
    );
}

/// A QEMU 7.2 device whose ring is full of junk while the first message completes drops that
/// message's entries: the test sees the ring was full and falls back rather than taking the armed
/// CQ's per-CQE entries for an IBTA arm.
#[test]
fn a_full_ring_during_the_first_message_does_not_make_qemu72_look_ibta() {
    let rules = RelayRules {
        junk_on_first_send: 1024,
        junk_handle: 0x0012_3456,
        drop_when_full: true,
        stall_cq_vector_between_sends: true,
        ..Default::default()
    };
    let plat = NotifyRelay::new(qemu72(), rules);
    let dev = hca::probe(plat.clone(), Default::default()).unwrap();
    assert_eq!(pv(&dev).arm_encoding(), ArmEncoding::Qemu72, "QEMU 7.2 device taken for IBTA after a full ring");
}

/// Same with the entry injected at the self-test's raw ARM doorbell itself (a device that
/// acknowledges an arm with an entry): on QEMU 7.2 the unarmed CQ's entries come first, so the
/// verdict must still be QEMU 7.2.
#[test]
fn an_entry_at_the_arm_doorbell_on_qemu72_is_still_qemu72() {
    let rules = RelayRules { inject_on_arm: true, ..Default::default() };
    let plat = NotifyRelay::new(qemu72(), rules);
    let dev = hca::probe(plat.clone(), Default::default()).unwrap();
    plat.rules.lock().unwrap().inject_on_arm = false;
    assert_eq!(pv(&dev).arm_encoding(), ArmEncoding::Qemu72);
    assert!(armed_event_arrives(&dev, WAIT));
}

/// Hostile IBTA device writing an entry for the unarmed CQ: falls back to ARM|ARM_SOL, which
/// still arms for next on the IBTA model (only solicited-only is lost).
#[test]
fn ibta_with_an_entry_for_the_unarmed_cq_falls_back_safely() {
    let rules = RelayRules { inject_after_create_cq: Some(0), ..Default::default() };
    let plat = NotifyRelay::new(SimConfig::default(), rules);
    let dev = hca::probe(plat.clone(), Default::default()).unwrap();
    assert_eq!(pv(&dev).arm_encoding(), ArmEncoding::Qemu72);
    assert!(armed_event_arrives(&dev, WAIT));
}

/// Duplicated entries (every entry forwarded 3 extra times): both profiles still found.
#[test]
fn duplicated_entries_do_not_mislead() {
    for (cfg, enc) in [(SimConfig::default(), ArmEncoding::Ibta), (qemu72(), ArmEncoding::Qemu72)] {
        let plat = NotifyRelay::new(cfg, RelayRules { duplicate: 3, ..Default::default() });
        let dev = hca::probe(plat.clone(), Default::default()).unwrap();
        assert_eq!(pv(&dev).arm_encoding(), enc);
        plat.rules.lock().unwrap().duplicate = 0;
        assert!(armed_event_arrives(&dev, WAIT));
    }
}

/// Entries naming other (unknown) handles at every arm: ignored.
#[test]
fn entries_for_other_handles_do_not_mislead() {
    for (cfg, enc) in [(SimConfig::default(), ArmEncoding::Ibta), (qemu72(), ArmEncoding::Qemu72)] {
        let rules = RelayRules { inject_other_on_arm: Some(0x00ab_cdef), ..Default::default() };
        let plat = NotifyRelay::new(cfg, rules);
        let dev = hca::probe(plat.clone(), Default::default()).unwrap();
        assert_eq!(pv(&dev).arm_encoding(), enc);
    }
}

/// A full ring of junk before the self-test's first CQ: the test still decides.
#[test]
fn a_full_ring_of_junk_before_the_self_test() {
    for (cfg, enc) in [(SimConfig::default(), ArmEncoding::Ibta), (qemu72(), ArmEncoding::Qemu72)] {
        let rules = RelayRules { junk_before_first_cq: 1024, junk_handle: 0x0012_3456, ..Default::default() };
        let plat = NotifyRelay::new(cfg, rules);
        let dev = hca::probe(plat.clone(), Default::default()).unwrap();
        assert_eq!(pv(&dev).arm_encoding(), enc);
        assert!(armed_event_arrives(&dev, WAIT));
    }
}

/// A producer index out of range in the notification ring during the self-test: the probe fails
/// (device fatal) within a bound and leaves no listed device.
#[test]
fn a_bad_ring_index_during_the_self_test_fails_the_probe_in_bounded_time() {
    let rules = RelayRules { bad_prod_before_first_cq: Some(0xdead_beef), ..Default::default() };
    let plat = NotifyRelay::new(SimConfig::default(), rules);
    let t = Instant::now();
    let r = hca::probe(plat.clone(), Default::default());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(r.err(), Some(ib_core::Error::DeviceFatal));
}

/// Every entry reaches the driver 2.5 s late (a stalled host): the self-test falls back, and the
/// late entries of the test's (destroyed) CQs reach no consumer CQ.
#[test]
fn late_entries_fall_back_and_reach_no_consumer() {
    let plat =
        NotifyRelay::new(SimConfig::default(), RelayRules { delay: Duration::from_millis(2500), ..Default::default() });
    let t = Instant::now();
    let dev = hca::probe(plat.clone(), Default::default()).unwrap();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(pv(&dev).arm_encoding(), ArmEncoding::Qemu72);
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(ch.try_get_cq_event().map(|c| c.handle()), None);
}

/// Many probes at once, of both profiles: every one decides right.
#[test]
fn concurrent_probes_all_decide() {
    let hs: Vec<_> = (0..12)
        .map(|i| {
            std::thread::spawn(move || {
                let cfg = if i % 2 == 0 { SimConfig::default() } else { qemu72() };
                let want = if i % 2 == 0 { ArmEncoding::Ibta } else { ArmEncoding::Qemu72 };
                let t = Instant::now();
                let (dev, _s) = hca::open_sim(cfg).unwrap();
                (pv(&dev).arm_encoding() == want, t.elapsed())
            })
        })
        .collect();
    for h in hs {
        let (ok, el) = h.join().unwrap();
        assert!(ok, "wrong encoding (took {el:?})");
    }
}
