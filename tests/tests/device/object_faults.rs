//! A device that breaks one of its objects, or says what it should not of one: the object stays
//! broken at once for every thread (every verb on it fails the moment the provider knows, not
//! once its report reaches the core), what a query answers is checked against the device's caps,
//! and a report the device writes for an object after its destroy never reaches the object that
//! takes its handle next. The device itself lives on. (Issue 21 §4; each test failed before its
//! fix.)

use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use ib_core::{
    access, AsyncEventType, Error, NotifyFlags, NotifyKind, NotifyStatus, RecvWr, Sge, SrqAttr, SrqInitAttr, Wc,
};
use pvrdma_abi::cmd::opcode;
use pvrdma_abi::event::EqeType;
use pvrdma_abi::regs::REG_REQUEST;
use pvrdma_abi::ring::{RX_CONS_HEAD, RX_PROD_TAIL, TX_CONS_HEAD};
use std::sync::{Arc, Mutex};
use tests::fixture::*;
use tests::intercept::{Hooks, Intercept};

/// An index no ring of any size can hold (indices wrap at twice the ring's size).
const BAD_INDEX: u32 = 0xdead_beef;

/// The async events the device's handler saw, as (type, object handle).
type Seen = Arc<Mutex<Vec<(AsyncEventType, Option<u32>)>>>;

fn watch(dev: &ib_core::Device) -> Seen {
    let seen = Seen::default();
    let sink = seen.clone();
    dev.set_async_event_handler(move |e| sink.lock().map(|mut v| v.push(ev(e))).unwrap_or(()));
    seen
}

fn wait_seen(seen: &Seen, want: (AsyncEventType, Option<u32>)) {
    tests::events::wait_for(WAIT, "the async event", || seen.lock().unwrap().contains(&want));
}

/// Found by the fresh-user trial: after `poll` reported a CQ unusable, `req_notify` answered
/// success until the provider's report reached the core on a thread of its own (200 ms later
/// it answered `DeviceFatal`).
#[test]
fn a_cq_whose_ring_the_device_broke_fails_every_verb_at_once() {
    let (dev, sim) = hca::open_sim(Default::default()).expect("probe");
    let seen = watch(&dev);
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    let page = cq.provider_cq::<hca::cq::Cq>().expect("a pvrdma CQ").record_page();
    sim.device().mem().store_u32(page.addr() + RX_PROD_TAIL, BAD_INDEX).unwrap();
    assert_eq!(cq.poll(&mut [Wc::default(); 4]), Err(Error::DeviceFatal));
    // At once, on this thread and on another.
    assert_eq!(cq.req_notify(NotifyFlags::NEXT_COMPLETION), Err(Error::DeviceFatal));
    let other = std::thread::scope(|s| s.spawn(|| cq.req_notify(NotifyFlags::SOLICITED)).join().unwrap());
    assert_eq!(other, Err(Error::DeviceFatal), "another thread");
    let req = cq.notify(NotifyKind::Next, false).unwrap();
    assert_eq!(req.status(), Some(NotifyStatus::Failure), "a notify request completes with the fault at once");
    assert_eq!(cq.poll(&mut [Wc::default(); 4]), Err(Error::DeviceFatal), "and stays broken");
    wait_seen(&seen, (AsyncEventType::CqErr, Some(cq.handle())));
    // The device lives on.
    let cq2 = dev.create_cq(8, None).unwrap();
    assert_eq!(cq2.req_notify(NotifyFlags::NEXT_COMPLETION), Ok(false));
    assert_eq!(cq2.poll(&mut [Wc::default(); 4]), Ok(0));
    assert!(!dev.is_fatal());
}

/// The same fault found by the arm's look at the ring (`REPORT_MISSED_EVENTS`) rather than by a
/// poll: the next verb fails at once.
#[test]
fn a_cq_fault_found_by_the_arm_fails_the_next_verb() {
    let (dev, sim) = hca::open_sim(Default::default()).expect("probe");
    let cq = dev.create_cq(8, None).unwrap();
    let page = cq.provider_cq::<hca::cq::Cq>().expect("a pvrdma CQ").record_page();
    sim.device().mem().store_u32(page.addr() + RX_PROD_TAIL, BAD_INDEX).unwrap();
    let flags = NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS;
    assert_eq!(cq.req_notify(flags), Ok(true), "a bad index counts as CQEs to poll");
    assert_eq!(cq.req_notify(NotifyFlags::NEXT_COMPLETION), Err(Error::DeviceFatal));
    assert_eq!(cq.poll(&mut [Wc::default(); 1]), Err(Error::DeviceFatal));
}

