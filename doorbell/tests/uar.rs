//! The UAR page table, its mappings and revocation, and typed doorbells' ownership.

use doorbell::{
    ArmEncoding, ContextUar, CqArmDoorbell, CqHandle, DoorbellError, Owner, QpHandle, UarError, UarMmio, UarTable,
};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// BAR2 as a log of (offset, value) writes.
#[derive(Default)]
struct Recorder(Mutex<Vec<(u64, u32)>>);

impl UarMmio for Recorder {
    fn uar_write32(&self, offset: u64, value: u32) {
        self.0.lock().unwrap().push((offset, value));
    }
}

impl Recorder {
    fn writes(&self) -> Vec<(u64, u32)> {
        self.0.lock().unwrap().clone()
    }
}

fn table(pages: u32) -> (Arc<Recorder>, UarTable) {
    let rec = Arc::new(Recorder::default());
    (rec.clone(), UarTable::new(rec, 0x100, pages))
}

#[test]
fn arms_and_doorbells_are_encoded_per_device() {
    let (rec, t) = table(4);
    let ctx = t.alloc().unwrap();
    let user = ctx.map(0, 4096).unwrap();
    user.qp_send(&QpHandle::new(9, ctx.owner()).unwrap()).unwrap();
    user.cq_poll(&CqHandle::new(5, ctx.owner()).unwrap()).unwrap();
    assert_eq!(rec.writes(), vec![(4096, 0x4000_0009), (4100, 0x8000_0005)]);
    rec.0.lock().unwrap().clear();
    let ucq = CqHandle::new(5, ctx.owner()).unwrap();
    let ibta = CqArmDoorbell::new(&t, ucq, ArmEncoding::Ibta);
    ibta.arm_next();
    ibta.arm_solicited().unwrap();
    let q = CqArmDoorbell::new(&t, ucq, ArmEncoding::Qemu72);
    q.arm_next();
    assert_eq!(q.arm_solicited(), Err(DoorbellError::Unsupported), "QEMU 7.2 cannot arm for solicited only");
    // The arm doorbell is the kernel page's even after the CQ's context revoked its own page.
    ctx.revoke();
    ibta.arm_next();
    assert_eq!(rec.writes(), vec![(4, 0x4000_0005), (4, 0x2000_0005), (4, 0x6000_0005), (4, 0x4000_0005)]);
    assert_eq!(user.qp_send(&QpHandle::new(9, ctx.owner()).unwrap()), Err(DoorbellError::Revoked));
}

#[test]
fn a_user_page_rings_only_its_own_objects() {
    let (rec, t) = table(4);
    let (a, b) = (t.alloc().unwrap(), t.alloc().unwrap());
    let a_db = a.map(0, 4096).unwrap();
    let b_cq = CqHandle::new(1, b.owner()).unwrap();
    let k_qp = QpHandle::new(2, Owner::Kernel).unwrap();
    assert_eq!(a_db.cq_poll(&b_cq), Err(DoorbellError::NotOwner));
    assert_eq!(a_db.cq_arm_next(&b_cq, ArmEncoding::Ibta), Err(DoorbellError::NotOwner));
    assert_eq!(a_db.qp_send(&k_qp), Err(DoorbellError::NotOwner));
    assert!(rec.writes().is_empty(), "nothing reaches BAR2");
    // The kernel page rings anything: a user CQ's arm, a kernel QP.
    let k = t.kernel_doorbells();
    k.cq_arm_next(&b_cq, ArmEncoding::Ibta).unwrap();
    k.qp_send(&k_qp).unwrap();
    assert_eq!(rec.writes(), vec![(4, 0x4000_0001), (0, 0x4000_0002)]);
    assert_eq!(CqHandle::new(1 << 24, Owner::Kernel), Err(DoorbellError::HandleTooWide(1 << 24)));
}

