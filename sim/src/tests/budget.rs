//! The host-memory budget: guest input cannot make the host pay more than the guest did.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::*;
use zerocopy::little_endian::{U32, U64};

const GIB: u64 = 1 << 30;

/// A page directory of 512 entries naming one table whose 512 entries name one page: 12 KiB of
/// guest memory that describes 1 GiB.
fn aliased_pdir(d: &Drv) -> u64 {
    let mem = d.dev.mem();
    let (dir, table, page) = (mem.alloc(PAGE).unwrap(), mem.alloc(PAGE).unwrap(), mem.alloc(PAGE).unwrap());
    mem.write(dir, &table.to_le_bytes().repeat(512)).unwrap();
    mem.write(table, &page.to_le_bytes().repeat(512)).unwrap();
    dir
}

#[test]
fn aliased_gib_mrs_are_charged_and_refused_past_the_budget() {
    let budget = 16 << 20;
    let mut d = Drv::new(SimConfig { host_budget: budget, ..SimConfig::default() });
    let pd = d.create_pd(0);
    let base = d.dev.stats().host_bytes;
    let dir = aliased_pdir(&d);
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
