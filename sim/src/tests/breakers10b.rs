//! Issue 10, third round of attacks (breaker): new inputs of the kinds the first round fixed.
//! Each test names the kind.

use crate::testutil::minidrv::*;
use crate::{SimConfig, UAR_BASE_PFN};
use pvrdma_abi::cmd::*;
use pvrdma_abi::regs::*;
use pvrdma_abi::uar::UAR_QP_SEND;
use pvrdma_abi::verbs::{access, qp_attr_mask as m, qp_state, send_flags, QpAttr};
use pvrdma_abi::wqe::*;
use zerocopy::little_endian::{U16, U32, U64};

use pvrdma_abi::errno::EINVAL;

// ---- Kind 1: every field of CREATE_QP means what it says ------------------------------------

type QpEdit = fn(&mut CreateQp);

/// Which of `cases` a fresh device accepts as CREATE_QP edits of a good request.
fn accepted_creates(cases: &[(&'static str, QpEdit)]) -> Vec<&'static str> {
    let mut accepted = Vec::new();
    for &(what, edit) in cases {
        let mut d = Drv::new(SimConfig::default());
        let pd = d.create_pd(0);
        let cq = d.create_cq(0, 16).handle;
        let (mut req, _) = d.qp_request(pd, cq, cq, 8, 2);
        assert_eq!(d.post(req).1, 0, "the unedited request");
        let (mut req2, _) = d.qp_request(pd, cq, cq, 8, 2);
        edit(&mut req2);
        req = req2;
        if d.post(req).1 != EINVAL {
            accepted.push(what);
        }
    }
    accepted
}

#[test]
fn create_qp_types_srqs_and_cq_handles_that_do_not_exist_are_refused() {
    let cases: [(&str, QpEdit); 5] = [
        ("qp_type UC", |r| r.qp_type = 3),
        ("qp_type 255", |r| r.qp_type = 255),
        ("is_srq 1", |r| r.is_srq = 1),
        ("send_cq_handle 0", |r| r.send_cq_handle = U32::new(0)),
        ("recv_cq_handle 999", |r| r.recv_cq_handle = U32::new(999)),
    ];
    assert_eq!(accepted_creates(&cases), Vec::<&str>::new());
}

/// (Linux's `pvrdma_create_qp` always sends `max_inline_data` 0.)
#[test]
fn inline_data_the_device_does_not_have_is_refused() {
    let cases: [(&str, QpEdit); 3] = [
        ("max_inline_data 1", |r| r.max_inline_data = U32::new(1)),
        ("max_inline_data 64", |r| r.max_inline_data = U32::new(64)),
        ("max_inline_data u32::MAX", |r| r.max_inline_data = U32::new(u32::MAX)),
    ];
    assert_eq!(accepted_creates(&cases), Vec::<&str>::new());
}

#[test]
fn create_qp_fields_outside_their_meaning_are_refused() {
    let cases: [(&str, QpEdit); 8] = [
        ("access_flags bit 6 (no such access)", |r| r.access_flags = U32::new(1 << 6)),
        ("access_flags u32::MAX", |r| r.access_flags = U32::new(u32::MAX)),
        ("access_flags MW_BIND (an MR flag)", |r| r.access_flags = U32::new(access::MW_BIND)),
        ("access_flags ZERO_BASED (an MR flag)", |r| r.access_flags = U32::new(access::ZERO_BASED)),
        ("sq_sig_all 2 (a bool)", |r| r.sq_sig_all = 2),
        ("sq_sig_all 255", |r| r.sq_sig_all = 255),
        ("srq_handle 5 with is_srq 0", |r| r.srq_handle = U32::new(5)),
        ("max_atomic_arg 0xffff (no atomics reported)", |r| r.max_atomic_arg = U16::new(0xffff)),
    ];
    assert_eq!(accepted_creates(&cases), Vec::<&str>::new());
}

// ---- Kind 1: MODIFY_QP refuses what Linux's driver never sends ------------------------------
// (Values Linux passes through unchecked are taken since issue 21: `modify_values.rs`.)

type AttrEdit = fn(&mut QpAttr);

#[test]
fn an_address_vector_outside_its_fields_is_refused() {
    // (The SL, static rate, flow label, source path bits and destination QPN are taken whatever
    // they hold since issue 21, as Linux passes them: see `modify_values.rs`.)
    let cases: [(&str, AttrEdit); 5] = [
        ("ah port_num 0", |a| a.ah_attr.port_num = 0),
        ("ah port_num 2", |a| a.ah_attr.port_num = 2),
        ("ah_flags 0 (RoCE needs a GRH)", |a| a.ah_attr.ah_flags = 0),
        ("ah_flags 0x81 (unknown bit)", |a| a.ah_attr.ah_flags = 0x81),
        ("vlan_id 4096 (12 bits)", |a| a.ah_attr.vlan_id = U16::new(4096)),
    ];
    let mut accepted = Vec::new();
    for (what, edit) in cases {
        let mut d = Drv::new(SimConfig::default());
        let qp = init_qp(&mut d);
        let mut a = rtr(qp);
        edit(&mut a);
        if d.modify(qp, RTR_MASK, a) != EINVAL {
            accepted.push(what);
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}

#[test]
fn a_good_address_vector_still_connects() {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    assert_eq!(d.modify(qp, RTR_MASK, rtr(qp)), 0);
    let q = d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() });
    assert_eq!((q.attrs.qp_state.get(), q.attrs.path_mtu.get()), (qp_state::RTR, 3));
    assert_eq!(q.attrs.ah_attr.grh.dgid, GID0);
}

/// A QP of `d` in `state` (RESET, INIT or RTS).
fn qp_in(d: &mut Drv, state: u32) -> u32 {
    if state == qp_state::RESET {
        d.bind_gid(0, GID0);
        let pd = d.create_pd(0);
        let cq = d.create_cq(0, 16).handle;
        return d.create_qp(pd, cq, cq, 8).qpn;
    }
    let qp = init_qp(d);
    if state == qp_state::RTS {
        let mut a = rtr(qp);
        assert_eq!(d.modify(qp, RTR_MASK, a), 0);
        a.qp_state = U32::new(qp_state::RTS);
        assert_eq!(d.modify(qp, m::STATE | m::SQ_PSN, a), 0);
    }
    qp
}

#[test]
fn attributes_a_transition_does_not_take_are_refused() {
    // (from, to, attribute): none is an optional or required attribute of that RC transition.
    let cases: [(u32, u32, &str, u32); 20] = [
        (qp_state::RESET, qp_state::INIT, "CUR_STATE", m::CUR_STATE),
        (qp_state::RESET, qp_state::INIT, "MIN_RNR_TIMER", m::MIN_RNR_TIMER),
        (qp_state::INIT, qp_state::INIT, "MAX_QP_RD_ATOMIC", m::MAX_QP_RD_ATOMIC),
        (qp_state::RESET, qp_state::INIT, "QKEY (UD only)", m::QKEY),
        (qp_state::RESET, qp_state::INIT, "DEST_QPN", m::DEST_QPN),
        (qp_state::RESET, qp_state::INIT, "AV", m::AV),
        (qp_state::RESET, qp_state::INIT, "SQ_PSN", m::SQ_PSN),
        (qp_state::RESET, qp_state::INIT, "PATH_MTU", m::PATH_MTU),
        (qp_state::INIT, qp_state::INIT, "QKEY (UD only)", m::QKEY),
        (qp_state::INIT, qp_state::INIT, "DEST_QPN", m::DEST_QPN),
        (qp_state::INIT, qp_state::INIT, "AV", m::AV),
        (qp_state::INIT, qp_state::INIT, "TIMEOUT", m::TIMEOUT),
        (qp_state::RTS, qp_state::RTS, "DEST_QPN", m::DEST_QPN),
        (qp_state::RTS, qp_state::RTS, "AV", m::AV),
        (qp_state::RTS, qp_state::RTS, "PATH_MTU", m::PATH_MTU),
        (qp_state::RTS, qp_state::RTS, "RQ_PSN", m::RQ_PSN),
        (qp_state::RTS, qp_state::RTS, "SQ_PSN", m::SQ_PSN),
        (qp_state::RTS, qp_state::RTS, "PORT", m::PORT),
        (qp_state::RTS, qp_state::RTS, "PKEY_INDEX", m::PKEY_INDEX),
        (qp_state::RTS, qp_state::RTS, "TIMEOUT", m::TIMEOUT),
    ];
    let mut accepted = Vec::new();
    for (from, to, what, bit) in cases {
        let mut d = Drv::new(SimConfig::default());
        let qp = qp_in(&mut d, from);
        let mut a = rtr(qp + 100);
        a.qp_state = U32::new(to);
        a.cur_qp_state = U32::new(from);
        a.port_num = 1;
        if d.modify(qp, m::STATE | bit, a) != EINVAL {
            accepted.push(format!("{from}->{to} {what}"));
        }
    }
    assert_eq!(accepted, Vec::<String>::new());
}

#[test]
fn rtr_without_a_path_mtu_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    let err = d.modify(qp, RTR_MASK & !m::PATH_MTU, rtr(qp));
    let q = d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() });
    assert!(
        err == EINVAL || pvrdma_abi::verbs::mtu::bytes(q.attrs.path_mtu.get()).is_some(),
        "RTR accepted (err {err}) and QUERY_QP reports path_mtu {}",
        q.attrs.path_mtu.get()
    );
}

