//! The tool's calls into libc: CPU time of this process (to show that event mode sleeps) and
//! SIGPIPE's default action.

use std::time::Duration;

/// User plus system CPU time consumed by the whole process so far.
pub fn process_cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory the size of `rusage`; getrusage fills it in and
    // RUSAGE_SELF is always a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: getrusage returned 0, so it initialised the whole struct (and it was zeroed before).
    let ru = unsafe { ru.assume_init() };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

/// Restores SIGPIPE's default action, which Rust's runtime replaces with "ignore": a tool whose
/// reader went away (`hca pingpong | head -1`) then ends quietly, as rdma-core's C tools do,
/// instead of failing on a write.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler and touches no memory
    // of this process; it runs in `main` before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
