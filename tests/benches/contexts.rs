//! A user context's create and release through the whole stack (UAR page, CREATE_UC, mapping,
//! revocation, DESTROY_UC) with 1 and with 511 other contexts live, paired in one run. The UAR
//! page allocation is flat (`doorbell`'s `uar` bench); what still grows with the contexts live
//! (about 1.1x at 511) is elsewhere: the model's ordered object tables, and caches.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pvrdma_sim::SimConfig;
use std::hint::black_box;

fn context_create_release(c: &mut Criterion) {
    let (dev, _sim) = hca::open_sim(SimConfig::default()).unwrap();
    let mut g = c.benchmark_group("ucontext_create_release");
    for live in [1usize, 511] {
        let held: Vec<_> = (0..live).map(|_| dev.alloc_ucontext().unwrap()).collect();
        g.bench_with_input(BenchmarkId::from_parameter(format!("{live}_live")), &live, |b, _| {
            b.iter(|| drop(black_box(dev.alloc_ucontext().unwrap())))
        });
        drop(held);
    }
    g.finish();
}

criterion_group!(benches, context_create_release);
criterion_main!(benches);
