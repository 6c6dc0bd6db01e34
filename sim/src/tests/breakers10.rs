//! Issue 10, second round of attacks (breaker): counts that must agree exactly, registers that
//! must not read success for what did not happen, and host memory the guest cannot inflate.

use crate::testutil::minidrv::*;
use crate::{DeviceState, SimConfig, SimDevice};
use pvrdma_abi::cmd::*;
use pvrdma_abi::regs::*;
use pvrdma_abi::verbs::{access, mr_flags, qp_attr_mask as m, qp_state, QpAttr};
use pvrdma_abi::wqe::{wc_status, wr_opcode};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromZeros, IntoBytes};

use pvrdma_abi::errno::EINVAL;
use pvrdma_abi::errno::ENOMEM;

// ---- Kind 1: counts must mean exactly one thing ----------------------------------------------

#[test]
fn cq_entry_counts_outside_powers_of_two_up_to_max_cqe_are_refused_whatever_nchunks_says() {
    let mut d = Drv::new(SimConfig::default());
    let (good, _) = d.cq_request(0, 16);
    for cqe in [0u32, 3, 17, 4097, 8192, 1 << 31, u32::MAX] {
        let need = 1 + (u64::from(cqe) * 64).div_ceil(PAGE);
        for n in [need, need.saturating_sub(1), 2, 65] {
            let mut req = good;
            req.cqe = U32::new(cqe);
            req.nchunks = U32::new(n as u32);
            assert_eq!(d.err(req), EINVAL, "cqe {cqe} over {n} chunks");
        }
    }
    // The largest CQ takes 65 chunks exactly; 64 and 66 are refused.
    let (big, _) = d.cq_request(0, 4096);
    assert_eq!(big.nchunks.get(), 65);
    for n in [64, 66, 128] {
        let mut req = big;
        req.nchunks = U32::new(n);
        assert_eq!(d.err(req), EINVAL, "cqe 4096 over {n} chunks");
    }
    d.ok(big);
}

#[test]
fn qp_queue_and_sge_counts_outside_caps_are_refused() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16).handle;
    let (good, _) = d.qp_request(pd, cq, cq, 8, 2);
    type Edit = fn(&mut CreateQp);
    let edits: [(&str, Edit); 10] = [
        ("send wr 0", |r| r.max_send_wr = U32::new(0)),
        ("recv wr 0", |r| r.max_recv_wr = U32::new(0)),
        ("send wr 6", |r| r.max_send_wr = U32::new(6)),
        ("recv wr 2048", |r| r.max_recv_wr = U32::new(2048)),
        ("send wr 2^31", |r| r.max_send_wr = U32::new(1 << 31)),
        ("send sge 5", |r| r.max_send_sge = U32::new(5)),
        ("recv sge u32::MAX", |r| r.max_recv_sge = U32::new(u32::MAX)),
        ("srq", |r| r.is_srq = 1),
        ("UC", |r| r.qp_type = pvrdma_abi::verbs::qp_type::UC),
        ("total_chunks u16::MAX", |r| r.total_chunks = U16::new(u16::MAX)),
    ];
    for (what, edit) in edits {
        let mut req = good;
        edit(&mut req);
        assert_eq!(d.err(req), EINVAL, "{what}");
    }
    // Every (total, send) pair but the exact one is refused, around the exact one.
    let (t, s) = (good.total_chunks.get(), good.send_chunks.get());
    for dt in 0..=4u16 {
        for ds in 0..=4u16 {
            let (tt, ss) = ((t + dt).saturating_sub(2), (s + ds).saturating_sub(2));
            if (tt, ss) == (t, s) {
                continue;
            }
            let mut req = good;
            req.total_chunks = U16::new(tt);
            req.send_chunks = U16::new(ss);
            assert_eq!(d.err(req), EINVAL, "total {tt} send {ss}");
        }
    }
    d.ok(good);
}

