//! The end of the process, as a kernel ends it: when a process exits, Linux closes its
//! `/dev/infiniband/rdma_cm` file and `ucma_close` destroys every id still open
//! (`drivers/infiniband/core/ucma.c`), so the kernel's CM sends what `cm_destroy_id` sends — a
//! DREQ for an established connection, a DREP for a received DREQ, a REJ for a request in
//! flight — and the peer hears of it at once instead of waiting out its DREQ's retries. Here the
//! CM dies with the process, so an `atexit` handler does the same: it destroys every CM ID of
//! each device's CM and waits, boundedly, for the GSI QPs to put those MADs on the wire. A process killed by a
//! signal sends nothing (its peer's retries and time-outs end the connection, as for a host that
//! vanished). Found by qperf -cm1: its server's child exits after the results without
//! disconnecting, and the client's `rdma_disconnect` waited its DREQ's retries out.

use crate::ffi::guard;
use crate::sys::{hca_gsi, hca_gsi_sends_in_flight};
use crate::world::{try_lock, Locked};
use std::sync::Once;
use std::time::{Duration, Instant};

/// How long the handler waits for the library's lock (another thread may hold it at exit).
const LOCK_WAIT: Duration = Duration::from_millis(100);
/// How long it waits for the last MADs to leave.
const SEND_WAIT: Duration = Duration::from_millis(200);

/// Registers the handler, once per process (with the first CM).
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds (it runs under `guard`).
        unsafe { libc::atexit(at_exit) };
    });
}

extern "C" fn at_exit() {
    guard((), || {
        let Some(w) = lock_within(LOCK_WAIT) else { return };
        let gsis = release_all(w);
        let deadline = Instant::now() + SEND_WAIT;
        // SAFETY: handles our libibverbs opened for this process's CMs, never closed.
        let busy = || gsis.iter().any(|&g| unsafe { hca_gsi_sends_in_flight(g as *mut hca_gsi) } > 0);
        while busy() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// Every CM ID of every device destroyed (the MADs go out now, from this thread); the GSI
/// handles.
fn release_all(w: Locked) -> Vec<usize> {
    let cms: Vec<_> = w.cms.iter().flatten().map(|d| (d.cm.clone(), d.gsi)).collect();
    drop(w);
    let now = Instant::now();
    cms.iter().for_each(|(cm, _)| cm.destroy_all(now));
    cms.into_iter().map(|(_, gsi)| gsi).collect()
}

fn lock_within(wait: Duration) -> Option<Locked> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(w) = try_lock() {
            return Some(w);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
