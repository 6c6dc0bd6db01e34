//! Storms over the paths without hand-offs (delivery by the doorbell's thread at link latency 0,
//! the CQ-vector handler on the raising thread, events delivered after the CQ-notification fence,
//! channel waits on a condvar): RNR parking and the device's wire budget with several pairs at
//! once, receivers destroyed or moved to ERR with packets parked, commands racing events, and a
//! CQ dropped in its own upcall while a consumer sleeps on its channel.

use ib_core::{access, Cq, NotifyFlags, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode};
use pvrdma_sim::SimConfig;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tests::fixture::*;

struct Side {
    qp: Qp,
    cq: Cq,
    mr: ib_core::Mr,
}

fn side(dev: &ib_core::Device, pd: &ib_core::Pd, ch: Option<&ib_core::CompChannel>, depth: u32) -> Side {
    let cq = dev.create_cq(64, ch).unwrap();
    let cap = QpCap { max_send_wr: depth, max_recv_wr: depth, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let qp = pd.create_qp(&attr).unwrap();
    let mr = pd.alloc_mr(1 << 16, access::LOCAL_WRITE).unwrap();
    Side { qp, cq, mr }
}

impl Side {
    fn recv(&self, slot: u64) {
        let sge = [Sge { addr: self.mr.addr() + 4096 + 8 * (slot % 512), length: 8, lkey: self.mr.lkey() }];
        self.qp.post_recv(&RecvWr { wr_id: slot, sg_list: &sge }).unwrap();
    }
    fn send(&self, seq: u64, signaled: bool) {
        let off = (seq % 512) * 8;
        self.mr.write(off as usize, &seq.to_le_bytes()).unwrap();
        let sge = [Sge { addr: self.mr.addr() + off, length: 8, lkey: self.mr.lkey() }];
        let wr = SendWr { wr_id: seq, sg_list: &sge, opcode: WrOpcode::Send, signaled, solicited: false };
        self.qp.post_send(&wr).unwrap();
    }
    fn read_slot(&self, slot: u64) -> u64 {
        let mut b = [0u8; 8];
        self.mr.read((4096 + 8 * (slot % 512)) as usize, &mut b).unwrap();
        u64::from_le_bytes(b)
    }
}

fn connect_pair(dev: &ib_core::Device, a: &Side, b: &Side) {
    connect(&a.qp, b.qp.qpn(), gid(dev));
    connect(&b.qp, a.qp.qpn(), gid(dev));
}

/// [`connect_pair`], but `a` gives up on an unanswered request after 10 ms
/// ([`connect_impatient`]).
fn connect_pair_impatient(dev: &ib_core::Device, a: &Side, b: &Side) {
    connect_impatient(&a.qp, b.qp.qpn(), gid(dev));
    connect(&b.qp, a.qp.qpn(), gid(dev));
}

/// Senders blast (signaled every message) into receivers that post their receive WQEs one at a
/// time, late, so packets park (RNR) and RECV doorbells kick them, while the device-wide wire
/// budget is tiny (QPs starve and are resumed). The receiver sleeps on a completion channel
/// (arm, poll once more). Every message must arrive once and in order, and every send complete.
fn rnr_budget_storm(cfg: SimConfig, pairs: usize, msgs: u64) {
    let (dev, _sim) = hca::open_sim(cfg).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mut ps = Vec::new();
    for _ in 0..pairs {
        let ch = dev.create_comp_channel().unwrap();
        let a = side(&dev, &pd, None, 16);
        let b = side(&dev, &pd, Some(&ch), 16);
        connect_pair(&dev, &a, &b);
        ps.push((a, b, ch));
    }
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        for (a, b, ch) in &ps {
            let failed = &failed;
            // Sender: keeps at most 16 outstanding, polls its CQ for send completions in order.
            s.spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut next_done = 0u64;
                let mut sent = 0u64;
                let mut wc = [Wc::default(); 16];
                while next_done < msgs {
                    while sent < msgs && sent - next_done < 16 {
                        a.send(sent, true);
                        sent += 1;
                    }
                    let n = a.cq.poll(&mut wc).unwrap();
                    for w in &wc[..n] {
                        assert_eq!(w.status, WcStatus::Success, "send {} failed", w.wr_id);
                        assert_eq!(w.wr_id, next_done, "send completions in order");
                        next_done += 1;
                    }
                    if n == 0 {
                        if Instant::now() > deadline || failed.load(Ordering::Relaxed) {
                            failed.store(true, Ordering::Relaxed);
                            panic!("sender stuck: {next_done}/{msgs} completed, {sent} sent");
                        }
                        std::thread::yield_now();
                    }
                }
            });
            // Receiver: one receive WQE at a time, event-driven.
            s.spawn(move || {
                let mut wc = [Wc::default(); 16];
                let mut got = 0u64;
                b.recv(0);
                while got < msgs {
                    b.cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
                    let mut n = b.cq.poll(&mut wc).unwrap();
                    if n == 0 {
                        match ch.get_cq_event(Duration::from_secs(10)) {
                            Ok(ev) => ev.ack_events(1),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                panic!("receiver: no event after {got}/{msgs}: {e:?}");
                            }
                        }
                        n = b.cq.poll(&mut wc).unwrap();
                    }
                    for w in &wc[..n] {
                        assert_eq!(w.status, WcStatus::Success);
                        assert_eq!(w.wr_id, got);
                        assert_eq!(b.read_slot(got), got, "message {got} in order");
                        got += 1;
                        if got < msgs {
                            b.recv(got);
                        }
                    }
                }
            });
        }
    });
    assert!(!failed.load(Ordering::Relaxed));
}