#[test]
fn only_offset_zero_one_page_maps() {
    let (_, t) = table(4);
    let ctx = t.alloc().unwrap();
    for (offset, len) in [(4096, 4096), (0, 8192), (0, 0), (1, 4096), (0, 4095), (u64::MAX, 4096)] {
        assert_eq!(ctx.map(offset, len).err(), Some(UarError::BadMapping { offset, len }));
    }
    assert_eq!(ctx.map(0, 4096).unwrap().page(), ctx.page());
    ctx.revoke();
    assert_eq!(ctx.map(0, 4096).err(), Some(UarError::Revoked(ctx.page().index())));
}

#[test]
fn a_revoked_mapping_is_inert_and_stays_so_after_the_page_is_reused() {
    let (rec, t) = table(2);
    let ctx = t.alloc().unwrap();
    let page = ctx.page();
    let old = ctx.map(0, 4096).unwrap();
    let old_cq = CqHandle::new(3, ctx.owner()).unwrap();
    old.cq_poll(&old_cq).unwrap();
    drop(ctx);
    assert_eq!(old.cq_poll(&old_cq), Err(DoorbellError::Revoked));
    // The page goes to the next context; the old mapping names its previous owner.
    let next = t.alloc().unwrap();
    assert_eq!(next.page(), page);
    assert_ne!(next.owner(), old_cq.owner());
    assert_eq!(old.cq_poll(&old_cq), Err(DoorbellError::Revoked));
    assert_eq!(rec.writes().len(), 1, "only the write before revocation reached BAR2");
    next.map(0, 4096).unwrap().cq_poll(&CqHandle::new(3, next.owner()).unwrap()).unwrap();
    assert_eq!(rec.writes().len(), 2);
}

/// BAR2 whose writes block until released, to hold a doorbell write in flight.
struct Gate {
    entered: mpsc::Sender<()>,
    open: Mutex<bool>,
    cv: std::sync::Condvar,
    writes: Mutex<Vec<u64>>,
}

impl UarMmio for Gate {
    fn uar_write32(&self, offset: u64, _value: u32) {
        self.entered.send(()).unwrap();
        let open = self.open.lock().unwrap();
        let (open, timeout) = self.cv.wait_timeout_while(open, Duration::from_secs(10), |o| !*o).unwrap();
        assert!(*open && !timeout.timed_out(), "the gate was never opened");
        self.writes.lock().unwrap().push(offset);
    }
}

#[test]
fn a_page_is_reused_only_after_writes_in_flight_through_it_finish() {
    let (tx, rx) = mpsc::channel();
    let gate =
        Arc::new(Gate { entered: tx, open: Mutex::new(false), cv: Default::default(), writes: Default::default() });
    let t = UarTable::new(gate.clone(), 0, 2);
    let ctx = t.alloc().unwrap();
    let db = ctx.map(0, 4096).unwrap();
    let qp = QpHandle::new(1, ctx.owner()).unwrap();
    let writer = std::thread::spawn(move || db.qp_send(&qp));
    rx.recv_timeout(Duration::from_secs(5)).expect("the write entered BAR2");
    drop(ctx); // revoked and released while the write is in flight
    assert_eq!(t.alloc().err(), Some(UarError::Exhausted(1)), "the page waits for the write");
    assert_eq!(t.in_use(), 2);
    *gate.open.lock().unwrap() = true;
    gate.cv.notify_all();
    assert_eq!(writer.join().unwrap(), Ok(()), "a write already in flight completes");
    let again = t.alloc().expect("the last write out returned the page");
    assert_eq!(again.page().index(), 1);
}

#[test]
fn concurrent_writers_and_revocation_never_write_after_revoke_returns() {
    for _ in 0..50 {
        let rec = Arc::new(Recorder::default());
        let t = UarTable::new(rec.clone(), 0, 2);
        let ctx = t.alloc().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let db = ctx.map(0, 4096).unwrap();
                let qp = QpHandle::new(1, ctx.owner()).unwrap();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if db.qp_send(&qp).is_err() {
                            break;
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_micros(200));
        ctx.revoke();
        let at_revoke = rec.writes().len();
        std::thread::sleep(Duration::from_micros(500));
        // A write that had entered before revoke may still land; none may start after.
        assert!(rec.writes().len() <= at_revoke + 2);
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
    }
}

