//! Shared receive queues end to end through the verbs core, the pvrdma provider and the model
//! (loopback and RoCE v2 ports): the four SRQ commands and their errors, receives shared by
//! several QPs with every payload checked, the limit event once per arm, a QP in error leaving
//! the SRQ's WQEs to the others, destroy refused while QPs use the SRQ, QEMU 7.2's swapped
//! MODIFY/QUERY_SRQ.

use ib_core::{
    access, AsyncEventType, Context, Cq, Device, Error, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge,
    Srq, SrqAttr, SrqAttrMask, SrqInitAttr, WcOpcode, WcStatus, WrOpcode,
};
use pvrdma_abi::cmd::{CreateSrq, DestroyPd, DestroySrq, ModifySrq, QuerySrq};
use pvrdma_abi::uar::{UAR_SRQ_OFFSET, UAR_SRQ_RECV};
use pvrdma_abi::verbs::{srq_attr_mask, srq_type, SrqAttr as DevSrqAttr};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::{Profile, SimConfig};
use std::time::Duration;
use tests::fixture::{connect, connect_roce, gid, open, open_with, poll_n, pv, rc_qp, uar_page, SETTLE, WAIT};

use libc::{EBUSY, EINVAL};
const MSG: u32 = 64;

fn srq(pd: &Pd, max_wr: u32, max_sge: u32) -> Srq {
    let init = SrqInitAttr { attr: SrqAttr { max_wr, max_sge, srq_limit: 0 }, srq_context: 77 };
    pd.create_srq(&init).expect("create_srq")
}

/// An RC QP whose receives come from `srq` (its RQ sizes are ignored).
fn srq_qp(pd: &Pd, cq: &Cq, srq: &Srq) -> Qp {
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 99, max_send_sge: 1, max_recv_sge: 99, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: Some(srq),
    };
    pd.create_qp(&attr).expect("create_qp on an SRQ")
}

fn post_srq(srq: &Srq, mr: &Mr, wr_id: u64) {
    let sge = [Sge { addr: mr.addr() + wr_id * u64::from(MSG), length: MSG, lkey: mr.lkey() }];
    srq.post_recv(&RecvWr { wr_id, sg_list: &sge }).expect("post_srq_recv");
}

fn payload(sender: u32, k: u32) -> Vec<u8> {
    (0..MSG).map(|i| (sender * 31 + k * 7 + i) as u8).collect()
}

