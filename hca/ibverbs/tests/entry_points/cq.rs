//! CQs, completion channels and async events through the library's C entry points, on the
//! default model device. CQEs are forged through the model (no QP needed): naming no QP of the
//! CQ, each completes with `IBV_WC_GENERAL_ERR` (21) and its `wr_id`.

use ibverbs_compat::abi::{ibv_async_event, ibv_comp_channel, ibv_context, ibv_cq, ibv_wc};
use ibverbs_compat::*;
use pvrdma_abi::wqe::Cqe;
use std::ptr::null_mut;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zerocopy::little_endian::U64;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The first device and a context on it.
fn open() -> (*mut ibv_context, hca::platform::sim::SimPlatform) {
    // SAFETY: the list is NULL-terminated, the first entry a device of this library.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        assert!(!list.is_null() && !(*list).is_null(), "the default model device");
        let dev = *list;
        let ctx = ibv_open_device(dev);
        let model = test_model(dev).expect("a model device");
        ibv_free_device_list(list);
        assert!(!ctx.is_null());
        (ctx, model)
    }
}

fn create(ctx: *mut ibv_context, cqe: i32, ch: *mut ibv_comp_channel, tag: usize) -> *mut ibv_cq {
    // SAFETY: an open context; `ch` NULL or a channel of this library.
    unsafe { ibv_create_cq(ctx, cqe, tag as *mut libc::c_void, ch, 0) }
}

/// Forges `n` CQEs with `wr_id`s from `first` on `cq` through the model.
fn forge(model: &hca::platform::sim::SimPlatform, cq: *mut ibv_cq, first: u64, n: u64) {
    for k in 0..n {
        let cqe = Cqe { wr_id: U64::new(first + k), ..Default::default() };
        // SAFETY: a live CQ.
        assert!(model.device().post_cqe(unsafe { (*cq).handle }, &cqe, false));
    }
}

/// Polls through the ops table, as the header's inline `ibv_poll_cq`.
fn poll(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> i32 {
    // SAFETY: a live CQ; `wc` has room for its length.
    unsafe { ((*(*cq).context).ops.poll_cq.unwrap())(cq, wc.len() as i32, wc.as_mut_ptr()) }
}

fn notify(cq: *mut ibv_cq, solicited: i32) -> i32 {
    // SAFETY: a live CQ.
    unsafe { ((*(*cq).context).ops.req_notify_cq.unwrap())(cq, solicited) }
}

fn set_nonblock(fd: i32, on: bool) {
    // SAFETY: F_GETFL/F_SETFL on an fd of ours.
    unsafe {
        let f = libc::fcntl(fd, libc::F_GETFL);
        let f = if on { f | libc::O_NONBLOCK } else { f & !libc::O_NONBLOCK };
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, f), 0);
    }
}

/// Takes a completion event with the fd non-blocking, retrying until a bound.
fn get_event(ch: *mut ibv_comp_channel) -> (*mut ibv_cq, *mut libc::c_void) {
    // SAFETY: a live channel.
    set_nonblock(unsafe { (*ch).fd }, true);
    let end = Instant::now() + Duration::from_secs(10);
    let (mut cq, mut tag) = (null_mut(), null_mut());
    // SAFETY: a live channel; the outputs are writable.
    while unsafe { ibv_get_cq_event(ch, &mut cq, &mut tag) } != 0 {
        assert_eq!(errno(), libc::EAGAIN);
        assert!(Instant::now() < end, "no completion event");
        std::thread::sleep(Duration::from_millis(1));
    }
    (cq, tag)
}

