//! `post_send` and its doorbell beside writing the same WQE bytes into a ring.
//!
//! On hardware the doorbell is a posted write: the CPU goes on while the HCA fetches the WQE. The
//! model runs the device inside the UAR write instead, so the project's side runs over a platform
//! (`tests::intercept`) that holds the QP's doorbell as a posted write would (one store) and hands
//! it to the model after the batch, untimed; the model then sends the batch and the receiver's
//! CQEs are polled, also untimed. The vector-2 handler is not given to the model there, which
//! the batch's unarmed CQs do not need.

use crate::pair;
use criterion::Criterion;
use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use ib_core::{access, Mr, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, Wc, WrOpcode};
use parking_lot::Mutex;
use pvrdma_abi::wqe::{Sge as WqeSge, SqWqeHdr};
use pvrdma_sim::SimConfig;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tests::fixture::{connect, gid};
use tests::intercept::{Hooks, Intercept};
use zerocopy::IntoBytes;

/// UAR writes held while `posted` is set (the last one kept, as the device would see only the
/// latest producer index anyway); DMA resolved once, as with the model's own platform.
#[derive(Default)]
struct PostedDoorbells {
    posted: AtomicBool,
    held: AtomicU64,
}

impl Hooks for PostedDoorbells {
    fn uar_write(&self, sim: &SimPlatform, offset: u64, value: u32) {
        if self.posted.load(Ordering::Relaxed) {
            self.held.store(offset << 32 | u64::from(value), Ordering::Relaxed);
        } else {
            sim.uar_write(offset, value)
        }
    }
    fn direct_dma(&self) -> bool {
        true
    }
}

impl PostedDoorbells {
    /// Hands the held doorbell, if any, to the model.
    fn flush(&self, sim: &SimPlatform) {
        self.posted.store(false, Ordering::SeqCst);
        let v = self.held.swap(u64::MAX, Ordering::SeqCst);
        if v != u64::MAX {
            sim.uar_write(v >> 32, v as u32);
        }
    }
}

/// An SQ of WQE slots laid out as the device's (header, then the SGE), under the kind of lock a
/// thread-safe post takes, with a producer index and a word standing for the doorbell.
struct RawSq {
    slots: Mutex<Vec<[u8; SLOT]>>,
    prod: AtomicU32,
    doorbell: AtomicU32,
}

const SLOT: usize = 128;
const DEPTH: u32 = 64;
const MSG: u32 = 64;

impl RawSq {
    /// Writes `batch` copies of `wqe` under one lock, one release store of the producer index,
    /// one doorbell store.
    fn post(&self, wqe: &[u8], batch: u32) {
        let mut slots = self.slots.lock();
        let p = self.prod.load(Ordering::Relaxed);
        let n = slots.len();
        for k in 0..batch {
            slots[(p + k) as usize % n][..wqe.len()].copy_from_slice(wqe);
        }
        self.prod.store(p.wrapping_add(batch), Ordering::Release);
        drop(slots);
        self.doorbell.store(p, Ordering::Relaxed);
    }
}

struct Bench {
    posted: Arc<Intercept<PostedDoorbells>>,
    a: Qp,
    b: Qp,
    mr_a: Mr,
    mr_b: Mr,
    cq_a: ib_core::Cq,
    cq_b: ib_core::Cq,
    _dev: ib_core::Device,
}

fn setup() -> Bench {
    let hooks = PostedDoorbells { held: AtomicU64::new(u64::MAX), ..Default::default() };
    let posted = Arc::new(Intercept { sim: SimPlatform::new(SimConfig::default()), hooks });
    let dev = hca::probe(posted.clone(), hca::ProbeOptions::default()).expect("the model");
    let pd = dev.alloc_pd().expect("a PD");
    let cq_a = dev.create_cq(4 * DEPTH, None).expect("a CQ");
    let cq_b = dev.create_cq(4 * DEPTH, None).expect("a CQ");
    let cap = QpCap { max_send_wr: DEPTH, max_recv_wr: DEPTH, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = |cq| {
        let attr = QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        };
        pd.create_qp(&attr).expect("a QP")
    };
    let (a, b) = (qp(&cq_a), qp(&cq_b));
    connect(&a, b.qpn(), gid(&dev));
    connect(&b, a.qpn(), gid(&dev));
    let mr_a = pd.alloc_mr(4096, access::LOCAL_WRITE).expect("an MR");
    let mr_b = pd.alloc_mr(4096, access::LOCAL_WRITE).expect("an MR");
    Bench { posted, a, b, mr_a, mr_b, cq_a, cq_b, _dev: dev }
}

impl Bench {
    /// Posts `batch` receives on `b`, then times `batch` sends on `a`; then (untimed) rings the
    /// held doorbell and polls both ends' CQEs.
    fn round(&self, batch: u32) -> Duration {
        let rsge = [Sge { addr: self.mr_b.addr(), length: MSG, lkey: self.mr_b.lkey() }];
        let recvs: Vec<_> = (0..batch).map(|k| RecvWr { wr_id: u64::from(k), sg_list: &rsge }).collect();
        self.b.post_recv_list(&recvs).expect("post_recv");
        let sge = [Sge { addr: self.mr_a.addr(), length: MSG, lkey: self.mr_a.lkey() }];
        let send =
            |k| SendWr { wr_id: u64::from(k), sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
        let sends: Vec<_> = (0..batch).map(send).collect();
        self.posted.hooks.posted.store(true, Ordering::SeqCst);
        let t = Instant::now();
        self.a.post_send_list(black_box(&sends)).expect("post_send");
        let spent = t.elapsed();
        self.posted.hooks.flush(&self.posted.sim);
        drain(&self.cq_a, batch);
        drain(&self.cq_b, batch);
        spent
    }
}

/// Polls `n` successful CQEs from `cq`, within a bound.
fn drain(cq: &ib_core::Cq, n: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut wc = [Wc::default(); 32];
    let mut got = 0;
    while got < n {
        let k = cq.poll(&mut wc).expect("poll");
        assert!(wc[..k].iter().all(|w| w.status == ib_core::WcStatus::Success), "a send failed");
        got += k as u32;
        assert!(Instant::now() < deadline, "the batch did not complete");
    }
}

/// The WQE the project writes for one 64-byte SEND: header, then one SGE.
fn wqe_bytes() -> Vec<u8> {
    let mut hdr = SqWqeHdr::default();
    hdr.wr_id.set(7);
    hdr.num_sge.set(1);
    hdr.total_len.set(MSG);
    let mut sge = WqeSge::default();
    sge.addr.set(0x1000);
    sge.length.set(MSG);
    sge.lkey.set(0x100);
    [hdr.as_bytes(), sge.as_bytes()].concat()
}

pub fn post_pairs(c: &mut Criterion) {
    let b = setup();
    let raw = RawSq {
        slots: Mutex::new(vec![[0; SLOT]; DEPTH as usize]),
        prod: AtomicU32::new(0),
        doorbell: AtomicU32::new(0),
    };
    let wqe = wqe_bytes();
    assert!(wqe.len() <= SLOT);
    for batch in [1u32, 32] {
        let name = if batch == 1 { "post_send_b1" } else { "post_send_b32" };
        pair(
            c,
            name,
            (u64::from(batch), "WQE"),
            |n| (0..n).map(|_| b.round(batch)).sum(),
            |n| {
                // Timed per batch, as the project's side is (the clock's cost is in both).
                let mut spent = Duration::ZERO;
                for _ in 0..n {
                    let t = Instant::now();
                    raw.post(black_box(&wqe), batch);
                    spent += t.elapsed();
                }
                spent
            },
        );
    }
}
