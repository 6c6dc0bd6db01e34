//! The soak (issue 10): `SOAK_MESSAGES` messages (default 10^6 in release, 10^5 in debug) over
//! RC pairs of the model — two workers, each with three groups (the kernel's context and two
//! user contexts, each with a channel, three shared CQs and six pairs: 36 pairs, 72 QPs, 18 CQs)
//! — stepping through a seeded random sequence: send and receive lists of random lengths, sizes,
//! SGE counts, immediate data and solicited flags; polls; arms for next or solicited, some waited
//! for on the channel or a notify request; QPs moved to ERR under traffic; pairs destroyed and
//! recreated or reset and reconnected; CQs and whole user contexts destroyed and recreated.
//!
//! Run: `cargo test --release -p tests --test soak -- --nocapture`. The seed is printed first
//! and in every failure; `SOAK_SEED=<n>` replays a run's step sequence (the interleaving of the
//! threads is not replayed). `SOAK_MESSAGES=<n>` sets the goal, `SOAK_SECONDS=<n>` the time
//! bound (default 120 s; missing the goal within it fails), `SOAK_WORKERS=<n>` the threads (2),
//! `SOAK_LATENCY_US=<n>` the model's link latency (0: the posting thread delivers; else the
//! model's port thread does), `SOAK_RESET=0` destroys the pairs held in error instead of
//! recovering half of them through RESET and reconnect. (The soak found the model delivering a
//! packet of a connection's past into its next one, between its check that the send is still
//! pending and the receiver's lock; a receiver now refuses a packet whose delivery began before
//! its last RESET.)
//!
//! Checked throughout (`tests::soak`): each completion is of an outstanding request, in order,
//! once (a duplicate or unknown `wr_id` fails at once); a request posted to a QP in ERR flushes;
//! a message arrives at most once, in order, with its length, immediate data and bytes, and a send
//! that succeeded was delivered; every arm waited for raises its event within 5 s, no CQ gets more
//! events than arms. At the end, after everything is destroyed: every request posted completed
//! (success, flush, or RETRY_EXC_ERR towards a peer in ERR), and the model holds no object, the
//! driver no user UAR page and no more DMA memory than after probe, the model's guest memory
//! (bytes and regions) and the host memory its objects are charged are back to their baselines;
//! with the device closed, the driver holds no DMA memory at all. (The driver's DMA count is the
//! process's: this test is a binary of its own, so that no other device allocates meanwhile; CI
//! also runs it by name.)

use pvrdma_sim::{LiveObjects, SimConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tests::soak::{Shared, Stats, Worker, WAIT};

/// Worker threads by default (the machine running CI has 2 cores; the model's port thread and
/// the driver's interrupt threads run beside them).
const WORKERS: u64 = 2;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

/// Aborts the process (seed printed) if the test has not finished `after` from now: a hang
/// anywhere must fail, not stall CI.
fn watchdog(after: Duration, seed: u64) -> Arc<AtomicBool> {
    let finished = Arc::new(AtomicBool::new(false));
    let f = finished.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < after {
            std::thread::sleep(Duration::from_millis(100));
            if f.load(SeqCst) {
                return;
            }
        }
        eprintln!("soak: watchdog: not finished after {after:?}: a hang (SOAK_SEED={seed})");
        std::process::abort();
    });
    finished
}

