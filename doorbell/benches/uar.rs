//! UAR page allocation cost with few and with many contexts live, paired in one run: an O(1)
//! allocator costs the same with 511 pages taken as with none.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use doorbell::{ContextUar, UarMmio, UarTable};
use std::hint::black_box;
use std::sync::Arc;

struct NoBar;

impl UarMmio for NoBar {
    fn uar_write32(&self, _offset: u64, _value: u32) {}
}

fn alloc_release(c: &mut Criterion) {
    let mut g = c.benchmark_group("uar_alloc_release");
    for live in [0usize, 511] {
        let t = UarTable::new(Arc::new(NoBar), 0, 513);
        let held: Vec<ContextUar> = (0..live).map(|_| t.alloc().unwrap()).collect();
        g.bench_with_input(BenchmarkId::from_parameter(format!("{live}_live")), &live, |b, _| {
            b.iter(|| drop(black_box(t.alloc().unwrap())))
        });
        drop(held);
    }
    g.finish();
}

criterion_group!(benches, alloc_release);
criterion_main!(benches);