#[test]
fn rnr_and_wire_budget_storm_at_latency_0() {
    let cfg = SimConfig { device_packets_in_flight: 2, ..Default::default() };
    rnr_budget_storm(cfg, 3, 3000);
}

#[test]
fn rnr_storm_at_latency_0_default_budget() {
    rnr_budget_storm(SimConfig::default(), 3, 3000);
}

#[test]
fn rnr_and_wire_budget_storm_qemu72() {
    let cfg = SimConfig { device_packets_in_flight: 3, profile: pvrdma_sim::Profile::Qemu72, ..Default::default() };
    rnr_budget_storm(cfg, 3, 2000);
}

/// B never posts receives: A's packets park on the wire, filling the device budget, so C's sends
/// to D starve. `release` (a command on B) leaves A's parked packets unanswered: once A's one
/// local ACK timeout runs out (its port thread's timer) the first fails RETRY_EXC_ERR and the
/// rest flush, which frees the budget and resumes C (issue 21 §3: as on the RoCE port, a
/// responder gone costs the requester its timeout, not an immediate failure). Every completion
/// must arrive, bounded, with an event on C's channel.
fn parked_receiver_released_by(release: impl Fn(Side)) {
    for _ in 0..50 {
        let cfg = SimConfig { device_packets_in_flight: 4, ..Default::default() };
        let (dev, _sim) = hca::open_sim(cfg).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let ch = dev.create_comp_channel().unwrap();
        let (a, b) = (side(&dev, &pd, None, 16), side(&dev, &pd, None, 16));
        let (c, d) = (side(&dev, &pd, Some(&ch), 16), side(&dev, &pd, None, 16));
        connect_pair_impatient(&dev, &a, &b);
        connect_pair(&dev, &c, &d);
        for i in 0..4 {
            a.send(i, true);
        }
        for i in 0..8 {
            d.recv(i);
        }
        c.cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        for i in 0..8 {
            c.send(i, true);
        }
        let mut wc = [Wc::default(); 16];
        assert_eq!(c.cq.poll(&mut wc).unwrap(), 0, "C starved behind B's parked packets");
        release(b);
        let ev = ch.get_cq_event(Duration::from_secs(5)).expect("C's completion event");
        ev.ack_events(1);
        let wa = poll_n(&a.cq, 4);
        assert!(
            wa[0].status == WcStatus::RetryExcErr
                && wa.iter().all(|w| matches!(w.status, WcStatus::RetryExcErr | WcStatus::WrFlushErr)),
            "{wa:?}"
        );
        let wcs = poll_n(&c.cq, 8);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        let wd = poll_n(&d.cq, 8);
        assert!(wd.iter().all(|w| w.status == WcStatus::Success), "{wd:?}");
    }
}

#[test]
fn modify_to_err_of_a_parked_receiver_releases_the_budget_and_starved_senders_resume() {
    parked_receiver_released_by(|b| b.qp.modify_to_err().unwrap());
}

