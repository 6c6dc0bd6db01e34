//! COMPARE SWAP and FETCH ADD over the loopback port (IBTA 9.4.5), driven by raw WQEs: the
//! original value in the requester's SGE, the responder's memory, the completion, the checks the
//! responder makes (R_Key, access, alignment, bounds) and the requester's (one 8-byte SGE), the
//! `max_rd_atomic` window. (The 64-bit atomicity of guest memory under threads: `mem.rs`.)

use crate::testutil::minidrv::*;
use pvrdma_abi::verbs::{access, qp_state};
use pvrdma_abi::wqe::{wc_opcode, wc_status, wr_opcode, Cqe, Sge};

const ATOMIC: u32 = access::LOCAL_WRITE | access::REMOTE_ATOMIC;

/// A refusal case: what, MR access, QP access, (offset, R_Key; 0 for the MR's) if not the MR's
/// first word, and the requester's status.
type Refusal = (&'static str, u32, u32, Option<(u64, u32)>, u32);
/// A local case: what, the SGEs (offset, length), and the status.
type Local = (&'static str, Vec<(u64, u32)>, u32);

/// A requester A and a responder B on one PD: A's local MR `la`, B's target MR `rb` (2 pages,
/// `mr_access`, its start 8-aligned but not page-aligned); B grants `qp_access`.
struct Rig {
    d: Drv,
    cq_a: TestCq,
    cq_b: TestCq,
    a: TestQp,
    b: TestQp,
    la: TestMr,
    rb: TestMr,
}

impl Rig {
    fn new(mr_access: u32, qp_access: u32) -> Self {
        Self::at(0x7100_0000_0458, mr_access, qp_access)
    }

    fn at(rb_va: u64, mr_access: u32, qp_access: u32) -> Self {
        Self::build(crate::SimConfig::default(), rb_va, mr_access, qp_access)
    }

    fn build(cfg: crate::SimConfig, rb_va: u64, mr_access: u32, qp_access: u32) -> Self {
        let mut d = Drv::new(cfg);
        d.bind_gid(0, GID0);
        let pd = d.create_pd(0);
        let (cq_a, cq_b) = (d.create_cq(0, 64), d.create_cq(0, 64));
        let a = d.create_qp(pd, cq_a.handle, cq_a.handle, 16);
        let b = d.create_qp(pd, cq_b.handle, cq_b.handle, 16);
        d.connect(a.qpn, b.qpn);
        d.connect_access(b.qpn, a.qpn, qp_access);
        let la = d.create_mr(pd, 0x7000_0000_0123, PAGE, access::LOCAL_WRITE);
        let rb = d.create_mr(pd, rb_va, 2 * PAGE, mr_access);
        Self { d, cq_a, cq_b, a, b, la, rb }
    }

    /// Posts a signaled atomic WQE `op` with the SGEs `sg` and rings the SQ doorbell.
    #[allow(clippy::too_many_arguments)]
    fn post(&self, wr_id: u64, op: u32, raddr: u64, rkey: u32, compare_add: u64, swap: u64, sg: &[Sge]) {
        self.d.post_atomic_wqe(&self.a, wr_id, op, raddr, rkey, compare_add, swap, sg);
    }

    /// An atomic on B's `rb` at offset `off` whose original value goes to `la` at `res`.
    fn atomic(&self, wr_id: u64, op: u32, off: u64, compare_add: u64, swap: u64, res: u64) -> Cqe {
        let sg = [sge(self.la.va + res, 8, self.la.lkey)];
        self.post(wr_id, op, self.rb.va + off, self.rb.rkey, compare_add, swap, &sg);
        self.one(&self.cq_a)
    }

    fn one(&self, cq: &TestCq) -> Cqe {
        let got = self.d.wait_cqes(cq, 1);
        assert_eq!(got.len(), 1, "one CQE within the bound");
        got[0]
    }

    fn u64_at(&self, mr: &TestMr, off: u64) -> u64 {
        self.d.dev.mem().read_u64(mr.iova + off).unwrap()
    }

    fn set(&self, mr: &TestMr, off: u64, v: u64) {
        self.d.dev.mem().write(mr.iova + off, &v.to_le_bytes()).unwrap();
    }
}

fn ok(c: &Cqe, wr_id: u64, opcode: u32) {
    let got = (c.wr_id.get(), c.status.get(), c.opcode.get(), c.byte_len.get());
    assert_eq!(got, (wr_id, wc_status::SUCCESS, opcode, 8));
}

#[test]
fn compare_swap_and_fetch_add_return_the_original_value() {
    let r = Rig::new(ATOMIC, access::REMOTE_ATOMIC);
    r.set(&r.rb, 4096 - 8, 0x1111_2222_3333_4444);
    // A mismatch leaves the memory alone and returns what is there.
    let c = r.atomic(1, wr_opcode::ATOMIC_CMP_AND_SWP, 4096 - 8, 5, 6, 0);
    ok(&c, 1, wc_opcode::COMP_SWAP);
    assert_eq!(r.u64_at(&r.la, 0), 0x1111_2222_3333_4444);
    assert_eq!(r.u64_at(&r.rb, 4096 - 8), 0x1111_2222_3333_4444);
    // A match swaps.
    let c = r.atomic(2, wr_opcode::ATOMIC_CMP_AND_SWP, 4096 - 8, 0x1111_2222_3333_4444, 0xabcd, 8);
    ok(&c, 2, wc_opcode::COMP_SWAP);
    assert_eq!((r.u64_at(&r.la, 8), r.u64_at(&r.rb, 4096 - 8)), (0x1111_2222_3333_4444, 0xabcd));
    // FETCH ADD wraps modulo 2^64; the neighbours are untouched.
    r.set(&r.rb, 4096, u64::MAX - 1);
    let c = r.atomic(3, wr_opcode::ATOMIC_FETCH_AND_ADD, 4096, 3, 0xdead, 16);
    ok(&c, 3, wc_opcode::FETCH_ADD);
    assert_eq!((r.u64_at(&r.la, 16), r.u64_at(&r.rb, 4096)), (u64::MAX - 1, 1));
    assert_eq!(r.u64_at(&r.rb, 4096 + 8), 0);
    assert_eq!(r.u64_at(&r.rb, 4096 - 8), 0xabcd);
    assert!(r.d.poll(&r.cq_b).is_none(), "no receive WQE consumed");
    assert_eq!(r.d.dev.stats().atomics_executed, 3);
}

#[test]
fn the_responder_refuses_what_ibta_refuses_and_goes_to_err() {
    let cases: [Refusal; 5] = [
        ("bad R_Key", ATOMIC, access::REMOTE_ATOMIC, Some((0, 0xdead)), wc_status::REM_ACCESS_ERR),
        (
            "MR without REMOTE_ATOMIC",
            access::LOCAL_WRITE | access::REMOTE_WRITE,
            access::REMOTE_ATOMIC,
            None,
            wc_status::REM_ACCESS_ERR,
        ),
        ("QP without REMOTE_ATOMIC", ATOMIC, access::REMOTE_WRITE, None, wc_status::REM_ACCESS_ERR),
        ("past the MR's end", ATOMIC, access::REMOTE_ATOMIC, Some((2 * PAGE, 0)), wc_status::REM_ACCESS_ERR),
        ("misaligned", ATOMIC, access::REMOTE_ATOMIC, Some((4, 0)), wc_status::REM_INV_REQ_ERR),
    ];
    for (what, mr_access, qp_access, at, status) in cases {
        let r = Rig::new(mr_access, qp_access);
        r.set(&r.rb, 0, 7);
        r.set(&r.rb, 8, 7);
        let (off, rkey) = at.unwrap_or((0, r.rb.rkey));
        let rkey = if rkey == 0 { r.rb.rkey } else { rkey };
        let sg = [sge(r.la.va, 8, r.la.lkey)];
        r.post(1, wr_opcode::ATOMIC_FETCH_AND_ADD, r.rb.va + off, rkey, 1, 0, &sg);
        let c = r.one(&r.cq_a);
        assert_eq!((c.wr_id.get(), c.status.get()), (1, status), "{what}");
        assert_eq!((r.u64_at(&r.rb, 0), r.u64_at(&r.rb, 8)), (7, 7), "{what}: nothing changed");
        assert_eq!(r.u64_at(&r.la, 0), 0, "{what}: nothing returned");
        assert_eq!(r.d.dev.core().qp(r.b.qpn).unwrap().state(), qp_state::ERR, "{what}: Class C");
        assert_eq!(r.d.dev.stats().atomics_executed, 0, "{what}");
    }
}

/// With `ZERO_BASED`, an 8-aligned address of the MR's space can lie misaligned in memory: the
/// responder checks the memory's alignment, as Linux rxe checks the page offset.
#[test]
fn an_address_misaligned_in_memory_is_an_invalid_request() {
    let r = Rig::at(0x7100_0000_0004, ATOMIC | access::ZERO_BASED, access::REMOTE_ATOMIC);
    let sg = [sge(r.la.va, 8, r.la.lkey)];
    r.post(1, wr_opcode::ATOMIC_CMP_AND_SWP, 8, r.rb.rkey, 0, 1, &sg);
    assert_eq!(r.one(&r.cq_a).status.get(), wc_status::REM_INV_REQ_ERR);
}

#[test]
fn the_requester_wants_exactly_eight_local_bytes_it_may_write() {
    let cases: [Local; 3] = [
        ("4 bytes", vec![(0, 4)], wc_status::LOC_LEN_ERR),
        ("16 bytes", vec![(0, 16)], wc_status::LOC_LEN_ERR),
        ("two SGEs of 4", vec![(0, 4), (100, 4)], wc_status::SUCCESS),
    ];
    for (what, sges, status) in cases {
        let r = Rig::new(ATOMIC, access::REMOTE_ATOMIC);
        r.set(&r.rb, 0, 0x0102_0304_0506_0708);
        let sg: Vec<Sge> = sges.iter().map(|&(o, l)| sge(r.la.va + o, l, r.la.lkey)).collect();
        r.post(1, wr_opcode::ATOMIC_FETCH_AND_ADD, r.rb.va, r.rb.rkey, 1, 0, &sg);
        assert_eq!(r.one(&r.cq_a).status.get(), status, "{what}");
        if status == wc_status::SUCCESS {
            let mut got = [0u8; 8];
            r.d.dev.mem().read(r.la.iova, &mut got[..4]).unwrap();
            r.d.dev.mem().read(r.la.iova + 100, &mut got[4..]).unwrap();
            assert_eq!(u64::from_le_bytes(got), 0x0102_0304_0506_0708, "{what}: split over the SGEs");
        }
    }
}

/// At most `max_rd_atomic` READs and atomics are outstanding: with a link latency, the second
/// atomic leaves the SQ only after the first completed, so the memory sees them in order.
#[test]
fn atomics_wait_for_max_rd_atomic() {
    let cfg = crate::SimConfig { link_latency: std::time::Duration::from_millis(20), ..Default::default() };
    // The mini-driver leaves `max_rd_atomic` 0, which counts as 1.
    let r = Rig::build(cfg, 0x7100_0000_0000, ATOMIC, access::REMOTE_ATOMIC);
    for k in 0..4u64 {
        let sg = [sge(r.la.va + 8 * k, 8, r.la.lkey)];
        r.post(k, wr_opcode::ATOMIC_FETCH_AND_ADD, r.rb.va, r.rb.rkey, 10, 0, &sg);
    }
    let got = r.d.wait_cqes(&r.cq_a, 4);
    assert_eq!(got.len(), 4);
    let originals: Vec<u64> = (0..4).map(|k| r.u64_at(&r.la, 8 * k)).collect();
    assert_eq!(originals, [0, 10, 20, 30]);
    assert!(r.d.dev.stats().sq_throttled > 0, "the later atomics waited on the SQ");
}
