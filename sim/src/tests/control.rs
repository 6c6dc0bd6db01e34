//! Registers, DSR load, and the command channel.

use crate::testutil::minidrv::*;
use crate::{DeviceState, SimConfig, SimDevice, UAR_BASE_PFN};
use pvrdma_abi::cmd::*;
use pvrdma_abi::dsr::Dsr;
use pvrdma_abi::regs::*;
use pvrdma_abi::verbs::{port_state, qp_attr_mask as m, qp_state, QpAttr};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

#[test]
fn version_err_dsr_and_caps() {
    let dev = SimDevice::new(SimConfig::default());
    assert_eq!(dev.reg_read(REG_VERSION), 17);
    assert_eq!(dev.reg_read(REG_ERR), 0xffff);
    assert_eq!(dev.reg_read(REG_MACL), 0x1200_5452);
    assert_eq!(dev.reg_read(REG_MACH), 0x5634);
    let d = Drv::load(dev, 2);
    assert_eq!(d.dev.state(), DeviceState::Inactive);
    assert_eq!(d.dev.reg_read(REG_ERR), 0xffff);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!(d.dev.reg_read(REG_ERR), 0);
    assert_eq!(d.dev.state(), DeviceState::Active);

    let mut raw = [0u8; 280];
    d.dev.mem().read(d.dsr, &mut raw).unwrap();
    let dsr = Dsr::read_from_bytes(&raw).unwrap();
    let c = dsr.caps;
    assert_eq!(dsr.driver_version.get(), 17, "driver fields are kept");
    assert_eq!(c.vendor_id.get(), 0x15ad);
    assert_eq!(c.vendor_part_id.get(), 0x0820);
    assert_eq!(c.hw_ver.get(), 1);
    assert_ne!(c.fw_ver.get(), 0);
    assert_eq!(c.node_guid.get(), 0x5054_00ff_fe12_3456);
    assert_eq!(c.phys_port_cnt, 1);
    assert_eq!(c.mode, 0);
    assert_eq!(c.gid_types, 3, "RoCE v1 and v2");
    assert_eq!(c.page_size_cap.get(), 4096);
    assert!(c.max_qp.get() >= 2 && c.max_cq.get() >= 1 && c.max_mr.get() >= 1);
    assert!(c.max_pd.get() >= 1 && c.max_sge.get() >= 1 && c.gid_tbl_len.get() >= 1);
    assert!(c.max_cqe.get().is_power_of_two() && c.max_qp_wr.get().is_power_of_two());
    assert!(c.max_pkeys.get() >= 1 && c.max_uar.get() >= 2 && c.max_mr_size.get() >= 1 << 20);

    // A new MAC changes the GUID at the next DSR load.
    d.dev.reg_write(REG_MACL, 0x0403_0200);
    d.dev.reg_write(REG_MACH, 0x0605);
    d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
    d.dev.mem().read(d.dsr, &mut raw).unwrap();
    let dsr = Dsr::read_from_bytes(&raw).unwrap();
    assert_eq!(dsr.caps.node_guid.get(), 0x0202_03ff_fe04_0506);
}

#[test]
fn a_bad_dsr_leaves_the_device_visibly_broken_until_reset() {
    // 4 ring pages (as Linux uses) give 3072 notification entries: not a power of two.
    let dev = SimDevice::new(SimConfig::default());
    let d = Drv::load(dev, 4);
    assert_eq!(d.dev.state(), DeviceState::Broken);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!(d.dev.reg_read(REG_ERR), 0xffff);
    d.dev.mem().write(d.cmd_slot, QueryPort::default().as_bytes()).unwrap();
    d.dev.reg_write(REG_REQUEST, 0);
    assert_eq!(d.dev.vectors().raised(0), 0, "no response from a broken device");
    assert_eq!(d.dev.stats().ignored_requests, 1);

    // A DSR outside guest memory also breaks it.
    d.dev.reg_write(REG_CTL, DeviceCtl::Reset as u32);
    assert_eq!(d.dev.state(), DeviceState::Inactive);
    d.dev.reg_write(REG_DSRLOW, 0x1000);
    d.dev.reg_write(REG_DSRHIGH, 0);
    assert_eq!(d.dev.state(), DeviceState::Broken);

    // RESET, then a good DSR: the device works.
    d.dev.reg_write(REG_CTL, DeviceCtl::Reset as u32);
    let mut d = Drv::load(d.dev.clone(), 2);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!(d.dev.reg_read(REG_ERR), 0);
    let r = d.ok(QueryPort { port_num: 1, ..Default::default() });
    assert_eq!(r.attrs.state.get(), port_state::ACTIVE);
}