#[test]
fn mr_lengths_and_counts_that_cannot_agree_are_refused() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let page = d.dev.mem().alloc(PAGE).unwrap();
    let dir = build_pdir(&d.dev, &[page; 4]);
    let mr = |start: u64, len: u64, n: u32| CreateMr {
        start: U64::new(start),
        length: U64::new(len),
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        nchunks: U32::new(n),
        ..Default::default()
    };
    let cases = [
        (0, 0, 0),
        (0, 0, 1),
        (u64::MAX - 10, 4096, 1),
        (u64::MAX - 4095, 4096, 1),
        (0, (1 << 30) + 1, (1 << 18) + 1),
        (0, u64::MAX, u32::MAX),
        (0, 4096 * 3, 4),
        (0, 4096 * 3, 2),
        (0xfff, 2, 1),
        (0xfff, 1, 2),
    ];
    for (start, len, n) in cases {
        assert_eq!(d.err(mr(start, len, n)), EINVAL, "start {start:#x} length {len} over {n}");
    }
    d.ok(mr(0xfff, 2, 2));
    d.ok(mr(0xfff, 1, 1));
}

#[test]
fn a_dma_mr_with_a_page_count_or_length_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let dma = |start: u64, len: u64, n: u32| CreateMr {
        start: U64::new(start),
        length: U64::new(len),
        pd_handle: U32::new(pd),
        flags: U32::new(mr_flags::DMA),
        nchunks: U32::new(n),
        ..Default::default()
    };
    d.ok(dma(0, 0, 0));
    for (start, len, n) in [(0, 0, 5), (0, 1 << 30, 0), (0x1000, 0, 0), (0, 4096, 1), (0, 0, u32::MAX)] {
        assert_eq!(d.err(dma(start, len, n)), EINVAL, "DMA MR start {start:#x} length {len} nchunks {n}");
    }
}

#[test]
fn port_pkey_and_gid_indices_past_their_tables_are_refused() {
    let mut d = Drv::new(SimConfig::default());
    for port in [0u8, 2, 255] {
        assert_eq!(d.err(QueryPort { port_num: port, ..Default::default() }), EINVAL, "port {port}");
    }
    for (port, index) in [(1u8, 1u8), (1, 2), (1, 128), (0, 0), (2, 1), (255, 255)] {
        let q = QueryPkey { port_num: port, index, ..Default::default() };
        assert_eq!(d.err(q), EINVAL, "pkey port {port} index {index}");
    }
    for index in [16u32, 17, 255, 256, 1 << 31, u32::MAX] {
        let gid_type = pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V1;
        let (mtu, vlan) = (U32::new(1024), U32::new(0xfff));
        let b = CreateBind { index: U32::new(index), new_gid: GID0, gid_type, mtu, vlan, ..Default::default() };
        assert_eq!(d.err(b), EINVAL, "bind index {index}");
        let u = DestroyBind { index: U32::new(index), ..Default::default() };
        assert_eq!(d.err(u), EINVAL, "unbind index {index}");
    }
    d.bind_gid(15, GID0);
    d.ok(DestroyBind { index: U32::new(15), ..Default::default() });
}