/// A QP whose SQ consumer index the device wrote out of range: the post that found it fails,
/// and so does every later verb on the QP even after the device writes a good index back
/// (before the fix each post read the index again and went on); QP_FATAL reaches the consumer
/// once; the QP's destroy and the device's other objects work.
#[test]
fn a_qp_whose_ring_the_device_broke_stays_broken() {
    let (dev, sim) = hca::open_sim(Default::default()).expect("probe");
    let seen = watch(&dev);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    let page = p.a.provider_qp::<hca::qp::Qp>().expect("a pvrdma QP").record_page();
    let mem = sim.device().mem();
    mem.store_u32(page.addr() + TX_CONS_HEAD, BAD_INDEX).unwrap();
    let sge = [Sge { addr: p.mr_a.addr(), length: 8, lkey: p.mr_a.lkey() }];
    let send =
        ib_core::SendWr { wr_id: 1, sg_list: &sge, opcode: ib_core::WrOpcode::Send, signaled: true, solicited: false };
    assert_eq!(p.a.post_send(&send), Err(Error::DeviceFatal));
    mem.store_u32(page.addr() + TX_CONS_HEAD, 0).unwrap();
    assert_eq!(p.a.post_send(&send), Err(Error::DeviceFatal), "stays broken");
    let recv = RecvWr { wr_id: 2, sg_list: &sge };
    assert_eq!(p.a.post_recv(&recv), Err(Error::DeviceFatal));
    assert_eq!(p.a.query_qp(ib_core::QpAttrMask::STATE).map(|a| a.qp_state), Err(Error::DeviceFatal));
    assert_eq!(p.a.modify_to_err(), Err(Error::DeviceFatal));
    wait_seen(&seen, (AsyncEventType::QpFatal, Some(p.a.qpn())));
    std::thread::sleep(SETTLE);
    let fatal = seen.lock().unwrap().iter().filter(|e| e.0 == AsyncEventType::QpFatal).count();
    assert_eq!(fatal, 1, "told once");
    // The other QP still carries traffic; the device is not fatal.
    p.b.post_recv(&RecvWr { wr_id: 3, sg_list: &[Sge { addr: p.mr_b.addr(), length: 8, lkey: p.mr_b.lkey() }] })
        .unwrap();
    assert!(!dev.is_fatal());
}

/// As for a QP, an SRQ whose consumer index the device wrote out of range stays broken, and
/// SRQ_ERR reaches the consumer.
#[test]
fn an_srq_whose_ring_the_device_broke_stays_broken() {
    let (dev, sim) = hca::open_sim(Default::default()).expect("probe");
    let seen = watch(&dev);
    let pd = dev.alloc_pd().unwrap();
    let srq =
        pd.create_srq(&SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 }).unwrap();
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let page = srq.provider_srq::<hca::srq::Srq>().expect("a pvrdma SRQ").record_page();
    let mem = sim.device().mem();
    mem.store_u32(page.addr() + RX_CONS_HEAD, BAD_INDEX).unwrap();
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    let recv = RecvWr { wr_id: 1, sg_list: &sge };
    assert_eq!(srq.post_recv(&recv), Err(Error::DeviceFatal));
    mem.store_u32(page.addr() + RX_CONS_HEAD, 0).unwrap();
    assert_eq!(srq.post_recv(&recv), Err(Error::DeviceFatal), "stays broken");
    assert_eq!(srq.query(), Err(Error::DeviceFatal));
    wait_seen(&seen, (AsyncEventType::SrqErr, Some(srq.handle())));
    assert!(!dev.is_fatal());
}

