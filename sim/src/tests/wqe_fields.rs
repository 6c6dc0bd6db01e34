//! Every WQE field the model reads: SGE counts past the QP's, a `total_len` that disagrees
//! with the SGEs, send flags outside the defined bits, fields of other opcodes and transports,
//! and message sizes past `max_msg_sz`.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::*;
use pvrdma_abi::uar::UAR_QP_SEND;
use pvrdma_abi::verbs::send_flags;
use pvrdma_abi::wqe::*;

/// From issue 10's second round of attacks on the model.
#[test]
fn wqe_sge_counts_past_the_qps_max_fail_the_wqe() {
    for num_sge in [3u32, 4, 255, u32::MAX] {
        let p = Pair::new(SimConfig::default(), 16);
        let d = &p.d;
        // The QPs have max_send_sge 2; the SQ stride (128 bytes) has room for 3 SGEs.
        let s = sge(p.src.va, 4, p.src.lkey);
        d.post_send_wqe(&p.a, 7, wr_opcode::SEND, pvrdma_abi::verbs::send_flags::SIGNALED, 0, &[s]);
        let hdr_at = p.a.sq; // slot 0
        d.dev.mem().write(hdr_at + 8, &num_sge.to_le_bytes()).unwrap();
        d.qp_doorbell(&p.a, pvrdma_abi::uar::UAR_QP_SEND);
        let c = d.wait_cqes(&p.cq_a, 1);
        assert_eq!(c.len(), 1, "num_sge {num_sge}");
        assert_eq!(c[0].status.get(), wc_status::LOC_QP_OP_ERR, "send num_sge {num_sge}");
        assert_eq!(d.dev.stats().packets_sent, 0);
    }
    for num_sge in [3u32, 1000, u32::MAX] {
        let p = Pair::new(SimConfig::default(), 16);
        let d = &p.d;
        d.recv(&p.b, 9, &[sge(p.dst.va, 64, p.dst.lkey)]);
        d.dev.mem().write(p.b.rq + 8, &num_sge.to_le_bytes()).unwrap();
        p.send_msg(1, 0, b"abc", 0);
        let c = d.wait_cqes(&p.cq_b, 1);
        assert_eq!(c.len(), 1, "recv num_sge {num_sge}");
        assert_eq!(c[0].status.get(), wc_status::LOC_QP_OP_ERR, "recv num_sge {num_sge}");
    }
}

/// From issue 10's second round of attacks on the model.
#[test]
fn a_wqe_whose_total_len_disagrees_with_its_sges_fails() {
    // total_len 0 is unstated (Linux's driver writes 0); any other value must be the SGEs' sum.
    let cases =
        [(1000u32, 0u32, false), (3, 64, false), (u32::MAX, 64, false), (4, 3, false), (0, 0, true), (4, 64, true)];
    for (send_total, recv_total, agrees) in cases {
        let p = Pair::new(SimConfig::default(), 16);
        let d = &p.d;
        d.recv(&p.b, 9, &[sge(p.dst.va, 64, p.dst.lkey)]);
        d.dev.mem().write(p.b.rq + 12, &recv_total.to_le_bytes()).unwrap();
        let s = sge(p.src.va, 4, p.src.lkey);
        d.post_send_wqe(&p.a, 7, wr_opcode::SEND, pvrdma_abi::verbs::send_flags::SIGNALED, 0, &[s]);
        d.dev.mem().write(p.a.sq + 12, &send_total.to_le_bytes()).unwrap();
        d.qp_doorbell(&p.a, pvrdma_abi::uar::UAR_QP_SEND);
        d.settle();
        let c = d.wait_cqes(&p.cq_a, 1);
        let statuses = (
            c.first().map(|c| c.status.get()),
            (send_total == 0 || send_total == 4)
                .then(|| d.wait_cqes(&p.cq_b, 1).first().map(|c| c.status.get()))
                .flatten(),
        );
        let ok = (Some(wc_status::SUCCESS), Some(wc_status::SUCCESS));
        assert_eq!(statuses == ok, agrees, "total_len {send_total}/{recv_total}: {statuses:?}");
    }
}

/// Issue 21 §3: a send WQE's flags are the program's, passed unchecked by rdma-core's provider;
/// QEMU 7.2 ignores them all, and the model acts on SIGNALED and SOLICITED and ignores the rest
/// (INLINE included: pvrdma has no inline data, the WQE's SGEs are gathered).
///
/// From issue 10's third round of attacks on the model.
#[test]
fn send_flags_outside_the_defined_bits_are_ignored() {
    for f in [1u32 << 5, 0xffff_ffe0, send_flags::IP_CSUM, send_flags::INLINE] {
        let p = Pair::new(SimConfig::default(), 16);
        p.post_recv(1, 0, 64);
        p.send_msg(2, f | send_flags::SIGNALED, b"hello", 0);
        p.d.settle();
        let c = p.d.wait_cqes(&p.cq_a, 1);
        assert_eq!(c.first().map(|c| c.status.get()), Some(wc_status::SUCCESS), "flags {f:#x}");
        let b = p.d.wait_cqes(&p.cq_b, 1);
        assert_eq!(
            b.first().map(|c| (c.status.get(), c.byte_len.get())),
            Some((wc_status::SUCCESS, 5)),
            "flags {f:#x}"
        );
    }
}

