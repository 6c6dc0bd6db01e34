//! The notification stress test (run in release: `cargo test --release -p tests --test
//! notify_stress`): a device thread posts 10^6 CQEs (the model's `post_cqe`, wr_id = a global
//! sequence number) round-robin over four CQs while one consumer thread per CQ cycles through
//! every way of waiting — the completion channel (arm with REPORT_MISSED_EVENTS, poll, sleep),
//! notify requests (NEXT with the missed-events check), the MANY_INSTANCE and SINGLE_INSTANCE
//! upcall dispatcher (policy changed while completions arrive: enable, then poll once more) — and
//! destroys and recreates its CQ. Every CQE is consumed exactly once; every wait ends.
//!
//! A lost wake-up fails fast: every wait is bounded (5 s), and a wait that times out while CQEs
//! posted to its CQ are still unconsumed is a lost wake-up (the arm was made, with the missed-events
//! check, before the wait began). To make a missed event show rather than be healed by the next
//! CQE, every 16th CQE of a CQ is the last it gets until the consumer has taken it. A failed check
//! on any thread aborts the process with its message; a watchdog aborts it after 120 s whatever
//! happens. (With the re-poll after arming removed from `ArmMachine::request`, this test fails
//! with "lost wake-up (notify request)".)
//!
//! A test binary of its own: the panic hook it installs aborts the process, which in a binary
//! shared with other tests would end them all at the first panic of any.

use ib_core::{CompChannel, Cq, Device, Error, NotifyFlags, NotifyKind, NotifyStatus, UpcallPolicy, Wc};
use pvrdma_sim::SimConfig;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tests::events::cqe;

const TOTAL: u64 = 1_000_000;
const CQS: usize = 4;
/// CQEs a CQ may hold unconsumed (the device waits beyond that: overflow is another test).
const CREDIT: u64 = 512;
/// Every PING-th CQE of a CQ is posted alone: nothing more for that CQ until it is consumed.
const PING: u64 = 16;
/// CQEs per consumer mode before it moves on to the next.
const EPOCH: u64 = 20_000;
/// Bound on every wait.
const WAIT: Duration = Duration::from_secs(5);
/// The whole test's bound.
const WATCHDOG: Duration = Duration::from_secs(120);

/// What the device thread and a CQ's consumer share.
struct Slot {
    /// The CQ's handle while the device may post to it.
    handle: AtomicU32,
    posted: AtomicU64,
    consumed: AtomicU64,
    /// The consumer asks the device to stop posting (to destroy the CQ) ...
    pause: AtomicBool,
    /// ... and the device confirms it will not post until `pause` is cleared.
    paused: AtomicBool,
    /// Upcalls made (the consumer waits on it in the upcall modes).
    upcalls: Mutex<u64>,
    upcall_cv: Condvar,
}

struct Shared {
    slots: Vec<Slot>,
    seen: Vec<AtomicU8>,
    consumed: AtomicU64,
    events: AtomicU64,
    requests: AtomicU64,
    recreated: AtomicU64,
    policy_changes: AtomicU64,
}

impl Shared {
    fn record(&self, slot: usize, wc: &[Wc]) {
        for w in wc {
            let prev = self.seen[w.wr_id as usize].fetch_add(1, SeqCst);
            assert_eq!(prev, 0, "CQE {} consumed twice", w.wr_id);
        }
        self.slots[slot].consumed.fetch_add(wc.len() as u64, SeqCst);
        self.consumed.fetch_add(wc.len() as u64, SeqCst);
    }

    /// Polls the CQ until empty, recording what it finds; returns how many.
    fn drain(&self, slot: usize, cq: &Cq) -> u64 {
        let mut wc = [Wc::default(); 64];
        let mut n = 0;
        loop {
            match cq.poll(&mut wc) {
                Ok(0) => return n,
                Ok(k) => {
                    self.record(slot, &wc[..k]);
                    n += k as u64;
                }
                Err(e) => panic!("poll: {e}"),
            }
        }
    }

    fn all_done(&self) -> bool {
        self.consumed.load(SeqCst) == TOTAL
    }

    /// A bounded wait ended with nothing: fine unless CQEs posted to this CQ wait unconsumed.
    fn check_not_lost(&self, slot: usize, what: &str) {
        let s = &self.slots[slot];
        let (posted, consumed) = (s.posted.load(SeqCst), s.consumed.load(SeqCst));
        assert!(
            posted == consumed,
            "lost wake-up ({what}): CQ {slot} has {} CQEs unconsumed after a {WAIT:?} wait",
            posted - consumed
        );
    }
}

