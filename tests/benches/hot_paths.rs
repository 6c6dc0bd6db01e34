//! The hot paths beside the limits they stand for, measured in the same run (design decision 19):
//! every sample runs the project and its baseline back to back, and the summary table at the end
//! gives the median of each per operation, in nanoseconds, and their ratio.
//!
//! | pair | project | baseline |
//! |---|---|---|
//! | `poll_cq_b1`, `poll_cq_b16` | `Cq::poll` of 1 or 16 CQEs per call from a CQ the model filled | a raw ring of 64-byte entries laid out as the CQ ring: one acquire load of the producer index, a 64-byte copy per entry, one release store of the consumer index, under one uncontended lock (a thread-safe poll takes one) |
//! | `req_notify` | `Cq::req_notify(NEXT_COMPLETION)` of a kernel CQ | one bare UAR write of the same arm value through the same platform |
//!
//! Run: `cargo bench -p tests --bench hot_paths` (criterion's own report per pair, then the table).

use criterion::{Criterion, SamplingMode};
use ib_core::{NotifyFlags, Wc};
use parking_lot::Mutex;
use pvrdma_abi::wqe::{wc_opcode, Cqe};
use pvrdma_sim::SimConfig;
use std::cell::RefCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tests::fixture::{pv, rc_qp};
use zerocopy::IntoBytes;

/// Per-sample nanoseconds per operation of one pair.
#[derive(Default)]
struct Row {
    name: &'static str,
    /// What one operation is (a CQE polled, an arm).
    unit: &'static str,
    project: Vec<f64>,
    baseline: Vec<f64>,
}

thread_local! {
    static ROWS: RefCell<Vec<Row>> = const { RefCell::new(Vec::new()) };
}

/// Benchmarks `project` (criterion's figure, per call) and runs `baseline` for as many calls
/// right after it in every sample; each closure makes `n` calls of `per_call` operations each and
/// returns the time they took. The table reports nanoseconds per operation.
fn pair(
    c: &mut Criterion,
    name: &'static str,
    (per_call, unit): (u64, &'static str),
    mut project: impl FnMut(u64) -> Duration,
    mut baseline: impl FnMut(u64) -> Duration,
) {
    ROWS.with(|r| r.borrow_mut().push(Row { name, unit, ..Default::default() }));
    let mut g = c.benchmark_group("hot_paths");
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            let p = project(n);
            let q = baseline(n);
            ROWS.with(|r| {
                let mut r = r.borrow_mut();
                let row = r.last_mut().expect("the row pushed above");
                let ops = (n * per_call) as f64;
                row.project.push(p.as_nanos() as f64 / ops);
                row.baseline.push(q.as_nanos() as f64 / ops);
            });
            p
        })
    });
    g.finish();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn summary() {
    println!("\n{:<14} {:<10} {:>12} {:>12} {:>8}", "pair", "per", "project ns", "baseline ns", "ratio");
    ROWS.with(|rows| {
        for row in rows.borrow_mut().iter_mut() {
            let (p, q) = (median(&mut row.project), median(&mut row.baseline));
            println!("{:<14} {:<10} {:>12.1} {:>12.1} {:>7.2}x", row.name, row.unit, p, q, p / q);
        }
    });
}

/// A ring of 64-byte entries laid out as the CQ ring: a ring-state word pair, then the entries.
struct RawRing {
    prod: AtomicU32,
    cons: AtomicU32,
    entries: Vec<[u8; 64]>,
    lock: Mutex<()>,
}

impl RawRing {
    fn new(elems: usize) -> Self {
        Self { prod: AtomicU32::new(0), cons: AtomicU32::new(0), entries: vec![[0; 64]; elems], lock: Mutex::new(()) }
    }