#[test]
fn destroy_of_a_parked_receiver_releases_the_budget_and_starved_senders_resume() {
    parked_receiver_released_by(|b| {
        let Side { qp, cq, mr } = b;
        qp.destroy(None).map_err(|(_, e)| e).unwrap();
        drop((cq, mr));
    });
}

/// Churn: traffic with events (channel + MANY_INSTANCE upcall + notify requests) while another
/// thread moves QPs to ERR and destroys them (commands whose effects publish flush CQEs and fire
/// arms, so the vector-2 handler runs on the command's thread). Nothing may hang.
#[test]
fn churn_commands_and_events_without_deadlock() {
    use ib_core::{NotifyKind, UpcallPolicy};
    let (dev, _sim) = hca::open_sim(SimConfig::default()).unwrap();
    let dev = Arc::new(dev);
    let t0 = Instant::now();
    for round in 0..60 {
        let pd = dev.alloc_pd().unwrap();
        let ch = dev.create_comp_channel().unwrap();
        let a = side(&dev, &pd, Some(&ch), 16);
        let b = side(&dev, &pd, None, 16);
        connect_pair(&dev, &a, &b);
        let upcalls = Arc::new(AtomicU64::new(0));
        {
            let u = upcalls.clone();
            b.cq.set_upcall(UpcallPolicy::ManyInstance, move |cq, _| {
                let mut wc = [Wc::default(); 16];
                while let Ok(n @ 1..) = cq.poll(&mut wc) {
                    u.fetch_add(n as u64, Ordering::Relaxed);
                }
            })
            .unwrap();
        }
        for i in 0..16 {
            b.recv(i);
        }
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut seq = 0u64;
                let mut wc = [Wc::default(); 16];
                while !stop.load(Ordering::Relaxed) {
                    if a.qp
                        .post_send(&SendWr {
                            wr_id: seq,
                            sg_list: &[Sge { addr: a.mr.addr(), length: 8, lkey: a.mr.lkey() }],
                            opcode: WrOpcode::Send,
                            signaled: true,
                            solicited: matches!(seq % 3, 0),
                        })
                        .is_err()
                    {
                        std::thread::yield_now();
                    }
                    seq += 1;
                    let _ = a.cq.poll(&mut wc);
                    let _ = a.cq.req_notify(NotifyFlags::NEXT_COMPLETION);
                    if let Some(ev) = ch.try_get_cq_event() {
                        ev.ack_events(1);
                    }
                }
            });
            s.spawn(|| {
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let r = b.cq.notify(NotifyKind::Next, true).unwrap();
                    let _ = r.wait(Duration::from_millis(20));
                    let _ = b.qp.post_recv(&RecvWr {
                        wr_id: k,
                        sg_list: &[Sge { addr: b.mr.addr() + 4096, length: 64, lkey: b.mr.lkey() }],
                    });
                    k += 1;
                }
            });
            std::thread::sleep(Duration::from_millis(5 + (round % 7)));
            if round % 2 == 0 {
                b.qp.modify_to_err().unwrap();
            } else {
                a.qp.modify_to_err().unwrap();
            }
            std::thread::sleep(Duration::from_millis(3));
            stop.store(true, Ordering::Relaxed);
        });
        let Side { qp, cq, mr } = b;
        qp.destroy(Some(Duration::from_secs(2))).map_err(|(_, e)| e).unwrap();
        drop(mr);
        cq.destroy(Some(Duration::from_secs(2))).map_err(|(_, e)| e).unwrap();
        let Side { qp, cq, mr } = a;
        qp.destroy(Some(Duration::from_secs(2))).map_err(|(_, e)| e).unwrap();
        drop(mr);
        while let Some(ev) = ch.try_get_cq_event() {
            ev.ack_events(1);
        }
        cq.destroy(Some(Duration::from_secs(2))).map_err(|(_, e)| e).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(120), "too slow: round {round}");
    }
}