#[test]
fn every_command_acks_with_its_cookie() {
    let mut d = Drv::new(SimConfig::default());
    let p = d.ok(QueryPort { port_num: 1, ..Default::default() }).attrs;
    assert_eq!((p.state.get(), p.max_mtu.get(), p.active_mtu.get()), (port_state::ACTIVE, 3, 3));
    assert_eq!((p.active_width, p.active_speed, p.phys_state), (1, 1, 5));
    assert!(p.gid_tbl_len.get() >= 1 && p.pkey_tbl_len.get() >= 1 && p.max_msg_sz.get() >= 1024);
    assert_eq!(d.ok(QueryPkey { port_num: 1, ..Default::default() }).pkey.get(), 0xffff);
    d.bind_gid(0, GID0);
    let ctx = d.create_uc(1);
    assert_eq!(ctx, 1, "handles start at 1");
    let upd = d.create_pd(ctx);
    let pd = d.create_pd(0);
    assert!(pd >= 1 && upd >= 1 && pd != upd);
    let mr = d.create_mr(pd, 0x1000, 8192, 1);
    let dma = d.ok(CreateMr {
        pd_handle: U32::new(pd),
        flags: U32::new(pvrdma_abi::verbs::mr_flags::DMA),
        ..Default::default()
    });
    assert!(dma.lkey.get() != 0 && dma.rkey.get() != 0);
    let cq = d.create_cq(0, 8);
    let qp = d.create_qp(pd, cq.handle, cq.handle, 4);
    d.connect(qp.qpn, qp.qpn);
    let q = d.ok(QueryQp { qp_handle: U32::new(qp.qpn), ..Default::default() }).attrs;
    assert_eq!(q.qp_state.get(), qp_state::RTS);
    assert_eq!(q.dest_qp_num.get(), qp.qpn);
    assert_eq!(q.path_mtu.get(), 3);
    d.ok(DestroyQp { qp_handle: U32::new(qp.qpn), ..Default::default() });
    d.ok(DestroyCq { cq_handle: U32::new(cq.handle), ..Default::default() });
    d.ok(DestroyMr { mr_handle: U32::new(mr.handle), ..Default::default() });
    d.ok(DestroyMr { mr_handle: dma.mr_handle, ..Default::default() });
    d.ok(DestroyPd { pd_handle: U32::new(pd), ..Default::default() });
    d.ok(DestroyPd { pd_handle: U32::new(upd), ..Default::default() });
    d.ok(DestroyUc { ctx_handle: U32::new(ctx), ..Default::default() });
    d.ok(DestroyBind { index: U32::new(0), ..Default::default() });
    assert_eq!(d.err(DestroyBind { index: U32::new(0), ..Default::default() }), 2);

    // Unknown and unmodelled opcodes: their ack, EINVAL.
    for opcode in [opcode::RESIZE_CQ, opcode::CREATE_SRQ, 99, 0x7fff_ffff] {
        let mut hdr = CmdHdr::new_zeroed();
        hdr.response = U64::new(0xabcd);
        hdr.cmd = U32::new(opcode);
        let (_, r) = d.post_raw(hdr.as_bytes(), 16);
        assert_eq!(r.ack.get(), opcode | 0x8000_0000);
        assert_eq!(r.response.get(), 0xabcd);
        assert_eq!(r.err, 22);
    }
    // REQUEST with a nonzero value is ignored, as on QEMU.
    d.dev.reg_write(REG_REQUEST, 1);
    assert_eq!(d.irqs(0), 0);
    let s = d.dev.stats();
    assert_eq!(s.failed_commands, 5);
    assert!(s.commands >= 20);
}

