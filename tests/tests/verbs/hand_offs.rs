//! What the in-process model spares a message at link latency 0 (no port-thread or vector-thread
//! hand-off), checked through the whole stack, and that nothing is lost or doubled when many
//! threads ring doorbells at once.

use ib_core::{access, Cq, NotifyFlags, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode};
use pvrdma_abi::wqe::{wc_opcode, Cqe};
use std::time::{Duration, Instant};
use tests::fixture::*;

#[test]
fn at_latency_0_the_raising_thread_runs_the_interrupt_handler() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let (scq, rcq) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, Some(&ch)).unwrap());
    let p = pair(&dev, &pd, (&scq, &scq), (&rcq, &rcq));
    rcq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    p.recv_b(1, 0, 64);
    let before = sim.device().vectors().raised(2);
    p.send_a(2, 0, b"now", WrOpcode::Send, false);
    // Queued before post_send returns, unless the vector thread's periodic drain (every 50 ms)
    // took the entry a moment earlier and delivers it just after: wait, with a bound.
    let ev = ch.get_cq_event(WAIT).expect("the event");
    assert_eq!(ev.handle(), rcq.handle());
    ev.ack_events(1);
    assert_eq!(sim.device().vectors().raised(2) - before, 1);
    assert_eq!(sim.device().vectors().wait(2, Duration::ZERO), 0, "no interrupt left for the vector thread");
    assert_eq!(stats(&dev).interrupts[2], 1, "the driver's handler took it on the raising thread");
    assert_eq!(poll_n(&rcq, 1)[0].wr_id, 1);
}

#[test]
fn an_empty_cq_kicks_the_poll_doorbell_once_per_streak_and_every_64th_poll() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let polls = || sim.device().stats().cq_polls;
    let mut wc = [Wc::default(); 4];
    let base = polls();
    for _ in 0..200 {
        assert_eq!(cq.poll(&mut wc).unwrap(), 0);
    }
    assert_eq!(polls() - base, 4, "polls 1, 65, 129 and 193 of the streak");
    let mut cqe = Cqe::default();
    cqe.opcode.set(wc_opcode::RECV);
    assert!(sim.device().post_cqe(cq.handle(), &cqe, false));
    assert_eq!(cq.poll(&mut wc).unwrap(), 1, "data ends the streak");
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
    assert_eq!(polls() - base, 5, "a new streak kicks at once");
}

/// One side of a ping-pong: its QP, its CQ (sends unsignaled) and its MR.
struct Side {
    qp: Qp,
    cq: Cq,
    mr: ib_core::Mr,
}

impl Side {
    fn recv(&self) {
        let sge = [Sge { addr: self.mr.addr() + 64, length: 64, lkey: self.mr.lkey() }];
        self.qp.post_recv(&RecvWr { wr_id: 1, sg_list: &sge }).unwrap();
    }

    fn send(&self, seq: u64) {
        self.mr.write(0, &seq.to_le_bytes()).unwrap();
        let sge = [Sge { addr: self.mr.addr(), length: 8, lkey: self.mr.lkey() }];
        let wr = SendWr { wr_id: seq, sg_list: &sge, opcode: WrOpcode::Send, signaled: false, solicited: false };
        self.qp.post_send(&wr).unwrap();
    }

    /// Waits (busy, with a bound) for the receive of message `seq` and checks its payload.
    fn expect(&self, seq: u64) {
        let deadline = Instant::now() + WAIT;
        let mut wc = [Wc::default(); 1];
        while self.cq.poll(&mut wc).unwrap() == 0 {
            assert!(Instant::now() < deadline, "message {seq} never arrived");
            std::thread::yield_now();
        }
        assert_eq!(wc[0].status, WcStatus::Success);
        let mut got = [0u8; 8];
        self.mr.read(64, &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), seq, "messages arrive once and in order");
        self.recv();
    }
}

#[test]
fn four_ping_pongs_at_once_at_latency_0_lose_and_double_nothing() {
    const ROUNDS: u64 = 1500;
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let side = || {
        let cq = dev.create_cq(16, None).unwrap();
        let attr = QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        };
        let qp = pd.create_qp(&attr).unwrap();
        let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
        Side { qp, cq, mr }
    };
    let pairs: Vec<(Side, Side)> = (0..4)
        .map(|_| {
            let (a, b) = (side(), side());
            connect(&a.qp, b.qp.qpn(), gid(&dev));
            connect(&b.qp, a.qp.qpn(), gid(&dev));
            a.recv();
            b.recv();
            (a, b)
        })
        .collect();
    let t = Instant::now();
    std::thread::scope(|s| {
        for (a, b) in &pairs {
            s.spawn(move || {
                for seq in 0..ROUNDS {
                    b.expect(seq);
                    b.send(seq);
                }
            });
            s.spawn(move || {
                for seq in 0..ROUNDS {
                    a.send(seq);
                    a.expect(seq);
                }
            });
        }
    });
    assert!(t.elapsed() < Duration::from_secs(60));
    let mut wc = [Wc::default(); 4];
    for (a, b) in &pairs {
        assert_eq!((a.cq.poll(&mut wc).unwrap(), b.cq.poll(&mut wc).unwrap()), (0, 0), "nothing extra");
    }
}
