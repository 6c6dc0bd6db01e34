//! A dead device: the driver checks liveness on a clock, not when things are quiet. With the
//! device dead (registers all-ones) under interrupt storms on any vector, every waiter gets
//! `DeviceFatal` within a second, never a `Timeout` after seconds. (From the second breaker round
//! of issue 10.)

use hca::ProbeOptions;
use ib_core::{Error, NotifyFlags, NotifyKind, NotifyStatus};
use pvrdma_abi::event::EqeType;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What "fast" means: the health check runs every 50 ms; a second is generous on a loaded CI.
const FAST: Duration = Duration::from_secs(1);
/// How long each waiter is willing to wait: far past FAST, so a Timeout is a failure.
const LONG: Duration = Duration::from_secs(4);

fn opts() -> ProbeOptions {
    ProbeOptions { cmd_timeout: LONG, ..Default::default() }
}

/// Raises each of `vectors` in a loop until dropped.
struct Storm {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Storm {
    fn start(sim: &hca::platform::sim::SimPlatform, vectors: &[u16]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = vectors
            .iter()
            .map(|&v| {
                let (dev, stop) = (sim.device().clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        dev.vectors().raise(v);
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        Self { stop, threads }
    }
}

impl Drop for Storm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn a_channel_waiter_gets_device_fatal_fast_under_a_storm_on_any_vector() {
    for vectors in [&[0u16][..], &[2], &[3], &[15], &[0, 1, 2], &[]] {
        let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
        let ch = dev.create_comp_channel().unwrap();
        let cq = dev.create_cq(8, Some(&ch)).unwrap();
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        let storm = Storm::start(&sim, vectors);
        sim.device().set_dead(true);
        let t = Instant::now();
        let got = ch.get_cq_event(LONG).map(|c| c.handle());
        let waited = t.elapsed();
        drop(storm);
        assert_eq!(got, Err(Error::DeviceFatal), "storm on {vectors:?}");
        assert!(waited < FAST, "DeviceFatal after {waited:?} under a storm on {vectors:?}");
    }
}

#[test]
fn every_kind_of_waiter_gets_device_fatal_fast_under_storms_on_every_vector() {
    let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    let cq2 = dev.create_cq(8, None).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    let next = cq2.notify(NotifyKind::Next, false).unwrap();
    let err_only = cq2.notify(NotifyKind::ErrorOnly, false).unwrap();
    let storm = Storm::start(&sim, &[1, 2]);
    let t = Instant::now();
    let async_waiter = {
        let dev = dev.clone();
        std::thread::spawn(move || (dev.get_async_event(LONG).map(|e| e.event_type), t.elapsed()))
    };
    let chan_waiter = std::thread::spawn(move || (ch.get_cq_event(LONG).map(|c| c.handle()), t.elapsed()));
    let notify_waiter = std::thread::spawn(move || {
        let r = (next.wait(LONG), err_only.wait(LONG));
        (r, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(30));
    let died = Instant::now();
    sim.device().set_dead(true);
    let (a, at) = async_waiter.join().unwrap();
    let (c, ct) = chan_waiter.join().unwrap();
    let (n, nt) = notify_waiter.join().unwrap();
    let cmd = dev.alloc_pd().map(|_| ());
    let cmd_t = died.elapsed();
    drop(storm);
    // The async queue hands out its DEVICE_FATAL event first, or DeviceFatal.
    assert!(matches!(a, Ok(ib_core::AsyncEventType::DeviceFatal) | Err(Error::DeviceFatal)), "{a:?}");
    assert_eq!(c, Err(Error::DeviceFatal));
    assert_eq!(n, (Ok(NotifyStatus::Failure), Ok(NotifyStatus::Failure)));
    assert_eq!(cmd, Err(Error::DeviceFatal));
    for (what, w) in [("async", at), ("channel", ct), ("notify", nt), ("command", cmd_t)] {
        assert!(w < FAST + Duration::from_millis(30), "{what} waiter ended after {w:?}");
    }
    let destroyed = Instant::now();
    assert!(cq2.destroy(Some(LONG)).is_ok());
    assert!(destroyed.elapsed() < FAST);
}

#[test]
fn a_cq_destroy_waiting_for_an_ack_ends_fast_when_the_device_dies_under_a_storm() {
    let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    sim.device().post_cqe(cq.handle(), &tests::events::cqe(1), false);
    let _unacked = ch.get_cq_event(LONG).unwrap();
    let storm = Storm::start(&sim, &[1, 2, 0]);
    let d = sim.device().clone();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        d.set_dead(true);
        Instant::now()
    });
    let r = cq.destroy(Some(LONG)).map_err(|(_, e)| e);
    let died = killer.join().unwrap();
    let after = died.elapsed();
    drop(storm);
    assert!(matches!(r, Ok(()) | Err(Error::DeviceFatal)), "{r:?}");
    assert!(after < FAST, "the destroy ended {after:?} after the device died");
}

#[test]
fn a_command_on_a_dead_device_under_a_vector_0_storm_fails_device_fatal() {
    let mut wrong = Vec::new();
    for round in 0..10 {
        let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
        let storm = Storm::start(&sim, &[0]);
        sim.device().set_dead(true);
        let t = Instant::now();
        let r = dev.alloc_pd().map(|_| ());
        let waited = t.elapsed();
        drop(storm);
        assert!(waited < FAST, "round {round}: {waited:?}");
        if r != Err(Error::DeviceFatal) {
            wrong.push(format!("{r:?}"));
        }
    }
    assert!(wrong.is_empty(), "not DeviceFatal: {wrong:?}");
}

#[test]
fn a_polling_command_on_a_dead_device_fails_fast() {
    let o = ProbeOptions { cmd_wait: hca::WaitMode::Polling, ..opts() };
    let (dev, sim) = hca::open_sim_with(Default::default(), o).unwrap();
    sim.device().set_dead(true);
    let t = Instant::now();
    let r = dev.alloc_pd().map(|_| ());
    let waited = t.elapsed();
    assert_eq!(r, Err(Error::DeviceFatal));
    assert!(waited < FAST, "DeviceFatal after {waited:?}");
}

#[test]
fn a_blocked_async_event_handler_does_not_stop_the_health_check() {
    let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
    let entered = Arc::new(AtomicBool::new(false));
    let flag = entered.clone();
    dev.set_async_event_handler(move |_| {
        if !flag.swap(true, Ordering::SeqCst) {
            std::thread::sleep(Duration::from_secs(3));
        }
    });
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    sim.device().inject_async_event(EqeType::PortActive, 1);
    let t = Instant::now();
    while !entered.load(Ordering::SeqCst) && t.elapsed() < LONG {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(entered.load(Ordering::SeqCst), "the handler ran");
    sim.device().set_dead(true);
    let t = Instant::now();
    let got = ch.get_cq_event(Duration::from_secs(2)).map(|c| c.handle());
    let waited = t.elapsed();
    assert_eq!(got, Err(Error::DeviceFatal), "after {waited:?}");
    assert!(waited < FAST, "DeviceFatal after {waited:?}");
}

#[test]
fn a_device_that_dies_between_commands_fails_the_next_ones_fast_under_a_cq_storm() {
    let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let storm = Storm::start(&sim, &[2]);
    sim.device().set_dead(true);
    let t = Instant::now();
    let results: Vec<_> = (0..5).map(|_| dev.create_cq(8, None).map(|_| ())).collect();
    let again = dev.alloc_pd().map(|_| ());
    let waited = t.elapsed();
    drop(storm);
    assert!(results.iter().all(|r| *r == Err(Error::DeviceFatal)), "{results:?}");
    assert_eq!(again, Err(Error::DeviceFatal));
    drop(pd);
    assert!(waited < FAST, "{waited:?}");
}

#[test]
fn a_polling_create_blocked_on_a_dead_device_does_not_starve_the_health_check() {
    let o = ProbeOptions { cmd_wait: hca::WaitMode::Polling, ..opts() };
    let (dev, sim) = hca::open_sim_with(Default::default(), o).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    let creator = {
        let dev = dev.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < LONG + LONG {
                if dev.create_cq(8, None).is_err() {
                    break;
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    sim.device().set_dead(true);
    let t = Instant::now();
    let got = ch.get_cq_event(Duration::from_secs(2)).map(|c| c.handle());
    let waited = t.elapsed();
    creator.join().unwrap();
    assert_eq!(got, Err(Error::DeviceFatal), "after {waited:?}");
    assert!(waited < FAST, "DeviceFatal after {waited:?}");
}

#[test]
fn a_cq_upcall_gets_failure_fast_when_the_device_dies_under_a_storm() {
    let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    cq.set_upcall(ib_core::UpcallPolicy::ManyInstance, move |_, status| {
        let _ = tx.send((status, Instant::now()));
    })
    .unwrap();
    let storm = Storm::start(&sim, &[0, 1, 2]);
    let died = Instant::now();
    sim.device().set_dead(true);
    let got = rx.recv_timeout(LONG);
    drop(storm);
    let (status, at) = got.expect("an upcall after the device died");
    assert_eq!(status, NotifyStatus::Failure);
    assert!(at - died < FAST, "upcall after {:?}", at - died);
}

#[test]
fn a_qp_destroy_waiting_for_an_ack_ends_fast_when_the_device_dies_under_a_storm() {
    let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let qp = tests::fixture::rc_qp(&pd, &cq, &cq);
    sim.device().inject_async_event(EqeType::QpFatal, qp.qpn());
    let unacked = dev.get_async_event(LONG).unwrap();
    assert_eq!(unacked.event_type, ib_core::AsyncEventType::QpFatal);
    let storm = Storm::start(&sim, &[1, 2]);
    let d = sim.device().clone();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        d.set_dead(true);
        Instant::now()
    });
    let r = qp.destroy(Some(LONG)).map_err(|(_, e)| e);
    let died = killer.join().unwrap();
    let after = died.elapsed();
    drop(storm);
    assert!(matches!(r, Ok(()) | Err(Error::DeviceFatal)), "{r:?}");
    assert!(after < FAST, "the destroy ended {after:?} after the device died");
    unacked.ack();
}

#[test]
fn closing_everything_on_a_dead_stormed_device_ends_fast() {
    let (dev, sim) = hca::open_sim_with(Default::default(), opts()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cqs: Vec<_> = (0..4).map(|_| dev.create_cq(16, Some(&ch)).unwrap()).collect();
    let qps: Vec<_> = cqs.iter().map(|cq| tests::fixture::rc_qp(&pd, cq, cq)).collect();
    let storm = Storm::start(&sim, &[0, 1, 2]);
    sim.device().set_dead(true);
    let t = Instant::now();
    drop(qps);
    drop(cqs);
    drop(pd);
    drop(ch);
    drop(dev);
    let took = t.elapsed();
    drop(storm);
    assert!(took < FAST, "closing took {took:?}");
}
