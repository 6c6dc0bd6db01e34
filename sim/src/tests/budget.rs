//! The host-memory budget: guest input cannot make the host pay more than the guest did.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::*;
use pvrdma_abi::errno::{EINVAL, ENOMEM};
use pvrdma_abi::regs::*;
use pvrdma_abi::verbs::{access, mr_flags};
use zerocopy::little_endian::{U16, U32, U64};

const GIB: u64 = 1 << 30;

#[test]
fn aliased_gib_mrs_are_charged_and_refused_past_the_budget() {
    let budget = 16 << 20;
    let mut d = Drv::new(SimConfig { host_budget: budget, ..SimConfig::default() });
    let pd = d.create_pd(0);
    let base = d.dev.stats().host_bytes;
    let (dir, _) = aliased_pdir(&d.dev);
    let mr = CreateMr {
        start: U64::new(0),
        length: U64::new(GIB),
        pdir_dma: U64::new(dir),
        pd_handle: U32::new(pd),
        nchunks: U32::new((GIB / PAGE) as u32),
        ..Default::default()
    };
    let mut handles = Vec::new();
    loop {
        let (resp, err) = d.post(mr);
        if err != 0 {
            assert_eq!(err, 12, "ENOMEM once the budget is spent");
            break;
        }
        handles.push(resp.mr_handle.get());
        assert!(handles.len() < 16, "16 aliased 1 GiB MRs accepted under a 16 MiB budget");
    }
    let s = d.dev.stats();
    assert_eq!(s.host_budget, budget);
    assert!(s.host_bytes <= budget, "{} bytes charged", s.host_bytes);
    // Each 1 GiB MR costs its page list, 2 MiB: 16 MiB pays for 7 beside the PD.
    assert_eq!(handles.len(), 7);
    for h in handles {
        d.ok(DestroyMr { mr_handle: U32::new(h), ..Default::default() });
    }
    assert_eq!(d.dev.stats().host_bytes, base, "every charge released");
    d.ok(mr);
}

#[test]
fn cqs_aliasing_one_ring_are_charged_per_cq() {
    let budget = 1 << 20;
    let mut d = Drv::new(SimConfig { host_budget: budget, ..SimConfig::default() });
    // Every CQ names the same directory, table and pages.
    let (req, _) = d.cq_request(0, 16);
    let mut n = 0u32;
    while d.post(req).1 == 0 {
        n += 1;
        assert!(n < 1 << 17, "the budget never ran out");
    }
    let s = d.dev.stats();
    assert!(s.host_bytes <= budget && s.host_bytes > budget / 2, "{s:?}");
    assert!(n > 100, "a 1 MiB budget holds only {n} small CQs");
    // Every object kind is charged.
    let before = d.dev.stats().host_bytes;
    for h in 1..=n {
        d.ok(DestroyCq { cq_handle: U32::new(h), ..Default::default() });
    }
    let freed = before - d.dev.stats().host_bytes;
    assert!(freed >= u64::from(n) * 64, "{freed} bytes for {n} CQs");
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16).handle;
    let after_pd_cq = d.dev.stats().host_bytes;
    d.create_qp(pd, cq, cq, 16);
    assert!(d.dev.stats().host_bytes > after_pd_cq, "a QP is charged");
}

/// Resident bytes of this process.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 4096
}

const MIB: u64 = 1 << 20;

