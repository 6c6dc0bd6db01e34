//! Issue 13's commands from a hostile driver: each test a bug once found here.

use super::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::*;
use zerocopy::little_endian::U32;

/// RESIZE_CQ charges the host budget for the new ring's page list, as CREATE_CQ charges the
/// first: before the fix a driver could create many one-page CQs (each charged for one entry
/// page) and resize each to `MAX_CQE` entries over aliased pages, holding page lists the budget
/// never saw. A resize the budget cannot pay for is refused (ENOMEM) and the CQ keeps its ring.
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
    list.extend(std::iter::repeat(page).take(64));
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
        l.extend(std::iter::repeat(page).take(64));
        l
    });
    let mut entries = vec![0u8; PAGE as usize];
    tight.dev.mem().read(fresh, &mut entries).unwrap();
    tight.dev.mem().write(req.pdir_dma.get(), &entries).unwrap();
    let resize = ResizeCq { cq_handle: U32::new(h), cqe: U32::new(4096), ..Default::default() };
    assert_eq!(tight.err(resize), 12, "ENOMEM");
    assert_eq!(tight.dev.cq_status(h).unwrap().entries, 1, "the old ring stays");
}
