//! Notify requests (the winverbs model): NEXT / SOLICITED / ERROR_ONLY, all outstanding requests
//! completed by one event, the four statuses, user CQs armed by the kernel, the arm union with the
//! completion channel, and QEMU 7.2's profile.

use hca::ProbeOptions;
use ib_core::{AsyncEventType, Device, Error, NotifyFlags, NotifyKind, NotifyStatus};
use ib_core::{UpcallPolicy, Wc, WrOpcode};
use pvrdma_abi::regs::REG_IMR;
use pvrdma_sim::{ArmState, Profile, SimConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tests::events::{cqe, err_cqe, wait_for};
use tests::fixture::*;

fn short_timeouts() -> ProbeOptions {
    ProbeOptions { cmd_timeout: Duration::from_millis(300), ..Default::default() }
}

#[test]
fn every_outstanding_request_completes_on_the_one_event() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let next: Vec<_> = (0..3).map(|_| cq.notify(NotifyKind::Next, false).unwrap()).collect();
    let sol = cq.notify(NotifyKind::Solicited, false).unwrap();
    let err = cq.notify(NotifyKind::ErrorOnly, false).unwrap();
    assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Next, "the union of the kinds");
    assert_eq!(cq.outstanding_notifies(), 5);
    // Waiters on other threads.
    let waiters: Vec<_> = next.into_iter().map(|r| std::thread::spawn(move || r.wait(WAIT))).collect();
    std::thread::sleep(Duration::from_millis(20));
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    for w in waiters {
        assert_eq!(w.join().unwrap(), Ok(NotifyStatus::Success));
    }
    // The SOLICITED request shares a NEXT arm: the device cannot say which CQE fired it, so it
    // completes too (early, never late).
    assert_eq!(sol.wait(WAIT), Ok(NotifyStatus::Success));
    std::thread::sleep(SETTLE);
    assert_eq!(err.status(), None, "ERROR_ONLY waits for an error");
    assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Disarmed, "and does not re-arm");
    assert_eq!(err.cancel(), NotifyStatus::Cancelled);
    assert_eq!(cq.outstanding_notifies(), 0);
}

#[test]
fn solicited_fires_on_a_solicited_receive_or_an_error_never_on_the_senders_cqe() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let pd = dev.alloc_pd().unwrap();
    let (scq_a, rcq_a) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let (scq_b, rcq_b) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let p = pair(&dev, &pd, (&scq_a, &rcq_a), (&scq_b, &rcq_b));
    let on_send = scq_a.notify(NotifyKind::Solicited, false).unwrap();
    let on_recv = rcq_b.notify(NotifyKind::Solicited, false).unwrap();
    assert_eq!(d.cq_status(rcq_b.handle()).unwrap().arm, ArmState::Solicited);
    // A plain message: neither fires.
    p.recv_b(1, 0, 64);
    p.send_a(1, 0, b"plain", WrOpcode::Send, false);
    poll_n(&rcq_b, 1);
    poll_n(&scq_a, 1);
    std::thread::sleep(SETTLE);
    assert_eq!((on_send.status(), on_recv.status()), (None, None));
    // A solicited message: the responder's receive CQE fires; the sender's own CQE does not.
    p.recv_b(2, 0, 64);
    p.send_a(2, 0, b"urgent", WrOpcode::Send, true);
    assert_eq!(on_recv.wait(WAIT), Ok(NotifyStatus::Success));
    poll_n(&scq_a, 1);
    std::thread::sleep(SETTLE);
    assert_eq!(on_send.status(), None, "the sender's own CQE never satisfies SOLICITED");
    poll_n(&rcq_b, 1);
    // Any error CQE (a flush) does.
    assert!(d.post_cqe(scq_a.handle(), &err_cqe(9), false));
    assert_eq!(on_send.wait(WAIT), Ok(NotifyStatus::Success));
    // And the solicited flag on a receive CQE (injected).
    let again = rcq_a.notify(NotifyKind::Solicited, false).unwrap();
    assert!(d.post_cqe(rcq_a.handle(), &cqe(3), false));
    std::thread::sleep(SETTLE);
    assert_eq!(again.status(), None);
    assert!(d.post_cqe(rcq_a.handle(), &cqe(4), true));
    assert_eq!(again.wait(WAIT), Ok(NotifyStatus::Success));
}

