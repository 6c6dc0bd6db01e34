//! The test binary run again with one test, as a child: what [`crate::netns`] and
//! [`crate::child`] both do.

use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest a child may run.
pub(crate) const LIMIT: Duration = Duration::from_secs(300);

/// Runs the test binary again with only the test `name` (`--exact --nocapture`, one thread),
/// under `wrapper` (a command and its arguments before the binary, e.g. `unshare -n --`; none:
/// the binary itself) and with `env` added, its output in a log read back. Returns its status
/// (`None`: killed at [`LIMIT`]) and its output; `Err` if it could not be started.
pub(crate) fn rerun(
    wrapper: &[&str],
    name: &str,
    env: &[(&str, &str)],
) -> Result<(Option<ExitStatus>, String), String> {
    static N: AtomicU64 = AtomicU64::new(0);
    let exe = std::env::current_exe().map_err(|e| format!("the test binary: {e}"))?;
    let log =
        std::env::temp_dir().join(format!("netlease-{}-{}.log", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.args([name, "--exact", "--nocapture", "--test-threads", "1"]).envs(env.iter().copied());
    let spawned = cmd.stdin(Stdio::null()).stdout(file).stderr(err).spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&log);
            return Err(format!("{}: {e}", wrapper.first().copied().unwrap_or("the test binary")));
        }
    };
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Err(e) => panic!("netlease: waiting for the child: {e}"),
        }
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    Ok((status, text))
}
