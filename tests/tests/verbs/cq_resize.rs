//! RESIZE_CQ end to end (model, provider, core): queued CQEs survive a resize in order, up and
//! down and across a wrapped ring; a size below the CQEs queued is refused; a device-side
//! producer racing repeated resizes loses and reorders nothing; the arm survives; QEMU 7.2 (no
//! RESIZE_CQ) answers EOPNOTSUPP and stays healthy.
use ib_core::{Error, NotifyFlags};
use pvrdma_sim::{Profile, SimConfig, SimDevice};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tests::events::{cqe, drain};
use tests::fixture::{pv, WAIT};

fn open(profile: Profile) -> (ib_core::Device, Arc<SimDevice>) {
    let (dev, sim) = hca::open_sim(SimConfig { profile, ..SimConfig::default() }).unwrap();
    let d = sim.device().clone();
    (dev, d)
}

fn inject(d: &SimDevice, cq: &ib_core::Cq, ids: std::ops::Range<u64>) {
    for i in ids {
        assert!(d.post_cqe(cq.handle(), &cqe(i), false));
    }
}

#[test]
fn queued_cqes_survive_resizes_up_and_down_in_order() {
    let (dev, d) = open(Profile::Ibta);
    assert!(pv(&dev).has_resize_cq(), "the IBTA model carries RESIZE_CQ");
    let cq = dev.create_cq(8, None).unwrap();
    // Wrap the ring first: 6 in, 6 out, then 5 in (slots 6, 7, 0, 1, 2).
    inject(&d, &cq, 100..106);
    assert_eq!(drain(&cq), (100..106).collect::<Vec<_>>());
    inject(&d, &cq, 0..5);
    assert_eq!(cq.resize(33).unwrap(), 64, "rounded up to a power of two");
    assert_eq!(cq.cqe(), 64);
    assert_eq!(d.cq_status(cq.handle()).unwrap().entries, 64);
    let mut wc = [ib_core::Wc::default(); 2];
    assert_eq!(cq.poll(&mut wc).unwrap(), 2);
    assert_eq!([wc[0].wr_id, wc[1].wr_id], [0, 1]);
    inject(&d, &cq, 5..60);
    assert_eq!(cq.resize(64).unwrap(), 64, "the same size again");
    assert_eq!(cq.poll(&mut wc).unwrap(), 2);
    assert_eq!(cq.resize(58).unwrap(), 64);
    let all = drain(&cq);
    assert_eq!(all, (4..60).collect::<Vec<_>>());
    inject(&d, &cq, 60..63);
    assert_eq!(cq.resize(4).unwrap(), 4, "down to 4 with 3 queued");
    assert_eq!(d.cq_status(cq.handle()).unwrap().entries, 4);
    inject(&d, &cq, 63..64);
    assert_eq!(drain(&cq), (60..64).collect::<Vec<_>>());
    // The shrunk ring holds 4 and works: fill it exactly.
    inject(&d, &cq, 64..68);
    assert_eq!(drain(&cq), (64..68).collect::<Vec<_>>());
}

#[test]
fn a_size_below_the_queued_cqes_or_out_of_range_is_refused() {
    let (dev, d) = open(Profile::Ibta);
    let cq = dev.create_cq(16, None).unwrap();
    inject(&d, &cq, 0..10);
    let e = cq.resize(8).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(matches!(cq.resize(0), Err(Error::InvalidArgument(_))));
    let max = dev.query_device().max_cqe;
    assert!(matches!(cq.resize(max + 1), Err(Error::InvalidArgument(_))));
    assert_eq!(cq.cqe(), 16, "unchanged");
    assert_eq!(drain(&cq), (0..10).collect::<Vec<_>>(), "nothing lost by a refused resize");
    inject(&d, &cq, 10..26);
    assert_eq!(drain(&cq), (10..26).collect::<Vec<_>>(), "the old ring still works");
    assert_eq!(cq.resize(max).unwrap(), max);
    assert!(d.post_cqe(cq.handle(), &cqe(26), false));
    assert_eq!(drain(&cq), vec![26]);
}