fn send(q: &Qp, mr: &Mr, data: &[u8]) {
    mr.write(0, data).expect("mr write");
    let sge = [Sge { addr: mr.addr(), length: data.len() as u32, lkey: mr.lkey() }];
    let wr = SendWr { wr_id: 1, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
    q.post_send(&wr).expect("post_send");
}

/// Senders `a[i]` connected to receivers `b[i]`, every `b[i]` on one SRQ, all on one device.
struct Shared {
    pd: Pd,
    cq_a: Cq,
    cq_b: Cq,
    a: Vec<Qp>,
    b: Vec<Qp>,
    srq: Srq,
    mr_a: Mr,
    mr_b: Mr,
}

/// [`Shared`] in `ctx` (the device's kernel context or a user context of it).
fn shared_in(dev: &Device, ctx: &Context, n: usize, depth: u32) -> Shared {
    let pd = ctx.alloc_pd().unwrap();
    let (cq_a, cq_b) = (ctx.create_cq(256, None).unwrap(), ctx.create_cq(256, None).unwrap());
    let srq = srq(&pd, depth, 1);
    let a: Vec<Qp> = (0..n).map(|_| rc_qp(&pd, &cq_a, &cq_a)).collect();
    let b: Vec<Qp> = (0..n).map(|_| srq_qp(&pd, &cq_b, &srq)).collect();
    for (x, y) in a.iter().zip(&b) {
        connect(x, y.qpn(), gid(dev));
        connect(y, x.qpn(), gid(dev));
    }
    let mr_a = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let mr_b = pd.alloc_mr(MSG as usize * depth as usize, access::LOCAL_WRITE).unwrap();
    Shared { pd, cq_a, cq_b, a, b, srq, mr_a, mr_b }
}

impl Shared {
    /// Each sender sends `per` messages; every receive completes on some QP of the SRQ, and the
    /// buffer its `wr_id` names holds the payload that QP's peer sent, in its order.
    fn exchange(&self, per: u32) {
        let depth = self.mr_b.len() as u64 / u64::from(MSG);
        for w in 0..depth {
            post_srq(&self.srq, &self.mr_b, w);
        }
        let mut next = vec![0u32; self.a.len()];
        for k in 0..per {
            for (i, q) in self.a.iter().enumerate() {
                send(q, &self.mr_a, &payload(i as u32, k));
                let sent = poll_n(&self.cq_a, 1);
                assert_eq!(sent[0].status, WcStatus::Success);
            }
        }
        let total = per as usize * self.a.len();
        let wcs = poll_n(&self.cq_b, total);
        let mut seen = std::collections::BTreeSet::new();
        for wc in wcs {
            assert_eq!((wc.status, wc.opcode, wc.byte_len), (WcStatus::Success, WcOpcode::Recv, MSG));
            assert!(seen.insert(wc.wr_id), "wr_id {} completed twice", wc.wr_id);
            let i = self.b.iter().position(|q| q.qpn() == wc.qp_num).expect("a QP of the SRQ");
            // RC: no source QP, as rxe (issue 21 §5); the payload names the sender.
            assert_eq!(wc.src_qp, 0);
            let mut got = vec![0u8; MSG as usize];
            self.mr_b.read(wc.wr_id as usize * MSG as usize, &mut got).unwrap();
            assert_eq!(got, payload(i as u32, next[i]), "QP {i}'s message {}", next[i]);
            next[i] += 1;
        }
        assert!(next.iter().all(|&k| k == per), "each QP received its peer's messages: {next:?}");
    }
}

#[test]
fn receives_are_shared_by_several_qps_with_every_payload_in_place() {
    let dev = open();
    let s = shared_in(&dev, &dev, 3, 32);
    s.exchange(10);
    let b0 = &s.b[0];
    let e = b0.post_recv(&RecvWr { wr_id: 0, sg_list: &[] }).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "post_recv on a QP of an SRQ: {e:?}");
}

#[test]
fn receives_are_shared_over_the_roce_v2_port_between_two_devices() {
    let open = || tests::fixture::open_roce(RoceConfig::new(vec![]), SimConfig::default()).0;
    let (send_dev, recv_dev) = (open(), open());
    let (send_gid, recv_gid) = (send_dev.query_gid(1, 1).unwrap(), recv_dev.query_gid(1, 1).unwrap());
    let (spd, rpd) = (send_dev.alloc_pd().unwrap(), recv_dev.alloc_pd().unwrap());
    let (cq_a, cq_b) = (send_dev.create_cq(256, None).unwrap(), recv_dev.create_cq(256, None).unwrap());
    let srq = srq(&rpd, 32, 1);
    let a: Vec<Qp> = (0..3).map(|_| rc_qp(&spd, &cq_a, &cq_a)).collect();
    let b: Vec<Qp> = (0..3).map(|_| srq_qp(&rpd, &cq_b, &srq)).collect();
    for (x, y) in a.iter().zip(&b) {
        connect_roce(x, y.qpn(), recv_gid, 1);
        connect_roce(y, x.qpn(), send_gid, 1);
    }
    let mr_a = spd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let mr_b = rpd.alloc_mr(MSG as usize * 32, access::LOCAL_WRITE).unwrap();
    let s = Shared { pd: rpd, cq_a, cq_b, a, b, srq, mr_a, mr_b };
    s.exchange(8);
    drop(spd);
}