#[test]
fn primary_path_indices_past_their_tables_are_refused() {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    let mut rtr = QpAttr::new_zeroed();
    rtr.qp_state = U32::new(qp_state::RTR);
    rtr.dest_qp_num = U32::new(qp);
    rtr.path_mtu = U32::new(3);
    rtr.ah_attr.grh.dgid = GID0;
    rtr.ah_attr.ah_flags = pvrdma_abi::verbs::AH_GRH;
    rtr.ah_attr.port_num = 1;
    let mask = m::STATE | m::AV | m::DEST_QPN | m::PATH_MTU;
    type Edit = fn(&mut QpAttr);
    // (Path MTUs and destination QPNs beyond their fields are taken since issue 21: see
    // `modify_values.rs`.)
    let edits: [(&str, Edit); 4] = [
        ("sgid_index 1 (unbound)", |a| a.ah_attr.grh.sgid_index = 1),
        ("sgid_index 16", |a| a.ah_attr.grh.sgid_index = 16),
        ("sgid_index 255", |a| a.ah_attr.grh.sgid_index = 255),
        ("dgid zero", |a| a.ah_attr.grh.dgid = [0; 16]),
    ];
    for (what, edit) in edits {
        let mut a = rtr;
        edit(&mut a);
        assert_eq!(d.modify(qp, mask, a), EINVAL, "{what}");
    }
    let mut a = rtr;
    for (port, pkey) in [(0u8, 0u16), (2, 0), (1, 1), (1, u16::MAX)] {
        a.port_num = port;
        a.pkey_index = U16::new(pkey);
        let mask = m::STATE | m::PORT | m::PKEY_INDEX;
        a.qp_state = U32::new(qp_state::INIT);
        assert_eq!(d.modify(qp, mask, a), EINVAL, "port {port} pkey_index {pkey}");
    }
    assert_eq!(d.modify(qp, mask, rtr), 0);
}

#[test]
fn alternate_path_indices_past_their_tables_are_refused() {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::INIT);
    a.alt_port_num = 1;
    a.alt_ah_attr.grh.dgid = GID0;
    let mask = m::STATE | m::ALT_PATH;
    type Edit = fn(&mut QpAttr);
    let edits: [(&str, Edit); 4] = [
        ("alt_pkey_index 1", |a| a.alt_pkey_index = U16::new(1)),
        ("alt_port_num 2", |a| a.alt_port_num = 2),
        ("alt_port_num 0", |a| a.alt_port_num = 0),
        ("alt sgid_index 200", |a| a.alt_ah_attr.grh.sgid_index = 200),
    ];
    for (what, edit) in edits {
        let mut b = a;
        edit(&mut b);
        assert_eq!(d.modify(qp, mask, b), EINVAL, "{what}");
    }
}

#[test]
fn qp_attribute_counts_past_caps_or_field_widths_are_refused() {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    let mut base = QpAttr::new_zeroed();
    base.qp_state = U32::new(qp_state::INIT);
    type Edit = fn(&mut QpAttr);
    let cases: [(&str, u32, Edit); 10] = [
        ("max_rd_atomic 17 (caps.max_qp_init_rd_atom 16)", m::MAX_QP_RD_ATOMIC, |a| a.max_rd_atomic = 17),
        ("max_dest_rd_atomic 255 (caps.max_qp_rd_atom 16)", m::MAX_DEST_RD_ATOMIC, |a| a.max_dest_rd_atomic = 255),
        ("retry_cnt 8 (3 bits)", m::RETRY_CNT, |a| a.retry_cnt = 8),
        ("rnr_retry 200 (3 bits)", m::RNR_RETRY, |a| a.rnr_retry = 200),
        ("timeout 32 (5 bits)", m::TIMEOUT, |a| a.timeout = 32),
        ("min_rnr_timer 255 (5 bits)", m::MIN_RNR_TIMER, |a| a.min_rnr_timer = 255),
        ("sq_psn 2^24", m::SQ_PSN, |a| a.sq_psn = U32::new(1 << 24)),
        ("rq_psn u32::MAX", m::RQ_PSN, |a| a.rq_psn = U32::new(u32::MAX)),
        ("CAP max_send_wr 4096 (no resize)", m::CAP, |a| a.cap.max_send_wr = U32::new(4096)),
        ("unknown mask bit 25", 1 << 25, |_| {}),
    ];
    let mut accepted = Vec::new();
    for (what, bit, edit) in cases {
        let mut a = base;
        edit(&mut a);
        if d.modify(qp, m::STATE | bit, a) != EINVAL {
            accepted.push(what);
        }
    }
    assert!(accepted.is_empty(), "accepted: {accepted:?}");
}

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