/// The whole stack: CQ X is dropped from inside its own upcall (which does not wait for
/// deliveries in flight) right after a drain spent X's channel arm, while the drain still holds
/// X's delivery (it delivers the arms it spent in ring order, after the fence: here 100 other
/// CQs' events come first). The delivery then pushes X's event into X's channel, where a
/// consumer sleeps: it gets an event for a CQ that was destroyed before the event was pushed.
#[test]
fn a_cq_dropped_in_its_upcall_hands_no_event_to_a_sleeping_waiter() {
    use ib_core::UpcallPolicy;
    use std::sync::Mutex;
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device().clone();
    let mut c = pvrdma_abi::wqe::Cqe::default();
    c.opcode.set(pvrdma_abi::wqe::wc_opcode::RECV);
    let ch_y = Arc::new(dev.create_comp_channel().unwrap());
    let ys: Vec<Cq> = (0..100).map(|_| dev.create_cq(16, Some(&ch_y)).unwrap()).collect();
    let z = dev.create_cq(16, None).unwrap();
    let (mut stale, mut rounds) = (0, 0);
    for _ in 0..30 {
        let ch_x = Arc::new(dev.create_comp_channel().unwrap());
        let x = dev.create_cq(16, Some(&ch_x)).unwrap();
        let hx = x.handle();
        let slot = Arc::new(Mutex::new(None::<Cq>));
        let dropped = Arc::new(AtomicBool::new(false));
        // Y events already pushed when the drop of X was over (X's comes after all 100).
        let ys_seen = Arc::new(AtomicU64::new(u64::MAX));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        {
            let (slot, dropped) = (slot.clone(), dropped.clone());
            let (ch_y, ys_seen) = (ch_y.clone(), ys_seen.clone());
            let go_rx = Mutex::new(go_rx);
            x.set_upcall(UpcallPolicy::ManyInstance, move |view, _| {
                if slot.lock().unwrap().is_none() {
                    return;
                }
                let _ = started_tx.send(());
                let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(5));
                let Some(owned) = slot.lock().unwrap().take() else { return };
                // Wait (bounded) until a drain spends X's arm, then drop X at once.
                let t = Instant::now();
                while view.armed().is_some() && t.elapsed() < Duration::from_secs(2) {
                    std::hint::spin_loop();
                }
                drop(owned);
                dropped.store(true, Ordering::SeqCst);
                let mut k = 0;
                while let Some(e) = ch_y.try_get_cq_event() {
                    e.ack_events(1);
                    k += 1;
                }
                ys_seen.store(k, Ordering::SeqCst);
            })
            .unwrap();
        }
        *slot.lock().unwrap() = Some(x);
        assert!(d.post_cqe(hx, &c, false)); // X's upcall starts (and re-arms X)
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // The consumer arms X's channel (through the view-less way: the slot holds X).
        slot.lock().unwrap().as_ref().unwrap().req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        go_tx.send(()).unwrap();
        for y in &ys {
            y.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        }
        // A consumer sleeps on X's channel.
        let waiter = {
            let (ch_x, dropped) = (ch_x.clone(), dropped.clone());
            std::thread::spawn(move || {
                ch_x.get_cq_event(Duration::from_millis(500)).map(|e| (e, dropped.load(Ordering::SeqCst)))
            })
        };
        std::thread::sleep(Duration::from_millis(5));
        // Vector 2 masked: the arms fire into the notification ring, nothing drains them yet.
        d.vectors().set_masked(2, true);
        for y in &ys {
            assert!(d.post_cqe(y.handle(), &c, false));
        }
        assert!(d.post_cqe(hx, &c, false));
        // One drain on this thread spends the 100 Ys and X, then delivers them in that order.
        z.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        d.vectors().set_masked(2, false);
        rounds += 1;
        let got = waiter.join();
        let seen = ys_seen.load(Ordering::SeqCst);
        eprintln!(
            "round {rounds}: {:?} ys pushed when X's drop was over: {seen}",
            got.as_ref().map(|r| r.as_ref().map(|(e, d)| (e.handle(), *d)))
        );
        if let Ok(Ok((ev, _))) = got {
            assert_eq!(ev.handle(), hx);
            // X's event is pushed after the 100 Ys': fewer than 100 pushed when the drop (and
            // its purge) was over means X's event was pushed after X was destroyed.
            if seen < 100 {
                stale += 1;
            }
            ev.ack_events(1);
        }
        while let Some(ev) = ch_y.try_get_cq_event() {
            ev.ack_events(1);
        }
        for y in &ys {
            let mut wc = [Wc::default(); 4];
            while y.poll(&mut wc).unwrap() > 0 {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        stale, 0,
        "{stale}/{rounds} rounds: a sleeping consumer got an event for a CQ dropped before it was delivered"
    );
}