// ---- Kind 1: the DSR's uar_pfn agrees with BAR2 ---------------------------------------------

#[test]
fn a_dsr_uar_pfn_other_than_bar2s_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    let off = core::mem::offset_of!(pvrdma_abi::dsr::Dsr, uar_pfn) as u64;
    d.dev.mem().write(d.dsr + off, &(UAR_BASE_PFN - 1).to_le_bytes()).unwrap();
    d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
    if d.dev.state() == crate::DeviceState::Active && d.dev.reg_read(REG_ERR) == 0 {
        // The driver maps BAR2's page 0 (the kernel's) for this context.
        let (_, err) = d.post(CreateUc { pfn: U32::new(UAR_BASE_PFN as u32), ..Default::default() });
        assert_eq!(err, EINVAL, "a user context was given the kernel's UAR page");
    }
}

// ---- Kind 1: every WQE field the model reads --------------------------------------------------

/// Issue 21 §3: a send WQE's flags are the program's, passed unchecked by rdma-core's provider;
/// QEMU 7.2 ignores them all, and the model acts on SIGNALED and SOLICITED and ignores the rest
/// (INLINE included: pvrdma has no inline data, the WQE's SGEs are gathered).
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

/// A `len`-byte MR over one page (an aliased directory), with LOCAL_WRITE.
fn aliased_mr(d: &mut Drv, pd: u32, len: u64) -> u32 {
    let mem = d.dev.mem();
    let (dir, table, page) = (mem.alloc(PAGE).unwrap(), mem.alloc(PAGE).unwrap(), mem.alloc(PAGE).unwrap());
    mem.write(dir, &table.to_le_bytes().repeat(512)).unwrap();
    mem.write(table, &page.to_le_bytes().repeat(512)).unwrap();
    d.ok(CreateMr {
        length: U64::new(len),
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        access_flags: U32::new(access::LOCAL_WRITE),
        nchunks: U32::new((len / PAGE) as u32),
        ..Default::default()
    })
    .lkey
    .get()
}