/// From issue 10's third round of attacks on the model.
#[test]
fn fields_of_other_opcodes_and_transports_do_not_leak_into_an_rc_send() {
    // A plain SEND with `ex` set: no immediate at the receiver.
    let p = Pair::new(SimConfig::default(), 16);
    p.post_recv(1, 0, 64);
    p.d.dev.mem().write(p.src.iova, b"x").unwrap();
    let s = [sge(p.src.va, 1, p.src.lkey)];
    p.d.post_send_wqe(&p.a, 2, wr_opcode::SEND, send_flags::SIGNALED, 0xdead, &s);
    // The UD union's remote_qpn names A itself: an RC send still goes to its connected QP.
    p.d.dev.mem().write(p.a.sq + 32, &p.a.qpn.to_le_bytes()).unwrap();
    p.d.qp_doorbell(&p.a, UAR_QP_SEND);
    let b = p.d.wait_cqes(&p.cq_b, 1);
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].status.get(), b[0].qp.get()), (wc_status::SUCCESS, u64::from(p.b.qpn)));
    assert_eq!(b[0].wc_flags.get() & wc_flags::WITH_IMM, 0, "a SEND delivered an immediate");
    // num_sge 0 with total_len 5: LOC_LEN_ERR.
    let p = Pair::new(SimConfig::default(), 16);
    p.post_recv(1, 0, 64);
    p.d.post_send_wqe(&p.a, 2, wr_opcode::SEND, send_flags::SIGNALED, 0, &[]);
    p.d.dev.mem().write(p.a.sq + 12, &5u32.to_le_bytes()).unwrap();
    p.d.qp_doorbell(&p.a, UAR_QP_SEND);
    let a = p.d.wait_cqes(&p.cq_a, 1);
    assert_eq!(a.first().map(|c| c.status.get()), Some(wc_status::LOC_LEN_ERR));
    // Opcodes the model does not carry fail the WQE without a packet.
    let uncarried = [
        wr_opcode::MASKED_ATOMIC_FETCH_AND_ADD,
        wr_opcode::SEND_WITH_INV,
        wr_opcode::MASKED_ATOMIC_CMP_AND_SWP,
        wr_opcode::LOCAL_INV,
        16,
        u32::MAX,
    ];
    for op in uncarried {
        let p = Pair::new(SimConfig::default(), 16);
        p.d.post_send_wqe(&p.a, 2, op, send_flags::SIGNALED, 0, &[sge(p.src.va, 1, p.src.lkey)]);
        p.d.qp_doorbell(&p.a, UAR_QP_SEND);
        let a = p.d.wait_cqes(&p.cq_a, 1);
        assert_eq!(a.first().map(|c| c.status.get()), Some(wc_status::LOC_QP_OP_ERR), "opcode {op}");
        assert_eq!(p.d.dev.stats().packets_sent, 0, "opcode {op}");
    }
}

/// From issue 10's third round of attacks on the model.
#[test]
fn query_port_max_msg_sz_is_enforced_and_sge_sums_do_not_wrap() {
    let mut d = Drv::new(SimConfig { mem_limit: 64 << 20, ..SimConfig::default() });
    let max = d.ok(QueryPort { port_num: 1, ..Default::default() }).attrs.max_msg_sz.get();
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 64);
    let lkey = d.aliased_mr(pd, 64 << 20);
    let (a, b) = (d.create_qp(pd, cq.handle, cq.handle, 8), d.create_qp(pd, cq.handle, cq.handle, 8));
    d.connect(a.qpn, b.qpn);
    d.connect(b.qpn, a.qpn);
    // max_msg_sz + 1 over two SGEs (each within the MR): LOC_LEN_ERR, no packet.
    d.send(&a, 1, 0, &[sge(0, max, lkey), sge(0, 1, lkey)]);
    let c = d.wait_cqes(&cq, 1);
    assert_eq!(c.first().map(|c| c.status.get()), Some(wc_status::LOC_LEN_ERR), "max_msg_sz {max} + 1");
    assert_eq!(d.dev.stats().packets_sent, 0);
    // Two SGEs whose u32 sum wraps to 0x10, stated as total_len 0x10: LOC_LEN_ERR.
    let p = Pair::new(SimConfig::default(), 16);
    let s = [sge(p.src.va, 0xffff_fff0, p.src.lkey), sge(p.src.va, 0x20, p.src.lkey)];
    p.d.post_send_wqe(&p.a, 3, wr_opcode::SEND, send_flags::SIGNALED, 0, &s);
    p.d.dev.mem().write(p.a.sq + 12, &0x10u32.to_le_bytes()).unwrap();
    p.d.qp_doorbell(&p.a, UAR_QP_SEND);
    let c = p.d.wait_cqes(&p.cq_a, 1);
    assert_eq!(c.first().map(|c| c.status.get()), Some(wc_status::LOC_LEN_ERR), "wrapped total_len");
}
