//! The sync primitives of the per-CQ arm state machine (`events/arm.rs`) and of notify requests
//! (`events/notify.rs`): `std`'s in a normal build, `loom`'s under `--cfg loom`, so the model check
//! (`hca/ib-core/tests/loom_arm.rs`) explores the very code the driver runs. Everything else in the crate
//! uses `parking_lot` and `std` directly; only these two modules go through here.

#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use std::time::{Duration, Instant};

/// Locks `m`. A poisoned lock (a panic while it was held) is taken over: the state behind these
/// locks is updated in single steps that leave it consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `cv` until `deadline` at the latest; returns the guard. Under loom the wait has no
/// timeout (loom has no clock): a wait that nothing ends is reported by loom as a deadlock, which
/// is how the model check sees a lost wake-up.
pub(crate) fn wait_until<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>, deadline: Instant) -> MutexGuard<'a, T> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left == Duration::ZERO && cfg!(not(loom)) {
        return guard;
    }
    match cv.wait_timeout(guard, left) {
        Ok((g, _)) => g,
        Err(p) => p.into_inner().0,
    }
}
