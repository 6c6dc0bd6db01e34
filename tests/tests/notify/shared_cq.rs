//! One CQ shared by every kind of waiter at once — a completion channel consumer, a notify-request
//! consumer and a MANY_INSTANCE upcall — while the device posts CQEs with random pauses: every
//! CQE is polled by someone, and soon (no lost wake-up anywhere), on both arm profiles.
use ib_core::{Error, NotifyFlags, NotifyKind, UpcallPolicy};
use pvrdma_sim::{Profile, SimConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tests::events::{cqe, drain, wait_for};

const N: u64 = 20_000;
/// The longest a CQE may wait for someone to poll it.
const WORST: Duration = Duration::from_millis(400);

/// When each CQE was posted, and what the consumers saw.
struct Ledger {
    t0: Instant,
    posted: Vec<AtomicU64>,
    seen: AtomicU64,
    worst_us: AtomicU64,
}

impl Ledger {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    fn record(&self, ids: Vec<u64>) {
        let now = self.now();
        for id in ids {
            let waited = now.saturating_sub(self.posted[id as usize].load(SeqCst));
            self.worst_us.fetch_max(waited, SeqCst);
            self.seen.fetch_add(1, SeqCst);
        }
    }
}

fn shared_cq(profile: Profile) {
    let (dev, sim) = hca::open_sim(SimConfig { profile, ..SimConfig::default() }).unwrap();
    let d = sim.device().clone();
    let ch = dev.create_comp_channel().unwrap();
    let cq = Arc::new(dev.create_cq(4096, Some(&ch)).unwrap());
    let ledger = Arc::new(Ledger {
        t0: Instant::now(),
        posted: (0..N).map(|_| AtomicU64::new(0)).collect(),
        seen: AtomicU64::new(0),
        worst_us: AtomicU64::new(0),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let l = ledger.clone();
    cq.set_upcall(UpcallPolicy::ManyInstance, move |c, _| l.record(drain(c))).unwrap();
    let channel = {
        let (cq, ch, l, stop) = (cq.clone(), ch.clone(), ledger.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                l.record(drain(&cq));
                cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
                l.record(drain(&cq));
                match ch.get_cq_event(Duration::from_millis(500)) {
                    Ok(c) => c.ack_events(1),
                    Err(Error::Timeout) => {}
                    Err(e) => panic!("{e:?}"),
                }
            }
        })
    };
    let requests = {
        let (cq, l, stop) = (cq.clone(), ledger.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                l.record(drain(&cq));
                let _ = cq.notify(NotifyKind::Next, true).unwrap().wait(Duration::from_millis(500));
            }
        })
    };
    let mut rng = 0x1234_5678u64;
    for i in 0..N {
        ledger.posted[i as usize].store(ledger.now(), SeqCst);
        wait_for(Duration::from_secs(5), "room in the CQ", || d.post_cqe(cq.handle(), &cqe(i), false));
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if rng.is_multiple_of(64) {
            std::thread::sleep(Duration::from_micros(rng % 300));
        }
    }
    wait_for(Duration::from_secs(5), "every CQE polled", || ledger.seen.load(SeqCst) >= N);
    stop.store(true, SeqCst);
    let _ = d.post_cqe(cq.handle(), &cqe(0), false); // wakes the channel consumer
    channel.join().unwrap();
    requests.join().unwrap();
    let worst = Duration::from_micros(ledger.worst_us.load(SeqCst));
    assert!(worst < WORST, "{profile:?}: a CQE waited {worst:?} for anyone to poll it");
}

#[test]
fn every_waiter_kind_on_one_cq_ibta() {
    shared_cq(Profile::Ibta);
}

#[test]
fn every_waiter_kind_on_one_cq_qemu72() {
    shared_cq(Profile::Qemu72);
}
