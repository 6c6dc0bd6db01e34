//! A test whose resources something else binds for it, once per process: the model devices a
//! library opens from its environment on first use (`HCA_DEVICES=model,roce=A`), where the
//! test cannot retry in-process once the library has read it. The test runs again, as a child
//! of the test binary with only this test (`--exact NAME`), told its candidates through an
//! environment variable; a child that finds a candidate taken ends with [`TAKEN_EXIT`]
//! ([`taken`]) and the next child gets fresh ones, at most [`crate::ATTEMPTS`] times. The first
//! child that binds holds its resources for its whole run (the library's model is the holder),
//! and its result is the test's.

use crate::Fresh;
use std::io::Write;

/// The exit status of a child that found one of its candidates taken.
pub const TAKEN_EXIT: i32 = 75;
/// Set in the child: the test's name (so a variable left set in a shell does not make every test
/// a child).
const CHILD_ENV: &str = "NETLEASE_CHILD";
const DONE: &str = "netlease: passed as a child:";

/// Runs `body` in a child of the test binary with `var` set to a value `pick` made of fresh
/// candidates, again with others while the child reports them [`taken`]. In the child itself
/// `body` runs with `var` already set. A child that fails, or does not end within 300 s
/// (killed), fails the calling test, with its output.
///
/// Call it on the test's own thread: libtest names that thread after the test, which is how the
/// child is told which test to run.
#[track_caller]
pub fn retried(var: &str, mut pick: impl FnMut(&mut Fresh) -> String, body: impl FnOnce()) {
    let name = test_name();
    if std::env::var(CHILD_ENV).ok().as_deref() == Some(name.as_str()) {
        body();
        let _ = writeln!(std::io::stderr(), "{DONE} {name}");
        return;
    }
    let mut last = String::new();
    for _ in 0..crate::ATTEMPTS {
        let value = pick(&mut Fresh(()));
        let env = [(CHILD_ENV, name.as_str()), (var, value.as_str())];
        let (status, text) = crate::rerun::rerun(&[], &name, &env).unwrap_or_else(|e| panic!("netlease: {e}"));
        eprint!("{text}");
        match status.map(|s| s.code().unwrap_or(-1)) {
            Some(0) if text.contains(&format!("{DONE} {name}")) => return,
            Some(TAKEN_EXIT) => last = format!("{var}={value}"),
            Some(0) => panic!("netlease: the test binary, run again, ran no test named {name:?}; its output:\n{text}"),
            Some(c) => panic!("netlease: {name} failed as a child (exit {c}); its output:\n{text}"),
            None => panic!(
                "netlease: {name} did not end within {:?} as a child (killed); its output:\n{text}",
                crate::rerun::LIMIT
            ),
        }
    }
    panic!("netlease: {name}: all {} candidates were taken, the last {last}", crate::ATTEMPTS)
}

/// In a child of [`retried`]: one of the candidates it was told is taken. Ends the child with
/// [`TAKEN_EXIT`] (so the parent tries others) after printing `why`.
pub fn taken(why: &str) -> ! {
    let _ = writeln!(std::io::stderr(), "netlease: a candidate is taken: {why}");
    std::process::exit(TAKEN_EXIT)
}

fn test_name() -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        other => panic!(
            "netlease::child::retried runs on a test's own thread (libtest names it after the test), not {other:?}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, UdpSocket};

    /// The body runs only in a child; a child that finds its candidate taken (here the address a
    /// socket of the parent holds) is run again with a fresh one, and the parent passes when a
    /// child does.
    #[test]
    fn a_taken_candidate_is_tried_again_in_a_new_child() {
        let held = crate::udp_v4(0);
        let at = held.local_addr().unwrap();
        let mut first = Some(at);
        let mut tries = 0;
        retried(
            "NETLEASE_TEST_ADDR",
            |f| {
                tries += 1;
                first.take().unwrap_or_else(|| SocketAddr::new(f.v4().into(), at.port())).to_string()
            },
            || {
                let a: SocketAddr = std::env::var("NETLEASE_TEST_ADDR").unwrap().parse().unwrap();
                assert_eq!(
                    std::env::var(CHILD_ENV).as_deref(),
                    Ok("child::tests::a_taken_candidate_is_tried_again_in_a_new_child")
                );
                match UdpSocket::bind(a) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => taken(&e.to_string()),
                    Err(e) => panic!("{e}"),
                }
            },
        );
        // In the parent: the first child found the held address taken, the second bound.
        if std::env::var(CHILD_ENV).is_err() {
            assert_eq!(tries, 2);
        }
        drop(held);
    }
}
