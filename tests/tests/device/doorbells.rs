//! The doorbell crate in the whole stack: a user context's UAR page reached only by mapping
//! offset 0, its mappings revoked with it, the kernel's page arming a user CQ, and 512 contexts
//! coming and going.

use doorbell::{ArmEncoding, DoorbellError, DoorbellOp, Owner};
use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use hca::Ucontext;
use ib_core::{NotifyFlags, WrOpcode};
use pvrdma_sim::SimConfig;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tests::fixture::*;
use tests::intercept::{Hooks, Intercept};

#[test]
fn a_context_maps_only_its_own_page_at_offset_zero() {
    let (dev, _sim) = hca::open_sim(SimConfig::default()).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let u = ctx.provider_context::<Ucontext>().unwrap();
    for (offset, len) in [(4096, 4096), (0, 8192), (0, 0), (u.uar_page().bar_offset(), 4096)] {
        let e = u.mmap(offset, len).err().expect("refused");
        assert_eq!(e.errno(), libc::EINVAL, "offset {offset:#x} length {len}: {e}");
    }
    assert_eq!(u.mmap(0, 4096).unwrap().page(), u.uar_page());
}

#[test]
fn a_released_contexts_mapping_rings_nothing() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let mapping = ctx.provider_context::<Ucontext>().unwrap().mmap(0, 4096).unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let h = cq_handle(&cq);
    mapping.cq_poll(&h).unwrap();
    let page = uar_page(&ctx);
    drop(cq);
    drop(ctx);
    let rung = sim.device().stats().doorbells;
    assert_eq!(mapping.cq_poll(&h), Err(DoorbellError::Revoked));
    assert_eq!(mapping.cq_arm_next(&h, ArmEncoding::Ibta), Err(DoorbellError::Revoked));
    assert_eq!(sim.device().stats().doorbells, rung, "nothing reached BAR2");
    // The page goes to the next context; the old mapping still rings nothing.
    let next = dev.alloc_ucontext().unwrap();
    assert_eq!(uar_page(&next), page, "the released page is free again");
    assert_eq!(mapping.cq_poll(&h), Err(DoorbellError::Revoked));
    assert_eq!(sim.device().stats().doorbells, rung);
    assert_eq!(pv(&dev).uar_table().in_use(), 2);
}

/// Records the BAR2 page of every CQ-doorbell write.
#[derive(Default)]
struct CqDoorbellPages(Mutex<Vec<(u64, u32)>>);

impl Hooks for CqDoorbellPages {
    fn uar_write(&self, sim: &SimPlatform, offset: u64, value: u32) {
        if offset % 4096 == 4 {
            self.0.lock().unwrap().push((offset / 4096, value));
        }
        sim.uar_write(offset, value)
    }
}

#[test]
fn the_kernel_page_arms_a_user_cq_and_its_event_comes() {
    let p = Arc::new(Intercept { sim: SimPlatform::new(SimConfig::default()), hooks: CqDoorbellPages::default() });
    let opts = hca::ProbeOptions { arm_encoding: Some(ArmEncoding::Ibta), ..Default::default() };
    let dev = hca::probe(p.clone(), opts).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, Some(&ch)).unwrap();
    let pr = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    p.0.lock().unwrap().clear();
    cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
    let arms: Vec<_> = p.0.lock().unwrap().clone();
    assert_eq!(arms, vec![(0, 0x4000_0000 | cq.handle())], "one IBTA arm, on the kernel's page");
    pr.recv_b(1, 0, 64);
    pr.send_a(1, 0, b"armed by the kernel", WrOpcode::Send, false);
    let ev = ch.get_cq_event(WAIT).expect("the arm's event");
    assert_eq!(ev.handle(), cq.handle());
    ev.ack_events(1);
    poll_n(&cq, 2);
    // The user context's own polls go through its own page.
    assert!(p.0.lock().unwrap().iter().skip(1).all(|(page, _)| *page == u64::from(uar_page(&ctx).index())));
}

#[test]
fn five_hundred_twelve_contexts_come_and_go_through_the_stack() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    for round in 0..2 {
        let ctxs: Vec<_> = (0..512).map(|_| dev.alloc_ucontext().unwrap()).collect();
        let pages: HashSet<u32> = ctxs.iter().map(|c| uar_page(c).index()).collect();
        assert_eq!(pages.len(), 512, "round {round}: a page per context");
        assert!(!pages.contains(&0));
        assert_eq!(pv(&dev).uar_table().in_use(), 513);
        drop(ctxs);
        assert_eq!(pv(&dev).uar_table().in_use(), 1, "round {round}: every page came back");
    }
    assert_eq!(sim.device().stats().refused_doorbells, 0);
}