#[test]
fn query_port_max_msg_sz_is_enforced_and_sge_sums_do_not_wrap() {
    let mut d = Drv::new(SimConfig { mem_limit: 64 << 20, ..SimConfig::default() });
    let max = d.ok(QueryPort { port_num: 1, ..Default::default() }).attrs.max_msg_sz.get();
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 64);
    let lkey = aliased_mr(&mut d, pd, 64 << 20);
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

// ---- Kind 2: registers report only what happened ---------------------------------------------

#[test]
fn icr_never_reads_causes_that_did_not_happen() {
    let d = Drv::new(SimConfig::default());
    let raised: u64 = (0..3).map(|v| d.dev.vectors().raised(v)).sum();
    d.dev.reg_write(REG_ICR, u32::MAX);
    let icr = d.dev.reg_read(REG_ICR);
    let after: u64 = (0..3).map(|v| d.dev.vectors().raised(v)).sum();
    assert_eq!(after, raised);
    assert_eq!(icr & !0x7, 0, "ICR reads causes past the three vectors: {icr:#x}");
    assert_eq!(icr, 0, "ICR reads {icr:#x} with no interrupt pending");
}

// ---- Kind 3: one command's CPU time is bounded -------------------------------------------------

#[test]
fn the_largest_mr_registration_and_its_destroy_take_milliseconds() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let t = std::time::Instant::now();
    let lkey = aliased_mr(&mut d, pd, crate::limits::MAX_MR_SIZE);
    let created = t.elapsed();
    assert_ne!(lkey, 0);
    let before = d.dev.stats().host_bytes;
    let handle = 1; // the first MR of a fresh device
    let t = std::time::Instant::now();
    d.ok(DestroyMr { mr_handle: U32::new(handle), ..Default::default() });
    let destroyed = t.elapsed();
    eprintln!("1 GiB MR: create {created:?}, destroy {destroyed:?}, {before} host bytes");
    assert!(created < std::time::Duration::from_millis(500), "CREATE_MR took {created:?}");
    assert!(destroyed < std::time::Duration::from_millis(100), "DESTROY_MR took {destroyed:?}");
    assert!(d.dev.stats().host_bytes < before);
}

