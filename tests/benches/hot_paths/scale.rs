//! Scale: 65,536 CQs and 512 user contexts live, creation cost as they accumulate (the last
//! ones beside the first ones: flat is 1.0), what a CQ and a QP cost in memory, and commands per
//! second in polling mode.

use crate::{heap_live, row};
use hca::ProbeOptions;
use ib_core::{Cq, QpCap, QpInitAttr, QpType};
use pvrdma_sim::SimConfig;
use std::time::{Duration, Instant};

/// CQs live at once.
const CQS: usize = 65_536;
/// CQs in each timed block (the first and the last).
const CQ_BLOCK: usize = 1000;
/// User contexts live at once, and the block timed at each end.
const CONTEXTS: usize = 512;
const CONTEXT_BLOCK: usize = 64;
/// Rounds of each scale measurement (the table shows the median).
const ROUNDS: usize = 3;
/// The model's memory budget for the CQ run: 65,536 CQs of one page of CQEs each (a ring-state
/// page, an entry page, a page directory and a page table: 16 KiB of DMA memory) and the rest.
const CQ_MEM_BUDGET: u64 = 1280 << 20;

fn per_op(d: Duration, n: usize) -> f64 {
    d.as_nanos() as f64 / n as f64
}

/// Creates `CQS` CQs; returns ns per CQ of the last and the first block, and (DMA, heap) bytes
/// per CQ (the heap includes the model's guest memory, so the DMA bytes too).
fn cq_round() -> (f64, f64, u64, u64) {
    let cfg = SimConfig { mem_limit: CQ_MEM_BUDGET, ..SimConfig::default() };
    let (dev, sim) = hca::open_sim(cfg).expect("the model");
    let (dma0, heap0) = (sim.device().mem().used(), heap_live());
    let mut cqs: Vec<Cq> = Vec::with_capacity(CQS);
    let (mut first, mut last) = (Duration::ZERO, Duration::ZERO);
    while cqs.len() < CQS {
        let t = Instant::now();
        for _ in 0..CQ_BLOCK.min(CQS - cqs.len()) {
            cqs.push(dev.create_cq(1, None).expect("one of 65,536 CQs"));
        }
        let spent = t.elapsed();
        if cqs.len() == CQ_BLOCK {
            first = spent;
        }
        last = spent;
    }
    let dma = (sim.device().mem().used() - dma0) / CQS as u64;
    let heap = (heap_live() - heap0).max(0) as u64 / CQS as u64;
    let tail = CQS % CQ_BLOCK;
    let last_n = if tail == 0 { CQ_BLOCK } else { tail };
    (per_op(last, last_n), per_op(first, CQ_BLOCK), dma, heap)
}

/// Grows this process's file-descriptor table past what the contexts will use. Each context
/// holds an eventfd (its async fd, as libibverbs's contexts hold theirs), and Linux waits for an
/// RCU grace period (10-30 ms here) when a multi-threaded process's table doubles, at 256 and
/// 512 descriptors: a one-off cost of the kernel's, not of the stack, which would land in
/// whichever block crosses it.
fn grow_fd_table() {
    let files: Vec<_> = (0..2 * CONTEXTS).filter_map(|_| std::fs::File::open("/dev/null").ok()).collect();
    drop(files);
}

/// Creates `CONTEXTS` user contexts; ns per context of the last and the first block.
fn context_round() -> (f64, f64) {
    grow_fd_table();
    let (dev, _sim) = hca::open_sim(SimConfig::default()).expect("the model");
    let mut held = Vec::with_capacity(CONTEXTS);
    let (mut first, mut last) = (Duration::ZERO, Duration::ZERO);
    while held.len() < CONTEXTS {
        let t = Instant::now();
        for _ in 0..CONTEXT_BLOCK {
            held.push(dev.alloc_ucontext().expect("one of 512 user contexts"));
        }
        let spent = t.elapsed();
        if held.len() == CONTEXT_BLOCK {
            first = spent;
        }
        last = spent;
    }
    (per_op(last, CONTEXT_BLOCK), per_op(first, CONTEXT_BLOCK))
}

/// (DMA, heap) bytes per QP of 16 send and 16 receive WRs of 2 SGEs, over 256 QPs.
fn qp_memory() -> (u64, u64) {
    const QPS: usize = 256;
    let (dev, sim) = hca::open_sim(SimConfig::default()).expect("the model");
    let pd = dev.alloc_pd().expect("a PD");
    let cq = dev.create_cq(64, None).expect("a CQ");
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let (dma0, heap0) = (sim.device().mem().used(), heap_live());
    let qps: Vec<_> = (0..QPS).map(|_| pd.create_qp(&attr).expect("a QP")).collect();
    let dma = (sim.device().mem().used() - dma0) / QPS as u64;
    let heap = (heap_live() - heap0).max(0) as u64 / QPS as u64;
    drop(qps);
    (dma, heap)
}

/// QUERY_PORT commands per second with polling waits, over `span`.
fn commands_per_second(span: Duration) -> f64 {
    let opts = ProbeOptions { cmd_wait: hca::WaitMode::Polling, ..ProbeOptions::default() };
    let (dev, _sim) = hca::open_sim_with(SimConfig::default(), opts).expect("the model");
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed() < span {
        for _ in 0..256 {
            dev.query_port(1).expect("QUERY_PORT");
        }
        n += 256;
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// Set in a child run of this benchmark that makes one [`cq_round`] and prints it.
pub const CQ_ROUND_ENV: &str = "HOT_PATHS_CQ_ROUND";

/// The child's side: one CQ round, printed as `last first dma heap`.
pub fn cq_round_child() {
    let (l, f, dma, heap) = cq_round();
    println!("{l} {f} {dma} {heap}");
}

/// One CQ round in a fresh process: a round after another gets the memory the last one freed
/// back from the allocator, whose state, not the stack's, would then set the ratio.
fn cq_round_fresh() -> (f64, f64, u64, u64) {
    let exe = std::env::current_exe().expect("this benchmark's path");
    let out = std::process::Command::new(exe).env(CQ_ROUND_ENV, "1").output().expect("a child round");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<f64> = text.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert!(
        out.status.success() && v.len() == 4,
        "child round failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (v[0], v[1], v[2] as u64, v[3] as u64)
}

pub fn scale_rows() {
    let (mut last, mut first, mut mem) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (l, f, dma, heap) = cq_round_fresh();
        last.push(l);
        first.push(f);
        mem.push((dma, heap));
    }
    row("cq_create_65536", "CQ (last/1st)", last, first);
    let (mut last, mut first) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (l, f) = context_round();
        last.push(l);
        first.push(f);
    }
    row("ucontext_create_512", "ctx (last/1st)", last, first);
    let (cq_dma, cq_heap) = mem[mem.len() / 2];
    let (qp_dma, qp_heap) = qp_memory();
    for (what, dma, heap) in [("CQ (one page of CQEs)", cq_dma, cq_heap), ("QP (16+16 WRs, 2 SGEs)", qp_dma, qp_heap)] {
        let objects = heap.saturating_sub(dma);
        println!(
            "memory per {what}: {dma} B of DMA memory; {objects} B of heap besides (driver, core and model objects)"
        );
    }
    let mut cps: Vec<f64> = (0..ROUNDS).map(|_| commands_per_second(Duration::from_millis(200))).collect();
    println!("commands per second, polling (QUERY_PORT, median of {ROUNDS}): {:.0}", crate::median(&mut cps));
}
