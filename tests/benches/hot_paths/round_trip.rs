//! Round trips between two threads: an RC ping-pong over the stack (event mode and busy mode,
//! link latency 0) beside a condvar ping-pong and a software loopback.

use crate::pair;
use criterion::Criterion;
use ib_core::{
    access, CompChannel, Cq, Mr, NotifyFlags, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, UserBuffer, Wc,
    WcStatus, WrOpcode,
};
use parking_lot::{Condvar, Mutex};
use pvrdma_sim::SimConfig;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use tests::fixture::{connect, gid};

/// Longest any wait in a round trip may take before the benchmark fails.
const STUCK: Duration = Duration::from_secs(5);
/// Receives kept posted on each end.
const RX_DEPTH: u32 = 16;

/// Pins the calling thread to CPU 0 (the pinned rows: this VM wakes an idle CPU slowly, which
/// hides hand-offs when the two threads sit on two CPUs). Only threads spawned for one sample
/// are pinned: threads inherit their creator's affinity.
fn pin_to_cpu0() {
    assert!(core_affinity::set_for_current(core_affinity::CoreId { id: 0 }), "cannot pin to CPU 0");
}

/// One end of the ping-pong: its QP, its CQ (sends unsignaled: receives only), the CQ's
/// channel in event mode, and the MR its sends (first half) and receives (second half) use.
pub(crate) struct End {
    pub(crate) qp: Qp,
    pub(crate) cq: Cq,
    pub(crate) ch: Option<CompChannel>,
    pub(crate) mr: Mr,
    /// Busy polling yields the CPU between empty polls (as `hca pingpong` does): the device's
    /// own threads (the RoCE port's receive thread) run in this process and need a CPU.
    pub(crate) yields: bool,
}

impl End {
    pub(crate) fn post_recv(&self, size: u32) {
        let half = (self.mr.len() / 2) as u64;
        let sge = [Sge { addr: self.mr.addr() + half, length: size, lkey: self.mr.lkey() }];
        self.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &sge }).expect("post_recv");
    }

    fn send(&self, size: u32) {
        let sge = [Sge { addr: self.mr.addr(), length: size, lkey: self.mr.lkey() }];
        let wr = SendWr { wr_id: 2, sg_list: &sge, opcode: WrOpcode::Send, signaled: false, solicited: false };
        self.qp.post_send(&wr).expect("post_send");
    }

    /// Waits for one receive: busy-polls, or (with a channel) polls, sleeps for an event, acks
    /// it and re-arms, as `ibv_rc_pingpong -e` does. Then re-posts the receive.
    fn wait_recv(&self, size: u32) {
        let deadline = Instant::now() + STUCK;
        let mut wc = [Wc::default(); 1];
        let mut spins = 0u32;
        loop {
            if self.cq.poll(&mut wc).expect("poll") == 1 {
                assert_eq!(wc[0].status, WcStatus::Success, "a receive failed");
                break;
            }
            match &self.ch {
                Some(ch) => {
                    let cq = ch.get_cq_event(STUCK).expect("a completion event");
                    cq.ack_events(1);
                    self.cq.req_notify(NotifyFlags::NEXT_COMPLETION).expect("req_notify");
                }
                None if self.yields => {
                    std::thread::yield_now();
                    assert!(Instant::now() < deadline, "no receive within {STUCK:?}");
                }
                None => {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins & 1023 == 0 {
                        assert!(Instant::now() < deadline, "no receive within {STUCK:?}");
                    }
                }
            }
        }
        self.post_recv(size);
    }

    /// `n` round trips; the initiator sends first. Returns the time from the start barrier.
    fn run(&self, n: u64, size: u32, initiator: bool, pinned: bool, start: &Barrier) -> Duration {
        if pinned {
            pin_to_cpu0();
        }
        start.wait();
        let t = Instant::now();
        for _ in 0..n {
            if initiator {
                self.send(size);
                self.wait_recv(size);
            } else {
                self.wait_recv(size);
                self.send(size);
            }
        }
        t.elapsed()
    }
}

