//! UAR page allocation cost with few and with many contexts live, paired in one run (an O(1)
//! allocator costs the same with 511 pages taken as with none); and one doorbell's cost beside
//! the bare write it ends in.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use doorbell::{ContextUar, Owner, QpHandle, UarMmio, UarTable};
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

/// One doorbell: the bare 32-bit write (the limit), through the kernel's page (owner check,
/// barrier), and through a user mapping (also its in-flight count, which revocation waits on).
fn ring(c: &mut Criterion) {
    let mut g = c.benchmark_group("doorbell_ring");
    let bar = Arc::new(NoBar);
    let t = UarTable::new(bar.clone(), 0, 2);
    let ctx = t.alloc().unwrap();
    let user = ctx.map(0, 4096).unwrap();
    let kernel = t.kernel_doorbells();
    let (kqp, uqp) = (QpHandle::new(1, Owner::Kernel).unwrap(), QpHandle::new(2, ctx.owner()).unwrap());
    let bare: Arc<dyn UarMmio> = bar.clone();
    g.bench_function("bare_uar_write", |b| {
        b.iter(|| black_box(&bare).uar_write32(black_box(0), black_box(0x4000_0001)))
    });
    g.bench_function("kernel_qp_send", |b| b.iter(|| kernel.qp_send(black_box(&kqp))));
    g.bench_function("user_qp_send", |b| b.iter(|| user.qp_send(black_box(&uqp))));
    g.finish();
}

criterion_group!(benches, alloc_release, ring);
criterion_main!(benches);
