//! Tests in a network namespace of their own.
//!
//! A host has one IPv6 loopback address, `::1`, and one UDP 4791 on it; a test that needs two
//! IPv6 addresses, or `::1` at the RoCE port, would have to assume an address on the host or take
//! a port another run may hold. (A test that reads every packet of the host through a raw socket
//! would see every other test's too.) So such a test runs in a network namespace made for it:
//! the test binary runs again, as a child, with only this test (`--exact NAME`), under
//! `unshare -n` (as root) or `unshare -rn` (a user namespace too, where unprivileged user
//! namespaces are allowed; it also grants the raw socket's CAP_NET_RAW there). The child brings
//! `lo` up (127.0.0.1 and `::1`), adds [`SECOND`] (`fd00::2`) to it, and runs the body there, no
//! one else in the namespace; its exit status decides the test's result. Where no namespace can
//! be made (no `unshare` or `ip`, or refused), the body runs in the test itself, on the host's
//! loopback (an IPv6 case over IPv4 on 127/8), and the reason is printed to stderr, uncaptured:
//! never a silent skip.

use std::io::Write;
use std::net::{Ipv6Addr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The first IPv6 address of the namespace: `::1`.
pub const FIRST: Ipv6Addr = Ipv6Addr::LOCALHOST;
/// The second, added to the namespace's `lo`: `fd00::2` (a unique-local address, so the case
/// would never reach a host that happened to have it).
pub const SECOND: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

/// Set (to any value) to run every such test on the host's loopback instead, as where no
/// namespace can be made: a way to run the fallback on a machine that has namespaces.
pub const NO_NETNS_ENV: &str = "NETLEASE_NO_NETNS";
/// Set in the child: the test's name and the parent's network namespace (see [`marker`]).
const CHILD_ENV: &str = "NETLEASE_NETNS_CHILD";
/// The exit status of a child that was started but could not set its namespace up.
const NO_NETNS_EXIT: i32 = 77;

/// Where the body of [`own`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Netns {
    /// In the test's own network namespace: `lo` up with 127/8, [`FIRST`] and [`SECOND`]; no one
    /// else is there, so every port (UDP 4791 too) is free and every packet is the test's.
    Own,
    /// No namespace could be made (the reason is printed): on the host's loopback, where 127/8
    /// addresses are held as the rest of the crate holds them, and an IPv6 case runs over IPv4.
    Host,
}

/// Runs `body` in a network namespace of the calling test's own, or, where none can be made,
/// here with [`Netns::Host`] after printing why. The child's failure (a panic, an exit other
/// than success, no end within 300 s) fails the calling test, with the child's output.
///
/// Call it on the test's own thread: libtest names that thread after the test, which is how the
/// child is told which test to run.
#[track_caller]
pub fn own(body: impl FnOnce(Netns)) {
    let name = test_name();
    let inside = std::env::var(CHILD_ENV).ok();
    if let Some(m) = inside.as_deref().filter(|m| m.split('\n').next() == Some(name.as_str())) {
        raw(&format!("{} {name}", STARTED));
        if let Err(why) = set_up(m) {
            raw(&format!("{} {why}", NO_NETNS));
            std::process::exit(NO_NETNS_EXIT);
        }
        body(Netns::Own);
        raw(&format!("{} {name}", DONE));
        return;
    }
    let why = match std::env::var_os(NO_NETNS_ENV) {
        Some(_) => format!("{NO_NETNS_ENV} is set"),
        None => match in_child(&name) {
            Ok(()) => return,
            Err(why) => why,
        },
    };
    raw(&format!(
        "netlease: {name}: no network namespace of its own ({why}); it runs on the host's loopback \
         (an IPv6 case over IPv4 on 127/8)"
    ));
    body(Netns::Host);
}

const STARTED: &str = "netlease: started in a network namespace of its own:";
const DONE: &str = "netlease: passed in a network namespace of its own:";
const NO_NETNS: &str = "netlease: the namespace could not be set up:";

/// To the process's stderr itself, past libtest's capture: shown whatever the test's outcome.
fn raw(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn test_name() -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        other => {
            panic!("netlease::netns::own runs on a test's own thread (libtest names it after the test), not {other:?}")
        }
    }
}

/// This process's network namespace (`net:[INODE]`).
fn netns_id() -> String {
    std::fs::read_link("/proc/self/ns/net").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
}

/// What the child is told: the test's name and the parent's namespace, so the child refuses to
/// change a namespace that is not its own (a marker left set in a shell, say).
fn marker(name: &str) -> String {
    format!("{name}\n{}", netns_id())
}