/// Found by the breaker: QUERY_SRQ's `max_wr` of 0 or 2^32-1, `max_sge` above the caps and a
/// limit above `max_wr` all reached the consumer. Each is refused (`BadResponse`); an answer
/// within the caps is the device's.
#[test]
fn query_srq_answers_beyond_the_caps_are_refused() {
    use tests::rewrite::Rewrite;
    // QUERY_SRQ's response: the header, then `max_wr`, `max_sge`, `srq_limit`.
    let cases: [(u64, u32, bool); 6] =
        [(16, 0, false), (16, u32::MAX, false), (20, 1 << 20, false), (24, 5, false), (24, 3, true), (20, 1, true)];
    for (offset, value, ok) in cases {
        let plat = Arc::new(Rewrite::new(opcode::QUERY_SRQ, offset, move |_| value));
        let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
        let dev = hca::probe(plat.clone(), opts).expect("probe");
        let pd = dev.alloc_pd().unwrap();
        let srq = pd
            .create_srq(&SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 })
            .unwrap();
        let got = srq.query();
        if ok {
            assert!(got.is_ok(), "word {offset} = {value}: {got:?}");
        } else {
            assert!(matches!(got, Err(Error::BadResponse(_))), "word {offset} = {value}: {got:?}");
        }
    }
}

/// The model numbered lowest-free (as QEMU 7.2: a destroyed object's handle comes straight
/// back), writing a late report for the destroyed object — `event` for the handle the last
/// destroy freed — just before it runs the next CREATE of that kind.
struct LateReport {
    numbering: tests::lowest_free::LowestFree,
    /// (the CREATE opcode it precedes, the event) once armed.
    armed: Mutex<Option<(u32, EqeType, u32)>>,
}

impl Hooks for LateReport {
    fn reg_write(&self, sim: &SimPlatform, offset: u32, value: u32) {
        if offset == REG_REQUEST {
            let d = sim.device();
            let op = d.mem().load_u32(tests::rewrite::dsr(d).cmd_slot_dma.get() + 8).unwrap_or(0);
            let mut armed = self.armed.lock().unwrap();
            if let Some((create, event, handle)) = *armed {
                if op == create {
                    d.inject_async_event(event, handle);
                    *armed = None;
                }
            }
        }
        self.numbering.reg_write(sim, offset, value);
    }
}

/// Found by the breaker: a CQ_ERR the device wrote for a CQ after its destroy marked the next
/// CQ that got the same handle overrun. The same holds for a QP's events. The report is
/// written before the new object's CREATE is answered, and resolved while the creating thread
/// holds the object lock, after the new object registered: before the fix it reached it.
#[test]
fn a_report_for_a_destroyed_object_never_reaches_the_next_holder_of_its_handle() {
    let plat = Arc::new(Intercept {
        sim: SimPlatform::new(pvrdma_sim::SimConfig::default()),
        hooks: LateReport { numbering: Default::default(), armed: Mutex::new(None) },
    });
    // No arm self-test: its CQ would take the model's first handle.
    let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
    let dev = hca::probe(plat.clone() as Arc<dyn Platform>, opts).expect("probe");
    let seen = watch(&dev);
    // Created first, its handle is the model's own: the QPs below name it in CREATE_QP, which
    // the numbering does not translate.
    let keep = dev.create_cq(8, None).unwrap();
    let old = dev.create_cq(8, None).unwrap();
    let h = old.handle();
    drop(old);
    *plat.hooks.armed.lock().unwrap() = Some((opcode::CREATE_CQ, EqeType::CqErr, h));
    let cq = dev.create_cq(8, None).unwrap();
    assert_eq!(cq.handle(), h, "the handle came back");
    std::thread::sleep(SETTLE);
    assert_eq!(cq.poll(&mut [Wc::default(); 2]), Ok(0), "not overrun");
    assert_eq!(cq.req_notify(NotifyFlags::NEXT_COMPLETION), Ok(false));
    // A QP's handle, likewise.
    let pd = dev.alloc_pd().unwrap();
    let old = rc_qp(&pd, &keep, &keep);
    let qpn = old.qpn();
    drop(old);
    *plat.hooks.armed.lock().unwrap() = Some((opcode::CREATE_QP, EqeType::QpFatal, qpn));
    let qp = rc_qp(&pd, &keep, &keep);
    assert_eq!(qp.qpn(), qpn, "the QPN came back");
    std::thread::sleep(SETTLE);
    let got = seen.lock().unwrap().clone();
    assert!(got.is_empty(), "no event reached the new objects: {got:?}");
    assert!(!dev.is_fatal());
}
