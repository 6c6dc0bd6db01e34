//! RDMA WRITE, WRITE with immediate and READ over the RoCE v2 port.

use super::*;
use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status};

/// Posts a signaled RDMA WQE `op` over `len` bytes at `off` of `e`'s send MR (the READ's
/// destination is `e`'s receive MR) towards `remote_addr` under `rkey`.
#[allow(clippy::too_many_arguments)]
fn rdma(d: &Drv, e: &End, wr_id: u64, op: u32, imm: u32, off: u64, len: u32, remote_addr: u64, rkey: u32) {
    let local = if op == wr_opcode::RDMA_READ { &e.dst } else { &e.src };
    let sg = [sge(local.va + off, len, local.lkey)];
    d.post_rdma_wqe(&e.qp, wr_id, op, send_flags::SIGNALED, imm, remote_addr, rkey, &sg);
    d.qp_doorbell(&e.qp, UAR_QP_SEND);
}

#[test]
fn write_write_with_immediate_and_read_move_multi_packet_data() {
    let (a, ea, b, eb) = pair(&Opts::steady(), LinkFaults::default());
    let data = pattern(10, 10_000);
    a.dev.mem().write(ea.src.iova, &data).unwrap();
    // WRITE of 10 packets into B's receive MR at offset 100.
    rdma(&a, &ea, 1, wr_opcode::RDMA_WRITE, 0, 0, 10_000, eb.dst.va + 100, eb.dst.rkey);
    let tx = wait(&a, &ea, 1, LONG);
    assert_eq!((tx.len(), tx[0].status.get(), tx[0].opcode.get()), (1, wc_status::SUCCESS, wc_opcode::RDMA_WRITE));
    assert_eq!(received(&b, &eb, 100, 10_000), data);
    assert!(b.poll(&eb.cq).is_none(), "a plain WRITE consumes no receive WQE");

    // WRITE with immediate: the data lands and a receive WQE completes with the immediate.
    recv(&b, &eb, 77, 0, 0);
    rdma(&a, &ea, 2, wr_opcode::RDMA_WRITE_WITH_IMM, 0x1234_5678, 0, 3000, eb.dst.va + 20_000, eb.dst.rkey);
    let rx = wait(&b, &eb, 1, LONG);
    assert_eq!(rx.len(), 1);
    assert_eq!((rx[0].wr_id.get(), rx[0].status.get()), (77, wc_status::SUCCESS));
    assert_eq!(rx[0].opcode.get(), wc_opcode::RECV_RDMA_WITH_IMM);
    assert_eq!((rx[0].imm_data.get(), rx[0].byte_len.get()), (0x1234_5678, 3000));
    assert_eq!(rx[0].wc_flags.get() & wc_flags::WITH_IMM, wc_flags::WITH_IMM);
    assert_eq!(received(&b, &eb, 20_000, 3000), data[..3000]);
    assert_eq!(wait(&a, &ea, 1, LONG)[0].status.get(), wc_status::SUCCESS);

    // READ of 7 responses from B's send MR into A's receive MR.
    let remote = pattern(11, 6500);
    b.dev.mem().write(eb.src.iova + 8, &remote).unwrap();
    rdma(&a, &ea, 3, wr_opcode::RDMA_READ, 0, 40, 6500, eb.src.va + 8, eb.src.rkey);
    let tx = wait(&a, &ea, 1, LONG);
    assert_eq!(tx.len(), 1);
    assert_eq!((tx[0].wr_id.get(), tx[0].status.get()), (3, wc_status::SUCCESS));
    assert_eq!((tx[0].opcode.get(), tx[0].byte_len.get()), (wc_opcode::RDMA_READ, 6500));
    assert_eq!(received(&a, &ea, 40, 6500), remote);
    let (sa, sb) = (a.dev.stats(), b.dev.stats());
    assert_eq!((sa.roce_retransmits, sb.roce_naks_sent), (0, 0));
}