#[test]
fn commands_succeed_and_refuse_as_documented() {
    let dev = open();
    let caps = dev.query_device();
    assert_eq!((caps.max_srq, caps.max_srq_wr, caps.max_srq_sge), (1024, 1024, 4));
    let pd = dev.alloc_pd().unwrap();
    let big = SrqInitAttr { attr: SrqAttr { max_wr: 2048, max_sge: 1, srq_limit: 0 }, srq_context: 0 };
    assert!(matches!(pd.create_srq(&big), Err(Error::InvalidArgument(_))));
    let wide = SrqInitAttr { attr: SrqAttr { max_wr: 8, max_sge: 5, srq_limit: 0 }, srq_context: 0 };
    assert!(matches!(pd.create_srq(&wide), Err(Error::InvalidArgument(_))));
    let s = srq(&pd, 100, 2);
    assert_eq!(s.query().unwrap(), SrqAttr { max_wr: 128, max_sge: 2, srq_limit: 0 }, "rounded to a power of two");
    s.modify(&SrqAttr { srq_limit: 5, ..Default::default() }, SrqAttrMask::LIMIT).unwrap();
    assert_eq!(s.query().unwrap().srq_limit, 5);
    let einval = |r: ib_core::Result<()>| assert_eq!(r.map_err(|e| e.errno()), Err(EINVAL));
    einval(s.modify(&SrqAttr { srq_limit: 129, ..Default::default() }, SrqAttrMask::LIMIT));
    einval(s.modify(&SrqAttr { max_wr: 256, ..Default::default() }, SrqAttrMask::MAX_WR));
    einval(s.modify(&SrqAttr::default(), SrqAttrMask(0)));
    einval(s.modify(&SrqAttr::default(), SrqAttrMask(4)));
    s.modify(&SrqAttr { srq_limit: 0, ..Default::default() }, SrqAttrMask::LIMIT).unwrap();
    assert_eq!(s.query().unwrap().srq_limit, 0, "0 disarms");

    // Destroy refused while a QP uses it; the PD too while the SRQ holds it.
    let cq = dev.create_cq(16, None).unwrap();
    let qp = srq_qp(&pd, &cq, &s);
    let s = match s.destroy(None) {
        Err((s, Error::Busy(_))) => s,
        other => panic!("destroy with a QP attached: {other:?}"),
    };
    let pd = match pd.dealloc() {
        Err((pd, Error::Busy(_))) => pd,
        other => panic!("dealloc of an SRQ's PD: {other:?}"),
    };
    drop(qp);
    s.destroy(None).expect("destroy once no QP uses it");
    assert_eq!(pv(&dev).stats().dropped_async_events, 0);
    pd.dealloc().expect("dealloc once the SRQ is gone");
}

/// A change to a good CREATE_SRQ request.
type Tamper = dyn Fn(&mut CreateSrq);

#[test]
fn the_model_refuses_bad_srq_commands_with_einval() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cmd = |f: &dyn Fn(&mut CreateSrq)| {
        let mut c = CreateSrq {
            pd_handle: pd.handle().into(),
            nchunks: 2u32.into(),
            attrs: DevSrqAttr { max_wr: 8u32.into(), max_sge: 1u32.into(), ..Default::default() },
            srq_type: srq_type::BASIC,
            ..Default::default()
        };
        f(&mut c);
        pv(&dev).post_command(c).map(|_| ()).map_err(|e| e.errno())
    };
    let cases: [(&str, &Tamper); 7] = [
        ("XRC type", &|c| c.srq_type = srq_type::XRC),
        ("max_wr 3", &|c| c.attrs.max_wr = 3u32.into()),
        ("max_wr past MAX_SRQ_WR", &|c| c.attrs.max_wr = 2048u32.into()),
        ("max_sge 0", &|c| c.attrs.max_sge = 0u32.into()),
        ("nchunks 3", &|c| c.nchunks = 3u32.into()),
        ("unknown PD", &|c| c.pd_handle = 999u32.into()),
        ("no page directory", &|_| {}),
    ];
    for (what, f) in cases {
        assert_eq!(cmd(f), Err(EINVAL), "{what}");
    }
    let unknown = 4242u32.into();
    let p = pv(&dev);
    assert_eq!(
        p.post_command(DestroySrq { srq_handle: unknown, ..Default::default() }).map(|_| ()).map_err(|e| e.errno()),
        Err(EINVAL)
    );
    assert_eq!(
        p.post_command(QuerySrq { srq_handle: unknown, ..Default::default() }).map(|_| ()).map_err(|e| e.errno()),
        Err(EINVAL)
    );
    let modify = ModifySrq { srq_handle: unknown, attr_mask: srq_attr_mask::LIMIT.into(), ..Default::default() };
    assert_eq!(p.post_command(modify).map(|_| ()).map_err(|e| e.errno()), Err(EINVAL));
    // The device's own refusals behind the core's: an SRQ with a QP, a PD with an SRQ.
    let s = srq(&pd, 8, 1);
    let cq = dev.create_cq(8, None).unwrap();
    let qp = srq_qp(&pd, &cq, &s);
    let busy = p.post_command(DestroySrq { srq_handle: s.handle().into(), ..Default::default() });
    assert_eq!(busy.map(|_| ()).map_err(|e| e.errno()), Err(EBUSY), "DESTROY_SRQ with a QP on it");
    drop(qp);
    let busy = p.post_command(DestroyPd { pd_handle: pd.handle().into(), ..Default::default() });
    assert_eq!(busy.map(|_| ()).map_err(|e| e.errno()), Err(EBUSY), "DESTROY_PD of an SRQ's PD");
    assert!(!dev.context().is_fatal());
}