#[test]
fn dsr_ring_page_counts_that_are_not_exact_powers_break_the_device() {
    // (pages - 1) pages of entries: 2 and 3 entry pages give 1024/1536 async entries.
    for (pages, ok) in [(2u32, true), (3, true), (4, false), (5, true), (9, true), (511, false), (1, false)] {
        let d = Drv::load(SimDevice::new(SimConfig::default()), pages);
        d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
        let active = d.dev.state() == DeviceState::Active;
        assert_eq!(active, ok, "{pages} DSR ring pages");
        assert_eq!(d.dev.reg_read(REG_ERR) == 0, ok, "ERR for {pages} DSR ring pages");
    }
}

// ---- Kind 2: a register never reports success for what did not happen ------------------------

fn ack_in_slot(d: &Drv) -> u32 {
    d.dev.mem().load_u32(d.resp_slot + 8).unwrap()
}

fn raw_request(d: &Drv, value: u32) {
    d.dev.mem().zero(d.resp_slot, 64).unwrap();
    let q = QueryPort { hdr: CmdHdr { cmd: U32::new(0), ..Default::default() }, port_num: 1, ..Default::default() };
    d.dev.mem().write(d.cmd_slot, q.as_bytes()).unwrap();
    d.dev.reg_write(REG_REQUEST, value);
}

#[test]
fn activate_and_request_before_any_dsr_do_nothing_visibly() {
    let dev = SimDevice::new(SimConfig::default());
    dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((dev.state(), dev.reg_read(REG_ERR)), (DeviceState::Inactive, 0xffff));
    dev.reg_write(REG_REQUEST, 0);
    assert_eq!(dev.stats().ignored_requests, 1);
    assert_eq!(dev.vectors().raised(0), 0);
    // DSRLOW alone loads nothing.
    let dsr = dev.mem().alloc(PAGE).unwrap();
    dev.reg_write(REG_DSRLOW, dsr as u32);
    dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    dev.reg_write(REG_REQUEST, 0);
    assert_eq!((dev.state(), dev.reg_read(REG_ERR)), (DeviceState::Inactive, 0xffff));
    assert_eq!(dev.stats().ignored_requests, 2);
    // An all-zero DSR (no slots, no rings) breaks it.
    dev.reg_write(REG_DSRHIGH, (dsr >> 32) as u32);
    dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((dev.state(), dev.reg_read(REG_ERR)), (DeviceState::Broken, 0xffff));
}

#[test]
fn reset_then_request_or_activate_is_refused_and_counted() {
    let mut d = Drv::new(SimConfig::default());
    d.create_pd(0);
    d.dev.reg_write(REG_CTL, DeviceCtl::Reset as u32);
    let (ignored, raised) = (d.dev.stats().ignored_requests, d.dev.vectors().raised(0));
    raw_request(&d, 0);
    assert_eq!(ack_in_slot(&d), 0, "no response after RESET");
    assert_eq!(d.dev.stats().ignored_requests, ignored + 1);
    assert_eq!(d.dev.vectors().raised(0), raised);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Inactive, 0xffff));
    // Rewriting DSRHIGH reloads the DSR DSRLOW still names; then it works again.
    d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Active, 0));
    assert_eq!(d.ok(CreatePd::default()).pd_handle.get(), 1, "RESET emptied the PD table");
}

#[test]
fn a_good_dsr_does_not_unbreak_a_broken_device_without_reset() {
    let d = Drv::load(SimDevice::new(SimConfig::default()), 4);
    assert_eq!(d.dev.state(), DeviceState::Broken);
    // A good DSR after the bad one, without RESET.
    let d = Drv::load(d.dev.clone(), 2);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Broken, 0xffff));
    let ignored = d.dev.stats().ignored_requests;
    raw_request(&d, 0);
    assert_eq!(ack_in_slot(&d), 0);
    assert_eq!(d.dev.stats().ignored_requests, ignored + 1);
    // Also after inject_fatal: ACTIVATE keeps ERR at 0xffff.
    let d2 = Drv::new(SimConfig::default());
    d2.dev.inject_fatal();
    d2.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!(d2.dev.reg_read(REG_ERR), 0xffff);
    let d2 = Drv::load(d2.dev.clone(), 2);
    d2.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d2.dev.state(), d2.dev.reg_read(REG_ERR)), (DeviceState::Broken, 0xffff));
}

