//! The upcall dispatcher (DAT/kDAPL): DISABLE / SINGLE_INSTANCE / MANY_INSTANCE, "enable, then
//! poll once more", destroying a CQ from inside its own upcall, and policy changes racing with
//! completions.

use ib_core::{Cq, Error, NotifyStatus, UpcallPolicy};
use pvrdma_sim::{ArmState, SimConfig, SimDevice};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tests::events::{cqe, drain, wait_for};
use tests::fixture::*;

/// What an upcall saw: its status and the wr_ids it polled.
type Report = (NotifyStatus, Vec<u64>);

/// An upcall that drains the CQ and reports what it saw on a channel.
fn reporting_upcall() -> (impl FnMut(&Cq, NotifyStatus) + Send + 'static, mpsc::Receiver<Report>) {
    let (tx, rx) = mpsc::channel();
    (move |cq: &Cq, st| drop(tx.send((st, drain(cq)))), rx)
}

fn no_upcall(rx: &mpsc::Receiver<Report>) {
    assert_eq!(rx.recv_timeout(SETTLE).ok(), None, "unexpected upcall");
}

fn arm_of(d: &SimDevice, cq: &Cq) -> ArmState {
    d.cq_status(cq.handle()).unwrap().arm
}

#[test]
fn many_instance_upcall_per_event_rearmed_by_the_driver() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let (f, rx) = reporting_upcall();
    cq.set_upcall(UpcallPolicy::ManyInstance, f).unwrap();
    assert_eq!(arm_of(d, &cq), ArmState::Next);
    for i in 0..5 {
        assert!(d.post_cqe(cq.handle(), &cqe(i), false));
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), (NotifyStatus::Success, vec![i]));
        wait_for(WAIT, "the driver's re-arm", || arm_of(d, &cq) == ArmState::Next);
    }
    assert_eq!(cq.upcall_policy(), Some(UpcallPolicy::ManyInstance));
}

#[test]
fn single_instance_one_upcall_then_disabled_until_enabled_again() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let (f, rx) = reporting_upcall();
    cq.set_upcall(UpcallPolicy::SingleInstance, f).unwrap();
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), (NotifyStatus::Success, vec![1]));
    assert_eq!(cq.upcall_policy(), Some(UpcallPolicy::Disable), "spent");
    assert!(d.post_cqe(cq.handle(), &cqe(2), false));
    no_upcall(&rx);
    assert_eq!(arm_of(d, &cq), ArmState::Disarmed);
    // Enable, then poll once more: the CQE that came while disabled gives no upcall; the poll
    // finds it.
    cq.modify_upcall(UpcallPolicy::SingleInstance).unwrap();
    assert_eq!(drain(&cq), vec![2]);
    no_upcall(&rx);
    assert!(d.post_cqe(cq.handle(), &cqe(3), false));
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), (NotifyStatus::Success, vec![3]));
}

#[test]
fn enabling_with_cqes_queued_gives_no_upcall_the_poll_after_finds_them() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let (f, rx) = reporting_upcall();
    cq.set_upcall(UpcallPolicy::Disable, f).unwrap();
    assert_eq!(arm_of(d, &cq), ArmState::Disarmed, "DISABLE does not arm");
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    cq.modify_upcall(UpcallPolicy::ManyInstance).unwrap();
    no_upcall(&rx);
    assert_eq!(drain(&cq), vec![1], "enable, then poll once more");
    assert!(d.post_cqe(cq.handle(), &cqe(2), false));
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), (NotifyStatus::Success, vec![2]));
    // Disabling drops nothing queued: the consumer polls itself.
    cq.modify_upcall(UpcallPolicy::Disable).unwrap();
    assert!(d.post_cqe(cq.handle(), &cqe(3), false));
    no_upcall(&rx);
    assert_eq!(drain(&cq), vec![3]);
}

#[test]
fn a_slow_upcall_does_not_stall_another_cqs_events() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let (slow, fast) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let g = gate.clone();
    slow.set_upcall(UpcallPolicy::ManyInstance, move |_, _| drop(g.lock())).unwrap();
    let (f, rx) = reporting_upcall();
    fast.set_upcall(UpcallPolicy::ManyInstance, f).unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let other = dev.create_cq(16, Some(&ch)).unwrap();
    other.req_notify(ib_core::NotifyFlags::NEXT_COMPLETION).unwrap();
    assert!(d.post_cqe(slow.handle(), &cqe(1), false)); // its upcall blocks on the gate
    std::thread::sleep(Duration::from_millis(20));
    assert!(d.post_cqe(fast.handle(), &cqe(2), false));
    assert!(d.post_cqe(other.handle(), &cqe(3), false));
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), (NotifyStatus::Success, vec![2]));
    assert_eq!(ch.get_cq_event(WAIT).map(|c| c.handle()), Ok(other.handle()));
    other.ack_events(1);
    drop(held);
}

