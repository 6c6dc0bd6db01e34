//! Counts and indices a driver gives: every count must agree exactly with the size it describes
//! (chunk counts, ring pages, queue and SGE counts, MR lengths), every index must lie inside its
//! table (P_Key, GID, path), and a refused count answers EINVAL in the response and in ERR.

use crate::testutil::minidrv::*;
use crate::{DeviceState, SimConfig, SimDevice};
use pvrdma_abi::cmd::*;
use pvrdma_abi::dsr::Dsr;
use pvrdma_abi::errno::EINVAL;
use pvrdma_abi::regs::*;
use pvrdma_abi::verbs::{mr_flags, qp_attr_mask as m, qp_state, QpAttr};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::FromZeros;

#[test]
fn dsr_rings_past_one_page_table_or_qemus_511_pages_are_refused() {
    // 513 pages over two page tables: 512 notification pages of 256 entries would be a power of
    // two (131072), but the ring must fit one table and QEMU 7.2 refuses more than 511 pages.
    for pages in [513, 512, 1] {
        let d = Drv::load(SimDevice::new(SimConfig::default()), pages);
        assert_eq!(d.dev.state(), DeviceState::Broken, "{pages} ring pages");
        assert_eq!(d.dev.reg_read(REG_ERR), 0xffff, "{pages} ring pages");
    }
    let d = Drv::load(SimDevice::new(SimConfig::default()), 257);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Active, 0), "257 pages");
}

#[test]
fn a_refused_dsr_reload_after_activate_reads_err_and_refuses_requests_until_reset() {
    let mut d = Drv::new(SimConfig::default());
    d.create_pd(0);
    // Reload the same DSR with its notification ring's num_pages set to 0.
    let off = core::mem::offset_of!(Dsr, cq_ring_pages) as u64;
    let mut raw = [0u8; 4];
    d.dev.mem().write(d.dsr + off, &0u32.to_le_bytes()).unwrap();
    d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
    assert_eq!(d.dev.state(), DeviceState::Broken);
    assert_eq!(d.dev.reg_read(REG_ERR), 0xffff, "ERR after the refused load");
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!(d.dev.reg_read(REG_ERR), 0xffff, "ERR after ACTIVATE of a broken device");
    // REQUEST is not answered, and the model counts it.
    let ignored = d.dev.stats().ignored_requests;
    d.dev.mem().write(d.resp_slot, &[0u8; 16]).unwrap();
    d.dev.reg_write(REG_REQUEST, 0);
    d.dev.mem().read(d.resp_slot + 8, &mut raw).unwrap();
    assert_eq!(u32::from_le_bytes(raw), 0, "no ack");
    assert_eq!(d.dev.stats().ignored_requests, ignored + 1);
    // RESET, a good DSR and ACTIVATE bring it back.
    d.dev.reg_write(REG_CTL, DeviceCtl::Reset as u32);
    let d = Drv::load(d.dev.clone(), 2);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Active, 0));
}

#[test]
fn cq_chunk_counts_must_describe_the_ring_exactly() {
    let mut d = Drv::new(SimConfig::default());
    let (good, _) = d.cq_request(0, 16);
    assert_eq!(good.nchunks.get(), 2);
    for n in [0, 1, 3, 128, 600, u32::MAX] {
        let mut req = good;
        req.nchunks = U32::new(n);
        assert_eq!(d.err(req), EINVAL, "cqe 16 over {n} chunks");
    }
    d.ok(good);
}

#[test]
fn qp_chunk_counts_must_describe_the_rings_exactly() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16).handle;
    let (good, _) = d.qp_request(pd, cq, cq, 8, 2);
    let (total, send) = (good.total_chunks.get(), good.send_chunks.get());
    for (t, s) in [(600, 1), (total + 1, send), (total, send + 1), (total, 0), (0, 0), (1, 0)] {
        let mut req = good;
        req.total_chunks = U16::new(t);
        req.send_chunks = U16::new(s);
        assert_eq!(d.err(req), EINVAL, "total_chunks {t}, send_chunks {s}");
    }
    d.ok(good);
}

#[test]
fn mr_chunk_counts_must_describe_the_pages_spanned_exactly() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let pages = [d.dev.mem().alloc(PAGE).unwrap(), d.dev.mem().alloc(PAGE).unwrap()];
    let dir = build_pdir(&d.dev, &pages);
    let mr = |start: u64, len: u64, n: u32| CreateMr {
        start: U64::new(start),
        length: U64::new(len),
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        nchunks: U32::new(n),
        ..Default::default()
    };
    for (start, len, n) in [(0x1000, 4096, 2), (0x1000, 4096, 0), (0x1800, 4096, 1), (0, 1, 2)] {
        assert_eq!(d.err(mr(start, len, n)), EINVAL, "start {start:#x} length {len} over {n}");
    }
    // 4096 bytes at offset 0x800 span two pages.
    d.ok(mr(0x1800, 4096, 2));
    d.ok(mr(0x1000, 4096, 1));
}

#[test]
fn a_refused_count_answers_einval_in_the_response_and_in_err() {
    let mut d = Drv::new(SimConfig::default());
    let (mut req, _) = d.cq_request(0, 16);
    req.nchunks = U32::new(600);
    // post() checks the ack, the cookie, one vector-0 interrupt and ERR = -err.
    let (resp, err) = d.post(req);
    assert_eq!((err, resp.cq_handle.get()), (EINVAL, 0));
    assert_eq!(d.dev.reg_read(REG_ERR), (-22i32) as u32);
    d.create_pd(0);
    assert_eq!(d.dev.reg_read(REG_ERR), 0);
}

#[test]
fn pkey_queries_past_the_one_entry_table_or_port_1_are_refused() {
    let mut d = Drv::new(SimConfig::default());
    let q = |port_num: u8, index: u8| QueryPkey { port_num, index, ..Default::default() };
    assert_eq!(d.ok(q(1, 0)).pkey.get(), 0xffff);
    for (port, index) in [(1, 1), (1, 255), (0, 0), (2, 0)] {
        assert_eq!(d.err(q(port, index)), EINVAL, "port {port} index {index}");
    }
}

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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
