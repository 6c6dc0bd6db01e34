//! Event channels: the fd polls readable exactly while events wait, `O_NONBLOCK` set by the
//! program gives `EAGAIN`, `rdma_destroy_id` waits for the id's unacknowledged events,
//! pointers that are not ours give `EINVAL`, `rdma_event_str` gives librdmacm's names, a sync
//! id migrates to a channel at once (its last event acknowledged by the call, as librdmacm's),
//! an id destroyed with events queued takes them along without blocking on the channel's fd, a
//! signal without `SA_RESTART` ends a blocked `rdma_get_cm_event` with EINTR (decision 35).

use crate::fixture::*;
use rdmacm_compat::abi::*;
use rdmacm_compat::*;
use std::ptr::null_mut;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn the_fd_is_readable_exactly_while_events_wait_and_nonblocking_reads_give_eagain() {
    run(|a, b| {
        let ch = channel();
        assert!(!readable(ch, Duration::from_millis(50)));
        // SAFETY: the channel's fd: O_NONBLOCK set as a program would.
        unsafe {
            let fl = libc::fcntl((*ch).fd, libc::F_GETFL);
            assert_eq!(libc::fcntl((*ch).fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        }
        let mut e = null_mut();
        // SAFETY: a channel of ours and an out-pointer.
        assert_eq!(unsafe { rdma_get_cm_event(ch, &mut e) }, -1);
        assert_eq!(errno(), libc::EAGAIN);
        let (id1, id2) = (id(ch, RDMA_PS_TCP), id(ch, RDMA_PS_TCP));
        for id in [id1, id2] {
            let (mut s, mut d) = (sin(a, 0), sin(b, 7471));
            // SAFETY: ids of ours; sockaddrs on the stack.
            assert_eq!(unsafe { rdma_resolve_addr(id, sa(&mut s), sa(&mut d), 1000) }, 0);
        }
        assert!(readable(ch, WAIT));
        expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
        assert!(readable(ch, Duration::ZERO), "one event still waits");
        expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
        assert!(!readable(ch, Duration::from_millis(50)), "no event waits");
        // SAFETY: ids and channel of ours.
        unsafe {
            assert_eq!(rdma_destroy_id(id1), 0);
            assert_eq!(rdma_destroy_id(id2), 0);
        }
        rdma_destroy_event_channel(ch);
    })
}

#[test]
fn destroy_waits_for_the_ids_unacknowledged_event() {
    run(|a, b| {
        let ch = channel();
        let id = id(ch, RDMA_PS_TCP);
        let (mut s, mut d) = (sin(a, 0), sin(b, 7471));
        // SAFETY: an id of ours; sockaddrs on the stack.
        assert_eq!(unsafe { rdma_resolve_addr(id, sa(&mut s), sa(&mut d), 1000) }, 0);
        assert!(readable(ch, WAIT));
        let mut e = null_mut();
        // SAFETY: readable: does not block.
        assert_eq!(unsafe { rdma_get_cm_event(ch, &mut e) }, 0);
        let (tx, rx) = mpsc::channel();
        let idp = id as usize;
        // SAFETY: the id is ours; destroyed once, on this thread.
        std::thread::spawn(move || tx.send(unsafe { rdma_destroy_id(idp as *mut rdma_cm_id) }).unwrap());
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "destroy returned before the ack");
        // SAFETY: the delivered event.
        assert_eq!(unsafe { rdma_ack_cm_event(e) }, 0);
        assert_eq!(rx.recv_timeout(WAIT), Ok(0));
        rdma_destroy_event_channel(ch);
    })
}

/// The count a destroyed id's queued event left in the fd is skipped: a blocked reader stays
/// blocked until a live id's event, a non-blocking one gets `EAGAIN`. (Destroy used to take
/// the count back with a read that could block behind a reader that had just taken it.)
#[test]
fn a_destroyed_ids_queued_event_is_skipped_by_readers() {
    run(|a, b| {
        let ch = channel();
        let (id1, id2) = (id(ch, RDMA_PS_TCP), id(ch, RDMA_PS_TCP));
        let (mut s, mut d) = (sin(a, 0), sin(b, 7471));
        // SAFETY: an id of ours; sockaddrs on the stack.
        assert_eq!(unsafe { rdma_resolve_addr(id1, sa(&mut s), sa(&mut d), 1000) }, 0);
        assert!(readable(ch, WAIT));
        // SAFETY: an id of ours, its event never delivered.
        assert_eq!(unsafe { rdma_destroy_id(id1) }, 0);
        let (tx, rx) = mpsc::channel();
        let c = ch as usize;
        std::thread::spawn(move || {
            let mut e = null_mut();
            // SAFETY: a channel of ours, live until this thread sends its answer.
            let r = unsafe { rdma_get_cm_event(c as *mut _, &mut e) };
            // SAFETY: the event just delivered, if any.
            let kind = if r == 0 { unsafe { (*e).event } } else { u32::MAX };
            tx.send((r, kind, e as usize)).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "a reader got the destroyed id's event");
        // SAFETY: as above.
        assert_eq!(unsafe { rdma_resolve_addr(id2, sa(&mut s), sa(&mut d), 1000) }, 0);
        let (r, kind, e) = rx.recv_timeout(WAIT).expect("the reader gets the live id's event");
        assert_eq!((r, kind), (0, RDMA_CM_EVENT_ADDR_RESOLVED));
        // SAFETY: the delivered event; then the fd, O_NONBLOCK set as a program would.
        unsafe {
            assert_eq!((*(e as *mut rdma_cm_event)).id, id2);
            assert_eq!(rdma_ack_cm_event(e as *mut _), 0);
            assert_eq!(rdma_resolve_route(id2, 1000), 0);
            assert!(readable(ch, WAIT));
            assert_eq!(rdma_destroy_id(id2), 0);
            let fl = libc::fcntl((*ch).fd, libc::F_GETFL);
            assert_eq!(libc::fcntl((*ch).fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
            let mut e = null_mut();
            assert_eq!(rdma_get_cm_event(ch, &mut e), -1);
            assert_eq!(errno(), libc::EAGAIN);
        }
        rdma_destroy_event_channel(ch);
    })
}

#[test]
fn pointers_that_are_not_the_librarys_give_einval() {
    run(|_, _| {
        let mut junk = [0u64; 64];
        let fake = junk.as_mut_ptr().cast::<rdma_cm_id>();
        let mut e = null_mut();
        // SAFETY: the library must look these up before using them.
        unsafe {
            assert_eq!(rdma_destroy_id(fake), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(rdma_listen(fake, 1), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(rdma_ack_cm_event(fake.cast()), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(rdma_get_cm_event(fake.cast(), &mut e), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(rdma_connect(null_mut(), null_mut()), -1);
            assert_eq!(errno(), libc::EINVAL);
        }
        let mut id = null_mut();
        // SAFETY: a channel that is not ours.
        assert_eq!(unsafe { rdma_create_id(fake.cast(), &mut id, null_mut(), RDMA_PS_TCP) }, -1);
        assert_eq!(errno(), libc::EINVAL);
    })
}

#[test]
fn event_names_are_librdmacms() {
    assert_eq!(name(RDMA_CM_EVENT_ADDR_RESOLVED), "RDMA_CM_EVENT_ADDR_RESOLVED");
    assert_eq!(name(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
    assert_eq!(name(99), "UNKNOWN EVENT");
}

#[test]
fn a_sync_id_migrates_to_a_channel_with_its_last_event_acknowledged() {
    run(|a, b| {
        let id = id(null_mut(), RDMA_PS_TCP);
        let (mut src, mut dst) = (sin(a, 0), sin(b, 7471));
        // SAFETY: a sync id of ours; sockaddrs on the stack. The call returns once resolved.
        assert_eq!(unsafe { rdma_resolve_addr(id, sa(&mut src), sa(&mut dst), 1000) }, 0, "errno {}", errno());
        // SAFETY: as above: ADDR_RESOLVED is kept in `id->event` until the next call.
        assert!(!unsafe { (*id).event }.is_null());
        let ch = channel();
        let (tx, rx) = mpsc::channel();
        let (i, c) = (id as usize, ch as usize);
        // SAFETY: a sync id of ours and a channel of ours.
        std::thread::spawn(move || tx.send(unsafe { rdma_migrate_id(i as *mut _, c as *mut _) }));
        assert_eq!(rx.recv_timeout(WAIT).expect("rdma_migrate_id returns"), 0);
        // SAFETY: the id, now of `ch`.
        unsafe {
            assert!((*id).event.is_null());
            assert_eq!((*id).channel, ch);
            assert_eq!(rdma_migrate_id(id, ch), 0, "a second move to the same channel");
            assert_eq!(rdma_resolve_route(id, 1000), 0);
        }
        expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
        // SAFETY: as above, its event acknowledged.
        assert_eq!(unsafe { rdma_destroy_id(id) }, 0);
        rdma_destroy_event_channel(ch);
    })
}

extern "C" fn note_signal(_: libc::c_int) {}

/// A signal whose handler lacks `SA_RESTART` ends a blocked `rdma_get_cm_event` with EINTR, as it
/// ends librdmacm's `write(2)` to the kernel's fd; with `SA_RESTART` the wait goes on.
#[test]
fn a_signal_ends_a_blocked_get_cm_event_as_it_ends_the_kernels_call() {
    run(|a, b| {
        let ch = channel();
        for flags in [0, libc::SA_RESTART] {
            // SAFETY: a zeroed sigaction is valid; the handler does nothing.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = note_signal as extern "C" fn(libc::c_int) as usize;
                sa.sa_flags = flags;
                assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, null_mut()), 0);
            }
            let (tx, rx) = mpsc::channel();
            let (ttx, trx) = mpsc::channel();
            let c = ch as usize;
            std::thread::spawn(move || {
                // SAFETY: pthread_self has no preconditions; a channel of ours, live until the
                // answer is sent.
                unsafe {
                    ttx.send(libc::pthread_self() as usize).unwrap();
                    let mut e = null_mut();
                    let r = rdma_get_cm_event(c as *mut _, &mut e);
                    let _ = tx.send((r, errno(), e as usize));
                }
            });
            let tid = trx.recv().unwrap() as libc::pthread_t;
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: a thread of this test, alive until it answers.
            assert_eq!(unsafe { libc::pthread_kill(tid, libc::SIGUSR1) }, 0);
            if flags == 0 {
                assert_eq!(rx.recv_timeout(WAIT).map(|(r, e, _)| (r, e)), Ok((-1, libc::EINTR)));
                continue;
            }
            assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "SA_RESTART: the wait goes on");
            let id = id(ch, RDMA_PS_TCP);
            let (mut s, mut d) = (sin(a, 0), sin(b, 7471));
            // SAFETY: an id of ours; sockaddrs on the stack; then the event the waiter took.
            unsafe {
                assert_eq!(rdma_resolve_addr(id, sa(&mut s), sa(&mut d), 1000), 0);
                let (r, _, e) = rx.recv_timeout(WAIT).expect("the event ends the wait");
                assert_eq!(r, 0);
                assert_eq!(rdma_ack_cm_event(e as *mut _), 0);
                assert_eq!(rdma_destroy_id(id), 0);
            }
        }
        rdma_destroy_event_channel(ch);
    })
}