#[test]
fn kernel_and_context_records_never_share_a_page() {
    let (dev, _sim) = hca::open_sim(SimConfig::default()).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let kpd = dev.alloc_pd().unwrap();
    let upd = ctx.alloc_pd().unwrap();
    let (kcq, ucq) = (dev.create_cq(8, None).unwrap(), ctx.create_cq(8, None).unwrap());
    let kqp = rc_qp(&kpd, &kcq, &kcq);
    let uqp = rc_qp(&upd, &ucq, &ucq);
    let rec = |cq: &ib_core::Cq| cq.provider_cq::<hca::cq::Cq>().unwrap().record_page();
    let qrec = |qp: &ib_core::Qp| qp.provider_qp::<hca::qp::Qp>().unwrap().record_page();
    let records = [rec(&kcq), rec(&ucq), qrec(&kqp), qrec(&uqp)];
    let owner = uar_owner(&ctx);
    let owners: Vec<_> = records.iter().map(|r| r.owner()).collect();
    assert_eq!(owners, vec![Owner::Kernel, owner, Owner::Kernel, owner]);
    let pages: HashSet<u64> = records.iter().map(|r| r.addr() / 4096).collect();
    assert_eq!(pages.len(), 4, "each record on a page of its own object: {records:?}");
    assert!(records.iter().all(|r| r.addr() % 4096 == 0));
}

#[test]
fn a_page_the_device_still_binds_is_retired_not_reused() {
    use ib_core::provider::UcontextOps;
    let platform = Arc::new(SimPlatform::new(SimConfig::default()));
    let weak = Arc::downgrade(&platform);
    let dev = hca::probe(platform, Default::default()).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let handle = ctx.provider_context::<Ucontext>().unwrap().handle();
    // A PD the driver does not know of keeps the context busy on the device: DESTROY_UC fails.
    let pd = pvrdma_abi::cmd::CreatePd { ctx_handle: handle.into(), ..Default::default() };
    let pd = pv(&dev).post_command(pd).unwrap().pd_handle.get();
    let page = uar_page(&ctx);
    drop(ctx);
    assert_eq!(pv(&dev).uar_table().in_use(), 2, "the still-bound page is not freed");
    let next = dev.alloc_ucontext().expect("a new context gets another page");
    assert_ne!(uar_page(&next), page);
    pv(&dev).post_command(pvrdma_abi::cmd::DestroyPd { pd_handle: pd.into(), ..Default::default() }).unwrap();
    drop((next, dev));
    tests::events::wait_for(WAIT, "the platform to be freed", || weak.upgrade().is_none());
}

#[test]
fn a_page_the_device_says_is_bound_is_retired_at_create() {
    let (dev, _sim) = hca::open_sim(SimConfig::default()).unwrap();
    let table = pv(&dev).uar_table().clone();
    // Bind the page the table hands out next to a context the driver does not know of.
    let next = table.kernel_page().pfn() + u64::from(table.in_use());
    let uc = pvrdma_abi::cmd::CreateUc { pfn: (next as u32).into(), ..Default::default() };
    let stray = pv(&dev).post_command(uc).unwrap().ctx_handle.get();
    let e = dev.alloc_ucontext().expect_err("the device refuses the bound page");
    assert_eq!(hca::device_status(&e), Some(firmware_cmd::DeviceStatus::Busy), "{e}");
    assert_eq!(table.in_use(), 2, "the bound page is retired, not queued for the next context");
    let ctx = dev.alloc_ucontext().expect("the next context gets another page");
    assert_ne!(uar_page(&ctx).pfn(), next);
    let destroy = pvrdma_abi::cmd::DestroyUc { ctx_handle: stray.into(), ..Default::default() };
    pv(&dev).post_command(destroy).unwrap();
}

/// A context's doorbells for another context's QP (SEND and RECV) are refused and counted, and
/// nothing is sent.
#[test]
fn a_context_cannot_ring_another_contexts_qp() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let owner = dev.alloc_ucontext().unwrap();
    let other = dev.alloc_ucontext().unwrap();
    let pd = owner.alloc_pd().unwrap();
    let cq = owner.create_cq(16, None).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    let before = sim.device().stats();
    // The driver's typed doorbells refuse another owner's QP before anything is written.
    let qa = p.a.provider_qp::<hca::qp::Qp>().expect("a pvrdma QP").doorbell_handle();
    assert_eq!(doorbells(&other).qp_send(&qa), Err(doorbell::DoorbellError::NotOwner));
    assert_eq!(sim.device().stats().doorbells, before.doorbells);
    // Written anyway (a hostile user's own mapping), the device refuses them and counts them.
    let other_page = uar_page(&other);
    raw_doorbell(&dev, other_page, DoorbellOp::QpSend, p.a.qpn(), ArmEncoding::Ibta);
    raw_doorbell(&dev, other_page, DoorbellOp::QpRecv, p.b.qpn(), ArmEncoding::Ibta);
    raw_doorbell(&dev, uar_page(&owner), DoorbellOp::QpSend, 0x00ff_ffff, ArmEncoding::Ibta);
    let after = sim.device().stats();
    assert_eq!(after.refused_doorbells, before.refused_doorbells + 3);
    assert_eq!(after.packets_sent, before.packets_sent);
    // The owner's own page still works; dropping the contexts first is harmless.
    drop(other);
    drop(owner);
    p.recv_b(1, 0, 8);
    p.send_a(1, 0, b"mine", WrOpcode::Send, false);
    poll_n(&cq, 2);
}