#[test]
fn reloading_a_good_dsr_while_active_keeps_the_device_and_its_objects() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    for _ in 0..3 {
        d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
        assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Active, 0));
    }
    assert_eq!(d.err(DestroyPd { pd_handle: U32::new(pd), ..Default::default() }), 0);
}

#[test]
fn a_nonzero_request_write_is_counted_when_dropped() {
    let d = Drv::new(SimConfig::default());
    let before = d.dev.stats();
    for v in [1u32, 0x8000_0000, u32::MAX] {
        raw_request(&d, v);
        assert_eq!(ack_in_slot(&d), 0, "REQUEST = {v:#x} ran nothing");
    }
    let after = d.dev.stats();
    assert_eq!(after.commands, before.commands);
    assert_eq!(after.ignored_requests, before.ignored_requests + 3, "three dropped REQUEST writes");
}

#[test]
fn a_response_that_cannot_be_written_does_not_read_success() {
    let d = Drv::new(SimConfig::default());
    assert!(d.dev.mem().free(d.resp_slot));
    let commands = d.dev.stats().commands;
    d.dev.mem().write(d.cmd_slot, CreatePd::default().as_bytes()).unwrap();
    d.dev.mem().write(d.cmd_slot + 8, &opcode::CREATE_PD.to_le_bytes()).unwrap();
    d.dev.reg_write(REG_REQUEST, 0);
    assert_eq!(d.dev.stats().commands, commands + 1);
    assert_ne!(d.dev.reg_read(REG_ERR), 0, "ERR reads success, but the response was lost");
}

#[test]
fn a_command_slot_freed_after_load_fails_visibly() {
    let d = Drv::new(SimConfig::default());
    assert!(d.dev.mem().free(d.cmd_slot));
    let raised = d.dev.vectors().raised(0);
    d.dev.reg_write(REG_REQUEST, 0);
    assert_eq!(d.dev.reg_read(REG_ERR), (-14i32) as u32, "EFAULT");
    assert_eq!(d.dev.vectors().raised(0), raised + 1);
    assert_eq!(d.dev.stats().failed_commands, 1);
}

#[test]
fn a_masked_command_vector_still_sets_err_and_counts_the_masked_interrupt() {
    let mut d = Drv::new(SimConfig::default());
    d.dev.reg_write(REG_IMR, 1);
    raw_request(&d, 0);
    assert_eq!(ack_in_slot(&d), ack_for(opcode::QUERY_PORT));
    assert_eq!(d.dev.reg_read(REG_ERR), 0);
    assert_eq!(d.dev.stats().interrupts_masked, 1);
    d.dev.reg_write(REG_IMR, 0);
    d.irqs(0);
    d.create_pd(0);
}

// ---- Kind 3: guest input cannot make the host pay more than the guest did ---------------------

/// Resident bytes of this process.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 4096
}

/// A directory naming one table 512 times, whose 512 entries name one page.
fn aliased_pdir(d: &Drv) -> (u64, u64) {
    let mem = d.dev.mem();
    let (dir, table, page) = (mem.alloc(PAGE).unwrap(), mem.alloc(PAGE).unwrap(), mem.alloc(PAGE).unwrap());
    mem.write(dir, &table.to_le_bytes().repeat(512)).unwrap();
    mem.write(table, &page.to_le_bytes().repeat(512)).unwrap();
    (dir, page)
}

const MIB: u64 = 1 << 20;