#[test]
fn channel_and_requests_share_one_arm() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::SOLICITED).unwrap();
    assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Solicited);
    let r = cq.notify(NotifyKind::Next, false).unwrap();
    assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Next, "NEXT upgrades");
    cq.req_notify(NotifyFlags::SOLICITED).unwrap();
    assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Next, "SOLICITED keeps NEXT");
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    assert_eq!(r.wait(WAIT), Ok(NotifyStatus::Success));
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    assert_no_event(&ch);
    cq.ack_events(1);
    // A request alone does not feed the channel.
    let r = cq.notify(NotifyKind::Next, false).unwrap();
    assert!(d.post_cqe(cq.handle(), &cqe(2), false));
    assert_eq!(r.wait(WAIT), Ok(NotifyStatus::Success));
    assert_no_event(&ch);
}

#[test]
fn overflow_completes_requests_with_overrun_and_the_async_handler_sees_it() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    dev.set_async_event_handler(move |e| sink.lock().unwrap().push(ev(e)));
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(1, Some(&ch)).unwrap();
    let err = cq.notify(NotifyKind::ErrorOnly, false).unwrap();
    assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Disarmed, "ERROR_ONLY does not arm");
    assert!(d.post_cqe(cq.handle(), &cqe(1), false)); // fills the CQ
    let next = cq.notify(NotifyKind::Next, false).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    assert!(d.post_cqe(cq.handle(), &cqe(2), false)); // overflows: CQ_ERR
    assert_eq!(err.wait(WAIT), Ok(NotifyStatus::Overrun));
    assert_eq!(next.wait(WAIT), Ok(NotifyStatus::Overrun));
    // The channel consumer wakes, polls what was queued, then sees the overrun.
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(cq.handle()));
    cq.ack_events(1);
    let mut wc = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc), Ok(1));
    assert_eq!(wc[0].wr_id, 1);
    assert_eq!(cq.poll(&mut wc), Err(Error::CqOverrun));
    wait_for(WAIT, "the async handler", || !seen.lock().unwrap().is_empty());
    assert_eq!(seen.lock().unwrap().as_slice(), &[(AsyncEventType::CqErr, Some(cq.handle()))]);
    assert_eq!(d.stats().cqes_dropped_overflow, 1, "the model never overwrites: it drops and counts");
    // A later request completes at once with the CQ's error.
    assert_eq!(cq.notify(NotifyKind::Next, true).unwrap().status(), Some(NotifyStatus::Overrun));
}