/// Which memory an end's MR is over.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Memory {
    /// Memory the model allocates (`alloc_mr`), reached directly.
    Model,
    /// The program's own buffer (`reg_buffer`, as `ibv_reg_mr`), reached through the model's
    /// fault-safe copies (`docs/memory.md`).
    Program,
}

/// Two connected ends on one model device, receives posted (and, in event mode, CQs armed).
fn ends(events: bool, size: u32) -> (ib_core::Device, End, End) {
    ends_over(events, size, Memory::Model)
}

/// [`ends`] with MRs over `memory`, big enough for two messages of `size`.
fn ends_over(events: bool, size: u32, memory: Memory) -> (ib_core::Device, End, End) {
    let (dev, _sim) = hca::open_sim(SimConfig::default()).expect("the model");
    let pd = dev.alloc_pd().expect("a PD");
    let cap =
        QpCap { max_send_wr: RX_DEPTH, max_recv_wr: RX_DEPTH, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let end = || {
        let ch = events.then(|| dev.create_comp_channel().expect("a channel"));
        let cq = dev.create_cq(2 * RX_DEPTH, ch.as_ref()).expect("a CQ");
        let attr = QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        };
        let qp = pd.create_qp(&attr).expect("a QP");
        let len = (2 * size as usize).max(8192);
        let mr = match memory {
            Memory::Model => pd.alloc_mr(len, access::LOCAL_WRITE).expect("an MR"),
            Memory::Program => {
                let buf = UserBuffer::new(len).expect("a buffer");
                pd.reg_buffer(&buf, access::LOCAL_WRITE).expect("an MR over the buffer")
            }
        };
        End { qp, cq, ch, mr, yields: false }
    };
    let (a, b) = (end(), end());
    connect(&a.qp, b.qp.qpn(), gid(&dev));
    connect(&b.qp, a.qp.qpn(), gid(&dev));
    for e in [&a, &b] {
        for _ in 0..RX_DEPTH {
            e.post_recv(size);
        }
        if events {
            e.cq.req_notify(NotifyFlags::NEXT_COMPLETION).expect("req_notify");
        }
    }
    (dev, a, b)
}

/// `n` round trips between `a` and `b` on two threads; the initiator's time.
pub(crate) fn stack_round_trips(a: &End, b: &End, n: u64, size: u32, pinned: bool) -> Duration {
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let peer = s.spawn(|| b.run(n, size, false, pinned, &start));
        let t = s.spawn(|| a.run(n, size, true, pinned, &start)).join().expect("the initiator");
        peer.join().expect("the peer thread");
        t
    })
}

/// Two threads handing a token back and forth through a `Mutex` and a `Condvar`: a counter of
/// hand-offs, odd when the token is with the peer.
fn condvar_round_trips(n: u64, pinned: bool) -> Duration {
    let token = Mutex::new(0u64);
    let cv = Condvar::new();
    let start = Barrier::new(2);
    let side = |initiator: bool| {
        if pinned {
            pin_to_cpu0();
        }
        start.wait();
        let t = Instant::now();
        for k in 0..n {
            let (wait_for, then) = if initiator { (2 * k, 2 * k + 1) } else { (2 * k + 1, 2 * k + 2) };
            let mut g = token.lock();
            while *g != wait_for {
                assert!(!cv.wait_for(&mut g, STUCK).timed_out(), "condvar ping-pong stuck");
            }
            *g = then;
            cv.notify_one();
        }
        let mut g = token.lock();
        while initiator && *g != 2 * n {
            assert!(!cv.wait_for(&mut g, STUCK).timed_out(), "condvar ping-pong stuck");
        }
        t.elapsed()
    };
    std::thread::scope(|s| {
        let peer = s.spawn(|| side(false));
        let t = s.spawn(|| side(true)).join().expect("the initiator");
        peer.join().expect("the peer thread");
        t
    })
}

/// One end's inbound ring of the software loopback: the payload buffer and a 64-byte entry
/// under the lock a thread-safe poll takes, and the producer and consumer indices.
struct Inbound {
    slot: Mutex<(Vec<u8>, [u8; 64])>,
    prod: AtomicU32,
    cons: AtomicU32,
}