fn device(sh: &Shared, dev: &pvrdma_sim::SimDevice) {
    let mut seq = 0u64;
    let mut idle = 0u32;
    while seq < TOTAL {
        let mut any = false;
        for s in &sh.slots {
            if seq == TOTAL {
                break;
            }
            if s.pause.load(SeqCst) {
                s.paused.store(true, SeqCst);
                continue;
            }
            let (posted, consumed) = (s.posted.load(SeqCst), s.consumed.load(SeqCst));
            if posted - consumed >= CREDIT {
                continue;
            }
            // Every PING-th CQE of a CQ is the last one it gets until it is consumed: a consumer
            // that misses its wake-up then sleeps out its bound and the test fails.
            if posted % PING == 0 && posted > consumed {
                continue;
            }
            assert!(dev.post_cqe(s.handle.load(SeqCst), &cqe(seq), false), "no such CQ");
            s.posted.fetch_add(1, SeqCst);
            seq += 1;
            any = true;
        }
        if any {
            idle = 0;
        } else {
            idle += 1;
            if idle > 64 {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::thread::yield_now();
            }
        }
    }
    // Keep confirming pauses until the consumers are done.
    while !sh.all_done() {
        for s in &sh.slots {
            if s.pause.load(SeqCst) {
                s.paused.store(true, SeqCst);
            }
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn new_cq(sh: &Arc<Shared>, dev: &Device, slot: usize, ch: &CompChannel) -> Cq {
    let cq = dev.create_cq(1024, Some(ch)).expect("create_cq");
    let sh2 = sh.clone();
    cq.set_upcall(UpcallPolicy::Disable, move |cq, st| {
        assert_eq!(st, NotifyStatus::Success);
        sh2.drain(slot, cq);
        let s = &sh2.slots[slot];
        *s.upcalls.lock().unwrap() += 1;
        s.upcall_cv.notify_all();
    })
    .expect("set_upcall");
    sh.slots[slot].handle.store(cq.handle(), SeqCst);
    cq
}

/// Now and then, give the CPU away between the last empty poll and the arm — the window where a
/// CQE slips in and only the re-poll after arming finds it.
fn preempted(x: &mut u32) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    if *x & 3 == 0 {
        std::thread::yield_now();
    }
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Channel,
    Request,
    UpcallMany,
    UpcallSingle,
    Recreate,
}

fn consumer(sh: &Arc<Shared>, dev: &Device, slot: usize, mut cq: Cq, ch: CompChannel) {
    let modes = [Mode::Channel, Mode::Request, Mode::UpcallMany, Mode::UpcallSingle, Mode::Recreate];
    let mut k = slot; // each consumer starts elsewhere in the cycle
    let mut jitter = 0x9e37_79b9_u32 ^ slot as u32;
    let s = &sh.slots[slot];
    while !sh.all_done() {
        let mode = modes[k % modes.len()];
        k += 1;
        let target = s.consumed.load(SeqCst) + EPOCH;
        let epoch_done = || s.consumed.load(SeqCst) >= target || sh.all_done();
        match mode {
            Mode::Channel => {
                let flags = NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS;
                while !epoch_done() {
                    if sh.drain(slot, &cq) > 0 {
                        continue;
                    }
                    preempted(&mut jitter);
                    if cq.req_notify(flags).unwrap() {
                        continue; // CQEs queued before the arm: poll again
                    }
                    match ch.get_cq_event(WAIT).map(|c| c.handle()) {
                        Ok(h) => {
                            assert_eq!(h, cq.handle());
                            cq.ack_events(1);
                            sh.events.fetch_add(1, SeqCst);
                        }
                        Err(Error::Timeout) => sh.check_not_lost(slot, "channel"),
                        Err(e) => panic!("get_cq_event: {e}"),
                    }
                }
            }
            Mode::Request => {
                while !epoch_done() {
                    if sh.drain(slot, &cq) > 0 {
                        continue;
                    }
                    preempted(&mut jitter);
                    let r = cq.notify(NotifyKind::Next, true).unwrap();
                    sh.requests.fetch_add(1, SeqCst);
                    match r.wait(WAIT) {
                        Ok(NotifyStatus::Success) => {}
                        Ok(st) => panic!("notify request completed {st:?}"),
                        Err(_) => sh.check_not_lost(slot, "notify request"),
                    }
                }
            }
            Mode::UpcallMany | Mode::UpcallSingle => {
                let policy = match mode {
                    Mode::UpcallMany => UpcallPolicy::ManyInstance,
                    _ => UpcallPolicy::SingleInstance,
                };
                while !epoch_done() {
                    let seen = *s.upcalls.lock().unwrap();
                    // Enable, then poll once more.
                    preempted(&mut jitter);
                    cq.modify_upcall(policy).unwrap();
                    sh.policy_changes.fetch_add(1, SeqCst);
                    sh.drain(slot, &cq);
                    let mut n = s.upcalls.lock().unwrap();
                    let mut deadline = Instant::now() + WAIT;
                    let mut progress = s.consumed.load(SeqCst);
                    // MANY_INSTANCE: sleep until the epoch is done; SINGLE_INSTANCE: until its
                    // one upcall, then enable again. The bound restarts whenever upcalls consume.
                    while !epoch_done() && (policy == UpcallPolicy::ManyInstance || *n == seen) {
                        if s.consumed.load(SeqCst) != progress {
                            progress = s.consumed.load(SeqCst);
                            deadline = Instant::now() + WAIT;
                        }
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            drop(n);
                            sh.check_not_lost(slot, "upcall");
                            n = s.upcalls.lock().unwrap();
                            break;
                        }
                        n = s.upcall_cv.wait_timeout(n, left.min(Duration::from_millis(50))).unwrap().0;
                    }
                }
                // Disable: the consumer takes over (and polls once more).
                cq.modify_upcall(UpcallPolicy::Disable).unwrap();
                sh.policy_changes.fetch_add(1, SeqCst);
                sh.drain(slot, &cq);
            }
            Mode::Recreate => {
                s.pause.store(true, SeqCst);
                let deadline = Instant::now() + WAIT;
                while !s.paused.load(SeqCst) {
                    assert!(Instant::now() < deadline, "the device never paused");
                    std::thread::yield_now();
                }
                while s.consumed.load(SeqCst) < s.posted.load(SeqCst) {
                    sh.drain(slot, &cq);
                }
                cq.destroy(Some(WAIT)).map_err(|(_, e)| e).expect("destroy");
                cq = new_cq(sh, dev, slot, &ch);
                sh.recreated.fetch_add(1, SeqCst);
                s.paused.store(false, SeqCst);
                s.pause.store(false, SeqCst);
            }
        }
    }
    cq.destroy(Some(WAIT)).map_err(|(_, e)| e).expect("final destroy");
}

#[test]
fn a_million_completions_each_consumed_once_and_every_wait_ends() {
    // A failed check on any thread fails the test at once (the others would wait for it).
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("notify_stress: failed; aborting");
        std::process::abort();
    }));
    let finished = Arc::new(AtomicBool::new(false));
    {
        let finished = finished.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < WATCHDOG {
                std::thread::sleep(Duration::from_millis(100));
                if finished.load(SeqCst) {
                    return;
                }
            }
            eprintln!("notify_stress: watchdog: not done after {WATCHDOG:?} — a lost wake-up or a hang");
            std::process::abort();
        });
    }
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let sh = Arc::new(Shared {
        slots: (0..CQS)
            .map(|_| Slot {
                handle: AtomicU32::new(0),
                posted: AtomicU64::new(0),
                consumed: AtomicU64::new(0),
                pause: AtomicBool::new(false),
                paused: AtomicBool::new(false),
                upcalls: Mutex::new(0),
                upcall_cv: Condvar::new(),
            })
            .collect(),
        seen: (0..TOTAL).map(|_| AtomicU8::new(0)).collect(),
        consumed: AtomicU64::new(0),
        events: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        recreated: AtomicU64::new(0),
        policy_changes: AtomicU64::new(0),
    });
    let chans: Vec<_> = (0..CQS).map(|_| dev.create_comp_channel().unwrap()).collect();
    let cqs: Vec<_> = (0..CQS).map(|i| new_cq(&sh, &dev, i, &chans[i])).collect();
    let t = Instant::now();
    std::thread::scope(|s| {
        let d = sim.device();
        let sh_d = &sh;
        s.spawn(move || device(sh_d, d));
        for (i, (cq, ch)) in cqs.into_iter().zip(chans).enumerate() {
            let (sh, dev) = (&sh, &dev);
            s.spawn(move || consumer(sh, dev, i, cq, ch));
        }
    });
    let took = t.elapsed();
    finished.store(true, SeqCst);
    assert_eq!(sh.consumed.load(SeqCst), TOTAL);
    assert!(sh.seen.iter().all(|s| s.load(SeqCst) == 1), "a CQE was never consumed");
    let stats = tests::fixture::stats(&dev);
    eprintln!(
        "notify_stress: {TOTAL} completions in {took:.2?} ({:.0}/s); channel events {}, notify \
         requests {}, upcall policy changes {}, CQs recreated {}, CQ interrupts {}, driver events {}",
        TOTAL as f64 / took.as_secs_f64(),
        sh.events.load(SeqCst),
        sh.requests.load(SeqCst),
        sh.policy_changes.load(SeqCst),
        sh.recreated.load(SeqCst),
        stats.interrupts[2],
        stats.cq_events,
    );
    assert!(sh.events.load(SeqCst) > 0 && sh.requests.load(SeqCst) > 0);
    assert!(sh.recreated.load(SeqCst) > 0 && sh.policy_changes.load(SeqCst) > 0);
}