#[test]
fn five_hundred_twelve_contexts_come_and_go() {
    let (_, t) = table(513);
    let ctxs: Vec<ContextUar> = (0..512).map(|_| t.alloc().unwrap()).collect();
    let pages: HashSet<u32> = ctxs.iter().map(|c| c.page().index()).collect();
    assert_eq!(pages.len(), 512);
    assert!(!pages.contains(&0), "page 0 is the kernel's");
    assert_eq!(t.alloc().err(), Some(UarError::Exhausted(512)));
    drop(ctxs);
    assert_eq!(t.in_use(), 1);
    let again: Vec<ContextUar> = (0..512).map(|_| t.alloc().unwrap()).collect();
    assert_eq!(again.len(), 512);
}

/// One step of an allocator workload.
#[derive(Clone, Debug)]
enum Op {
    Alloc,
    Release(usize),
    Revoke(usize),
    Ring(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Revoke),
        2 => any::<usize>().prop_map(Op::Ring),
    ]
}

proptest! {
    /// Any sequence: no page is given to two live contexts, exhaustion is reported exactly when
    /// every user page is live, a revoked context's mapping writes nothing, and releasing
    /// everything leaves only the kernel's page in use.
    #[test]
    fn the_allocator_never_double_allocates_or_leaks(pages in 1u32..9, ops in proptest::collection::vec(op(), 0..200)) {
        let (rec, t) = table(pages);
        let mut live: Vec<(ContextUar, doorbell::Doorbells, bool)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc => match t.alloc() {
                    Ok(c) => {
                        prop_assert!(live.iter().all(|(l, _, _)| l.page() != c.page()), "double allocation");
                        prop_assert_ne!(c.page().index(), 0);
                        let db = c.map(0, 4096).unwrap();
                        live.push((c, db, false));
                    }
                    Err(e) => {
                        prop_assert_eq!(e, UarError::Exhausted(pages - 1));
                        prop_assert_eq!(live.len() as u32, pages - 1, "exhausted with pages free");
                    }
                },
                Op::Release(i) if !live.is_empty() => {
                    live.swap_remove(i % live.len());
                }
                Op::Revoke(i) if !live.is_empty() => {
                    let n = live.len();
                    let (c, _, revoked) = &mut live[i % n];
                    c.revoke();
                    *revoked = true;
                }
                Op::Ring(i) if !live.is_empty() => {
                    let (c, db, revoked) = &live[i % live.len()];
                    let before = rec.writes().len();
                    let r = db.qp_send(&QpHandle::new(7, c.owner()).unwrap());
                    prop_assert_eq!(r.is_ok(), !*revoked);
                    prop_assert_eq!(rec.writes().len(), before + usize::from(!*revoked));
                }
                _ => {}
            }
            prop_assert_eq!(t.in_use() as usize, 1 + live.len());
        }
        live.clear();
        prop_assert_eq!(t.in_use(), 1);
        let all: Vec<_> = (1..pages).map(|_| t.alloc().unwrap()).collect();
        prop_assert_eq!(all.len() as u32, pages - 1);
    }
}

#[test]
fn a_retired_page_never_returns_and_pins_nothing() {
    let (rec, t) = table(3);
    let mut ctx = t.alloc().unwrap();
    let db = ctx.map(0, 4096).unwrap();
    let (page, owner) = (ctx.page(), ctx.owner());
    ctx.retire();
    drop(ctx);
    assert_eq!(db.qp_send(&QpHandle::new(1, owner).unwrap()), Err(DoorbellError::Revoked));
    let other = t.alloc().unwrap();
    assert_ne!(other.page(), page);
    drop(other);
    let again = t.alloc().unwrap();
    assert_ne!(again.page(), page, "the retired page is never handed out again");
    assert_eq!(t.alloc().err(), Some(UarError::Exhausted(2)));
    drop((again, db, t));
    assert_eq!(Arc::strong_count(&rec), 1, "retiring keeps the page, not the table or BAR2");
}