#[test]
fn failures_set_err_raise_vector_0_and_the_device_keeps_working() {
    let mut d = Drv::new(SimConfig::default());
    // post() checks ERR = -err and exactly one vector-0 interrupt for each of these.
    assert_eq!(d.err(DestroyPd { pd_handle: U32::new(7), ..Default::default() }), 22);
    assert_eq!(d.dev.reg_read(REG_ERR), (-22i32) as u32);
    let pd = d.create_pd(0);
    assert_eq!(d.dev.reg_read(REG_ERR), 0);

    // A page directory outside guest memory: EINVAL (as QEMU 7.2); the next valid command succeeds.
    let bad =
        CreateCq { pdir_dma: U64::new(0xdead_0000), cqe: U32::new(8), nchunks: U32::new(2), ..Default::default() };
    assert_eq!(d.err(bad), 22);
    let (mut req, _) = d.cq_request(0, 8);
    let good = req;
    // A table entry pointing outside guest memory.
    let dir = req.pdir_dma.get();
    let table = d.dev.mem().read_u64(dir).unwrap();
    let page1 = d.dev.mem().read_u64(table + 8).unwrap();
    d.dev.mem().write(table + 8, &0x10_0000u64.to_le_bytes()).unwrap();
    assert_eq!(d.err(req), 22);
    d.dev.mem().write(table + 8, &(page1 + 0x800).to_le_bytes()).unwrap();
    assert_eq!(d.err(req), 22, "a misaligned page");
    d.dev.mem().write(table + 8, &page1.to_le_bytes()).unwrap();
    // Bad sizes.
    req = good;
    req.cqe = U32::new(6);
    assert_eq!(d.err(req), 22);
    req.cqe = U32::new(1 << 20);
    assert_eq!(d.err(req), 22);
    req.cqe = U32::new(128);
    assert_eq!(d.err(req), 22, "too few chunks for 128 CQEs");
    req = good;
    req.ctx_handle = U32::new(9);
    assert_eq!(d.err(req), 22, "unknown context");
    let cq = d.ok(good).cq_handle.get();

    // MRs: unknown PD, length 0, too few chunks, DMA address outside memory.
    let mr = |pd: u32, len: u64, n: u32, dir: u64| CreateMr {
        start: U64::new(0x1000),
        length: U64::new(len),
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        nchunks: U32::new(n),
        ..Default::default()
    };
    let page = d.dev.mem().alloc(PAGE).unwrap();
    let dir = build_pdir(&d.dev, &[page]);
    assert_eq!(d.err(mr(99, 4096, 1, dir)), 22);
    assert_eq!(d.err(mr(pd, 0, 1, dir)), 22);
    assert_eq!(d.err(mr(pd, 8192, 1, dir)), 22);
    assert_eq!(d.err(mr(pd, 4096, 1, u64::MAX - 7)), 22);
    assert_eq!(d.err(mr(pd, 4096, 1, 0x4000_0000_0000)), 22);
    assert_eq!(d.err(mr(pd, 4096, u32::MAX, dir)), 22);
    d.ok(mr(pd, 4096, 1, dir));

    // QPs: bad sizes, chunk counts, types, handles.
    let (qreq, _) = d.qp_request(pd, cq, cq, 8, 2);
    let mut q = qreq;
    q.max_send_wr = U32::new(6);
    assert_eq!(d.err(q), 22);
    q = qreq;
    q.max_send_sge = U32::new(1000);
    assert_eq!(d.err(q), 22);
    q = qreq;
    q.send_chunks = U16::new(q.total_chunks.get());
    assert_eq!(d.err(q), 22);
    q = qreq;
    q.total_chunks = U16::new(1);
    assert_eq!(d.err(q), 22);
    q = qreq;
    q.qp_type = 3; // UC
    assert_eq!(d.err(q), 22);
    q = qreq;
    q.send_cq_handle = U32::new(77);
    assert_eq!(d.err(q), 22);
    q = qreq;
    q.pdir_dma = U64::new(0x20);
    assert_eq!(d.err(q), 22);
    let qpn = d.ok(qreq).qpn.get();

    // Busy objects.
    assert_eq!(d.err(DestroyPd { pd_handle: U32::new(pd), ..Default::default() }), 16);
    assert_eq!(d.err(DestroyCq { cq_handle: U32::new(cq), ..Default::default() }), 16);
    d.ok(DestroyQp { qp_handle: U32::new(qpn), ..Default::default() });
    d.ok(DestroyCq { cq_handle: U32::new(cq), ..Default::default() });
    assert_eq!(d.err(DestroyCq { cq_handle: U32::new(cq), ..Default::default() }), 22);
    assert_eq!(d.err(DestroyPd { pd_handle: U32::new(pd), ..Default::default() }), 16, "MR left");

    // User contexts: the kernel's page, a page out of range, a taken page.
    let uc = |pfn: u64| CreateUc { pfn: U32::new(pfn as u32), ..Default::default() };
    assert_eq!(d.err(uc(UAR_BASE_PFN)), 22);
    assert_eq!(d.err(uc(UAR_BASE_PFN - 1)), 22);
    assert_eq!(d.err(uc(UAR_BASE_PFN + 4096)), 22);
    let ctx = d.create_uc(3);
    assert_eq!(d.err(uc(UAR_BASE_PFN + 3)), 16);
    let cq = d.create_cq(ctx, 4);
    assert_eq!(d.err(DestroyUc { ctx_handle: U32::new(ctx), ..Default::default() }), 16);
    // A user CQ cannot serve a kernel PD's QP.
    let (q, _) = d.qp_request(pd, cq.handle, cq.handle, 4, 1);
    assert_eq!(d.err(q), 1);
    assert_eq!(d.dev.state(), DeviceState::Active);
}

