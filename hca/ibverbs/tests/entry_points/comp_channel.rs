//! Completion channels shared between threads: `ibv_get_cq_event` in one thread while another
//! arms and acknowledges, `ibv_destroy_cq` waiting for an acknowledgement from another thread,
//! and a `get_cq_event` blocked while its CQ is destroyed, a signal ending a blocked
//! `get_cq_event` as it ends the kernel's read. Every wait is bounded. (From the breaker rounds
//! on the library; the signal case from qperf, whose tests end with `SIGALRM`.)

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

extern "C" fn note_signal(_: libc::c_int) {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Signals [`note_signal`] saw.
static SIGNALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Installs [`note_signal`] for SIGUSR1, with `flags` (`SA_RESTART` or not).
fn on_sigusr1(flags: libc::c_int) {
    // SAFETY: a zeroed sigaction is valid; the handler is an async-signal-safe atomic add.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = note_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = flags;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, null_mut()), 0);
    }
}

/// A thread blocked in `ibv_get_cq_event` of `ch`; the receiver gets `(return, errno, cq)`.
fn blocked_waiter(ch: usize) -> (libc::pthread_t, std::sync::mpsc::Receiver<(i32, i32, usize)>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ttx, trx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions; `ch` is a live channel of this library.
        unsafe {
            ttx.send(libc::pthread_self() as usize).unwrap();
            let (mut c, mut t) = (null_mut(), null_mut());
            let r = ibv_get_cq_event(ch as *mut ibv_comp_channel, &mut c, &mut t);
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            let _ = tx.send((r, errno, c as usize));
        }
    });
    (trx.recv().unwrap() as libc::pthread_t, rx)
}

/// A signal whose handler lacks `SA_RESTART` ends a blocked `ibv_get_cq_event` with EINTR, as
/// it ends libibverbs's `read(2)` of the kernel's fd; under `SA_RESTART` the wait goes on and
/// takes the next event. (qperf stops a test with SIGALRM, no `SA_RESTART`, while a side may
/// block for an event its stopped peer never causes: its rc_lat stalled here.)
#[test]
fn a_signal_ends_a_blocked_get_cq_event_as_it_ends_the_kernels_read() {
    let (ctx, model) = open();
    // SAFETY: objects of this library; signals to threads of this test.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 8, null_mut(), ch, 0);
        let settle = Duration::from_millis(100);

        on_sigusr1(0);
        let (tid, rx) = blocked_waiter(ch as usize);
        std::thread::sleep(settle);
        let seen = SIGNALS.load(Ordering::SeqCst);
        assert_eq!(libc::pthread_kill(tid, libc::SIGUSR1), 0);
        let (r, errno, _) = rx.recv_timeout(Duration::from_secs(10)).expect("the signal ended the wait");
        assert_eq!((r, errno), (-1, libc::EINTR));
        assert!(SIGNALS.load(Ordering::SeqCst) > seen, "the handler ran");

        on_sigusr1(libc::SA_RESTART);
        let (tid, rx) = blocked_waiter(ch as usize);
        std::thread::sleep(settle);
        assert_eq!(libc::pthread_kill(tid, libc::SIGUSR1), 0);
        assert!(rx.recv_timeout(settle * 3).is_err(), "SA_RESTART: the wait goes on");
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq, 0), 0);
        assert!(model.device().post_cqe((*cq).handle, &pvrdma_abi::wqe::Cqe::default(), false));
        let (r, _, c) = rx.recv_timeout(Duration::from_secs(10)).expect("the event ends the wait");
        assert_eq!((r, c), (0, cq as usize));
        ibv_ack_cq_events(cq, 1);
        assert_eq!(poll_n(cq, 1).len(), 1);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