    fn produce(&mut self, n: u32) {
        let p = self.prod.load(Ordering::Relaxed);
        for k in 0..n {
            let slot = (p + k) as usize % self.entries.len();
            self.entries[slot][..8].copy_from_slice(&u64::from(p + k).to_le_bytes());
        }
        self.prod.store(p + n, Ordering::Release);
    }

    /// Up to `out.len()` entries: one acquire load, one copy each, one release store, one lock.
    fn poll(&self, out: &mut [[u8; 64]]) -> usize {
        let _g = self.lock.lock();
        let prod = self.prod.load(Ordering::Acquire);
        let cons = self.cons.load(Ordering::Relaxed);
        let n = (prod.wrapping_sub(cons) as usize).min(out.len());
        for (k, o) in out.iter_mut().take(n).enumerate() {
            *o = self.entries[(cons as usize + k) % self.entries.len()];
        }
        self.cons.store(cons.wrapping_add(n as u32), Ordering::Release);
        n
    }
}

const RING: u32 = 4096;

fn poll_pairs(c: &mut Criterion) {
    let (dev, sim) = hca::open_sim(SimConfig::default()).expect("the model");
    let cq = dev.create_cq(RING, None).expect("a CQ");
    let pd = dev.alloc_pd().expect("a PD");
    let qp = rc_qp(&pd, &cq, &cq);
    let mut cqe = Cqe::default();
    cqe.opcode.set(wc_opcode::RECV);
    cqe.qp.set(u64::from(qp.qpn()));
    let device = sim.device().clone();
    for batch in [1usize, 16] {
        let name = if batch == 1 { "poll_cq_b1" } else { "poll_cq_b16" };
        let mut raw = RawRing::new(RING as usize);
        let mut wc = vec![Wc::default(); batch];
        let mut out = vec![[0u8; 64]; batch];
        let chunk = u64::from(RING / 2) / batch as u64 * batch as u64;
        pair(
            c,
            name,
            (batch as u64, "CQE"),
            |n| {
                let mut spent = Duration::ZERO;
                let mut left = n * batch as u64;
                while left > 0 {
                    let k = left.min(chunk);
                    for _ in 0..k {
                        assert!(device.post_cqe(cq.handle(), &cqe, false));
                    }
                    let t = Instant::now();
                    let mut got = 0;
                    while got < k {
                        got += cq.poll(black_box(&mut wc)).expect("poll") as u64;
                    }
                    spent += t.elapsed();
                    left -= k;
                }
                spent
            },
            |n| {
                let mut spent = Duration::ZERO;
                let mut left = n * batch as u64;
                while left > 0 {
                    let k = left.min(chunk);
                    raw.produce(k as u32);
                    let t = Instant::now();
                    let mut got = 0;
                    while got < k {
                        got += raw.poll(black_box(&mut out)) as u64;
                    }
                    spent += t.elapsed();
                    left -= k;
                }
                spent
            },
        );
    }
    black_box(cqe.as_bytes());
}

fn req_notify_pair(c: &mut Criterion) {
    let (dev, _sim) = hca::open_sim(SimConfig::default()).expect("the model");
    let cq = dev.create_cq(64, None).expect("a CQ");
    let arm = doorbell::DoorbellOp::CqArmNext
        .encode(cq.handle(), pv(&dev).arm_encoding())
        .expect("next is always expressible");
    let kernel = pv(&dev).uar_table().kernel_page().bar_offset() + u64::from(arm.offset);
    pair(
        c,
        "req_notify",
        (1, "arm"),
        |n| {
            let t = Instant::now();
            for _ in 0..n {
                cq.req_notify(NotifyFlags::NEXT_COMPLETION).expect("arm");
            }
            t.elapsed()
        },
        |n| {
            let p = pv(&dev);
            let t = Instant::now();
            for _ in 0..n {
                p.raw_uar_write(black_box(kernel), black_box(arm.value));
            }
            t.elapsed()
        },
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    poll_pairs(&mut c);
    req_notify_pair(&mut c);
    c.final_summary();
    summary();
}