#[test]
fn aliased_objects_of_every_kind_keep_rss_within_the_budget() {
    let budget = 48 * MIB;
    let cfg = SimConfig { host_budget: budget, mem_limit: 16 * MIB, ..SimConfig::default() };
    let mut d = Drv::new(cfg);
    d.bind_gid(0, GID0);
    let before = rss();
    let pd = d.create_pd(0);
    let (dir, _) = aliased_pdir(&d);
    // QPs of the largest size (1024 WRs, 4 SGEs) over one aliased directory.
    let cq = d.create_cq(0, 16).handle;
    // Strides 256 (SQ) and 128 (RQ) bytes: 64 and 32 pages.
    let (sp, rp) = (64u16, 32u16);
    let qp = CreateQp {
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        send_cq_handle: U32::new(cq),
        recv_cq_handle: U32::new(cq),
        max_send_wr: U32::new(1024),
        max_recv_wr: U32::new(1024),
        max_send_sge: U32::new(4),
        max_recv_sge: U32::new(4),
        total_chunks: U16::new(1 + sp + rp),
        send_chunks: U16::new(sp),
        qp_type: pvrdma_abi::verbs::qp_type::RC,
        ..Default::default()
    };
    let mut qps = 0;
    while qps < 256 && d.post(qp).1 == 0 {
        qps += 1;
    }
    // CQs of 4096 CQEs over the same directory.
    let cqr = CreateCq { pdir_dma: U64::new(dir), cqe: U32::new(4096), nchunks: U32::new(65), ..Default::default() };
    let mut cqs = 0;
    while cqs < 20_000 && d.post(cqr).1 == 0 {
        cqs += 1;
    }
    // 1 GiB MRs over the same directory, and DMA MRs, and PDs, until the budget says no.
    let mr = CreateMr {
        length: U64::new(1 << 30),
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        nchunks: U32::new(1 << 18),
        ..Default::default()
    };
    let mut mrs = 0;
    while mrs < 4096 && d.post(mr).1 == 0 {
        mrs += 1;
    }
    let grown = rss().saturating_sub(before);
    let s = d.dev.stats();
    eprintln!("{qps} QPs, {cqs} CQs, {mrs} MRs: {} host bytes charged, RSS +{grown}", s.host_bytes);
    assert!(s.host_bytes <= budget, "{s:?}");
    // Slack for other tests running in this process meanwhile.
    let bound = budget + cfg_mem(&d) + 96 * MIB;
    assert!(grown < bound, "RSS grew {grown} bytes (bound {bound}) for {qps} QPs, {cqs} CQs, {mrs} MRs");
    assert!(qps > 0 && cqs > 0, "{qps} QPs, {cqs} CQs");
    let pd_err = d.post(CreatePd::default()).1;
    assert!(pd_err == 0 || pd_err == ENOMEM);
}

fn cfg_mem(d: &Drv) -> u64 {
    d.dev.config().mem_limit
}

#[test]
fn every_charge_is_released_by_destroy_and_by_reset() {
    let mut d = Drv::new(SimConfig { link_latency: std::time::Duration::from_secs(3600), ..SimConfig::default() });
    let base = d.dev.stats().host_bytes;
    assert_eq!(base, 0, "nothing charged on a fresh device");
    let build = |d: &mut Drv| {
        d.bind_gid(0, GID0);
        let ctx = d.create_uc(3);
        let upd = d.create_pd(ctx);
        let pd = d.create_pd(0);
        let ucq = d.create_cq(ctx, 8).handle;
        let cq = d.create_cq(0, 64);
        let a = d.create_qp(pd, cq.handle, cq.handle, 16);
        let b = d.create_qp(pd, cq.handle, cq.handle, 16);
        d.connect(a.qpn, b.qpn);
        d.connect(b.qpn, a.qpn);
        let mr = d.create_mr(pd, 0x1000, 3 * PAGE, access::LOCAL_WRITE);
        let dma = d
            .ok(CreateMr { pd_handle: U32::new(pd), flags: U32::new(mr_flags::DMA), ..Default::default() })
            .mr_handle
            .get();
        // Sends on the wire (latency 1 h): in flight at destroy / RESET.
        for i in 0..4 {
            d.send(&a, i, 0, &[sge(mr.va, 100, mr.lkey)]);
        }
        (ctx, upd, pd, ucq, cq.handle, a.qpn, b.qpn, mr.handle, dma)
    };
    let (ctx, upd, pd, ucq, cq, a, b, mr, dma) = build(&mut d);
    assert!(d.dev.stats().host_bytes > 0);
    for q in [a, b] {
        d.ok(DestroyQp { qp_handle: U32::new(q), ..Default::default() });
    }
    for h in [mr, dma] {
        d.ok(DestroyMr { mr_handle: U32::new(h), ..Default::default() });
    }
    for h in [cq, ucq] {
        d.ok(DestroyCq { cq_handle: U32::new(h), ..Default::default() });
    }
    for h in [pd, upd] {
        d.ok(DestroyPd { pd_handle: U32::new(h), ..Default::default() });
    }
    d.ok(DestroyUc { ctx_handle: U32::new(ctx), ..Default::default() });
    assert_eq!(d.dev.stats().host_bytes, base, "destroy released every charge");
    // Build it all again and RESET with everything live.
    build(&mut d);
    d.dev.reg_write(REG_CTL, DeviceCtl::Reset as u32);
    assert_eq!(d.dev.stats().host_bytes, base, "RESET released every charge");
    // And the device is usable with the full budget afterwards.
    let mut d = Drv::new_on(d.dev.clone());
    build(&mut d);
}

