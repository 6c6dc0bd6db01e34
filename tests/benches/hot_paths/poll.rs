//! `poll_cq` at batch 1 and 16 beside a raw ring read, and `req_notify` beside a bare UAR write.

use crate::pair;
use criterion::Criterion;
use ib_core::{NotifyFlags, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Wc, WrOpcode};
use parking_lot::Mutex;
use pvrdma_abi::wqe::{wc_opcode, Cqe};
use pvrdma_sim::SimConfig;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tests::fixture::{connect, pv};

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

/// Receives the model delivers per round: one RQ of the model's largest depth.
const DEPTH: u32 = 1024;

/// Two connected RC QPs of depth [`DEPTH`]: `a` sends unsignaled into `scq`, `b` receives into
/// `rcq`, the CQ whose poll is timed.
fn receiving_pair(
    dev: &ib_core::Device,
    pd: &ib_core::Pd,
    scq: &ib_core::Cq,
    rcq: &ib_core::Cq,
) -> (ib_core::Qp, ib_core::Qp) {
    let cap = QpCap { max_send_wr: DEPTH, max_recv_wr: DEPTH, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = |recv_cq| {
        let attr =
            QpInitAttr { send_cq: scq, recv_cq, cap, qp_type: QpType::Rc, sq_sig_all: false, qp_context: 0, srq: None };
        pd.create_qp(&attr).expect("create_qp")
    };
    let (a, b) = (qp(scq), qp(rcq));
    let gid = tests::fixture::gid(dev);
    connect(&a, b.qpn(), gid);
    connect(&b, a.qpn(), gid);
    (a, b)
}

/// Makes the model queue `k` receive CQEs on `b`'s CQ: `k` empty receives, `k` empty unsignaled
/// sends, and a bounded wait for the port to deliver them (none of it timed).
fn deliver(a: &ib_core::Qp, b: &ib_core::Qp, k: usize, device: &pvrdma_sim::SimDevice) {
    let recvs: Vec<RecvWr> = (0..k as u64).map(|wr_id| RecvWr { wr_id, sg_list: &[] }).collect();
    b.post_recv_list(&recvs).expect("post_recv");
    let sends: Vec<SendWr> = (0..k as u64)
        .map(|wr_id| SendWr { wr_id, sg_list: &[], opcode: WrOpcode::Send, signaled: false, solicited: false })
        .collect();
    a.post_send_list(&sends).expect("post_send");
    assert!(device.wait_port_idle(Duration::from_secs(5)), "the model did not deliver");
}

pub fn poll_pairs(c: &mut Criterion) {
    let (dev, sim) = hca::open_sim(SimConfig::default()).expect("the model");
    let cq = dev.create_cq(RING, None).expect("a CQ");
    let scq = dev.create_cq(RING, None).expect("a CQ");
    let pd = dev.alloc_pd().expect("a PD");
    let (a, b) = receiving_pair(&dev, &pd, &scq, &cq);
    let device = sim.device().clone();
    for batch in [1usize, 16] {
        let name = if batch == 1 { "poll_cq_b1" } else { "poll_cq_b16" };
        let mut raw = RawRing::new(RING as usize);
        let mut wc = vec![Wc::default(); batch];
        let mut out = vec![[0u8; 64]; batch];
        let chunk = u64::from(DEPTH);
        pair(
            c,
            name,
            (batch as u64, "CQE"),
            |n| {
                let mut spent = Duration::ZERO;
                let mut left = n * batch as u64;
                while left > 0 {
                    let k = left.min(chunk);
                    deliver(&a, &b, k as usize, &device);
                    let t = Instant::now();
                    let mut got = 0;
                    while got < k {
                        got += cq.poll(black_box(&mut wc)).expect("poll") as u64;
                    }
                    spent += t.elapsed();
                    assert_eq!(wc[0].status, ib_core::WcStatus::Success, "a receive the consumer posted");
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
}

pub fn req_notify_pair(c: &mut Criterion) {
    let (dev, sim) = hca::open_sim(SimConfig::default()).expect("the model");
    let ch = dev.create_comp_channel().expect("a channel");
    let cq = dev.create_cq(64, Some(&ch)).expect("a CQ");
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
    // The arm after an event spent it: the one that rings the doorbell. Each arm is timed on
    // its own (the event in between is not), and so is each bare write.
    let mut cqe = Cqe::default();
    cqe.opcode.set(wc_opcode::RECV);
    let device = sim.device().clone();
    let mut wc = [Wc::default(); 1];
    pair(
        c,
        "req_notify_spent",
        (1, "arm"),
        |n| {
            let mut spent = Duration::ZERO;
            for _ in 0..n {
                assert!(device.post_cqe(cq.handle(), &cqe, false));
                // Usually queued already (the handler ran on this thread); the vector thread's
                // periodic drain may have taken the entry first and deliver it a moment later.
                let ev = ch.get_cq_event(Duration::from_secs(5)).expect("the armed CQ's event");
                ev.ack_events(1);
                assert_eq!(cq.poll(&mut wc).expect("poll"), 1);
                let t = Instant::now();
                cq.req_notify(NotifyFlags::NEXT_COMPLETION).expect("arm");
                spent += t.elapsed();
            }
            spent
        },
        |n| {
            let p = pv(&dev);
            let mut spent = Duration::ZERO;
            for _ in 0..n {
                let t = Instant::now();
                p.raw_uar_write(black_box(kernel), black_box(arm.value));
                spent += t.elapsed();
            }
            spent
        },
    );
}