/// Waits for the next async event of the kernel context.
fn next_event(dev: &Device, within: Duration) -> Option<(AsyncEventType, u32)> {
    let e = dev.context().get_async_event(within).ok()?;
    let what = e.srq().map(|s| s.handle()).or_else(|| e.qp().map(|q| q.qp_num())).unwrap_or(u32::MAX);
    if let Some(s) = e.srq() {
        assert_eq!(s.srq_context(), 77);
    }
    let out = (e.event_type, what);
    e.ack();
    Some(out)
}

#[test]
fn the_limit_event_fires_once_per_arm() {
    let dev = open();
    let s = shared_in(&dev, &dev, 1, 16);
    for w in 0..8 {
        post_srq(&s.srq, &s.mr_b, w);
    }
    s.srq.modify(&SrqAttr { srq_limit: 4, ..Default::default() }, SrqAttrMask::LIMIT).unwrap();
    let limit = (AsyncEventType::SrqLimitReached, s.srq.handle());
    let one = |k: u32| {
        send(&s.a[0], &s.mr_a, &payload(0, k));
        poll_n(&s.cq_a, 1);
        poll_n(&s.cq_b, 1);
    };
    for k in 0..4 {
        one(k); // 7, 6, 5, 4 left: not below 4
    }
    assert_eq!(next_event(&dev, SETTLE), None, "no event while 4 or more stay posted");
    one(4); // 3 left
    assert_eq!(next_event(&dev, WAIT), Some(limit));
    assert_eq!(s.srq.query().unwrap().srq_limit, 0, "the event disarmed the limit");
    one(5);
    one(6);
    assert_eq!(next_event(&dev, SETTLE), None, "once per arm");
    // Re-armed: above the limit again, then below it.
    for w in 8..12 {
        post_srq(&s.srq, &s.mr_b, w);
    }
    s.srq.modify(&SrqAttr { srq_limit: 5, ..Default::default() }, SrqAttrMask::LIMIT).unwrap(); // 5 posted
    one(7); // 4 left
    assert_eq!(next_event(&dev, WAIT), Some(limit));
    one(8);
    assert_eq!(next_event(&dev, SETTLE), None);
    drop(s);
}

#[test]
fn a_qp_in_error_flushes_nothing_of_the_srq_and_its_peers_take_the_wqes() {
    let dev = open();
    let s = shared_in(&dev, &dev, 2, 8);
    for w in 0..4 {
        post_srq(&s.srq, &s.mr_b, w);
    }
    s.b[0].modify_to_err().unwrap();
    assert_eq!(next_event(&dev, WAIT), Some((AsyncEventType::QpLastWqeReached, s.b[0].qpn())));
    std::thread::sleep(SETTLE);
    let mut wc = [ib_core::Wc::default(); 4];
    assert_eq!(s.cq_b.poll(&mut wc).unwrap(), 0, "the SRQ's WQEs are not flushed with the QP");
    for k in 0..4 {
        send(&s.a[1], &s.mr_a, &payload(1, k));
        assert_eq!(poll_n(&s.cq_a, 1)[0].status, WcStatus::Success);
    }
    let got = poll_n(&s.cq_b, 4);
    assert!(got.iter().all(|w| w.status == WcStatus::Success && w.qp_num == s.b[1].qpn()));
    let _ = &s.pd;
}