impl Inbound {
    fn new() -> Self {
        Self { slot: Mutex::new((Vec::new(), [0; 64])), prod: AtomicU32::new(0), cons: AtomicU32::new(0) }
    }

    fn deliver(&self, payload: &[u8], entry: &[u8; 64]) {
        let mut s = self.slot.lock();
        s.0.clear();
        s.0.extend_from_slice(payload);
        s.1 = *entry;
        drop(s);
        self.prod.fetch_add(1, Ordering::Release);
    }

    fn poll(&self, out: &mut [u8], entry: &mut [u8; 64]) {
        let deadline = Instant::now() + STUCK;
        let cons = self.cons.load(Ordering::Relaxed);
        let mut spins = 0u32;
        while self.prod.load(Ordering::Acquire) == cons {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins & 1023 == 0 {
                assert!(Instant::now() < deadline, "software loopback stuck");
            }
        }
        let s = self.slot.lock();
        out.copy_from_slice(&s.0);
        *entry = s.1;
        drop(s);
        self.cons.store(cons.wrapping_add(1), Ordering::Release);
    }
}

/// The software loopback: the same ping-pong, each message a payload copy and one entry into
/// the other end's ring, and a poll that copies both back.
fn loopback_round_trips(n: u64, size: usize) -> Duration {
    let (to_a, to_b) = (Inbound::new(), Inbound::new());
    let start = Barrier::new(2);
    let side = |rx: &Inbound, tx: &Inbound, initiator: bool| {
        let payload = vec![0x5au8; size];
        let mut buf = vec![0u8; size];
        let (entry, mut got) = ([1u8; 64], [0u8; 64]);
        start.wait();
        let t = Instant::now();
        for _ in 0..n {
            if initiator {
                tx.deliver(&payload, &entry);
                rx.poll(&mut buf, &mut got);
            } else {
                rx.poll(&mut buf, &mut got);
                tx.deliver(&payload, &entry);
            }
        }
        t.elapsed()
    };
    std::thread::scope(|s| {
        let peer = s.spawn(|| side(&to_b, &to_a, false));
        let t = s.spawn(|| side(&to_a, &to_b, true)).join().expect("the initiator");
        peer.join().expect("the peer thread");
        t
    })
}

pub fn event_pairs(c: &mut Criterion) {
    let (_dev, a, b) = ends(true, 64);
    for pinned in [false, true] {
        let name = if pinned { "event_rt_64B_pinned" } else { "event_rt_64B" };
        pair(
            c,
            name,
            (1, "round trip"),
            |n| stack_round_trips(&a, &b, n, 64, pinned),
            |n| condvar_round_trips(n, pinned),
        );
    }
}

pub fn busy_pairs(c: &mut Criterion) {
    for size in [64u32, 4096] {
        let (_dev, a, b) = ends(false, size);
        let name = if size == 64 { "busy_rt_64B" } else { "busy_rt_4096B" };
        pair(
            c,
            name,
            (1, "round trip"),
            |n| stack_round_trips(&a, &b, n, size, false),
            |n| loopback_round_trips(n, size as usize),
        );
    }
}

/// The busy ping-pong with both ends' MRs over the program's own buffers (every send gathered
/// and every receive scattered through the fault-safe copies) beside the same ping-pong over
/// memory the model allocates, on another device of the same configuration.
pub fn user_memory_pairs(c: &mut Criterion) {
    for size in [64u32, 65536] {
        let (_dev, a, b) = ends_over(false, size, Memory::Program);
        let (_model, ma, mb) = ends_over(false, size, Memory::Model);
        let name = if size == 64 { "user_mr_rt_64B" } else { "user_mr_rt_64KiB" };
        pair(
            c,
            name,
            (1, "round trip"),
            |n| stack_round_trips(&a, &b, n, size, false),
            |n| stack_round_trips(&ma, &mb, n, size, false),
        );
    }
}
