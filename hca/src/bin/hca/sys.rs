//! The tool's calls into libc: CPU time of this process (to show that event mode sleeps),
//! `ibv_rc_pingpong`'s random PSN, the page size, and
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

/// A start PSN as `ibv_rc_pingpong` draws it: `lrand48() & 0xffffff`, the generator seeded
/// with `getpid() * time(NULL)` on the first call.
pub fn random_psn() -> u32 {
    static SEED: std::sync::Once = std::sync::Once::new();
    let pid = std::process::id() as libc::c_long;
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as libc::c_long);
    // SAFETY: srand48 and lrand48 only touch libc's own generator state; the Once runs the seed
    // once, and this tool draws PSNs from one thread.
    SEED.call_once(|| unsafe { libc::srand48(pid.wrapping_mul(now)) });
    // SAFETY: as above.
    let r = unsafe { libc::lrand48() };
    (r & 0xff_ffff) as u32
}

/// The system's page size (`sysconf(_SC_PAGESIZE)`), 4096 if it cannot say.
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a configuration value and touches no memory of this process.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).ok().filter(|&p| p > 0).unwrap_or(4096)
}
