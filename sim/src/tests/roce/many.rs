//! Many connections at once between two devices: each QP's messages arrive exactly once and in
//! order, with its own bytes, whatever the other QPs on the same ports and receive threads do.

use super::*;
use pvrdma_abi::wqe::{wc_opcode, wc_status, Cqe};

/// QP pairs between the two devices.
const PAIRS: usize = 8;
/// Operations each pair's first QP posts: SEND, WRITE, READ in turn.
const OPS: u64 = 60;
const SLOT: u64 = 2048;
/// Where WRITEs land in the responder's receive MR (the receives take the slots below it).
const WRITES_AT: u64 = 128 << 10;

fn len_of(i: u64) -> usize {
    [8, 1500, 2048][(i / 3 % 3) as usize]
}

/// Posts operation `i` of pair `k` on `e` towards `r`.
fn post(d: &Drv, e: &End, r: &End, k: usize, i: u64) {
    let (len, slot) = (len_of(i), i * SLOT);
    let tag = (k as u64) << 16 | i;
    let (op, local, raddr, rkey) = match i % 3 {
        0 => (wr_opcode::SEND, &e.src, 0, 0),
        1 => (wr_opcode::RDMA_WRITE, &e.src, r.dst.va + WRITES_AT + slot, r.dst.rkey),
        _ => (wr_opcode::RDMA_READ, &e.dst, r.src.va + slot, r.src.rkey),
    };
    if op != wr_opcode::RDMA_READ {
        d.dev.mem().write(local.iova + slot, &pattern(tag, len)).unwrap();
    }
    let sg = [sge(local.va + slot, len as u32, local.lkey)];
    let flags = send_flags::SIGNALED;
    d.post_rdma_wqe(&e.qp, i, op, flags, 0, raddr, rkey, &sg);
    d.qp_doorbell(&e.qp, UAR_QP_SEND);
}

