//! Network resources a test holds from the moment it learns them.
//!
//! The rule every test of the workspace follows: a test creates every resource it needs, or holds
//! it from the moment it learns it. No port is found free and then released (anything may take
//! it in between). No address is assumed on the host: only loopback is there, `lo` with 127/8.
//! No fixed port is used that another program, or another test binary running at the same time,
//! may hold. Two runs of the test command at once (two clones, two test binaries) then never
//! collide, and the command passes on a machine with nothing but `lo`.
//!
//! - The model's RoCE v2 port binds UDP 4791, a fixed port (IBTA's), on its address: a test
//!   holds a 127/8 address by binding it there. [`v4`] tries candidate addresses with the
//!   caller's closure (create the model device on it, bind the fake peer's socket) until one
//!   binds, and the bound socket (the model's port) is the holder. The candidates start at a
//!   point that varies per process, so concurrent runs rarely even try the same one; a taken
//!   one is skipped.
//! - [`hold`] hands out fresh addresses and ports together, for a child process told both
//!   (`hca --roce A pingpong -p P`): when the child reports one of them taken ([`says_taken`]),
//!   the test runs it again with others.
//! - A test that is the TCP server binds port 0 and keeps the listener. A test that needs a port
//!   where nothing listens holds one bound but not listening: [`ClosedTcpPort`]. A child that is
//!   the server is connected to only once it listens ([`wait_listening`]), so a test never
//!   reaches another run's server on the same port.
//! - A test that needs IPv6 (two addresses, or `::1` at UDP 4791) runs in a network namespace of
//!   its own, made for it: [`netns::own`]. Where none can be made it runs the case over IPv4 on
//!   127/8 and prints why; it never skips silently.
//! - A test whose addresses a library binds for it, once per process (the model devices
//!   `HCA_DEVICES` names), runs as a child told its candidates, again with fresh ones while a
//!   child finds them taken: [`child::retried`].
#![deny(unsafe_code)]

pub mod child;
// geteuid(2).
#[allow(unsafe_code)]
pub mod netns;
mod rerun;
// socket(2), bind(2), getsockname(2) over libc's socket address structures.
#[allow(unsafe_code)]
mod tcp;

pub use tcp::{listens, wait_listening, ClosedTcpPort, Listening};

use std::collections::hash_map::RandomState;
use std::error::Error;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Attempts [`hold`] (and [`v4`]) makes before it gives up.
pub const ATTEMPTS: usize = 64;

/// What one attempt made of its candidates.
#[derive(Debug)]
pub enum Attempt<T> {
    /// Bound: the value holds the resource.
    Held(T),
    /// Someone else holds a candidate (`EADDRINUSE`): the reason, and the next attempt takes
    /// others.
    Taken(String),
}

impl<T> Attempt<T> {
    /// `Held` for `Ok`; `Taken` for an error that is, or is caused by, `EADDRINUSE` ([`is_taken`]).
    /// Any other error is the test's failure: it panics with it.
    #[track_caller]
    pub fn of<E: Error + 'static>(r: Result<T, E>) -> Self {
        match r {
            Ok(v) => Attempt::Held(v),
            Err(e) if is_taken(&e) => Attempt::Taken(e.to_string()),
            Err(e) => panic!("netlease: not a resource someone else holds, a failure: {e}"),
        }
    }
}