/// In the child: `lo` up, [`SECOND`] on it, both addresses bindable.
fn set_up(marker: &str) -> Result<(), String> {
    let parent = marker.split('\n').nth(1).unwrap_or("");
    if parent.is_empty() || netns_id() == parent {
        return Err("not in a network namespace of its own".into());
    }
    let second = format!("{SECOND}/128");
    ip(&["link", "set", "lo", "up"])?;
    ip(&["-6", "addr", "add", &second, "dev", "lo", "nodad"])?;
    // The kernel finishes adding an address (its local route) on a work queue of its own, later,
    // and a datagram sent before then is lost: wait (bounded) until one gets through each way.
    let bind = |a: Ipv6Addr| {
        let s = UdpSocket::bind((a, 0)).map_err(|e| format!("[{a}] cannot be bound: {e}"))?;
        s.set_read_timeout(Some(Duration::from_millis(20))).map_err(|e| e.to_string())?;
        Ok::<_, String>(s)
    };
    let (x, y) = (bind(FIRST)?, bind(SECOND)?);
    for (from, to) in [(&x, &y), (&y, &x)] {
        let dst = to.local_addr().map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // (A send refused while the route is missing is tried again too.)
            let _ = from.send_to(b"up?", dst);
            if to.recv_from(&mut [0u8; 8]).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no datagram from {} reached {dst} within 10 s",
                    from.local_addr().map_err(|e| e.to_string())?
                ));
            }
        }
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output().map_err(|e| format!("ip: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("ip {}: {} {}", args.join(" "), out.status, err.trim()));
    }
    Ok(())
}

/// Runs the test `name` again in a child of its own namespace: `Ok` when it passed there, `Err`
/// with the reason when no namespace could be made; panics when the test failed there.
fn in_child(name: &str) -> Result<(), String> {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let ways: &[&str] = if root { &["-n", "-rn"] } else { &["-rn"] };
    let mut refused = Vec::new();
    for how in ways {
        let marker = marker(name);
        let env = [(CHILD_ENV, marker.as_str())];
        let (status, text) = match crate::rerun::rerun(&["unshare", how, "--"], name, &env) {
            Ok(r) => r,
            Err(e) => {
                refused.push(format!("unshare {how}: {e}"));
                continue;
            }
        };
        // Captured by libtest: shown when the test fails, or with --nocapture.
        eprint!("{text}");
        let Some(status) = status else {
            panic!(
                "netlease: {name} did not end within {:?} in its own network namespace (killed); its output:\n{text}",
                crate::rerun::LIMIT
            );
        };
        if !text.contains(&format!("{STARTED} {name}")) {
            if status.success() {
                panic!("netlease: the test binary, run again, ran no test named {name:?}; its output:\n{text}");
            }
            refused.push(format!("unshare {how}: {status}: {}", text.trim()));
            continue;
        }
        if status.code() == Some(NO_NETNS_EXIT) {
            if let Some(why) = text.lines().find_map(|l| l.strip_prefix(NO_NETNS)) {
                refused.push(format!("unshare {how}: {}", why.trim()));
                continue;
            }
        }
        if status.success() && text.contains(&format!("{DONE} {name}")) {
            return Ok(());
        }
        panic!("netlease: {name} failed in its own network namespace ({status}); its output:\n{text}");
    }
    Err(refused.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn the_body_runs_once_with_two_ipv6_addresses_or_over_ipv4() {
        let mut runs = 0;
        own(|net| {
            runs += 1;
            match net {
                Netns::Own => {
                    // Both addresses, UDP 4791 on each free: this namespace is the test's.
                    let a = UdpSocket::bind((FIRST, 4791)).unwrap();
                    let b = UdpSocket::bind((SECOND, 4791)).unwrap();
                    a.send_to(b"hello", b.local_addr().unwrap()).unwrap();
                    let mut buf = [0u8; 8];
                    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let (n, from) = b.recv_from(&mut buf).unwrap();
                    assert_eq!((&buf[..n], from), (&b"hello"[..], a.local_addr().unwrap()));
                }
                Netns::Host => {
                    let s = crate::udp_v4(4791);
                    assert!(s.local_addr().unwrap().ip().is_loopback());
                }
            }
        });
        // Here once over IPv4, or not at all here (in the child once).
        assert!(runs <= 1, "the body ran {runs} times");
    }

    /// The child's failure is the test's, with the child's output.
    #[test]
    fn a_body_that_fails_in_the_namespace_fails_the_test() {
        let fallback = std::sync::atomic::AtomicBool::new(false);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            own(|net| match net {
                Netns::Own => panic!("as a broken case panics"),
                Netns::Host => fallback.store(true, Ordering::Relaxed),
            })
        }));
        match r {
            // (In the child itself the body's own panic arrives here, and fails the child.)
            Err(e) => {
                let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
                assert!(
                    msg.contains("failed in its own network namespace") && msg.contains("as a broken case panics"),
                    "{msg}"
                );
            }
            Ok(()) => assert!(fallback.load(Ordering::Relaxed), "no failure, and no fallback either"),
        }
    }

    #[test]
    fn a_child_refuses_a_namespace_that_is_not_its_own() {
        let m = marker("x");
        assert_eq!(set_up(&m), Err("not in a network namespace of its own".into()));
        assert!(set_up("x").is_err());
    }
}