#[test]
fn eight_qp_pairs_mix_send_write_and_read_through_faults_each_exactly_once_in_order() {
    let f = |seed| LinkFaults { loss: 0.05, reorder: 0.05, duplicate: 0.05, seed };
    let (mut a, mut b) = (device(f(81)), device(f(82)));
    let (ia, ib) = (ip(&a), ip(&b));
    let o = Opts { timeout: 13, ..Opts::default() };
    let ob = Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..o };
    let mut ends = Vec::new();
    for k in 0..PAIRS {
        let (ea, eb) = (end(&mut a, 256), end(&mut b, 256));
        connect(&mut a, ea.qp.qpn, eb.qp.qpn, ib, &o);
        connect(&mut b, eb.qp.qpn, ea.qp.qpn, ia, &ob);
        // What the READs read: distinct per pair.
        for i in (2..OPS).step_by(3) {
            let tag = (k as u64) << 16 | i;
            b.dev.mem().write(eb.src.iova + i * SLOT, &pattern(tag, len_of(i))).unwrap();
        }
        for j in 0..OPS / 3 {
            recv(&b, &eb, j, j * SLOT, SLOT as u32);
        }
        ends.push((ea, eb));
    }
    for i in 0..OPS {
        for (k, (ea, eb)) in ends.iter().enumerate() {
            post(&a, ea, eb, k, i);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut sent, mut got) = (vec![0u64; PAIRS], vec![0u64; PAIRS]);
    while (sent.iter().sum::<u64>() < OPS * PAIRS as u64 || got.iter().sum::<u64>() < OPS / 3 * PAIRS as u64)
        && Instant::now() < deadline
    {
        for (k, (ea, eb)) in ends.iter().enumerate() {
            let tag = |i: u64| (k as u64) << 16 | i;
            while let Some(c) = a.poll(&ea.cq) {
                let i = sent[k];
                assert_eq!((c.wr_id.get(), c.status.get()), (i, wc_status::SUCCESS), "QP {k} op {i}");
                let (len, slot) = (len_of(i), i * SLOT);
                match i % 3 {
                    1 => assert_eq!(received(&b, eb, WRITES_AT + slot, len), pattern(tag(i), len)),
                    2 => assert_eq!(received(&a, ea, slot, len), pattern(tag(i), len), "QP {k} READ {i}"),
                    _ => {}
                }
                sent[k] += 1;
            }
            while let Some(c) = b.poll(&eb.cq) {
                let j = got[k];
                assert_eq!((c.wr_id.get(), c.status.get()), (j, wc_status::SUCCESS), "QP {k} recv {j}");
                assert_eq!(c.opcode.get(), wc_opcode::RECV);
                let len = len_of(j * 3);
                assert_eq!(c.byte_len.get() as usize, len);
                assert_eq!(received(&b, eb, j * SLOT, len), pattern(tag(j * 3), len), "QP {k} SEND {j}");
                got[k] += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(sent, vec![OPS; PAIRS], "every operation completed within the bound");
    assert_eq!(got, vec![OPS / 3; PAIRS], "every SEND received within the bound");
    std::thread::sleep(Duration::from_millis(50));
    for (ea, eb) in &ends {
        assert!(a.poll(&ea.cq).is_none() && b.poll(&eb.cq).is_none(), "nothing twice");
    }
    let (sa, sb) = (a.dev.stats(), b.dev.stats());
    assert!(sa.roce_injected_loss > 0 && sb.roce_injected_loss > 0);
}

#[test]
fn a_small_send_on_one_qp_is_not_held_behind_a_big_read_on_another() {
    // A 16 MiB READ at a path MTU of 256 is 65536 responses. The SEND's QP gives up after two
    // local ACK timeouts of 10 ms without an acknowledgement: it fails unless the responder's
    // receive thread answers it between the READ's responses rather than after all of them.
    let no = LinkFaults::default();
    let (mut a, mut b) = (device(no.clone()), device(no));
    let (ia, ib) = (ip(&a), ip(&b));
    // The READ's own QPs wait about a second for an acknowledgement, so a loaded machine that
    // stalls the responses for more than 10 ms does not exhaust the READ's retries (seen once in
    // a full parallel test run: "the READ" failed while the SEND passed).
    let o = Opts { mtu: 1, ..Opts::steady() };
    let ob = Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..o };
    let (ea, eb) = (end(&mut a, 16), end(&mut b, 16));
    let (xa, xb) = (end(&mut a, 16), end(&mut b, 16));
    connect(&mut a, ea.qp.qpn, eb.qp.qpn, ib, &o);
    connect(&mut b, eb.qp.qpn, ea.qp.qpn, ia, &ob);
    let small = Opts { retry_cnt: 1, timeout: Opts::default().timeout, ..o };
    connect(&mut a, xa.qp.qpn, xb.qp.qpn, ib, &small);
    connect(&mut b, xb.qp.qpn, xa.qp.qpn, ia, &Opts { retry_cnt: 1, ..ob });
    const BIG: u64 = 16 << 20;
    let rw = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    let src = b.create_mr(eb.pd, 0x5000_0000_0000, BIG, rw);
    let dst = a.create_mr(ea.pd, 0x5100_0000_0000, BIG, rw);
    let data = pattern(82, BIG as usize);
    b.dev.mem().write(src.iova, &data).unwrap();
    recv(&b, &xb, 1, 0, 64);
    let sg = [sge(dst.va, BIG as u32, dst.lkey)];
    let flags = send_flags::SIGNALED;
    a.post_rdma_wqe(&ea.qp, 1, wr_opcode::RDMA_READ, flags, 0, src.va, src.rkey, &sg);
    a.qp_doorbell(&ea.qp, UAR_QP_SEND);
    // The SEND once the READ's responses flow.
    let deadline = Instant::now() + LONG;
    while a.dev.stats().roce_rx_packets < 100 && Instant::now() < deadline {
        std::thread::yield_now();
    }
    send(&a, &xa, 2, &[7u8; 64], 0, None);
    let st = |c: Vec<Cqe>| c.iter().map(|c| (c.wr_id.get(), c.status.get())).collect::<Vec<_>>();
    assert_eq!(st(wait(&a, &xa, 1, LONG)), [(2, wc_status::SUCCESS)], "the small SEND");
    assert_eq!(st(wait(&b, &xb, 1, LONG)), [(1, wc_status::SUCCESS)]);
    assert_eq!(st(wait(&a, &ea, 1, LONG)), [(1, wc_status::SUCCESS)], "the READ");
    let mut got = vec![0u8; BIG as usize];
    a.dev.mem().read(dst.iova, &mut got).unwrap();
    assert!(got == data, "the READ's bytes");
}
