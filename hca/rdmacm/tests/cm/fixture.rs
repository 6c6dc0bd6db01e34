//! The two devices, and the waits every test bounds.
#![allow(dead_code)]

use rdmacm_compat::abi::*;
use rdmacm_compat::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::BorrowedFd;
use std::ptr::null_mut;
use std::time::Duration;

/// How long a test waits for an event before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

const ADDRS_ENV: &str = "RDMACM_TEST_ROCE_ADDRS";

/// Runs `body` with the two devices' addresses (device 0 on `a`, device 1 on `b`), in a child
/// of the test binary told two fresh addresses ([`netlease::child::retried`]): the library
/// opens its devices once per process from `HCA_DEVICES`.
pub fn run(body: impl FnOnce(Ipv4Addr, Ipv4Addr)) {
    let pick = |f: &mut netlease::Fresh| format!("{},{}", f.v4(), f.v4());
    netlease::child::retried(ADDRS_ENV, pick, || {
        let addrs = std::env::var(ADDRS_ENV).expect("the child's addresses");
        let (a, b) = addrs.split_once(',').expect("two addresses");
        std::env::set_var("HCA_DEVICES", format!("model,roce={a};model,roce={b}"));
        let (a, b): (Ipv4Addr, Ipv4Addr) = (a.parse().unwrap(), b.parse().unwrap());
        check_opened(&[a, b]);
        body(a, b)
    })
}

fn check_opened(addrs: &[Ipv4Addr]) {
    let mut n = 0;
    // SAFETY: an out-pointer; the list is freed below.
    let list = unsafe { rdma_get_devices(&mut n) };
    assert!(!list.is_null());
    // SAFETY: the list rdma_get_devices gave.
    unsafe { rdma_free_devices(list) };
    if n as usize == addrs.len() {
        return;
    }
    for &a in addrs {
        if let Err(e) = UdpSocket::bind((a, 4791)) {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                netlease::child::taken(&format!("{a}: {e}"));
            }
        }
    }
    panic!("the library opened {n} devices of {}", addrs.len());
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A `sockaddr_in` for `ip:port`.
pub fn sin(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    }
}

pub fn sa(s: &mut libc::sockaddr_in) -> *mut libc::sockaddr {
    (s as *mut libc::sockaddr_in).cast()
}

/// The IPv4 address and port in a `sockaddr` the library wrote.
pub fn read(p: *const libc::sockaddr) -> SocketAddr {
    // SAFETY: an AF_INET sockaddr of the library's (checked).
    unsafe {
        assert_eq!((*p).sa_family as i32, libc::AF_INET);
        let s = &*p.cast::<libc::sockaddr_in>();
        SocketAddr::new(IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))), u16::from_be(s.sin_port))
    }
}

pub fn channel() -> *mut rdma_event_channel {
    let ch = rdma_create_event_channel();
    assert!(!ch.is_null(), "rdma_create_event_channel: errno {}", errno());
    ch
}

pub fn id(ch: *mut rdma_event_channel, ps: u32) -> *mut rdma_cm_id {
    let mut id = null_mut();
    // SAFETY: a channel of ours, an out-pointer.
    assert_eq!(unsafe { rdma_create_id(ch, &mut id, null_mut(), ps) }, 0, "rdma_create_id: errno {}", errno());
    id
}

/// Whether `ch`'s fd polls readable within `t`.
pub fn readable(ch: *mut rdma_event_channel, t: Duration) -> bool {
    // SAFETY: the channel's fd, open while the channel lives.
    let fd = unsafe { BorrowedFd::borrow_raw((*ch).fd) };
    let mut ready = [false];
    osdep::poll_readable(&[fd], t, &mut ready).expect("poll") == 1
}

/// The next event of `ch` within [`WAIT`]: (type, status, id, listen id); acknowledged after
/// `look` saw it.
#[track_caller]
pub fn next_with<R>(ch: *mut rdma_event_channel, look: impl FnOnce(&rdma_cm_event) -> R) -> R {
    assert!(readable(ch, WAIT), "no event within {WAIT:?}");
    let mut e = null_mut();
    // SAFETY: a channel of ours, readable: the call does not block.
    assert_eq!(unsafe { rdma_get_cm_event(ch, &mut e) }, 0, "rdma_get_cm_event: errno {}", errno());
    // SAFETY: the event just delivered.
    let r = look(unsafe { &*e });
    // SAFETY: as above, acknowledged once.
    assert_eq!(unsafe { rdma_ack_cm_event(e) }, 0);
    r
}

/// The next event's type and status.
#[track_caller]
pub fn next(ch: *mut rdma_event_channel) -> (u32, i32) {
    next_with(ch, |e| (e.event, e.status))
}

/// The name of an event type.
pub fn name(event: u32) -> String {
    // SAFETY: rdma_event_str gives a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(rdma_event_str(event)) }.to_string_lossy().into_owned()
}

/// Expects the next event to be `want` with status 0.
#[track_caller]
pub fn expect(ch: *mut rdma_event_channel, want: u32) {
    let (got, status) = next(ch);
    assert_eq!((name(got), status), (name(want), 0));
}

/// An RC id of `ch` with its address and route resolved from `src` to `dst`.
pub fn routed(ch: *mut rdma_event_channel, ps: u32, src: Ipv4Addr, dst: SocketAddr) -> *mut rdma_cm_id {
    let id = id(ch, ps);
    let SocketAddr::V4(d) = dst else { panic!("IPv4") };
    let (mut s, mut d) = (sin(src, 0), sin(*d.ip(), d.port()));
    // SAFETY: an id of ours; sockaddrs on the stack.
    assert_eq!(unsafe { rdma_resolve_addr(id, sa(&mut s), sa(&mut d), 2000) }, 0, "errno {}", errno());
    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    // SAFETY: as above.
    assert_eq!(unsafe { rdma_resolve_route(id, 2000) }, 0, "errno {}", errno());
    expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    id
}

/// A listener of `ch` on `ip`, an ephemeral port; returns it and its address.
pub fn listener(ch: *mut rdma_event_channel, ps: u32, ip: Ipv4Addr) -> (*mut rdma_cm_id, SocketAddr) {
    let l = id(ch, ps);
    let mut s = sin(ip, 0);
    // SAFETY: an id of ours; a sockaddr on the stack.
    unsafe {
        assert_eq!(rdma_bind_addr(l, sa(&mut s)), 0, "rdma_bind_addr: errno {}", errno());
        assert_eq!(rdma_listen(l, 8), 0, "rdma_listen: errno {}", errno());
        (l, read(&(*l).route.addr.src as *const libc::sockaddr_storage as *const libc::sockaddr))
    }
}

/// `rdma_conn_param` with `qp_num` and no private data.
pub fn conn_param(qp_num: u32) -> rdma_conn_param {
    rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num,
    }
}