#[test]
fn resizes_under_traffic_lose_and_reorder_nothing() {
    const N: u64 = 20_000;
    const WINDOW: u64 = 16;
    let (dev, d) = open(Profile::Ibta);
    let cq = Arc::new(dev.create_cq(WINDOW as u32, None).unwrap());
    let consumed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (cq, consumed, stop) = (cq.clone(), consumed.clone(), stop.clone());
        std::thread::spawn(move || {
            for i in 0..N {
                // Never more queued than the smallest size the consumer resizes to.
                while i - consumed.load(SeqCst) >= WINDOW {
                    if stop.load(SeqCst) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                assert!(d.post_cqe(cq.handle(), &cqe(i), false));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let sizes = [16u32, 64, 32, 1024, 16, 128];
    let (mut next, mut resizes) = (0u64, 0usize);
    while next < N {
        if Instant::now() > deadline {
            stop.store(true, SeqCst);
            panic!("stalled at {next} of {N}");
        }
        for id in drain(&cq) {
            assert_eq!(id, next, "CQE lost or reordered");
            next += 1;
        }
        consumed.store(next, SeqCst);
        if next % 7 == 0 {
            let want = sizes[resizes % sizes.len()];
            assert_eq!(cq.resize(want).unwrap(), want);
            resizes += 1;
        }
    }
    producer.join().unwrap();
    assert!(resizes > 100, "only {resizes} resizes ran under traffic");
    assert!(drain(&cq).is_empty());
}

#[test]
fn the_arm_survives_a_resize() {
    let (dev, d) = open(Profile::Ibta);
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    assert_eq!(cq.resize(256).unwrap(), 256);
    inject(&d, &cq, 7..8);
    let got = ch.get_cq_event(WAIT).expect("the arm made before the resize fires");
    assert_eq!(got.handle(), cq.handle());
    got.ack_events(1);
    assert_eq!(drain(&cq), vec![7]);
    // Unarmed now: a resize does not arm it either.
    assert_eq!(cq.resize(2).unwrap(), 2);
    inject(&d, &cq, 8..9);
    std::thread::sleep(tests::fixture::SETTLE);
    assert!(ch.try_get_cq_event().is_none(), "no event without an arm");
    assert_eq!(drain(&cq), vec![8]);
}

#[test]
fn qemu72_has_no_resize_cq_and_answers_eopnotsupp() {
    let (dev, d) = open(Profile::Qemu72);
    assert!(!pv(&dev).has_resize_cq(), "QEMU 7.2 leaves RESIZE_CQ unanswered: found at probe");
    let cq = dev.create_cq(8, None).unwrap();
    inject(&d, &cq, 0..3);
    let e = cq.resize(64).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    assert_eq!(e.errno(), libc::EOPNOTSUPP);
    assert_eq!(cq.cqe(), 8);
    assert_eq!(drain(&cq), vec![0, 1, 2]);
    // The probe's unanswered RESIZE_CQ left the device healthy.
    assert!(dev.create_cq(4, None).is_ok());
}

#[test]
fn the_probe_can_be_overridden_and_polling_probes_do_not_ask() {
    let no = hca::ProbeOptions { resize_cq: Some(false), ..Default::default() };
    let (dev, _sim) = hca::open_sim_with(SimConfig::default(), no).unwrap();
    assert!(!pv(&dev).has_resize_cq());
    let cq = dev.create_cq(8, None).unwrap();
    assert_eq!(cq.resize(16).unwrap_err().errno(), libc::EOPNOTSUPP);
    let polling = hca::ProbeOptions { cmd_wait: hca::WaitMode::Polling, ..Default::default() };
    let (dev, _sim) = hca::open_sim_with(SimConfig::default(), polling).unwrap();
    assert!(!pv(&dev).has_resize_cq(), "a polling probe cannot tell QEMU 7.2's silence from death");
}

/// A producer thread posting signaled RDMA WRITEs on an RC QP whose send CQ the consumer keeps
/// resizing: every completion arrives once, in posting order, all successful.
#[test]
fn resizes_under_rc_traffic_keep_every_completion_in_order() {
    use ib_core::{access, SendWr, Sge, WcStatus, WrOpcode};
    const N: u64 = 5_000;
    const WINDOW: u64 = 16; // the fixture QP's send queue depth, and the smallest size below
    let (dev, _d) = open(Profile::Ibta);
    let pd = dev.alloc_pd().unwrap();
    let scq = Arc::new(dev.create_cq(16, None).unwrap());
    let rcq = dev.create_cq(16, None).unwrap();
    let (a, b) = (tests::fixture::rc_qp(&pd, &scq, &rcq), tests::fixture::rc_qp(&pd, &rcq, &rcq));
    let gid = tests::fixture::gid(&dev);
    tests::fixture::connect(&a, b.qpn(), gid);
    tests::fixture::connect(&b, a.qpn(), gid);
    let src = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let dst = pd.alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE).unwrap();
    let (remote_addr, rkey) = (dst.addr(), dst.rkey());
    let consumed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let a = Arc::new(a);
    let producer = {
        let (a, consumed, stop) = (a.clone(), consumed.clone(), stop.clone());
        let sge = [Sge { addr: src.addr(), length: 64, lkey: src.lkey() }];
        std::thread::spawn(move || {
            for i in 0..N {
                while i - consumed.load(SeqCst) >= WINDOW {
                    if stop.load(SeqCst) {
                        return;
                    }
                    std::thread::yield_now();
                }
                let wr = SendWr {
                    wr_id: i,
                    sg_list: &sge,
                    opcode: WrOpcode::RdmaWrite { remote_addr, rkey },
                    signaled: true,
                    solicited: false,
                };
                a.post_send(&wr).expect("post_send");
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let sizes = [64u32, 16, 256, 32];
    let (mut next, mut resizes) = (0u64, 0usize);
    let mut wc = [ib_core::Wc::default(); 16];
    while next < N {
        if Instant::now() > deadline {
            stop.store(true, SeqCst);
            panic!("stalled at {next} of {N}");
        }
        let n = scq.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert_eq!((w.wr_id, w.status), (next, WcStatus::Success), "completion lost or reordered");
            next += 1;
        }
        consumed.store(next, SeqCst);
        if n > 0 {
            let want = sizes[resizes % sizes.len()];
            assert_eq!(scq.resize(want).unwrap(), want);
            resizes += 1;
        }
    }
    producer.join().unwrap();
    assert!(resizes > 100, "only {resizes} resizes ran under traffic");
    assert!(drain(&scq).is_empty());
}

/// A device that answers RESIZE_CQ with another size than asked is not believed: the resize fails
/// (EIO), the CQ is unusable from then on (its ring could be either size), the device lives on.
#[test]
fn a_resize_answered_with_another_size_breaks_only_that_cq() {
    use pvrdma_abi::cmd::opcode;
    use tests::rewrite::Rewrite;
    let plat = Arc::new(Rewrite::new(opcode::RESIZE_CQ, 16, |cqe| cqe.wrapping_mul(2)));
    let dev = hca::probe(plat.clone(), hca::ProbeOptions::default()).unwrap();
    assert!(pv(&dev).has_resize_cq());
    let cq = dev.create_cq(8, None).unwrap();
    let e = cq.resize(16).unwrap_err();
    assert!(matches!(e, Error::BadResponse(_)), "{e:?}");
    assert_eq!(e.errno(), libc::EIO);
    assert_eq!(cq.poll(&mut [ib_core::Wc::default(); 1]), Err(Error::DeviceFatal), "the CQ is unusable");
    assert!(!dev.is_fatal());
    let other = dev.create_cq(8, None).unwrap();
    assert!(plat.sim.device().post_cqe(other.handle(), &cqe(5), false));
    assert_eq!(drain(&other), vec![5], "other CQs work");
}
