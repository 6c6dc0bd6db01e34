//! The hot paths beside the limits they stand for, measured in the same run (design decision 19):
//! every sample runs the project and its baseline back to back, and the summary table at the end
//! gives the median of each per operation, in nanoseconds, and their ratio.
//!
//! | pair | project | baseline |
//! |---|---|---|
//! | `poll_cq_b1`, `poll_cq_b16` | `Cq::poll` of 1 or 16 CQEs per call: receive completions the model delivered for receives the consumer posted (each retires its owed WQE, as every poll does) | a raw ring of 64-byte entries laid out as the CQ ring: one acquire load of the producer index, a 64-byte copy per entry, one release store of the consumer index, under one uncontended lock (a thread-safe poll takes one) |
//! | `req_notify` | `Cq::req_notify(NEXT_COMPLETION)` of a kernel CQ already armed (rings nothing) | one bare UAR write of the same arm value through the same platform |
//! | `req_notify_spent` | the same after an event spent the arm (rings the arm doorbell), each arm timed alone | each bare write timed alone |
//! | `ibv_poll_cq_empty`, `ibv_poll_cq_one`, `ibv_req_notify_cq` | the libibverbs-compatible library's `ops.poll_cq` (1 entry; empty, or one CQE each) and `ops.req_notify_cq` (already armed) through the ops table, as the header's inline functions | the core's `Cq::poll` / `Cq::req_notify(NEXT_COMPLETION)` on a user context's CQ of the same size |
//! | `post_send_b1`, `post_send_b32` | `Qp::post_send_list` of 1 or 32 64-byte SENDs (as `ibv_post_send` with a chain), its one doorbell included (a posted write, as on hardware: the model runs it after the batch, untimed) | the same WQE bytes (header and SGE) written into a ring under one lock, one release store of the producer index and one store standing for the doorbell |
//! | `event_rt_64B`, `event_rt_64B_pinned` | a 64-byte RC ping-pong between two threads sleeping on completion channels (arm, wait, ack, poll, post), unpinned and both threads on CPU 0 | two threads handing a token back and forth through a `Mutex` and `Condvar` |
//! | `busy_rt_64B`, `busy_rt_4096B` | the same ping-pong busy-polling, link latency 0 | a software loopback: the payload copy, one 64-byte entry and an index update into the other end's ring, and a poll that copies it back |
//! | `user_mr_rt_64B`, `user_mr_rt_64KiB` | the busy ping-pong with both ends' MRs over the program's own buffers (`reg_buffer`, as `ibv_reg_mr`: every gather and scatter a fault-safe copy, `docs/memory.md`) | the same ping-pong over memory the model allocates (`alloc_mr`), on a second device |
//! | `roce_rt_64B`, `roce_rt_64KiB` | a busy RC ping-pong between two devices over the RoCE v2 port (two loopback addresses, MTU 1024) | a bare UDP ping-pong between two sockets on the same addresses, one datagram per MTU of payload each way |
//! | `cq_create_65536`, `ucontext_create_512` | creating the last thousand of 65,536 CQs, each round in a fresh process (the last 64 of 512 user contexts) | the first thousand (the first 64): flat means 1.0 |
//!
//! The run also prints what a CQ and a QP cost (DMA memory and process heap). Run:
//! `cargo bench -p tests --bench hot_paths` (criterion's own report per pair, then the table).

use criterion::{Criterion, SamplingMode};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};
use std::alloc::System;
use std::cell::RefCell;
use std::time::Duration;

/// Counts heap bytes, for what a CQ and a QP cost (`scale.rs`).
#[global_allocator]
static HEAP: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Heap bytes live now (allocated minus freed, by every thread of the process).
fn heap_live() -> i64 {
    let s = HEAP.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64 + s.bytes_reallocated as i64
}

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

/// Adds a row measured outside criterion (one figure per round, already per operation).
fn row(name: &'static str, unit: &'static str, project: Vec<f64>, baseline: Vec<f64>) {
    ROWS.with(|r| r.borrow_mut().push(Row { name, unit, project, baseline }));
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn summary() {
    println!("\n{:<20} {:<12} {:>12} {:>12} {:>8}", "pair", "per", "project ns", "baseline ns", "ratio");
    ROWS.with(|rows| {
        for row in rows.borrow_mut().iter_mut().filter(|r| !r.project.is_empty()) {
            let (p, q) = (median(&mut row.project), median(&mut row.baseline));
            println!("{:<20} {:<12} {:>12.1} {:>12.1} {:>7.2}x", row.name, row.unit, p, q, p / q);
        }
    });
}

mod ibverbs;
mod poll;
mod post;
mod roce;
mod round_trip;
mod scale;

fn main() {
    if std::env::var_os(scale::CQ_ROUND_ENV).is_some() {
        return scale::cq_round_child();
    }
    let mut c = Criterion::default().configure_from_args();
    poll::poll_pairs(&mut c);
    poll::req_notify_pair(&mut c);
    ibverbs::ibverbs_pairs(&mut c);
    post::post_pairs(&mut c);
    round_trip::event_pairs(&mut c);
    round_trip::busy_pairs(&mut c);
    round_trip::user_memory_pairs(&mut c);
    roce::roce_pairs(&mut c);
    scale::scale_rows();
    c.final_summary();
    summary();
}
