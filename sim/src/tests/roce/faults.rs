//! Exactly-once, in-order delivery through loss, reordering and duplication injected on both
//! devices' links: every message is received once, in order, with its bytes, and every send
//! completes successfully.

use super::*;
use crate::SimStats;
use pvrdma_abi::wqe::{wc_opcode, wc_status};

const MESSAGES: u64 = 2000;
/// Receive WQEs kept posted, and sends kept outstanding.
const RECVS: u64 = 128;
const SENDS: u64 = 64;
const SLOT: u64 = 2048;

/// Message `i`'s length: one packet, two packets, or exactly two MTUs.
fn len_of(i: u64) -> usize {
    [8, 1500, 2048][(i % 3) as usize]
}

/// Streams [`MESSAGES`] messages from one device to the other through `faults`; returns both
/// devices' counters.
fn exactly_once(faults: LinkFaults) -> (SimStats, SimStats) {
    let fb = LinkFaults { seed: faults.seed.wrapping_add(1), ..faults.clone() };
    exactly_once_with(faults, fb)
}

/// [`exactly_once`] with faults `fa` on the sender's link and `fb` on the receiver's.
fn exactly_once_with(fa: LinkFaults, fb: LinkFaults) -> (SimStats, SimStats) {
    // A local ACK timeout of 33.5 ms: seven in a row without progress (a retry_cnt of 7
    // exhausted) take a quarter second, which a loaded test machine's scheduling does not.
    let o = Opts { timeout: 13, ..Opts::default() };
    let (a, ea, b, eb) = pair_with(&o, fa, fb);
    for i in 0..RECVS {
        recv(&b, &eb, i, (i % RECVS) * SLOT, SLOT as u32);
    }
    let (mut posted, mut sent, mut got) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    while (sent < MESSAGES || got < MESSAGES) && Instant::now() < deadline {
        while posted < MESSAGES && posted - sent < SENDS {
            send(&a, &ea, posted, &pattern(posted, len_of(posted)), (posted % SENDS) * SLOT, None);
            posted += 1;
        }
        while let Some(c) = a.poll(&ea.cq) {
            assert_eq!((c.wr_id.get(), c.status.get()), (sent, wc_status::SUCCESS), "send completions in order");
            sent += 1;
        }
        while let Some(c) = b.poll(&eb.cq) {
            assert_eq!((c.wr_id.get(), c.status.get()), (got, wc_status::SUCCESS), "each message once, in order");
            assert_eq!(c.opcode.get(), wc_opcode::RECV);
            let len = len_of(got);
            assert_eq!(c.byte_len.get() as usize, len);
            assert_eq!(received(&b, &eb, (got % RECVS) * SLOT, len), pattern(got, len), "message {got}");
            if got + RECVS < MESSAGES {
                recv(&b, &eb, got + RECVS, (got % RECVS) * SLOT, SLOT as u32);
            }
            got += 1;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!((sent, got), (MESSAGES, MESSAGES), "all delivered within the bound");
    // Nothing more arrives: no message was delivered twice.
    std::thread::sleep(Duration::from_millis(50));
    assert!(a.poll(&ea.cq).is_none() && b.poll(&eb.cq).is_none());
    (a.dev.stats(), b.dev.stats())
}

#[test]
fn exactly_once_through_loss() {
    let (a, b) = exactly_once(LinkFaults { loss: 0.1, seed: 1, ..LinkFaults::default() });
    assert!(a.roce_injected_loss > 0 && b.roce_injected_loss > 0);
    assert!(a.roce_retransmits > 0, "lost packets were sent again");
}

#[test]
fn exactly_once_through_loss_on_the_receivers_link_alone() {
    // The receiver's faults hit what it receives (the data) as well as what it sends (ACKs).
    let f = LinkFaults { loss: 0.1, seed: 6, ..LinkFaults::default() };
    let (a, b) = exactly_once_with(LinkFaults::default(), f);
    assert_eq!(a.roce_injected_loss, 0);
    // Counted after the receiving side's faults: a tenth of what A sent never reached B's
    // transport.
    assert!(b.roce_rx_packets < a.roce_tx_packets * 95 / 100, "received data was dropped too");
    assert!(a.roce_retransmits > 0);
}

#[test]
fn exactly_once_through_reordering() {
    let (a, b) = exactly_once(LinkFaults { reorder: 0.1, seed: 2, ..LinkFaults::default() });
    assert!(a.roce_injected_reorder > 0 && b.roce_injected_reorder > 0);
    assert!(b.roce_naks_sent > 0, "a packet ahead of its turn is NAKed");
}

#[test]
fn exactly_once_through_duplication() {
    let (a, b) = exactly_once(LinkFaults { duplicate: 0.1, seed: 3, ..LinkFaults::default() });
    assert!(a.roce_injected_duplicate > 0 && b.roce_injected_duplicate > 0);
    assert!(b.roce_rx_duplicates > 0, "duplicates were seen and dropped");
}

#[test]
fn exactly_once_through_loss_reordering_and_duplication_together() {
    let f = LinkFaults { loss: 0.1, reorder: 0.1, duplicate: 0.1, seed: 4 };
    let (a, b) = exactly_once(f);
    let injected = |s: &SimStats| s.roce_injected_loss + s.roce_injected_reorder + s.roce_injected_duplicate;
    assert!(injected(&a) > 0 && injected(&b) > 0);
}

/// WRITEs and READs alternate through loss, reordering and duplication: each completes once,
/// successfully, with its bytes in place.
#[test]
fn writes_and_reads_through_a_faulty_link() {
    // Each link's faults hit both directions, so a packet meets the sender's and the
    // receiver's: about a tenth of the packets are lost. (A READ makes no progress when its
    // request or its first response is lost; retry_cnt = 7 gives out when eight attempts in a
    // row do, which at a fifth lost would be likely over this many READs.)
    let f = LinkFaults { loss: 0.05, reorder: 0.03, duplicate: 0.03, seed: 5 };
    let (a, ea, b, eb) = pair(&Opts { timeout: 13, ..Opts::default() }, f);
    let remote = pattern(99, MR_LEN as usize);
    b.dev.mem().write(eb.src.iova, &remote).unwrap();
    const OPS: u64 = 300;
    const OUT: u64 = 16;
    let (mut posted, mut done) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    while done < OPS && Instant::now() < deadline {
        while posted < OPS && posted - done < OUT {
            let slot = (posted % OUT) * 8192;
            let (op, local) = if posted % 2 == 0 {
                a.dev.mem().write(ea.src.iova + slot, &pattern(posted, 3000)).unwrap();
                (wr_opcode::RDMA_WRITE, sge(ea.src.va + slot, 3000, ea.src.lkey))
            } else {
                (wr_opcode::RDMA_READ, sge(ea.dst.va + slot, 5000, ea.dst.lkey))
            };
            let (raddr, rkey) = if posted % 2 == 0 {
                (eb.dst.va + slot, eb.dst.rkey)
            } else {
                (eb.src.va + (posted % 40) * 5000, eb.src.rkey)
            };
            let flags = send_flags::SIGNALED;
            a.post_rdma_wqe(&ea.qp, posted, op, flags, 0, raddr, rkey, &[local]);
            a.qp_doorbell(&ea.qp, UAR_QP_SEND);
            posted += 1;
        }
        while let Some(c) = a.poll(&ea.cq) {
            let i = done;
            assert_eq!((c.wr_id.get(), c.status.get()), (i, wc_status::SUCCESS), "op {i}");
            let slot = (i % OUT) * 8192;
            if i % 2 == 0 {
                assert_eq!(received(&b, &eb, slot, 3000), pattern(i, 3000), "WRITE {i}");
            } else {
                let at = ((i % 40) * 5000) as usize;
                assert_eq!(received(&a, &ea, slot, 5000), remote[at..at + 5000], "READ {i}");
            }
            done += 1;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(done, OPS, "all completed within the bound");
    assert!(a.dev.stats().roce_retransmits > 0);
}

/// Every packet reordered and duplicated on both links: still exactly once, in order.
#[test]
fn exactly_once_when_every_packet_is_reordered_and_duplicated() {
    let (a, b) = exactly_once(LinkFaults { reorder: 1.0, duplicate: 1.0, seed: 27, ..LinkFaults::default() });
    assert!(a.roce_injected_duplicate > 0 && b.roce_rx_duplicates > 0);
}

/// Every packet lost: each send completes, the first with RETRY_EXC_ERR and the rest flushed;
/// nothing hangs.
#[test]
fn a_link_that_loses_everything_ends_in_retry_exc_err() {
    let f = LinkFaults { loss: 1.0, seed: 28, ..LinkFaults::default() };
    let o = Opts { timeout: 13, retry_cnt: 2, ..Opts::default() };
    let (a, ea, b, eb) = pair(&o, f);
    recv(&b, &eb, 0, 0, 4096);
    for i in 0..4 {
        send(&a, &ea, i, &pattern(i, 3000), i * 4096, None);
    }
    let got: Vec<(u64, u32)> = wait(&a, &ea, 4, LONG).iter().map(|c| (c.wr_id.get(), c.status.get())).collect();
    let flushed = wc_status::WR_FLUSH_ERR;
    assert_eq!(got, [(0, wc_status::RETRY_EXC_ERR), (1, flushed), (2, flushed), (3, flushed)]);
    assert!(b.poll(&eb.cq).is_none(), "nothing delivered");
}
