//! The driver against a failing device: fatal events, surprise removal, hostile CQEs.

use hca::ProbeOptions;
use ib_core::{AsyncEventType, Error, NotifyFlags, Wc, WcStatus};
use pvrdma_abi::wqe::{wc_opcode, Cqe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tests::fixture::*;

fn short_timeouts() -> ProbeOptions {
    ProbeOptions { cmd_timeout: Duration::from_millis(300), ..Default::default() }
}

#[test]
fn device_fatal_wakes_waiters_and_fails_every_verb() {
    let (dev, sim) = hca::open_sim_with(Default::default(), short_timeouts()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    dev.set_async_event_handler(move |e| sink.lock().map(|mut v| v.push(ev(e))).unwrap_or(()));
    let ch = dev.create_comp_channel().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    let waiter = {
        let ch = ch.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            (ch.get_cq_event(Duration::from_secs(20)).map(|c| c.handle()), t.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    sim.device().inject_fatal();
    let (got, waited) = waiter.join().unwrap();
    assert_eq!(got, Err(Error::DeviceFatal));
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(dev.is_fatal());
    // The handler runs on the driver's async thread: the waiter may wake before it has run.
    let told = Instant::now();
    while seen.lock().map(|v| v.is_empty()).unwrap_or(false) && told.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(seen.lock().map(|v| v.clone()).unwrap_or_default(), vec![(AsyncEventType::DeviceFatal, None)]);
    let mut wc = [Wc::default(); 2];
    assert_eq!(cq.poll(&mut wc), Err(Error::DeviceFatal));
    assert_eq!(cq.req_notify(NotifyFlags::NEXT_COMPLETION), Err(Error::DeviceFatal));
    assert!(matches!(dev.alloc_pd(), Err(Error::DeviceFatal)));
    assert!(matches!(pd.alloc_mr(4096, 0), Err(Error::DeviceFatal)));
    // Teardown of objects on a fatal device logs, never hangs.
    let t = Instant::now();
    drop((cq, pd, dev));
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[test]
fn surprise_removal_is_found_by_the_health_check() {
    let (dev, sim) = hca::open_sim_with(Default::default(), short_timeouts()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    sim.device().set_dead(true);
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Err(Error::DeviceFatal));
    assert!(dev.is_fatal());
    assert!(matches!(dev.query_port(1), Err(Error::DeviceFatal)));
}

#[test]
fn probe_of_a_dead_device_fails() {
    let sim = hca::platform::sim::SimPlatform::new(Default::default());
    sim.device().set_dead(true);
    assert!(matches!(hca::probe(Arc::new(sim), Default::default()), Err(Error::DeviceFatal)));
}

#[test]
fn hostile_cqes_become_error_completions() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let qp = rc_qp(&pd, &cq, &cq);
    // A receive the device holds (no message comes): the one CQE below that is believed.
    connect(&qp, qp.qpn(), gid(&dev));
    qp.post_recv(&ib_core::RecvWr { wr_id: 7, sg_list: &[] }).unwrap();
    let mut forged = Cqe::default();
    forged.wr_id.set(7);
    forged.qp.set(u64::from(qp.qpn()) + 1000); // not a QP on this CQ
    forged.opcode.set(wc_opcode::RECV);
    assert!(sim.device().post_cqe(cq.handle(), &forged, false));
    forged.qp.set(u64::from(qp.qpn()));
    forged.opcode.set(0x4242); // unknown opcode
    assert!(sim.device().post_cqe(cq.handle(), &forged, false));
    forged.opcode.set(wc_opcode::RECV);
    assert!(sim.device().post_cqe(cq.handle(), &forged, false));
    let wcs = poll_n(&cq, 3);
    assert_eq!((wcs[0].status, wcs[0].qp_num), (WcStatus::GeneralErr, 0));
    assert_eq!(wcs[1].status, WcStatus::GeneralErr);
    assert_eq!((wcs[2].status, wcs[2].qp_num, wcs[2].wr_id), (WcStatus::Success, qp.qpn(), 7));
}

#[test]
fn destroying_a_qp_removes_its_queued_cqes() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let (q1, q2) = (rc_qp(&pd, &cq, &cq), rc_qp(&pd, &cq, &cq));
    for q in [&q1, &q2] {
        connect(q, q.qpn(), gid(&dev));
    }
    for (wr_id, qp) in [(1u64, &q1), (2, &q2), (3, &q1), (4, &q2)] {
        // A receive the device holds, so the CQE forged for it is believed.
        qp.post_recv(&ib_core::RecvWr { wr_id, sg_list: &[] }).unwrap();
        let mut c = Cqe::default();
        c.wr_id.set(wr_id);
        c.qp.set(u64::from(qp.qpn()));
        c.opcode.set(wc_opcode::RECV);
        assert!(sim.device().post_cqe(cq.handle(), &c, false));
    }
    drop(q1);
    let wcs = poll_n(&cq, 2);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![2, 4]);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
}

fn epoll_readable(fd: i32, ms: i32) -> bool {
    // SAFETY: epoll on a live fd with locals that outlive the calls; the epoll fd is closed.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        let mut e = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 1 };
        libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut e);
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 1];
        let n = libc::epoll_wait(ep, out.as_mut_ptr(), 1, ms);
        libc::close(ep);
        n == 1
    }
}