#[test]
fn destroying_a_cq_from_inside_its_own_upcall_is_an_error() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let handle = cq.handle();
    let slot: Arc<Mutex<Option<Cq>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let s = slot.clone();
    cq.set_upcall(UpcallPolicy::ManyInstance, move |view, _| {
        let owned = s.lock().unwrap().take();
        if let Some(cq) = owned {
            match cq.destroy(Some(Duration::from_secs(1))) {
                Ok(()) => drop(tx.send(Ok(()))),
                Err((cq, e)) => {
                    // Back in the slot before the test thread hears of it and takes it.
                    *s.lock().unwrap() = Some(cq);
                    let _ = tx.send(Err(e));
                }
            }
        }
        let _ = view.modify_upcall(UpcallPolicy::ManyInstance); // allowed in here
    })
    .unwrap();
    *slot.lock().unwrap() = Some(cq);
    assert!(d.post_cqe(handle, &cqe(1), false));
    let got = rx.recv_timeout(WAIT).expect("the upcall deadlocked");
    assert!(matches!(got, Err(Error::WouldDeadlock(_))), "{got:?}");
    // The CQ is intact: destroyed from outside it goes.
    let cq = slot.lock().unwrap().take().unwrap();
    cq.destroy(None).unwrap();
    wait_for(WAIT, "DESTROY_CQ", || d.cq_status(handle).is_none());
}

#[test]
fn dropping_a_cq_inside_its_own_upcall_destroys_it_after_the_upcall() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let handle = cq.handle();
    let slot: Arc<Mutex<Option<Cq>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let s = slot.clone();
    cq.set_upcall(UpcallPolicy::ManyInstance, move |_, _| {
        drop(s.lock().unwrap().take());
        let _ = tx.send(());
    })
    .unwrap();
    *slot.lock().unwrap() = Some(cq);
    assert!(d.post_cqe(handle, &cqe(1), false));
    rx.recv_timeout(WAIT).expect("the upcall deadlocked");
    wait_for(WAIT, "DESTROY_CQ after the upcall returned", || d.cq_status(handle).is_none());
}

#[test]
fn a_panicking_upcall_is_contained() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let cq = dev.create_cq(16, None).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    cq.set_upcall(UpcallPolicy::ManyInstance, move |cq, _| {
        drain(cq);
        if c.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("consumer bug in an upcall");
        }
    })
    .unwrap();
    assert!(d.post_cqe(cq.handle(), &cqe(1), false));
    wait_for(WAIT, "the first upcall", || calls.load(Ordering::SeqCst) == 1);
    wait_for(WAIT, "the re-arm", || arm_of(d, &cq) == ArmState::Next);
    assert!(d.post_cqe(cq.handle(), &cqe(2), false));
    wait_for(WAIT, "the second upcall", || calls.load(Ordering::SeqCst) == 2);
}

/// The kDAPL race: a device thread posts completions while the consumer keeps changing the
/// policy on another thread (each change followed by one more poll, as documented, then a pause
/// in which only upcalls consume). Every completion is consumed exactly once, by an upcall or by
/// the consumer; the last batch, posted after a final enable, by upcalls alone.
#[test]
fn policy_changes_while_completions_arrive_never_lose_one() {
    const N: u64 = 20_000;
    const LAST: u64 = 2_000;
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device().clone();
    let cq = Arc::new(dev.create_cq(256, None).unwrap());
    let seen: Arc<Vec<AtomicU64>> = Arc::new((0..N).map(|_| AtomicU64::new(0)).collect());
    let consumed = Arc::new(AtomicU64::new(0));
    let record = {
        let (seen, consumed) = (seen.clone(), consumed.clone());
        move |ids: Vec<u64>| {
            for id in ids {
                assert_eq!(seen[id as usize].fetch_add(1, Ordering::SeqCst), 0, "wr_id {id} twice");
                consumed.fetch_add(1, Ordering::SeqCst);
            }
        }
    };
    let r = record.clone();
    cq.set_upcall(UpcallPolicy::Disable, move |cq, _| r(drain(cq))).unwrap();
    let (go_last, last) = mpsc::channel::<()>();
    // Policy changes made so far: the device waits for one per 400 completions, so the changes
    // race the completions however fast the upcalls consume them.
    let changes = Arc::new(AtomicU64::new(0));
    let device = {
        let (cq_h, consumed, changes) = (cq.handle(), consumed.clone(), changes.clone());
        std::thread::spawn(move || {
            for i in 0..N {
                if i == N - LAST {
                    last.recv().unwrap();
                }
                let paced = Instant::now();
                while i < N - LAST && changes.load(Ordering::SeqCst) < i / 400 && paced.elapsed() < WAIT {
                    std::thread::yield_now();
                }
                // Stay within the CQ: an overflow is a different test.
                while i - consumed.load(Ordering::SeqCst) >= 200 {
                    std::thread::yield_now();
                }
                assert!(d.post_cqe(cq_h, &cqe(i), false));
            }
        })
    };
    let policies = [UpcallPolicy::ManyInstance, UpcallPolicy::Disable, UpcallPolicy::SingleInstance];
    let mut k = 0usize;
    while consumed.load(Ordering::SeqCst) < N - LAST {
        cq.modify_upcall(policies[k % 3]).unwrap();
        record(drain(&cq)); // change, then poll once more
        k += 1;
        changes.store(k as u64, Ordering::SeqCst);
        std::thread::sleep(Duration::from_micros(20 * (k as u64 % 4)));
    }
    cq.modify_upcall(UpcallPolicy::ManyInstance).unwrap();
    record(drain(&cq));
    go_last.send(()).unwrap();
    wait_for(Duration::from_secs(20), "every completion", || consumed.load(Ordering::SeqCst) == N);
    device.join().unwrap();
    assert!(seen.iter().all(|s| s.load(Ordering::SeqCst) == 1));
    assert!(k > 20, "the policy changed only {k} times");
}