#[test]
fn mr_access_flags_that_describe_nothing_are_refused() {
    let mut accepted = Vec::new();
    for (what, acc) in [
        ("REMOTE_WRITE without LOCAL_WRITE", access::REMOTE_WRITE),
        ("REMOTE_ATOMIC without LOCAL_WRITE", access::REMOTE_ATOMIC),
    ] {
        let mut d = Drv::new(SimConfig::default());
        let pd = d.create_pd(0);
        let base = d.dev.mem().alloc(PAGE).unwrap();
        let req = CreateMr {
            start: U64::new(0x1000),
            length: U64::new(PAGE),
            pdir_dma: U64::new(build_pdir(&d.dev, &[base])),
            pd_handle: U32::new(pd),
            access_flags: U32::new(acc),
            nchunks: U32::new(1),
            ..Default::default()
        };
        if d.post(req).1 != EINVAL {
            accepted.push(what);
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}

#[test]
fn bind_fields_outside_their_meaning_are_refused() {
    type Edit = fn(&mut CreateBind);
    let cases: [(&str, Edit); 5] = [
        ("mtu 0 (no MTU)", |b| b.mtu = U32::new(0)),
        ("mtu 99", |b| b.mtu = U32::new(99)),
        ("vlan 4096 (12 bits)", |b| b.vlan = U32::new(4096)),
        ("vlan u32::MAX", |b| b.vlan = U32::new(u32::MAX)),
        ("multicast GID ff02::1", |b| b.new_gid = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
    ];
    let mut accepted = Vec::new();
    for (what, edit) in cases {
        let mut d = Drv::new(SimConfig::default());
        let mut b = CreateBind {
            index: U32::new(1),
            new_gid: GID0,
            gid_type: pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V1,
            mtu: U32::new(1024),
            vlan: U32::new(0xfff),
            ..Default::default()
        };
        assert_eq!(d.post(b).1, 0, "the unedited bind");
        edit(&mut b);
        b.index = U32::new(2);
        if d.post(b).1 != EINVAL {
            accepted.push(what);
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}

#[test]
fn a_destroyed_context_takes_no_new_cq_or_pd() {
    let mut d = Drv::new(SimConfig::default());
    let ctx = d.create_uc(1);
    d.ok(DestroyUc { ctx_handle: U32::new(ctx), ..Default::default() });
    let (req, _) = d.cq_request(ctx, 16);
    assert_eq!(d.post(req).1, EINVAL, "CREATE_CQ");
    assert_eq!(d.post(CreatePd { ctx_handle: U32::new(ctx), ..Default::default() }).1, EINVAL);
}

// ---- Kind 2: a failure raises what a success would ----------------------------------------------

#[test]
fn an_error_cqe_satisfies_a_solicited_arm_with_one_interrupt() {
    let p = Pair::new(SimConfig::default(), 16);
    p.d.notifications();
    p.d.irqs(2);
    p.d.cq_doorbell(0, p.cq_a.handle, pvrdma_abi::uar::UAR_CQ_ARM_SOL);
    p.d.post_send_wqe(&p.a, 2, wr_opcode::MASKED_ATOMIC_CMP_AND_SWP, send_flags::SIGNALED, 0, &[]);
    p.d.qp_doorbell(&p.a, UAR_QP_SEND);
    let c = p.d.wait_cqes(&p.cq_a, 1);
    assert_eq!(c.first().map(|c| c.status.get()), Some(wc_status::LOC_QP_OP_ERR));
    assert_eq!(p.d.notifications(), vec![p.cq_a.handle]);
    assert_eq!(p.d.dev.vectors().wait(2, WAIT), 1, "one CQ interrupt for the error CQE");
}

// ---- Kind 3: every charge comes back after traffic ------------------------------------------------

#[test]
fn host_bytes_return_to_zero_after_parked_packets_and_destroys() {
    let p = Pair::new(SimConfig::default(), 16);
    let mut d = p.d;
    // B posts no receive: A's 16 sends park at the port.
    for i in 0..16 {
        d.dev.mem().write(p.src.iova, b"abc").unwrap();
        d.send(&p.a, i, 0, &[sge(p.src.va, 3, p.src.lkey)]);
    }
    d.settle();
    assert_eq!(d.dev.parked_packets(p.b.qpn), 16);
    assert!(d.dev.stats().host_bytes > 0);
    for q in [p.a.qpn, p.b.qpn] {
        d.ok(DestroyQp { qp_handle: U32::new(q), ..Default::default() });
    }
    for c in [p.cq_a.handle, p.cq_b.handle] {
        d.ok(DestroyCq { cq_handle: U32::new(c), ..Default::default() });
    }
    for mr in [p.src.handle, p.dst.handle] {
        d.ok(DestroyMr { mr_handle: U32::new(mr), ..Default::default() });
    }
    d.ok(DestroyPd { pd_handle: U32::new(p.pd), ..Default::default() });
    d.settle();
    assert_eq!(d.dev.stats().host_bytes, 0);
    assert_eq!(d.dev.parked_packets(p.b.qpn), 0);
}