#[test]
fn qemu_72_swaps_modify_and_query_so_the_driver_refuses_them() {
    let dev = open_with(SimConfig { profile: Profile::Qemu72, ..Default::default() });
    let pd = dev.alloc_pd().unwrap();
    let s = srq(&pd, 8, 1);
    let unsupported = |r: ib_core::Result<()>| assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}");
    unsupported(s.modify(&SrqAttr { srq_limit: 2, ..Default::default() }, SrqAttrMask::LIMIT));
    unsupported(s.query().map(|_| ()));
    // Receives through the SRQ work as on IBTA.
    let s2 = shared_in(&dev, &dev, 2, 16);
    s2.exchange(4);
    // The device itself: QUERY_SRQ runs the modify (EINVAL, MODIFY_SRQ's ack): a transport fault.
    let q = QuerySrq { srq_handle: s.handle().into(), ..Default::default() };
    assert!(pv(&dev).post_command(q).is_err());
    assert!(dev.context().is_fatal(), "a response with another command's ack faults the channel");
}

#[test]
fn a_user_context_rings_its_own_srqs_and_no_other_contexts() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).expect("probe of the model");
    let (ctx_a, ctx_b) = (dev.alloc_ucontext().unwrap(), dev.alloc_ucontext().unwrap());
    let s = shared_in(&dev, &ctx_a, 2, 16);
    let refused = || sim.device().stats().refused_doorbells;
    let before = refused();
    let ring = |ctx: Option<&Context>, handle: u32| {
        let page = ctx.map_or(0, |c| uar_page(c).bar_offset());
        pv(&dev).raw_uar_write(page + u64::from(UAR_SRQ_OFFSET), UAR_SRQ_RECV | handle);
    };
    ring(Some(&ctx_a), s.srq.handle());
    ring(None, s.srq.handle());
    assert_eq!(refused(), before, "its own context's page and the kernel's ring it");
    ring(Some(&ctx_b), s.srq.handle());
    ring(Some(&ctx_a), 0x00ff_fff0);
    assert_eq!(refused(), before + 2, "another context's page, an unknown SRQ: refused and counted");
    // The data path of a user context's SRQ: its posts ring through the context's own page.
    s.exchange(4);
    assert_eq!(refused(), before + 2);
}

#[test]
fn srq_events_reach_only_a_live_srq_and_a_ring_fault_raises_srq_err() {
    use pvrdma_abi::event::EqeType;
    let (dev, sim) = hca::open_sim(SimConfig::default()).expect("probe of the model");
    let s = shared_in(&dev, &dev, 1, 8);
    let dropped = || pv(&dev).stats().dropped_async_events;
    // A ring fault: the SRQ's producer index out of range. The next message finds it, the SRQ
    // reports SRQ_ERR, the QP that was to receive goes to ERR (QP_FATAL), the sender fails.
    let page = s.srq.provider_srq::<hca::srq::Srq>().expect("a pvrdma SRQ").record_page();
    sim.device().mem().store_u32(page.addr() + pvrdma_abi::ring::RX_PROD_TAIL, 0xdead).unwrap();
    send(&s.a[0], &s.mr_a, &payload(0, 0));
    assert_ne!(poll_n(&s.cq_a, 1)[0].status, WcStatus::Success, "no receive WQE could be taken");
    // The QP's entry into ERR also raises LAST_WQE_REACHED (it had an SRQ): all three are taken
    // here, so none arrives after the QP is gone and counts among the dropped below.
    let got = [next_event(&dev, WAIT), next_event(&dev, WAIT), next_event(&dev, WAIT)];
    let (qpn, srq) = (s.b[0].qpn(), s.srq.handle());
    let wants =
        [(AsyncEventType::QpFatal, qpn), (AsyncEventType::SrqErr, srq), (AsyncEventType::QpLastWqeReached, qpn)];
    for want in wants {
        assert!(got.contains(&Some(want)), "{want:?} not in {got:?}");
    }
    // An event for the SRQ's handle once it is gone is dropped and counted, never delivered.
    let handle = s.srq.handle();
    let Shared { a, b, srq, .. } = s;
    drop((a, b));
    srq.destroy(None).expect("destroy");
    let before = dropped();
    sim.device().inject_async_event(EqeType::SrqLimitReached, handle);
    assert_eq!(next_event(&dev, SETTLE), None);
    assert_eq!(dropped(), before + 1);
}
