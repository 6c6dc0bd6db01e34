//! The libibverbs-compatible library's CQ verbs through its ops table, as the header's inline
//! `ibv_poll_cq`/`ibv_req_notify_cq` call them, beside the core's `Cq::poll`/`Cq::req_notify` on
//! a CQ of the same kind (a user context's, 4096 entries, on a model) in the same run. The
//! issue's target: the library at most 1.2x the Rust call.

use crate::pair;
use criterion::Criterion;
use ib_core::{NotifyFlags, Wc};
use ibverbs_compat::abi::{ibv_context, ibv_cq, ibv_wc};
use pvrdma_abi::wqe::Cqe;
use pvrdma_sim::{SimConfig, SimDevice};
use std::hint::black_box;
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RING: u32 = 4096;
/// CQEs forged (untimed) per round of the one-CQE pairs.
const CHUNK: u64 = 1024;

/// A CQ of the library on its default model device, and that model.
fn library_cq() -> (*mut ibv_cq, Arc<SimDevice>) {
    // SAFETY: the list is NULL-terminated; its first device is the library's default model.
    unsafe {
        let list = ibverbs_compat::ibv_get_device_list(null_mut());
        assert!(!list.is_null() && !(*list).is_null(), "the library's model device");
        let ctx: *mut ibv_context = ibverbs_compat::ibv_open_device(*list);
        let model = ibverbs_compat::test_model(*list).expect("a model").device().clone();
        ibverbs_compat::ibv_free_device_list(list);
        let cq = ibverbs_compat::ibv_create_cq(ctx, RING as i32, null_mut(), null_mut(), 0);
        assert!(!cq.is_null());
        (cq, model)
    }
}

fn ops_poll(cq: *mut ibv_cq, wc: &mut [ibv_wc; 1]) -> i32 {
    // SAFETY: a live CQ of the library; room for one completion.
    unsafe { ((*(*cq).context).ops.poll_cq.unwrap_unchecked())(cq, 1, wc.as_mut_ptr()) }
}

/// Forges `k` CQEs on CQ `handle` (untimed).
fn forge(model: &SimDevice, handle: u32, k: u64) {
    let cqe = Cqe::default();
    for _ in 0..k {
        assert!(model.post_cqe(handle, &cqe, false));
    }
}

/// Times polls of one CQE each, [`CHUNK`] forged at a time.
fn one_each(n: u64, forge_k: impl Fn(u64), mut poll: impl FnMut() -> i32) -> Duration {
    let mut spent = Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let k = left.min(CHUNK);
        forge_k(k);
        let t = Instant::now();
        for _ in 0..k {
            assert_eq!(black_box(poll()), 1);
        }
        spent += t.elapsed();
        left -= k;
    }
    spent
}

/// Times `n` calls of `f`.
fn timed(n: u64, mut f: impl FnMut()) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed()
}

pub fn ibverbs_pairs(c: &mut Criterion) {
    let (lcq, lmodel) = library_cq();
    let (dev, sim) = hca::open_sim(SimConfig::default()).expect("the model");
    let uctx = dev.alloc_ucontext().expect("a user context");
    let rcq = uctx.create_cq(RING, None).expect("a CQ");
    let rmodel = sim.device().clone();
    let mut iwc = [ibv_wc::default(); 1];
    let mut rwc = [Wc::default(); 1];
    pair(
        c,
        "ibv_poll_cq_empty",
        (1, "call"),
        |n| timed(n, || assert_eq!(black_box(ops_poll(lcq, &mut iwc)), 0)),
        |n| timed(n, || assert_eq!(black_box(rcq.poll(&mut rwc).expect("poll")), 0)),
    );
    // SAFETY: a live CQ of the library.
    let lhandle = unsafe { (*lcq).handle };
    pair(
        c,
        "ibv_poll_cq_one",
        (1, "CQE"),
        |n| one_each(n, |k| forge(&lmodel, lhandle, k), || ops_poll(lcq, &mut iwc)),
        |n| one_each(n, |k| forge(&rmodel, rcq.handle(), k), || rcq.poll(&mut rwc).expect("poll") as i32),
    );
    pair(
        c,
        "ibv_req_notify_cq",
        (1, "arm"),
        // SAFETY: a live CQ of the library.
        |n| timed(n, || assert_eq!(unsafe { ((*(*lcq).context).ops.req_notify_cq.unwrap_unchecked())(lcq, 0) }, 0)),
        |n| timed(n, || assert!(!rcq.req_notify(NotifyFlags::NEXT_COMPLETION).expect("arm"))),
    );
}