#[test]
fn a_send_after_a_read_completes_in_order_and_reads_ack_earlier_sends() {
    let (a, ea, b, eb) = pair(&Opts { mtu: 1, ..Opts::default() }, LinkFaults::default());
    recv(&b, &eb, 1, 0, 4096);
    recv(&b, &eb, 2, 4096, 4096);
    send(&a, &ea, 1, &pattern(1, 700), 0, None);
    rdma(&a, &ea, 2, wr_opcode::RDMA_READ, 0, 0, 1000, eb.src.va, eb.src.rkey);
    send(&a, &ea, 3, &pattern(3, 300), 2048, None);
    let tx = wait(&a, &ea, 3, LONG);
    let ids: Vec<_> = tx.iter().map(|c| (c.wr_id.get(), c.status.get())).collect();
    assert_eq!(ids, vec![(1, 0), (2, 0), (3, 0)]);
    assert_eq!(wait(&b, &eb, 2, LONG).len(), 2);
}

#[test]
fn a_write_outside_the_mr_is_nakked_writes_nothing_and_errs_both_qps() {
    let (a, ea, b, eb) = pair(&Opts::default(), LinkFaults::default());
    a.dev.mem().write(ea.src.iova, &pattern(1, 4000)).unwrap();
    // The last 1000 bytes fall past the end of B's receive MR.
    let at = eb.dst.va + MR_LEN - 3000;
    rdma(&a, &ea, 1, wr_opcode::RDMA_WRITE, 0, 0, 4000, at, eb.dst.rkey);
    let tx = wait(&a, &ea, 1, LONG);
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].status.get(), wc_status::REM_ACCESS_ERR);
    assert_eq!(received(&b, &eb, MR_LEN - 3000, 3000), vec![0u8; 3000], "nothing written");
    assert_eq!(a.dev.qp_state(ea.qp.qpn), Some(qp_state::ERR));
    assert_eq!(b.dev.qp_state(eb.qp.qpn), Some(qp_state::ERR));
    assert_eq!(b.dev.stats().roce_naks_sent, 1);
}

#[test]
fn a_read_with_a_bad_rkey_completes_with_a_remote_access_error() {
    let (a, ea, _b, eb) = pair(&Opts::default(), LinkFaults::default());
    rdma(&a, &ea, 5, wr_opcode::RDMA_READ, 0, 0, 100, eb.src.va, eb.src.rkey ^ 0x100);
    let tx = wait(&a, &ea, 1, LONG);
    assert_eq!((tx.len(), tx[0].wr_id.get()), (1, 5));
    assert_eq!(tx[0].status.get(), wc_status::REM_ACCESS_ERR);
}

#[test]
fn a_write_with_immediate_waits_for_a_receive_wqe_whole_or_in_packets() {
    let o = Opts { min_rnr_timer: 14, ..Opts::default() };
    let (a, ea, b, eb) = pair(&o, LinkFaults::default());
    a.dev.mem().write(ea.src.iova, &pattern(14, 5000)).unwrap();
    // An only packet (800 bytes) and a five-packet WRITE, each RNR NAKed until B posts.
    for (i, len) in [(1u64, 800u32), (2, 5000)] {
        let at = eb.dst.va + 4096 * i;
        rdma(&a, &ea, i, wr_opcode::RDMA_WRITE_WITH_IMM, i as u32, 0, len, at, eb.dst.rkey);
        std::thread::sleep(Duration::from_millis(20));
        assert!(a.poll(&ea.cq).is_none() && b.poll(&eb.cq).is_none());
        recv(&b, &eb, 10 + i, 0, 0);
        let rx = wait(&b, &eb, 1, LONG);
        assert_eq!(rx.len(), 1, "WRITE {i}");
        assert_eq!((rx[0].wr_id.get(), rx[0].status.get()), (10 + i, wc_status::SUCCESS));
        assert_eq!((rx[0].imm_data.get(), rx[0].byte_len.get()), (i as u32, len));
        assert_eq!(received(&b, &eb, 4096 * i, len as usize), pattern(14, len as usize));
        assert_eq!(wait(&a, &ea, 1, LONG)[0].status.get(), wc_status::SUCCESS);
    }
    assert!(b.dev.stats().roce_rnr_naks_sent >= 2);
}
