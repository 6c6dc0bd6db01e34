//! The completion channel's fd as a consumer uses it (`ibv_comp_channel.fd`): readable in
//! `poll`/`epoll` exactly when an event is pending, non-blocking reads failing with EAGAIN when
//! none is, one event per read; and events that name their CQ and its `cq_context`.

use crate::scripted::{open, scq};
use ib_core::{Error, NotifyFlags};
use std::os::fd::RawFd;
use std::time::Duration;

fn readable(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd, count 1, no timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n == 1 && pfd.revents & libc::POLLIN != 0
}

/// An epoll set watching `fd` for input.
struct Epoll(RawFd);

impl Epoll {
    fn watching(fd: RawFd) -> Self {
        // SAFETY: plain syscalls with a live, local epoll_event.
        unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            assert!(ep >= 0);
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 7 };
            assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev), 0);
            Self(ep)
        }
    }

    /// Ready fds within `ms` milliseconds.
    fn wait(&self, ms: i32) -> usize {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: `evs` is a live array of 4 events.
        let n = unsafe { libc::epoll_wait(self.0, evs.as_mut_ptr(), 4, ms) };
        assert!(n >= 0);
        n as usize
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: closing the epoll fd this value owns.
        unsafe { libc::close(self.0) };
    }
}

#[test]
fn readable_in_poll_and_epoll_exactly_while_an_event_is_pending() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq_with(16, Some(&ch), 0xfeed).unwrap();
    let ep = Epoll::watching(ch.fd());
    assert!(!readable(ch.fd()));
    assert_eq!(ep.wait(0), 0);
    for round in 0..3 {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        assert!(!readable(ch.fd()), "round {round}: armed, nothing yet");
        assert!(scq(&cq).publish(false));
        assert!(readable(ch.fd()), "round {round}: an event is pending");
        assert_eq!(ep.wait(1000), 1);
        let got = ch.get_cq_event(Duration::ZERO).unwrap();
        assert_eq!((got.handle(), got.cq_context()), (cq.handle(), 0xfeed));
        assert_eq!(got, *cq.cq_ref(), "the event names this CQ");
        assert!(!readable(ch.fd()), "round {round}: taken");
        assert_eq!(ep.wait(0), 0);
        got.ack_events(1);
    }
}

#[test]
fn nonblocking_gets_fail_with_eagain_and_each_get_takes_one_event() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let (a, b) = (dev.create_cq_with(8, Some(&ch), 1).unwrap(), dev.create_cq_with(8, Some(&ch), 2).unwrap());
    ch.set_nonblocking(true).unwrap();
    let t = std::time::Instant::now();
    let e = ch.get_cq_event(Duration::from_secs(5)).unwrap_err();
    assert_eq!((e.clone(), e.errno()), (Error::WouldBlock, libc::EAGAIN));
    assert!(t.elapsed() < Duration::from_secs(1), "a non-blocking get waited");
    for cq in [&a, &b] {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        scq(cq).publish(false);
    }
    assert_eq!(ch.pending(), 2);
    let first = ch.get_cq_event(Duration::ZERO).unwrap();
    assert!(readable(ch.fd()), "one event left");
    let second = ch.get_cq_event(Duration::ZERO).unwrap();
    assert_eq!((first.cq_context(), second.cq_context()), (1, 2));
    assert_eq!(ch.get_cq_event(Duration::ZERO), Err(Error::WouldBlock));
    // The consumer's own fcntl (as on `channel->fd`) counts the same.
    ch.set_nonblocking(false).unwrap();
    assert_eq!(ch.get_cq_event(Duration::from_millis(20)), Err(Error::Timeout));
    // SAFETY: F_GETFL/F_SETFL on the channel's live fd.
    unsafe {
        let fl = libc::fcntl(ch.fd(), libc::F_GETFL);
        libc::fcntl(ch.fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    assert_eq!(ch.get_cq_event(Duration::from_secs(5)), Err(Error::WouldBlock));
    first.ack_events(1);
    second.ack_events(1);
}

#[test]
fn a_raw_nonblocking_read_of_the_fd_gives_one_event_per_read_and_eagain_when_none() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    for _ in 0..2 {
        cq.req_notify(NotifyFlags::NEXT_COMPLETION).unwrap();
        scq(&cq).publish(false);
    }
    ch.set_nonblocking(true).unwrap();
    let read = || {
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer from the channel's fd.
        let n = unsafe { libc::read(ch.fd(), b.as_mut_ptr().cast(), 8) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        (n, u64::from_ne_bytes(b), errno)
    };
    let (n, v, _) = read();
    assert_eq!((n, v), (8, 1), "one event per read");
    let (n, v, _) = read();
    assert_eq!((n, v), (8, 1));
    let (n, _, errno) = read();
    assert_eq!((n, errno), (-1, Some(libc::EAGAIN)), "none left");
}
