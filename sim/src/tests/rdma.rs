//! RDMA WRITE, WRITE with immediate and READ over the loopback port (IBTA 9.4.3, 9.4.4): data
//! placement, completions, remote access checks by R_Key and what the responder does on them.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::uar::UAR_QP_SEND;
use pvrdma_abi::verbs::{access, qp_state, send_flags};
use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status, wr_opcode, Cqe, Sge, SqWqeHdr};
use std::time::Duration;
use zerocopy::little_endian::{U32, U64};

const REMOTE: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;

/// A requester A and a responder B (one PD unless said otherwise), A's local MR `la`
/// (LOCAL_WRITE) and B's target MR `rb` of 2 pages with `mr_access`; B's QP grants `qp_access`.
struct Rig {
    d: Drv,
    pd: u32,
    cq_a: TestCq,
    cq_b: TestCq,
    a: TestQp,
    b: TestQp,
    la: TestMr,
    rb: TestMr,
}

const RB_LEN: u64 = 2 * PAGE;

impl Rig {
    fn new(mr_access: u32, qp_access: u32) -> Self {
        Self::build(SimConfig::default(), mr_access, qp_access)
    }

    fn build(cfg: SimConfig, mr_access: u32, qp_access: u32) -> Self {
        let mut d = Drv::new(cfg);
        d.bind_gid(0, GID0);
        let pd = d.create_pd(0);
        let cq_a = d.create_cq(0, 64);
        let cq_b = d.create_cq(0, 64);
        let a = d.create_qp(pd, cq_a.handle, cq_a.handle, 16);
        let b = d.create_qp(pd, cq_b.handle, cq_b.handle, 16);
        d.connect(a.qpn, b.qpn);
        d.connect_access(b.qpn, a.qpn, qp_access);
        let la = d.create_mr(pd, 0x7000_0000_0123, 3 * PAGE, access::LOCAL_WRITE);
        let rb = d.create_mr(pd, 0x7100_0000_0456, RB_LEN, mr_access);
        Self { d, pd, cq_a, cq_b, a, b, la, rb }
    }

    /// Posts a signaled RDMA WQE on A from the start of `la` (`len` bytes) and rings the SQ
    /// doorbell.
    fn rdma(&self, wr_id: u64, op: u32, imm: u32, raddr: u64, rkey: u32, len: u32) {
        let sg = [sge(self.la.va, len, self.la.lkey)];
        self.rdma_sges(wr_id, op, send_flags::SIGNALED, imm, raddr, rkey, &sg);
    }

    #[allow(clippy::too_many_arguments)]
    fn rdma_sges(&self, wr_id: u64, op: u32, flags: u32, imm: u32, raddr: u64, rkey: u32, sg: &[Sge]) {
        self.d.post_rdma_wqe(&self.a, wr_id, op, flags, imm, raddr, rkey, sg);
        self.d.qp_doorbell(&self.a, UAR_QP_SEND);
    }

    fn one(&self, cq: &TestCq) -> Cqe {
        let got = self.d.wait_cqes(cq, 1);
        assert_eq!(got.len(), 1, "one CQE within the bound");
        got[0]
    }

    fn fill(&self, mr: &TestMr, off: u64, bytes: &[u8]) {
        self.d.dev.mem().write(mr.iova + off, bytes).unwrap();
    }