/// BAR2 whose writes panic.
struct Panics;

impl UarMmio for Panics {
    fn uar_write32(&self, _offset: u64, _value: u32) {
        panic!("BAR2 write failed");
    }
}

#[test]
fn a_write_that_panics_still_leaves() {
    let t = UarTable::new(Arc::new(Panics), 0, 2);
    let ctx = t.alloc().unwrap();
    let db = ctx.map(0, 4096).unwrap();
    let qp = QpHandle::new(1, ctx.owner()).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.qp_send(&qp)));
    assert!(r.is_err());
    drop(ctx);
    assert_eq!(t.in_use(), 1, "the panicked write left: the page came back");
    assert!(t.alloc().is_ok());
}

#[test]
fn pages_are_reused_oldest_first_and_owners_never_repeat() {
    let (_, t) = table(4);
    let (a, b, c) = (t.alloc().unwrap(), t.alloc().unwrap(), t.alloc().unwrap());
    let (pa, pb, oa) = (a.page(), b.page(), a.owner());
    drop(a);
    drop(b);
    let (x, y) = (t.alloc().unwrap(), t.alloc().unwrap());
    assert_eq!((x.page(), y.page()), (pa, pb), "first released, first reused");
    assert_ne!(x.owner(), oa, "a reused page is another owner");
    // Two tables (two devices): their contexts are different owners too.
    let (_, t2) = table(4);
    let z = t2.alloc().unwrap();
    assert_eq!(z.page().index(), c.page().index() - 2);
    assert!(![x.owner(), y.owner(), c.owner()].contains(&z.owner()));
    let foreign = CqHandle::new(1, z.owner()).unwrap();
    assert_eq!(x.map(0, 4096).unwrap().cq_poll(&foreign), Err(DoorbellError::NotOwner));
}

#[test]
fn sizes_from_a_faulty_platform_are_clamped() {
    let rec: Arc<dyn UarMmio> = Arc::new(Recorder::default());
    let huge = UarTable::new(rec.clone(), 0, u32::MAX);
    assert_eq!(huge.pages(), doorbell::MAX_UAR_PAGES);
    assert_eq!(huge.in_use(), 1, "nothing is built for pages never used");
    let top = UarTable::new(rec.clone(), u64::MAX, 8);
    assert_eq!(top.pages(), 1, "no page frame past u64::MAX");
    assert_eq!(top.alloc().err(), Some(UarError::Exhausted(0)));
    let edge = UarTable::new(rec, u64::MAX - 2, 8);
    assert_eq!(edge.pages(), 3);
    assert_eq!(edge.alloc().unwrap().page().pfn(), u64::MAX - 1);
}

#[test]
fn a_mapping_left_behind_does_not_keep_bar2() {
    let (rec, t) = table(2);
    let ctx = t.alloc().unwrap();
    let db = ctx.map(0, 4096).unwrap();
    let qp = QpHandle::new(1, ctx.owner()).unwrap();
    db.qp_send(&qp).unwrap();
    drop(ctx);
    drop(t);
    assert_eq!(Arc::strong_count(&rec), 1, "the device behind BAR2 can go");
    assert_eq!(db.qp_send(&qp), Err(DoorbellError::Revoked));
    // A live mapping whose table went (the device was released) rings nothing either.
    let (rec, t) = table(2);
    let ctx = t.alloc().unwrap();
    let db = ctx.map(0, 4096).unwrap();
    let qp = QpHandle::new(1, ctx.owner()).unwrap();
    drop(t);
    drop(rec);
    assert_eq!(db.qp_send(&qp), Err(DoorbellError::Revoked));
    drop(ctx);
}