/// From issue 10's second round of attacks on the model.
#[test]
fn aliased_objects_of_every_kind_keep_rss_within_the_budget() {
    let budget = 48 * MIB;
    let cfg = SimConfig { host_budget: budget, mem_limit: 16 * MIB, ..SimConfig::default() };
    let mut d = Drv::new(cfg);
    d.bind_gid(0, GID0);
    let before = rss();
    let pd = d.create_pd(0);
    let (dir, _) = aliased_pdir(&d.dev);
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
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

/// From issue 10's second round of attacks on the model.
#[test]
fn mr_registration_cost_is_charged_before_the_walk_so_a_tiny_budget_refuses_at_once() {
    let mut d = Drv::new(SimConfig { host_budget: 64 * 1024, ..SimConfig::default() });
    let pd = d.create_pd(0);
    let (dir, _) = aliased_pdir(&d.dev);
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

/// From issue 10's second round of attacks on the model.
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
    let (dir, _) = aliased_pdir(&d.dev);
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

/// From issue 10's third round of attacks on the model.
#[test]
fn the_largest_mr_registration_and_its_destroy_take_milliseconds() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let t = std::time::Instant::now();
    let lkey = d.aliased_mr(pd, crate::limits::MAX_MR_SIZE);
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

/// From issue 10's third round of attacks on the model.
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

/// RESIZE_CQ charges the host budget for the new ring's page list, as CREATE_CQ charges the
/// first: before the fix a driver could create many one-page CQs (each charged for one entry
/// page) and resize each to `MAX_CQE` entries over aliased pages, holding page lists the budget
/// never saw. A resize the budget cannot pay for is refused (ENOMEM) and the CQ keeps its ring.
///
/// From issue 13's hostile-driver review of its commands.
#[test]
fn resize_cq_charges_the_new_ring_to_the_host_budget() {
    let cfg = SimConfig::default();
    let mut d = Drv::new(cfg);
    let (req, ring) = d.cq_request(0, 1);
    let h = d.ok(req).cq_handle.get();
    let dir = req.pdir_dma.get();
    let before = d.dev.stats().host_bytes;
    // 4096 CQEs over 64 entry pages, every one the same guest page.
    let page = d.dev.mem().alloc(PAGE).unwrap();
    let mut list = vec![ring.state];
    list.extend([page; 64]);
    let fresh = build_pdir(&d.dev, &list);
    let mut entries = vec![0u8; PAGE as usize];
    d.dev.mem().read(fresh, &mut entries).unwrap();
    d.dev.mem().write(dir, &entries).unwrap();
    let resize = ResizeCq { cq_handle: U32::new(h), cqe: U32::new(4096), ..Default::default() };
    assert_eq!(d.ok(resize).cqe.get(), 4096);
    let after = d.dev.stats().host_bytes;
    assert!(after >= before + 64 * 8, "the new page list is charged: {before} -> {after}");
    d.ok(DestroyCq { cq_handle: U32::new(h), ..Default::default() });
    assert!(d.dev.stats().host_bytes < before, "and released with the CQ");

    // A budget that holds the CQ but not its resize.
    let mut tight = Drv::new(SimConfig { host_budget: before + 256, ..SimConfig::default() });
    let (req, ring) = tight.cq_request(0, 1);
    let h = tight.ok(req).cq_handle.get();
    let fresh = build_pdir(&tight.dev, &{
        let page = tight.dev.mem().alloc(PAGE).unwrap();
        let mut l = vec![ring.state];
        l.extend([page; 64]);
        l
    });
    let mut entries = vec![0u8; PAGE as usize];
    tight.dev.mem().read(fresh, &mut entries).unwrap();
    tight.dev.mem().write(req.pdir_dma.get(), &entries).unwrap();
    let resize = ResizeCq { cq_handle: U32::new(h), cqe: U32::new(4096), ..Default::default() };
    assert_eq!(tight.err(resize), 12, "ENOMEM");
    assert_eq!(tight.dev.cq_status(h).unwrap().entries, 1, "the old ring stays");
}

/// A driver that frees the ring pages of a CQ it keeps cannot make the model hold more than
/// `mem_limit`: pages the device resolved stay charged until the CQ lets go of them (found by a
/// breaker: 400 such CQs held 100 MiB for a driver allowed 8).
#[test]
fn freeing_a_live_cqs_ring_keeps_it_charged_until_the_cq_goes() {
    let limit = 8u64 << 20;
    let mut d = Drv::new(SimConfig { mem_limit: limit, ..SimConfig::default() });
    let dev = d.dev.clone();
    let mem = dev.mem();
    let base = mem.used();
    let ring_bytes = 65 * 4096;
    let mut cqs = Vec::new();
    // Create a 4096-CQE CQ and free its ring, while there is room for one more.
    while mem.used() + ring_bytes + 2 * 4096 <= limit && cqs.len() < 100 {
        let (req, ring) = d.cq_request(0, 4096);
        let dir = req.pdir_dma.get();
        let table = mem.read_u64(dir).unwrap();
        cqs.push(d.ok(req).cq_handle.get());
        assert!(mem.free(ring.state) && mem.free(table) && mem.free(dir));
        assert!(mem.used() - base >= ring_bytes * cqs.len() as u64, "each live CQ still holds its ring");
    }
    assert!(cqs.len() < 100, "the freed rings stopped counting: the model would hold them past its limit");
    assert!(mem.alloc(ring_bytes).is_err(), "no room left: the limit binds");
    for cq in cqs {
        d.ok(pvrdma_abi::cmd::DestroyCq { cq_handle: cq.into(), ..Default::default() });
    }
    assert!(mem.used() - base < ring_bytes, "destroyed CQs release their rings");
}