#[test]
fn create_and_destroy_answer_as_libibverbs() {
    let (ctx, _m) = open();
    let (other, _m2) = open();
    // SAFETY: the contexts are open; every pointer passed is ours or NULL.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let foreign = ibv_create_comp_channel(other);
        assert!(!ch.is_null() && (*ch).fd >= 0 && (*ch).context == ctx);
        for (c, cqe, chan, vec) in [
            (null_mut(), 16, null_mut(), 0),
            (ctx, 0, null_mut(), 0),
            (ctx, -1, null_mut(), 0),
            (ctx, 1 << 30, null_mut(), 0),
            (ctx, 16, null_mut(), (*ctx).num_comp_vectors),
            (ctx, 16, null_mut(), -1),
            (ctx, 16, foreign, 0),
        ] {
            assert!(ibv_create_cq(c, cqe, null_mut(), chan, vec).is_null());
            assert_eq!(errno(), libc::EINVAL, "cqe {cqe} vector {vec}");
        }
        let cq = create(ctx, 10, ch, 0x55);
        assert!(!cq.is_null());
        assert!((*cq).cqe >= 10);
        assert_eq!(((*cq).context, (*cq).channel, (*cq).cq_context as usize), (ctx, ch, 0x55));
        assert_eq!(ibv_resize_cq(cq, 64), 0);
        assert_eq!((*cq).cqe, 64);
        assert_eq!(ibv_destroy_comp_channel(ch), libc::EBUSY, "a CQ uses it");
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_cq(null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_destroy_comp_channel(foreign), 0);
        assert_eq!(ibv_close_device(other), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn resize_keeps_the_queued_cqes_and_sets_cqe() {
    let (ctx, model) = open();
    let cq = create(ctx, 8, null_mut(), 0);
    let mut wc = [ibv_wc::default(); 64];
    forge(&model, cq, 0, 6);
    // SAFETY: a live CQ of this library (and NULL).
    unsafe {
        assert_eq!(ibv_resize_cq(cq, 5), 0, "rounded up to 8, room for the 6 queued");
        assert_eq!(ibv_resize_cq(cq, 4), libc::EINVAL, "fewer entries than the 6 queued");
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(ibv_resize_cq(cq, 0), libc::EINVAL);
        assert_eq!(ibv_resize_cq(cq, -3), libc::EINVAL);
        assert_eq!(ibv_resize_cq(cq, i32::MAX), libc::EINVAL);
        assert_eq!(ibv_resize_cq(null_mut(), 8), libc::EINVAL);
        assert_eq!((*cq).cqe, 8);
        let op = (*ctx).ops._compat_resize_cq.expect("the resize_cq op in the slot libibverbs fills");
        assert_eq!(op(cq, 40), 0, "the op itself");
        assert_eq!((*cq).cqe, 64, "the size the device gave");
        assert_eq!(ibv_resize_cq(cq, 40), 0);
        assert_eq!((*cq).cqe, 64);
    }
    forge(&model, cq, 6, 30);
    assert_eq!(poll(cq, &mut wc), 36);
    assert!(wc[..36].iter().enumerate().all(|(i, w)| w.wr_id == i as u64), "in order");
    forge(&model, cq, 36, 2);
    // SAFETY: as above.
    unsafe {
        assert_eq!(ibv_resize_cq(cq, 2), 0);
        assert_eq!((*cq).cqe, 2);
    }
    assert_eq!(poll(cq, &mut wc), 2);
    assert_eq!((wc[0].wr_id, wc[1].wr_id), (36, 37));
    // SAFETY: ours, no event taken.
    unsafe {
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn poll_converts_in_chunks_through_the_ops() {
    let (ctx, model) = open();
    let cq = create(ctx, 64, null_mut(), 0);
    let mut wc = [ibv_wc::default(); 40];
    assert_eq!(poll(cq, &mut wc[..1]), 0, "empty");
    assert_eq!(poll(cq, &mut wc), 0, "empty");
    forge(&model, cq, 100, 20);
    // SAFETY: a live CQ; n 0 writes nothing.
    assert_eq!(unsafe { ((*ctx).ops.poll_cq.unwrap())(cq, 0, wc.as_mut_ptr()) }, 0);
    assert_eq!(poll(cq, &mut wc[..1]), 1);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].wc_flags), (100, 21, 0));
    assert_eq!(poll(cq, &mut wc), 19, "more than one chunk of 16");
    assert!(wc[..19].iter().enumerate().all(|(i, w)| w.wr_id == 101 + i as u64 && w.status == 21));
    assert_eq!(poll(cq, &mut wc), 0);
    // SAFETY: ours, no event taken.
    unsafe {
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn notify_get_event_ack_and_nonblocking_fd() {
    let (ctx, model) = open();
    // SAFETY: the context is open; every pointer is ours.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = create(ctx, 16, ch, 0xabc);
        set_nonblock((*ch).fd, true);
        let (mut got, mut tag) = (null_mut(), null_mut());
        assert_eq!(ibv_get_cq_event(ch, &mut got, &mut tag), -1);
        assert_eq!(errno(), libc::EAGAIN, "O_NONBLOCK set by fcntl, nothing pending");
        assert_eq!(notify(cq, 0), 0);
        forge(&model, cq, 1, 1);
        let (got, tag) = get_event(ch);
        assert_eq!((got, tag as usize), (cq, 0xabc));
        ibv_ack_cq_events(cq, 1);
        let mut wc = [ibv_wc::default(); 4];
        assert_eq!(poll(cq, &mut wc), 1);
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(null_mut(), 0), libc::EINVAL);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn destroy_blocks_until_the_event_is_acked() {
    let (ctx, model) = open();
    // SAFETY: the context is open; every pointer is ours.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = create(ctx, 16, ch, 0);
        assert_eq!(notify(cq, 0), 0);
        forge(&model, cq, 1, 1);
        let (got, _) = get_event(ch);
        let addr = got as usize;
        let (tx, rx) = mpsc::channel();
        let t = std::thread::spawn(move || tx.send(ibv_destroy_cq(addr as *mut ibv_cq)).unwrap());
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "destroyed with an event unacked");
        ibv_ack_cq_events(cq, 1);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(0), "destroyed once acked");
        t.join().unwrap();
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn overflow_raises_cq_err_on_the_async_queue() {
    let (ctx, model) = open();
    // SAFETY: the context is open; every pointer is ours.
    unsafe {
        let cq = create(ctx, 4, null_mut(), 0);
        set_nonblock((*ctx).async_fd, true);
        let mut ev = ibv_async_event { element: abi::ibv_async_event_element { port_num: -1 }, event_type: 99 };
        assert_eq!(ibv_get_async_event(ctx, &mut ev), -1);
        assert_eq!(errno(), libc::EAGAIN);
        forge(&model, cq, 0, (*cq).cqe as u64 + 1);
        let end = Instant::now() + Duration::from_secs(10);
        while ibv_get_async_event(ctx, &mut ev) != 0 {
            assert_eq!(errno(), libc::EAGAIN);
            assert!(Instant::now() < end, "no CQ_ERR");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!((ev.event_type, ev.element.cq), (0, cq), "IBV_EVENT_CQ_ERR for this CQ");
        let (tx, rx) = mpsc::channel();
        let addr = cq as usize;
        let t = std::thread::spawn(move || tx.send(ibv_destroy_cq(addr as *mut ibv_cq)).unwrap());
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "destroyed with an async event unacked");
        ibv_ack_async_event(&mut ev);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(0));
        t.join().unwrap();
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
