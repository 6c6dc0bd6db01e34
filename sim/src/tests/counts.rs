//! Issue 10's count and register inputs: every count a driver gives must agree exactly with the
//! size it describes, and ERR never reads success for what did not happen.

use crate::testutil::minidrv::*;
use crate::{DeviceState, SimConfig, SimDevice};
use pvrdma_abi::cmd::*;
use pvrdma_abi::dsr::Dsr;
use pvrdma_abi::regs::*;
use zerocopy::little_endian::{U16, U32, U64};

use pvrdma_abi::errno::EINVAL;

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