#[test]
fn modify_qp_demands_what_the_real_device_demands() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 8);
    let qp = d.create_qp(pd, cq.handle, cq.handle, 4).qpn;
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::RTS);
    assert_eq!(d.modify(qp, m::STATE, a), 22, "RESET -> RTS");
    a.qp_state = U32::new(qp_state::INIT);
    a.port_num = 2;
    assert_eq!(d.modify(qp, m::STATE | m::PORT, a), 22, "port 2");
    a.port_num = 1;
    assert_eq!(d.modify(qp, m::STATE | m::PORT, a), 0);
    a.qp_state = U32::new(qp_state::RTR);
    a.dest_qp_num = U32::new(qp);
    assert_eq!(d.modify(qp, m::STATE | m::DEST_QPN, a), 22, "RTR without AV");
    a.ah_attr.grh.dgid = GID0;
    a.ah_attr.ah_flags = pvrdma_abi::verbs::AH_GRH;
    a.ah_attr.port_num = 1;
    assert_eq!(d.modify(qp, m::STATE | m::DEST_QPN | m::AV, a), 22, "sgid 0 not bound");
    d.bind_gid(0, GID0);
    a.ah_attr.grh.sgid_index = 3;
    assert_eq!(d.modify(qp, m::STATE | m::DEST_QPN | m::AV, a), 22, "sgid 3 not bound");
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.dgid = [0; 16];
    assert_eq!(d.modify(qp, m::STATE | m::DEST_QPN | m::AV, a), 22, "no dgid");
    a.ah_attr.grh.dgid = GID0;
    assert_eq!(d.modify(qp, m::STATE | m::AV, a), 22, "RTR without dest_qp_num");
    a.path_mtu = U32::new(3);
    a.qkey = U32::new(0x1234);
    let mask = m::STATE | m::DEST_QPN | m::AV | m::PATH_MTU;
    assert_eq!(d.modify(qp, mask | m::QKEY, a), 22, "a Q_Key on an RC QP (UD only)");
    a.rq_psn = U32::new(0x1234);
    assert_eq!(d.modify(qp, mask | m::RQ_PSN, a), 0);
    assert_eq!(d.dev.qp_state(qp), Some(qp_state::RTR));
    let q = d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() }).attrs;
    assert_eq!((q.rq_psn.get(), q.qkey.get()), (0x1234, 0));
    a.qp_state = U32::new(qp_state::INIT);
    assert_eq!(d.modify(qp, m::STATE, a), 22, "RTR -> INIT");
    a.qp_state = U32::new(qp_state::ERR);
    assert_eq!(d.modify(qp, m::STATE, a), 0);
    a.qp_state = U32::new(qp_state::RESET);
    assert_eq!(d.modify(qp, m::STATE, a), 0);
    assert_eq!(d.modify(77, m::STATE, a), 22);
}

#[test]
fn reset_destroys_everything_and_dead_reads_all_ones() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 8);
    d.create_qp(pd, cq.handle, cq.handle, 4);
    d.dev.reg_write(REG_CTL, DeviceCtl::Reset as u32);
    assert_eq!(d.dev.state(), DeviceState::Inactive);
    assert_eq!(d.dev.reg_read(REG_ERR), 0xffff);
    assert!(d.dev.cq_status(cq.handle).is_none());
    let mut d = Drv::load(d.dev.clone(), 2);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!(d.err(DestroyPd { pd_handle: U32::new(pd), ..Default::default() }), 22);

    d.dev.set_dead(true);
    for off in (0..0x28).step_by(4) {
        assert_eq!(d.dev.reg_read(off), u32::MAX);
    }
    d.dev.reg_write(REG_REQUEST, 0);
    assert_eq!(d.irqs(0), 0);
    d.dev.set_dead(false);
    assert_eq!(d.dev.reg_read(REG_VERSION), 17);

    // A fatal error: DEVICE_FATAL on the async ring, then silence.
    d.dev.inject_fatal();
    assert_eq!(d.dev.state(), DeviceState::Broken);
    assert_eq!(d.irqs(1), 1);
    assert_eq!(d.async_events(), vec![(8, 0)]);
    d.dev.reg_write(REG_REQUEST, 0);
    assert_eq!(d.irqs(0), 0);
}
