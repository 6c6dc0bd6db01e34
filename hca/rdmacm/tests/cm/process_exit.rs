//! A process that exits with a connection still up: its peer hears of it at once, as from a
//! Linux process whose `rdma_cm` file the kernel closes (`ucma_close` destroys its ids, the CM
//! sends a DREQ). Here the CM lives in the library, so its exit handler sends the DREQ
//! (`hca/rdmacm/src/exit.rs`). Found by qperf -cm1, whose server child exits without
//! disconnecting: its client's `rdma_disconnect` waited out its DREQ's retries.
//!
//! Two processes: this test's (a listener on device 0) and the test binary run again as the
//! peer (`peer_process`, `--ignored --exact`), with a device of its own on a fresh address,
//! which connects, waits for ESTABLISHED, and calls `exit` without disconnecting.

use crate::fixture::*;
use rdmacm_compat::abi::*;
use rdmacm_compat::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PEER_ENV: &str = "RDMACM_EXIT_TEST_LISTENER";
/// The exit status of a peer whose address was taken (another is tried).
const TAKEN: i32 = 75;

#[test]
fn a_process_that_exits_connected_sends_its_peer_a_dreq() {
    run(|a, _| {
        let ch = channel();
        let (l, laddr) = listener(ch, RDMA_PS_TCP, a);
        let mut peer = netlease::v4("the peer process's address", |c| requested(ch, c, laddr));
        let s = next_with(ch, |e| {
            assert_eq!(name(e.event), name(RDMA_CM_EVENT_CONNECT_REQUEST));
            e.id
        });
        let mut sp = conn_param(0x52);
        // SAFETY: the request's id; parameters on the stack.
        assert_eq!(unsafe { rdma_accept(s, &mut sp) }, 0, "rdma_accept: errno {}", errno());
        expect(ch, RDMA_CM_EVENT_ESTABLISHED);
        let t0 = Instant::now();
        // The peer exits now; its DREQ ends the connection well before a DREQ of ours could
        // time out, and before WAIT.
        expect(ch, RDMA_CM_EVENT_DISCONNECTED);
        let took = t0.elapsed();
        let status = peer.wait().expect("the peer's status");
        assert!(status.success(), "the peer: {status:?}");
        assert!(took < Duration::from_secs(5), "DISCONNECTED {took:?} after ESTABLISHED");
        // SAFETY: ids and a channel of ours, no event outstanding.
        unsafe {
            assert_eq!(rdma_disconnect(s), 0);
            assert_eq!(rdma_destroy_id(s), 0);
            assert_eq!(rdma_destroy_id(l), 0);
            rdma_destroy_event_channel(ch);
        }
    })
}

/// The peer started on a device of its own at `c`, connecting to `to`, once its CONNECT_REQUEST
/// waits on `ch`; `Taken` when the peer could not bind `c` (it ends with [`TAKEN`]).
fn requested(ch: *mut rdma_event_channel, c: Ipv4Addr, to: SocketAddr) -> netlease::Attempt<Child> {
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args(["--ignored", "--exact", "process_exit::peer_process", "--nocapture"])
        .env(PEER_ENV, format!("{c},{to}"))
        .env("HCA_DEVICES", format!("model,roce={c}"))
        .env_remove("NETLEASE_CHILD")
        .stdout(Stdio::null())
        .spawn()
        .expect("the peer process");
    let deadline = Instant::now() + WAIT;
    while !readable(ch, Duration::from_millis(50)) {
        match child.try_wait().expect("the peer's status") {
            Some(st) if st.code() == Some(TAKEN) => return netlease::Attempt::Taken(format!("{c}: UDP 4791")),
            Some(st) => panic!("the peer ended before its request came: {st:?}"),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                panic!("no CONNECT_REQUEST from the peer within {WAIT:?}");
            }
            None => {}
        }
    }
    netlease::Attempt::Held(child)
}

/// The peer of [`a_process_that_exits_connected_sends_its_peer_a_dreq`], run by it (ignored
/// otherwise): connects without a QP, establishes, and exits without disconnecting.
#[test]
#[ignore = "the peer process of a_process_that_exits_connected_sends_its_peer_a_dreq, run by it"]
fn peer_process() {
    let Ok(v) = std::env::var(PEER_ENV) else { return };
    let (c, to) = v.split_once(',').expect("ADDR,LISTENER");
    let (c, to): (Ipv4Addr, SocketAddr) = (c.parse().unwrap(), to.parse().unwrap());
    let mut n = 0;
    // SAFETY: an out-pointer; the list is freed at once.
    unsafe { rdma_free_devices(rdma_get_devices(&mut n)) };
    if n != 1 {
        std::process::exit(TAKEN);
    }
    let ch = channel();
    let id = routed(ch, RDMA_PS_TCP, c, to);
    let mut cp = conn_param(0x51);
    // SAFETY: an id of ours; parameters on the stack.
    assert_eq!(unsafe { rdma_connect(id, &mut cp) }, 0, "rdma_connect: errno {}", errno());
    expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
    // SAFETY: as above.
    assert_eq!(unsafe { rdma_establish(id) }, 0, "rdma_establish: errno {}", errno());
    // Let the RTU go before the process ends (the exit handler sends only the DREQ).
    std::thread::sleep(Duration::from_millis(200));
    std::process::exit(0);
}