/// Threads blocked in `get_cq_event` and in epoll on the channel fd and the async fd all wake
/// promptly when the device dies; O_NONBLOCK reads then say DEVICE_FATAL, not EAGAIN, and a
/// channel made afterwards is readable at once.
#[test]
fn fatal_wakes_every_kind_of_waiter() {
    let (dev, sim) = hca::open_sim_with(Default::default(), short_timeouts()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let _cq = dev.create_cq(16, Some(&ch)).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let waiters: Vec<_> = (0..6)
        .map(|i| {
            let ch = ch.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                let woke = if i % 2 == 0 {
                    ch.get_cq_event(Duration::from_secs(8)).map(|c| c.handle()) == Err(Error::DeviceFatal)
                } else {
                    epoll_readable(ch.fd(), 8000)
                };
                (woke, t.elapsed())
            })
        })
        .collect();
    let afd = ctx.async_fd();
    let async_waiter = std::thread::spawn(move || {
        let t = Instant::now();
        (epoll_readable(afd, 8000), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100));
    sim.device().inject_fatal();
    for w in waiters.into_iter().chain([async_waiter]) {
        let (woke, took) = w.join().unwrap();
        assert!(woke && took < Duration::from_secs(3), "woke {woke} after {took:?}");
    }
    ch.set_nonblocking(true).unwrap();
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Err(Error::DeviceFatal));
    let e = ctx.get_async_event(WAIT).unwrap();
    assert_eq!(e.event_type, AsyncEventType::DeviceFatal);
    e.ack();
    ctx.set_async_nonblocking(true).unwrap();
    assert_eq!(ctx.get_async_event(WAIT).map(|e| e.event_type), Err(Error::DeviceFatal));
    assert!(matches!(dev.create_cq(4, None), Err(Error::DeviceFatal)));
    let late = dev.create_comp_channel().unwrap();
    assert!(epoll_readable(late.fd(), 0), "a channel made after fatal is not readable");
}

/// A CQ destroy waiting for an ack is cut short by a fatal device (hca, not the scripted core).
#[test]
fn cq_destroy_ack_wait_cut_by_fatal() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    sim.device().post_cqe(cq.handle(), &tests::events::cqe(1), false);
    let _ev = ch.get_cq_event(WAIT).unwrap();
    let d = sim.device().clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        d.inject_fatal();
    });
    let start = Instant::now();
    let r = cq.destroy(Some(Duration::from_secs(20)));
    assert!(r.is_ok() && start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    t.join().unwrap();
}

/// A device-fatal async event and a port event racing destroys: nothing hangs.
#[test]
fn fatal_async_event_during_destroy_churn() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let d = sim.device().clone();
    let t = std::thread::spawn(move || {
        for _ in 0..50 {
            d.inject_async_event(pvrdma_abi::event::EqeType::PortActive, 1);
        }
        d.inject_fatal();
    });
    let start = Instant::now();
    for _ in 0..50 {
        match pd.create_qp(&ib_core::QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap: cap(),
            qp_type: ib_core::QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        }) {
            Ok(q) => drop(q),
            Err(Error::DeviceFatal) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    t.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_stormed_async_vector_does_not_starve_the_health_check() {
    let (dev, sim) = hca::open_sim_with(Default::default(), short_timeouts()).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let storm = {
        let (sim, stop) = (sim.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                sim.device().vectors().raise(1);
                std::thread::yield_now();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    sim.device().set_dead(true);
    let t = Instant::now();
    let got = ch.get_cq_event(Duration::from_secs(3)).map(|c| c.handle());
    let waited = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    storm.join().unwrap();
    assert_eq!(got, Err(Error::DeviceFatal));
    // The check runs every 50 ms whatever the vector does; a second is generous on a loaded CI.
    assert!(waited < Duration::from_secs(1), "DeviceFatal after {waited:?}");
}
