//! Completion channels shared between threads: `ibv_get_cq_event` in one thread while another
//! arms and acknowledges, `ibv_destroy_cq` waiting for an acknowledgement from another thread,
//! and a `get_cq_event` blocked while its CQ is destroyed. Every wait is bounded. (From the
//! breaker rounds on the library.)

use crate::fx::*;
use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[test]
fn get_cq_event_in_one_thread_while_another_arms_and_acks() {
    let (ctx, model) = open();
    // SAFETY: objects of this library.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 256, 0x77 as *mut _, ch, 0);
        let (chu, cqu) = (ch as usize, cq as usize);
        const N: usize = 50;
        let waiter = std::thread::spawn(move || {
            let mut got = 0;
            while got < N {
                let (mut c, mut t) = (null_mut(), null_mut());
                assert_eq!(ibv_get_cq_event(chu as *mut ibv_comp_channel, &mut c, &mut t), 0);
                assert_eq!((c as usize, t as usize), (cqu, 0x77));
                TAKEN.fetch_add(1, Ordering::SeqCst);
                got += 1;
            }
        });
        let end = Instant::now() + Duration::from_secs(20);
        let mut wc = [ibv_wc::default(); 8];
        for i in 0..N {
            assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq, 0), 0);
            let cqe = pvrdma_abi::wqe::Cqe { wr_id: zerocopy::little_endian::U64::new(i as u64), ..Default::default() };
            assert!(model.device().post_cqe((*cq).handle, &cqe, false));
            assert_eq!(poll_n(cq, 1)[0].wr_id, i as u64);
            // Wait for the waiter to take it before arming again, then ack it from here.
            while TAKEN.load(Ordering::SeqCst) <= i {
                assert!(Instant::now() < end, "event {i} not taken");
                std::thread::sleep(Duration::from_millis(1));
            }
            ibv_ack_cq_events(cq, 1);
            assert_eq!(poll(cq, &mut wc), 0);
        }
        waiter.join().expect("waiter");
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// Completion events the waiter of `get_cq_event_in_one_thread_while_another_arms_and_acks` took.
static TAKEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn destroy_cq_waits_for_an_ack_from_another_thread() {
    let (ctx, model) = open();
    // SAFETY: objects of this library.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 8, null_mut(), ch, 0);
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq, 0), 0);
        let cqe = pvrdma_abi::wqe::Cqe::default();
        assert!(model.device().post_cqe((*cq).handle, &cqe, false));
        let (mut c, mut t) = (null_mut(), null_mut());
        assert_eq!(ibv_get_cq_event(ch, &mut c, &mut t), 0);
        assert_eq!(c, cq);
        let cqu = cq as usize;
        let acker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ibv_ack_cq_events(cqu as *mut ibv_cq, 1);
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let destroyer = std::thread::spawn(move || tx.send(ibv_destroy_cq(cqu as *mut ibv_cq)).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(0), "destroy completes once acked");
        acker.join().unwrap();
        destroyer.join().unwrap();
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn get_cq_event_blocked_while_its_cq_is_destroyed_and_the_channel_gets_another() {
    let (ctx, model) = open();
    // SAFETY: objects of this library.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 8, null_mut(), ch, 0);
        let chu = ch as usize;
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let (mut c, mut t) = (null_mut(), null_mut());
            let r = ibv_get_cq_event(chu as *mut ibv_comp_channel, &mut c, &mut t);
            tx.send((r, c as usize)).unwrap();
        });
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(ibv_destroy_cq(cq), 0, "nothing taken for it");
        let cq2 = ibv_create_cq(ctx, 8, null_mut(), ch, 0);
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq2, 0), 0);
        assert!(model.device().post_cqe((*cq2).handle, &pvrdma_abi::wqe::Cqe::default(), false));
        let (r, c) = rx.recv_timeout(Duration::from_secs(10)).expect("the waiter wakes");
        assert_eq!((r, c), (0, cq2 as usize), "the event names the live CQ");
        waiter.join().unwrap();
        ibv_ack_cq_events(cq2, 1);
        assert_eq!(ibv_destroy_cq(cq2), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