    fn bytes(&self, mr: &TestMr, off: u64, len: usize) -> Vec<u8> {
        let mut got = vec![0u8; len];
        self.d.dev.mem().read(mr.iova + off, &mut got).unwrap();
        got
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_write_lands_and_a_read_brings_it_back_into_several_sges() {
    let r = Rig::new(REMOTE, REMOTE);
    let msg = pattern(5000, 3);
    r.fill(&r.la, 0, &msg);
    // Across a page boundary of both MRs (their starts are not page-aligned).
    r.rdma(1, wr_opcode::RDMA_WRITE, 0, r.rb.va + 100, r.rb.rkey, 5000);
    let w = r.one(&r.cq_a);
    assert_eq!((w.status.get(), w.opcode.get()), (wc_status::SUCCESS, wc_opcode::RDMA_WRITE));
    assert_eq!((w.wr_id.get(), w.byte_len.get()), (1, 5000));
    assert_eq!(r.bytes(&r.rb, 100, 5000), msg);
    assert_eq!(r.bytes(&r.rb, 0, 100), vec![0; 100], "nothing before the target range");

    // READ it back into two SGEs of A's MR.
    let base = r.la.va + 6000;
    let sg = [sge(base, 1000, r.la.lkey), sge(base + 1000, 4000, r.la.lkey)];
    r.rdma_sges(2, wr_opcode::RDMA_READ, send_flags::SIGNALED, 0, r.rb.va + 100, r.rb.rkey, &sg);
    let c = r.one(&r.cq_a);
    assert_eq!((c.status.get(), c.opcode.get()), (wc_status::SUCCESS, wc_opcode::RDMA_READ));
    assert_eq!((c.wr_id.get(), c.byte_len.get()), (2, 5000));
    assert_eq!(r.bytes(&r.la, 6000, 5000), msg);
    r.d.settle();
    assert!(r.d.poll(&r.cq_b).is_none(), "WRITE and READ consume no receive WQE");
    assert_eq!(r.d.dev.qp_state(r.b.qpn), Some(qp_state::RTS));
}

#[test]
fn a_write_with_immediate_completes_a_receive_and_waits_for_one() {
    let r = Rig::build(SimConfig { link_latency: Duration::from_millis(1), ..Default::default() }, REMOTE, REMOTE);
    r.fill(&r.la, 0, b"hello, rdma");
    r.rdma(5, wr_opcode::RDMA_WRITE_WITH_IMM, 0x1234_5678, r.rb.va, r.rb.rkey, 11);
    // No receive WQE: the request waits (RNR on a wire) and neither side completes.
    r.d.settle();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while r.d.dev.parked_packets(r.b.qpn) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(r.d.dev.parked_packets(r.b.qpn), 1);
    assert!(r.d.poll(&r.cq_a).is_none() && r.d.poll(&r.cq_b).is_none());
    // The receive's buffer is not where the data goes.
    r.d.recv(&r.b, 77, &[sge(r.rb.va + 4000, 64, r.rb.lkey)]);
    let rx = r.one(&r.cq_b);
    assert_eq!(rx.status.get(), wc_status::SUCCESS);
    assert_eq!(rx.opcode.get(), wc_opcode::RECV_RDMA_WITH_IMM);
    assert_eq!((rx.wr_id.get(), rx.byte_len.get(), rx.imm_data.get()), (77, 11, 0x1234_5678));
    assert_eq!(rx.wc_flags.get() & wc_flags::WITH_IMM, wc_flags::WITH_IMM);
    assert_eq!(rx.src_qp.get(), 0, "RC: no source QP, as rxe (issue 21 §5)");
    let tx = r.one(&r.cq_a);
    assert_eq!((tx.opcode.get(), tx.byte_len.get()), (wc_opcode::RDMA_WRITE, 11));
    assert_eq!(r.bytes(&r.rb, 0, 11), b"hello, rdma");
    assert_eq!(r.bytes(&r.rb, 4000, 11), vec![0; 11], "nothing scattered into the receive");
}

/// Posts `op` of 16 bytes at `raddr` with `rkey` on a fresh rig and checks the requester
/// completes `REM_ACCESS_ERR` and moves to ERR, the responder moves to ERR (its posted receive
/// flushed) and no byte changed on either side.
fn access_error(r: &Rig, op: u32, raddr: u64, rkey: u32) {
    r.fill(&r.la, 0, &[0xaa; 16]);
    r.fill(&r.rb, RB_LEN - 16, &[0x55; 16]);
    r.d.recv(&r.b, 9, &[sge(r.rb.va, 8, r.rb.lkey)]);
    r.rdma(1, op, 0, raddr, rkey, 16);
    let c = r.one(&r.cq_a);
    assert_eq!((c.wr_id.get(), c.status.get()), (1, wc_status::REM_ACCESS_ERR));
    let flushed = r.one(&r.cq_b);
    assert_eq!((flushed.wr_id.get(), flushed.status.get()), (9, wc_status::WR_FLUSH_ERR));
    assert_eq!(r.d.dev.qp_state(r.a.qpn), Some(qp_state::ERR));
    assert_eq!(r.d.dev.qp_state(r.b.qpn), Some(qp_state::ERR));
    assert_eq!(r.bytes(&r.la, 0, 16), vec![0xaa; 16]);
    assert_eq!(r.bytes(&r.rb, 0, 8), vec![0; 8]);
    assert_eq!(r.bytes(&r.rb, RB_LEN - 16, 16), vec![0x55; 16]);
}

#[test]
fn an_mr_without_remote_write_refuses_a_write() {
    let r = Rig::new(access::LOCAL_WRITE | access::REMOTE_READ, REMOTE);
    access_error(&r, wr_opcode::RDMA_WRITE, r.rb.va, r.rb.rkey);
}

#[test]
fn an_mr_without_remote_read_refuses_a_read() {
    let r = Rig::new(access::LOCAL_WRITE | access::REMOTE_WRITE, REMOTE);
    access_error(&r, wr_opcode::RDMA_READ, r.rb.va + RB_LEN - 16, r.rb.rkey);
}

#[test]
fn a_qp_without_remote_access_refuses_both() {
    let r = Rig::new(REMOTE, access::REMOTE_WRITE);
    access_error(&r, wr_opcode::RDMA_READ, r.rb.va + RB_LEN - 16, r.rb.rkey);
    let r = Rig::new(REMOTE, access::REMOTE_READ);
    access_error(&r, wr_opcode::RDMA_WRITE_WITH_IMM, r.rb.va, r.rb.rkey);
}

#[test]
fn one_byte_out_of_bounds_is_refused_either_end() {
    for op in [wr_opcode::RDMA_WRITE, wr_opcode::RDMA_READ] {
        let r = Rig::new(REMOTE, REMOTE);
        access_error(&r, op, r.rb.va + RB_LEN - 15, r.rb.rkey);
        let r = Rig::new(REMOTE, REMOTE);
        access_error(&r, op, r.rb.va - 1, r.rb.rkey);
        let r = Rig::new(REMOTE, REMOTE);
        access_error(&r, op, u64::MAX - 7, r.rb.rkey);
    }
}

#[test]
fn an_unknown_rkey_an_lkey_or_another_pds_rkey_is_refused() {
    let r = Rig::new(REMOTE, REMOTE);
    access_error(&r, wr_opcode::RDMA_WRITE, r.rb.va, r.rb.rkey ^ 0x8000_0000);
    let r = Rig::new(REMOTE, REMOTE);
    access_error(&r, wr_opcode::RDMA_READ, r.rb.va, r.rb.lkey);
    let mut r = Rig::new(REMOTE, REMOTE);
    let other_pd = r.d.create_pd(0);
    let foreign = r.d.create_mr(other_pd, 0x7200_0000_0000, PAGE, REMOTE);
    access_error(&r, wr_opcode::RDMA_WRITE, foreign.va, foreign.rkey);
    assert_eq!(r.bytes(&foreign, 0, 16), vec![0; 16]);
}

#[test]
fn zero_length_operations_check_no_rkey() {
    let r = Rig::new(REMOTE, REMOTE);
    r.d.recv(&r.b, 4, &[]);
    r.rdma_sges(1, wr_opcode::RDMA_WRITE, send_flags::SIGNALED, 0, 0, 0xdead, &[]);
    r.rdma_sges(2, wr_opcode::RDMA_READ, send_flags::SIGNALED, 0, u64::MAX, 0, &[]);
    r.rdma_sges(3, wr_opcode::RDMA_WRITE_WITH_IMM, send_flags::SIGNALED, 7, 0, 1, &[]);
    let tx = r.d.wait_cqes(&r.cq_a, 3);
    let got: Vec<_> = tx.iter().map(|c| (c.wr_id.get(), c.status.get(), c.byte_len.get())).collect();
    assert_eq!(got, vec![(1, 0, 0), (2, 0, 0), (3, 0, 0)]);
    let rx = r.one(&r.cq_b);
    assert_eq!((rx.opcode.get(), rx.byte_len.get(), rx.imm_data.get()), (wc_opcode::RECV_RDMA_WITH_IMM, 0, 7));
    // The QP's access flags still apply (Linux rxe checks them before the length).
    let r = Rig::new(REMOTE, 0);
    r.rdma_sges(1, wr_opcode::RDMA_WRITE, send_flags::SIGNALED, 0, 0, 0, &[]);
    assert_eq!(r.one(&r.cq_a).status.get(), wc_status::REM_ACCESS_ERR);
}

#[test]
fn a_read_into_memory_without_local_write_fails_locally() {
    let mut r = Rig::new(REMOTE, REMOTE);
    r.fill(&r.rb, 0, &[9; 32]);
    let ro = r.d.create_mr(r.pd, 0x7300_0000_0000, PAGE, 0);
    let sg = [sge(ro.va, 32, ro.lkey)];
    r.rdma_sges(1, wr_opcode::RDMA_READ, send_flags::SIGNALED, 0, r.rb.va, r.rb.rkey, &sg);
    assert_eq!(r.one(&r.cq_a).status.get(), wc_status::LOC_PROT_ERR);
    assert_eq!(r.bytes(&ro, 0, 32), vec![0; 32]);
    assert_eq!(r.d.dev.qp_state(r.a.qpn), Some(qp_state::ERR));
    assert_eq!(r.d.dev.qp_state(r.b.qpn), Some(qp_state::RTS), "the responder did nothing wrong");
}

#[test]
fn bad_wqes_fail_locally() {
    // An opcode the model does not carry.
    let r = Rig::new(REMOTE, REMOTE);
    r.rdma(1, wr_opcode::MASKED_ATOMIC_FETCH_AND_ADD, 0, r.rb.va, r.rb.rkey, 8);
    let c = r.one(&r.cq_a);
    assert_eq!((c.status.get(), c.opcode.get()), (wc_status::LOC_QP_OP_ERR, wc_opcode::SEND));
    // A READ whose total_len disagrees with its SGEs.
    let r = Rig::new(REMOTE, REMOTE);
    let hdr = SqWqeHdr {
        wr_id: U64::new(2),
        num_sge: U32::new(1),
        total_len: U32::new(9),
        opcode: U32::new(wr_opcode::RDMA_READ),
        send_flags: U32::new(send_flags::SIGNALED),
        ..Default::default()
    };
    r.d.post_wqe(&r.a, &hdr, &[sge(r.la.va, 8, r.la.lkey)]);
    r.d.qp_doorbell(&r.a, UAR_QP_SEND);
    let c = r.one(&r.cq_a);
    assert_eq!((c.status.get(), c.opcode.get()), (wc_status::LOC_LEN_ERR, wc_opcode::RDMA_READ));
    // A READ longer than the device's largest message.
    let r = Rig::new(REMOTE, REMOTE);
    let big = [sge(r.la.va, u32::MAX, r.la.lkey), sge(r.la.va, u32::MAX, r.la.lkey)];
    r.rdma_sges(3, wr_opcode::RDMA_READ, send_flags::SIGNALED, 0, r.rb.va, r.rb.rkey, &big);
    assert_eq!(r.one(&r.cq_a).status.get(), wc_status::LOC_LEN_ERR);
    assert_eq!(r.d.dev.qp_state(r.b.qpn), Some(qp_state::RTS));
}

#[test]
fn selective_signaling_covers_rdma_operations() {
    let r = Rig::new(REMOTE, REMOTE);
    r.fill(&r.la, 0, &pattern(64, 1));
    let sg = [sge(r.la.va, 64, r.la.lkey)];
    r.rdma_sges(1, wr_opcode::RDMA_WRITE, 0, 0, r.rb.va, r.rb.rkey, &sg);
    let back = [sge(r.la.va + 1000, 64, r.la.lkey)];
    r.rdma_sges(2, wr_opcode::RDMA_READ, 0, 0, r.rb.va, r.rb.rkey, &back);
    r.rdma_sges(3, wr_opcode::RDMA_WRITE, send_flags::SIGNALED, 0, r.rb.va + 64, r.rb.rkey, &sg);
    let c = r.one(&r.cq_a);
    assert_eq!((c.wr_id.get(), c.opcode.get()), (3, wc_opcode::RDMA_WRITE));
    r.d.settle();
    assert!(r.d.poll(&r.cq_a).is_none(), "the unsignaled WRITE and READ have no CQE");
    assert_eq!(r.bytes(&r.la, 1000, 64), pattern(64, 1));
    // An unsignaled operation that fails still completes.
    r.rdma_sges(4, wr_opcode::RDMA_READ, 0, 0, r.rb.va, r.rb.rkey ^ 1, &back);
    let c = r.one(&r.cq_a);
    assert_eq!((c.wr_id.get(), c.status.get()), (4, wc_status::REM_ACCESS_ERR));
}

#[test]
fn a_read_response_lands_at_its_offset_across_sges() {
    // A long link latency keeps the READ request in flight: its response is given by hand, in
    // pieces, as a wire transport gives RDMA READ response packets.
    let cfg = SimConfig { link_latency: Duration::from_secs(3600), ..Default::default() };
    let r = Rig::build(cfg, REMOTE, REMOTE);
    let sg = [sge(r.la.va + 100, 1000, r.la.lkey), sge(r.la.va + 5000, 2000, r.la.lkey)];
    r.rdma_sges(1, wr_opcode::RDMA_READ, send_flags::SIGNALED, 0, r.rb.va, r.rb.rkey, &sg);
    let core = r.d.dev.core();
    let qp = core.qp(r.a.qpn).unwrap();
    let data = pattern(3000, 9);
    assert_eq!(qp.read_response(core, 0, 0, &data[..700]), Ok(()));
    assert_eq!(qp.read_response(core, 0, 700, &data[700..2100]), Ok(()));
    assert_eq!(qp.read_response(core, 0, 2100, &data[2100..]), Ok(()));
    assert_eq!(r.bytes(&r.la, 100, 1000), data[..1000]);
    assert_eq!(r.bytes(&r.la, 5000, 2000), data[1000..]);
    assert_eq!(r.bytes(&r.la, 1100, 10), vec![0; 10], "nothing between the SGEs");
    assert_eq!(qp.read_response(core, 0, 2999, &[1, 2]), Err(wc_status::LOC_LEN_ERR));
    assert_eq!(qp.read_response(core, 1, 0, &[1]), Err(wc_status::BAD_RESP_ERR), "no such READ");
    let mut fx = crate::ctx::Effects::default();
    qp.complete_send(core, 0, wc_status::SUCCESS, &mut fx);
    assert_eq!(qp.read_response(core, 0, 0, &[1]), Err(wc_status::BAD_RESP_ERR), "completed");
    core.settle_effects(&mut fx);
    core.raise_fired(&mut fx);
    let c = r.one(&r.cq_a);
    assert_eq!((c.status.get(), c.opcode.get(), c.byte_len.get()), (0, wc_opcode::RDMA_READ, 3000));
}