#[test]
fn soak_every_request_completes_once_and_nothing_leaks() {
    let seed = env_u64("SOAK_SEED").unwrap_or_else(|| fastrand::u64(..));
    let default_goal = if cfg!(debug_assertions) { 100_000 } else { 1_000_000 };
    let goal = env_u64("SOAK_MESSAGES").unwrap_or(default_goal);
    let bound = Duration::from_secs(env_u64("SOAK_SECONDS").unwrap_or(120));
    let workers = env_u64("SOAK_WORKERS").unwrap_or(WORKERS).clamp(1, 64) as u8;
    let reset_pairs = env_u64("SOAK_RESET").unwrap_or(1) != 0;
    eprintln!(
        "soak: SOAK_SEED={seed} SOAK_MESSAGES={goal} SOAK_SECONDS={} SOAK_WORKERS={workers} SOAK_RESET={}",
        bound.as_secs(),
        u8::from(reset_pairs)
    );
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("soak: failed; replay with SOAK_SEED={seed}");
    }));
    let finished = watchdog(bound + Duration::from_secs(60), seed);

    let link_latency = Duration::from_micros(env_u64("SOAK_LATENCY_US").unwrap_or(0));
    let (dev, sim) = hca::open_sim(SimConfig { link_latency, ..SimConfig::default() }).expect("probe of the model");
    let pv = hca::pvrdma(&dev).expect("a pvrdma device");
    let base_dma = hca::dma::outstanding_bytes();
    let base_mem = (sim.device().mem().used(), sim.device().mem().regions());
    let base_host = sim.device().stats().host_bytes;
    assert_eq!(sim.device().live_objects(), LiveObjects::default(), "objects before the soak");
    assert_eq!(pv.uar_table().in_use(), 1, "only the kernel's UAR page before the soak");

    let shared = Shared {
        goal,
        messages: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        deadline: Instant::now() + bound,
        reset_pairs,
    };
    let t = Instant::now();
    let mut total = Stats::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|i| {
                let (dev, shared) = (&dev, &shared);
                s.spawn(move || {
                    let stop = StopOthers(&shared.stop);
                    let mut w = Worker::new(dev, shared, i, seed);
                    w.run();
                    drop(stop);
                    w.stats
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(st) => total.add(&st),
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    });
    let took = t.elapsed();
    report_figures(&total, took, &sim);

    assert!(total.messages >= goal, "{} messages of {goal} within {bound:?} (SOAK_SEED={seed})", total.messages);
    let completed = total.sends_ok + total.sends_flushed + total.sends_retry_exc;
    assert_eq!(completed, total.sends_posted, "sends posted and completed (SOAK_SEED={seed})");
    assert_eq!(total.messages + total.recvs_flushed, total.recvs_posted, "receives (SOAK_SEED={seed})");
    if goal >= 100_000 {
        let t = &total;
        let resets = if reset_pairs { t.pair_resets } else { 1 };
        let exercised = [t.qp_errors, t.waits, resets, t.qps_destroyed, t.cqs_destroyed, t.contexts_destroyed];
        assert!(exercised.iter().all(|&n| n > 0), "a path never taken: {total:?}");
    }

    let objects = || sim.device().live_objects();
    settle("objects in the model", objects, LiveObjects::default());
    assert_eq!(objects(), LiveObjects::default(), "objects left in the model");
    assert_eq!(pv.uar_table().in_use(), 1, "user UAR pages left in use");
    settle("driver DMA bytes", hca::dma::outstanding_bytes, base_dma);
    assert_eq!(hca::dma::outstanding_bytes(), base_dma, "driver DMA bytes against the baseline after probe");
    let mem = || (sim.device().mem().used(), sim.device().mem().regions());
    settle("model guest memory (bytes, regions)", mem, base_mem);
    assert_eq!(mem(), base_mem, "model guest memory (bytes, regions) against its baseline");
    assert_eq!(sim.device().stats().host_bytes, base_host, "the model's host-memory charge against its baseline");
    let stats = sim.device().stats();
    assert_eq!((stats.cq_overflows, stats.cqes_dropped_overflow, stats.refused_doorbells), (0, 0, 0), "{stats:?}");
    assert_eq!((stats.qp_ring_faults, stats.notifications_dropped), (0, 0), "{stats:?}");
    drop(dev);
    drop(sim);
    settle("driver DMA bytes with the device closed", hca::dma::outstanding_bytes, 0);
    assert_eq!(hca::dma::outstanding_bytes(), 0, "driver DMA bytes with the device closed");
    finished.store(true, SeqCst);
}

/// Waits (bounded) for `now()` to come back to `base`, and says how long it took if it was not
/// there at once: a destroyed CQ's memory goes when the last holder lets go of it, which may be
/// the driver's event thread finishing the delivery it was making when the CQ was destroyed.
fn settle<T: PartialEq + std::fmt::Debug>(what: &str, now: impl Fn() -> T, base: T) {
    let (first, t) = (now(), Instant::now());
    if first == base {
        return;
    }
    while now() != base && t.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    eprintln!("soak: {what}: {first:?} at teardown (baseline {base:?}), {:?} after {:.2?}", now(), t.elapsed());
}

/// Tells the other workers to stop if this one fails (its panic unwinds through here).
struct StopOthers<'a>(&'a AtomicBool);

impl Drop for StopOthers<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, SeqCst);
        }
    }
}

fn report_figures(t: &Stats, took: Duration, sim: &hca::platform::sim::SimPlatform) {
    let s = sim.device().stats();
    eprintln!(
        "soak: {} messages in {took:.2?} ({:.0} messages/s); WRs posted {} sends + {} receives; CQEs {}; \
         sends ok {}, flushed {}, RETRY_EXC {}; receives flushed {}; messages never delivered {}",
        t.messages,
        t.messages as f64 / took.as_secs_f64(),
        t.sends_posted,
        t.recvs_posted,
        t.cqes,
        t.sends_ok,
        t.sends_flushed,
        t.sends_retry_exc,
        t.recvs_flushed,
        t.undelivered,
    );
    eprintln!(
        "soak: arms {} (missed reported {}), events {}, waits {} (notify requests {}); QPs put in ERR {}, \
         pairs reset {}; destroyed: QPs {}, CQs {} (busy refused {}), user contexts {}; async events {}",
        t.arms,
        t.missed_reported,
        t.events,
        t.waits,
        t.notify_requests,
        t.qp_errors,
        t.pair_resets,
        t.qps_destroyed,
        t.cqs_destroyed,
        t.busy_refused,
        t.contexts_destroyed,
        t.async_events,
    );
    eprintln!(
        "soak: model: packets sent {}, delivered {}, parked {}, failed {}, dropped {}; CQ interrupts {}",
        s.packets_sent, s.packets_delivered, s.packets_parked, s.packets_failed, s.packets_dropped, s.interrupts[2]
    );
}