#[test]
fn failed_creates_charge_nothing() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16).handle;
    let base = d.dev.stats().host_bytes;
    // A QP whose RQ pages are outside guest memory, a CQ whose last page is, an MR whose last is.
    let (mut qp, _) = d.qp_request(pd, cq, cq, 8, 2);
    qp.pdir_dma = U64::new(aliased_bad_tail(&d, 1 + 1 + 1));
    assert_eq!(d.err(qp), EINVAL);
    let (mut c, _) = d.cq_request(0, 128);
    c.pdir_dma = U64::new(aliased_bad_tail(&d, 3));
    assert_eq!(d.err(c), EINVAL);
    let m = CreateMr {
        length: U64::new(1 << 30),
        pdir_dma: U64::new(aliased_bad_tail(&d, 1 << 18)),
        pd_handle: U32::new(pd),
        nchunks: U32::new(1 << 18),
        ..Default::default()
    };
    assert_eq!(d.err(m), EINVAL);
    for _ in 0..20 {
        assert_eq!(d.err(m), EINVAL);
    }
    assert_eq!(d.dev.stats().host_bytes, base);
}

/// A page directory whose first `n - 1` pages are one good page and whose page `n - 1` is
/// outside guest memory.
fn aliased_bad_tail(d: &Drv, n: usize) -> u64 {
    let mem = d.dev.mem();
    let page = mem.alloc(PAGE).unwrap();
    let mut list = vec![page; n];
    list[n - 1] = 0xdead_0000;
    let dir = mem.alloc(PAGE).unwrap();
    let table_count = n.div_ceil(512);
    let tables: Vec<u64> = (0..table_count).map(|_| mem.alloc(PAGE).unwrap()).collect();
    for (t, chunk) in list.chunks(512).enumerate() {
        mem.write(dir + 8 * t as u64, &tables[t].to_le_bytes()).unwrap();
        let bytes: Vec<u8> = chunk.iter().flat_map(|p| p.to_le_bytes()).collect();
        mem.write(tables[t], &bytes).unwrap();
    }
    dir
}

#[test]
fn repeated_dsr_reloads_and_gid_binds_do_not_grow_the_host() {
    let mut d = Drv::new(SimConfig::default());
    // Warm up, then measure.
    for i in 0..200u32 {
        d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
        d.bind_gid(i % 16, GID0);
    }
    let before = rss();
    for i in 0..20_000u32 {
        d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
        d.bind_gid(i % 16, GID0);
        if i % 3 == 0 {
            d.ok(DestroyBind { index: U32::new(i % 16), ..Default::default() });
        }
    }
    let grown = rss().saturating_sub(before);
    eprintln!("RSS +{grown} over 20,000 DSR reloads and binds");
    assert_eq!(d.dev.stats().host_bytes, 0);
    assert!(grown < 64 * MIB, "RSS grew {grown} bytes over 20,000 DSR reloads and binds");
}