/// Every catastrophic cause completes every request of every CQ with Failure and wakes every
/// waiter (requests, channels, upcalls) with an error; nothing hangs.
fn catastrophe(cause: impl FnOnce(&Device, &pvrdma_sim::SimDevice)) {
    let (dev, sim) = hca::open_sim_with(SimConfig::default(), short_timeouts()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let a = dev.create_cq(16, Some(&ch)).unwrap();
    let b = dev.create_cq(16, None).unwrap();
    let upcalls = Arc::new(Mutex::new(Vec::new()));
    let sink = upcalls.clone();
    b.set_upcall(UpcallPolicy::ManyInstance, move |_, st| sink.lock().unwrap().push(st)).unwrap();
    a.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    let reqs = [
        a.notify(NotifyKind::Next, false).unwrap(),
        a.notify(NotifyKind::ErrorOnly, false).unwrap(),
        b.notify(NotifyKind::Solicited, false).unwrap(),
    ];
    let waiters: Vec<_> =
        reqs.into_iter().map(|r| std::thread::spawn(move || r.wait(Duration::from_secs(20)))).collect();
    let chw = {
        let ch = ch.clone();
        std::thread::spawn(move || ch.get_cq_event(Duration::from_secs(20)).map(|c| c.handle()))
    };
    std::thread::sleep(Duration::from_millis(20));
    let t = std::time::Instant::now();
    cause(&dev, sim.device());
    for w in waiters {
        assert_eq!(w.join().unwrap(), Ok(NotifyStatus::Failure));
    }
    assert_eq!(chw.join().unwrap(), Err(Error::DeviceFatal));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    wait_for(WAIT, "the upcall's failure", || !upcalls.lock().unwrap().is_empty());
    assert_eq!(upcalls.lock().unwrap().as_slice(), &[NotifyStatus::Failure]);
    assert!(matches!(a.notify(NotifyKind::Next, false), Err(Error::DeviceFatal)));
    drop((a, b, dev));
}

#[test]
fn device_fatal_fails_every_request() {
    catastrophe(|_, d| d.inject_fatal());
}

#[test]
fn all_ones_registers_found_by_the_health_check_fail_every_request() {
    catastrophe(|_, d| d.set_dead(true));
}

#[test]
fn a_command_timeout_fails_every_request() {
    catastrophe(|dev, d| {
        d.reg_write(REG_IMR, 1); // the command interrupt never comes
        assert!(matches!(dev.alloc_pd(), Err(Error::Device(_))));
    });
}

#[test]
fn a_bad_ring_index_fails_every_request() {
    catastrophe(|_, d| {
        // A CQ_ERR for a CQ that exists is an overrun, not a failure; a wild producer index in
        // the async-event ring is a failure.
        let at = u64::from(d.reg_read(pvrdma_abi::regs::REG_DSRHIGH)) << 32
            | u64::from(d.reg_read(pvrdma_abi::regs::REG_DSRLOW));
        let mut b = vec![0u8; core::mem::size_of::<pvrdma_abi::dsr::Dsr>()];
        d.mem().read(at, &mut b).unwrap();
        let dsr = <pvrdma_abi::dsr::Dsr as zerocopy::FromBytes>::read_from_bytes(&b).unwrap();
        let dir = dsr.async_ring_pages.pdir_dma.get();
        let table = d.mem().read_u64(dir).unwrap();
        let state = d.mem().read_u64(table).unwrap();
        // The driver's next drain (at most one service interval away) finds it.
        d.mem().store_u32(state + pvrdma_abi::ring::RX_PROD_TAIL, 0xdead_beef).unwrap();
    });
}

#[test]
fn a_user_cq_is_armed_by_the_kernel_for_its_requests() {
    for profile in [Profile::Ibta, Profile::Qemu72] {
        let (dev, sim) = hca::open_sim(SimConfig { profile, ..Default::default() }).unwrap();
        let d = sim.device();
        let ctx = dev.alloc_ucontext().unwrap();
        let cq = ctx.create_cq(16, None).unwrap();
        let refused = d.stats().refused_doorbells;
        let r = cq.notify(NotifyKind::Next, true).unwrap();
        assert_eq!(d.cq_status(cq.handle()).unwrap().arm, ArmState::Next, "{profile:?}");
        assert_eq!(d.stats().refused_doorbells, refused, "the kernel page may arm a user CQ");
        assert!(d.post_cqe(cq.handle(), &cqe(7), false));
        assert_eq!(r.wait(WAIT), Ok(NotifyStatus::Success), "{profile:?}");
        // A second request after the event re-arms through the kernel page again.
        let r = cq.notify(NotifyKind::Next, true).unwrap();
        assert_eq!(r.status(), Some(NotifyStatus::Success), "the CQE is still queued");
        assert_eq!(poll_n(&cq, 1)[0].wr_id, 7);
        let r = cq.notify(NotifyKind::Next, true).unwrap();
        assert_eq!(r.status(), None);
        assert!(d.post_cqe(cq.handle(), &cqe(8), false));
        assert_eq!(r.wait(WAIT), Ok(NotifyStatus::Success));
    }
}

#[test]
fn qemu72_cannot_express_a_solicited_request() {
    let (dev, _sim) = hca::open_sim(SimConfig { profile: Profile::Qemu72, ..Default::default() }).unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    assert!(matches!(cq.notify(NotifyKind::Solicited, false), Err(Error::Unsupported(_))));
    assert!(cq.notify(NotifyKind::ErrorOnly, false).is_ok());
}

#[test]
fn cancel_and_destroy_complete_requests_cancelled() {
    let (dev, _sim) = hca::open_sim(SimConfig::default()).unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let a = cq.notify(NotifyKind::Next, false).unwrap();
    let b = cq.notify(NotifyKind::ErrorOnly, false).unwrap();
    let w = std::thread::spawn(move || b.wait(Duration::from_secs(20)));
    assert_eq!(a.cancel(), NotifyStatus::Cancelled);
    assert_eq!(a.wait(WAIT), Ok(NotifyStatus::Cancelled));
    cq.destroy(None).unwrap();
    assert_eq!(w.join().unwrap(), Ok(NotifyStatus::Cancelled));
}