/// Whether `e`, or an error in its chain of sources, is an I/O error of kind `AddrInUse`.
pub fn is_taken(e: &(dyn Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        let io = e.downcast_ref::<io::Error>().or_else(|| e.downcast_ref::<Arc<io::Error>>().map(|a| &**a));
        if io.is_some_and(|io| io.kind() == io::ErrorKind::AddrInUse) {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Whether a child's output reports `EADDRINUSE` as Rust words it ("Address already in use (os
/// error 98)"): the child could not bind what it was told to.
pub fn says_taken(text: &str) -> bool {
    text.contains(&io::Error::from_raw_os_error(libc::EADDRINUSE).to_string())
}

/// Hands out fresh candidates to one attempt of [`hold`].
pub struct Fresh(());

impl Fresh {
    /// A 127/8 address no earlier call of this process handed out: `127.16.0.1` to
    /// `127.254.255.254` (not `127.0/16`, where the host's own services listen: `127.0.0.1`,
    /// `127.0.0.53`, `127.0.1.1`).
    pub fn v4(&mut self) -> Ipv4Addr {
        const HOSTS: u64 = 254;
        const SPAN: u64 = (255 - 16) * 256 * HOSTS;
        let i = next(&V4, SPAN);
        let (second, third, fourth) = (16 + i / (256 * HOSTS), (i / HOSTS) % 256, 1 + i % HOSTS);
        Ipv4Addr::new(127, second as u8, third as u8, fourth as u8)
    }

    /// A port, TCP or UDP, no earlier call of this process handed out: 20000 to 32767, below
    /// Linux's ephemeral range (32768-60999), so a port the kernel picks for someone's port-0
    /// bind or connection is never among them.
    pub fn port(&mut self) -> u16 {
        const FIRST: u64 = 20_000;
        const SPAN: u64 = 32_768 - FIRST;
        (FIRST + next(&PORT, SPAN)) as u16
    }
}

static V4: OnceLock<AtomicU64> = OnceLock::new();
static PORT: OnceLock<AtomicU64> = OnceLock::new();

/// The next of `span` candidates, in order from a start this process drew at random (from the
/// pid and the hasher's per-process random keys): two processes rarely start near each other.
fn next(counter: &OnceLock<AtomicU64>, span: u64) -> u64 {
    let c = counter.get_or_init(|| {
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        AtomicU64::new(h.finish() % span)
    });
    c.fetch_add(1, Ordering::Relaxed) % span
}

/// Runs `attempt` with fresh candidates until it holds what it bound, at most [`ATTEMPTS`] times;
/// `what` names the resource in the panic when every attempt found its candidates taken.
#[track_caller]
pub fn hold<T>(what: &str, mut attempt: impl FnMut(&mut Fresh) -> Attempt<T>) -> T {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        match attempt(&mut Fresh(())) {
            Attempt::Held(v) => return v,
            Attempt::Taken(why) => last = why,
        }
    }
    panic!(
        "netlease: {what}: all {ATTEMPTS} candidates were taken, the last with: {last} \
         (a wildcard bind of the port, e.g. Linux's rdma_rxe on UDP 4791, takes every address)"
    )
}

/// [`hold`] with one fresh 127/8 address per attempt.
#[track_caller]
pub fn v4<T>(what: &str, mut attempt: impl FnMut(Ipv4Addr) -> Attempt<T>) -> T {
    hold(what, |f| attempt(f.v4()))
}

/// A UDP socket bound to `port` of a 127/8 address of its own (a fake RoCE peer at 4791; with
/// port 0, a sender at an address no other socket of the test has).
#[track_caller]
pub fn udp_v4(port: u16) -> UdpSocket {
    v4("a UDP socket on 127/8", |ip| Attempt::of(UdpSocket::bind((ip, port))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn candidates_are_loopback_unicast_and_never_repeat_in_a_process() {
        let mut f = Fresh(());
        let mut seen = HashSet::new();
        for _ in 0..10_000 {
            let a = f.v4();
            let [x, y, _, w] = a.octets();
            assert!(x == 127 && (16..=254).contains(&y) && (1..=254).contains(&w), "{a}");
            assert!(seen.insert(a), "{a} twice");
        }
        let ports: HashSet<u16> = (0..1000).map(|_| f.port()).collect();
        assert_eq!(ports.len(), 1000);
        assert!(ports.iter().all(|p| (20_000..32_768).contains(p)));
    }

    #[test]
    fn a_taken_address_is_skipped_and_the_next_one_held() {
        let first = udp_v4(4791);
        let taken = first.local_addr().unwrap().ip();
        let mut tries = Vec::new();
        let mut once = Some(taken);
        let sock = v4("a test socket", |ip| {
            // The first attempt is pointed at the address held above.
            let ip = once.take().unwrap_or(ip.into());
            tries.push(ip);
            Attempt::of(UdpSocket::bind((ip, 4791)))
        });
        assert_eq!(tries.len(), 2, "{tries:?}");
        assert_eq!(tries[0], taken);
        assert_eq!(sock.local_addr().unwrap().ip(), tries[1]);
    }

    #[test]
    #[should_panic(expected = "all 64 candidates were taken")]
    fn every_candidate_taken_panics_with_what_and_why() {
        v4::<()>("nothing", |_| Attempt::Taken("held".into()));
    }

    #[test]
    #[should_panic(expected = "a failure")]
    fn an_error_other_than_taken_fails_the_test() {
        let _ = Attempt::of(UdpSocket::bind(("192.0.2.1", 4791)));
    }

    #[test]
    fn taken_is_found_through_sources_and_in_a_childs_words() {
        #[derive(Debug)]
        struct Wrap(Arc<io::Error>);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot bind: {}", self.0)
            }
        }
        impl Error for Wrap {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let inuse = Wrap(Arc::new(io::Error::from_raw_os_error(libc::EADDRINUSE)));
        assert!(is_taken(&inuse));
        assert!(!is_taken(&Wrap(Arc::new(io::Error::from_raw_os_error(libc::EADDRNOTAVAIL)))));
        assert!(says_taken(&format!("cannot open the built-in device: {inuse}")));
        assert!(!says_taken("Couldn't connect to 127.0.0.1:5: Connection refused (os error 111)"));
    }
}