#[test]
fn mr_registration_cost_is_charged_before_the_walk_so_a_tiny_budget_refuses_at_once() {
    let mut d = Drv::new(SimConfig { host_budget: 64 * 1024, ..SimConfig::default() });
    let pd = d.create_pd(0);
    let (dir, _) = aliased_pdir(&d);
    let m = CreateMr {
        length: U64::new(1 << 30),
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        nchunks: U32::new(1 << 18),
        ..Default::default()
    };
    let t = std::time::Instant::now();
    for _ in 0..200 {
        assert_eq!(d.err(m), ENOMEM);
    }
    assert!(t.elapsed() < std::time::Duration::from_secs(2), "{:?}", t.elapsed());
}

impl Drv {
    /// Loads a fresh DSR on `dev` (after a RESET) and activates it.
    fn new_on(dev: std::sync::Arc<SimDevice>) -> Self {
        let d = Self::load(dev, 2);
        d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
        assert_eq!(d.dev.reg_read(REG_ERR), 0);
        d
    }
}

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

#[test]
fn a_bind_of_a_gid_type_the_device_does_not_have_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    let (mtu, vlan) = (U32::new(1024), U32::new(0xfff));
    let bind =
        |gid_type: u8| CreateBind { index: U32::new(1), new_gid: GID0, gid_type, mtu, vlan, ..Default::default() };
    d.ok(bind(pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V1));
    d.ok(bind(pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2));
    for t in [0, 0x80, 0x03] {
        assert_eq!(d.err(bind(t)), EINVAL, "gid_type {t}");
    }
}

#[test]
fn sixteen_mib_messages_from_one_aliased_page_stay_within_the_wire_budget() {
    let wire = 48 * MIB;
    let cfg = SimConfig { device_bytes_in_flight: wire, mem_limit: 64 * MIB, ..SimConfig::default() };
    let mut d = Drv::new(cfg);
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 64);
    let msg = 16 * MIB;
    // A 16 MiB MR over one page (4,096 entries naming it).
    let (dir, _) = aliased_pdir(&d);
    let mr = d.ok(CreateMr {
        length: U64::new(msg),
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        nchunks: U32::new((msg / PAGE) as u32),
        ..Default::default()
    });
    let before = rss();
    // 32 QPs each send one 16 MiB message to a peer that never posts a receive (packets park).
    let mut qps = Vec::new();
    for _ in 0..32 {
        let a = d.create_qp(pd, cq.handle, cq.handle, 4);
        let b = d.create_qp(pd, cq.handle, cq.handle, 4);
        d.connect(a.qpn, b.qpn);
        d.connect(b.qpn, a.qpn);
        d.send(&a, 1, 0, &[sge(0, msg as u32, mr.lkey.get())]);
        qps.push((a, b));
    }
    d.settle();
    let grown = rss().saturating_sub(before);
    let parked: usize = qps.iter().map(|(_, b)| d.dev.parked_packets(b.qpn)).sum();
    assert!(parked as u64 * msg <= wire + msg, "{parked} messages of 16 MiB parked");
    eprintln!("{parked} parked 16 MiB messages, RSS +{grown}");
    assert!(parked >= 2, "the attack parked {parked} messages");
    let bound = wire + msg + d.dev.stats().host_bytes + 96 * MIB;
    assert!(grown < bound, "RSS grew {grown} bytes (bound {bound}) with {parked} parked");
}

#[test]
fn an_unbind_naming_another_gid_than_the_entry_holds_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let mut other = GID0;
    other[15] ^= 1;
    let u = |gid| DestroyBind { index: U32::new(0), dest_gid: gid, ..Default::default() };
    assert_eq!(d.err(u(other)), EINVAL, "unbind of a GID the entry does not hold");
    d.ok(u(GID0));
}
