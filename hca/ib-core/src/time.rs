//! The verbs core's view of the one deadline helper of the stack (`osdep`): every wait in the
//! core, the providers, the command channel and the device model is bounded through
//! [`deadline_after`] or [`poll_until`].

use std::time::Duration;

pub use osdep::{deadline_after, FAR_FUTURE};

/// How long destroying an object waits for an event delivery or an upcall still running for it
/// (a consumer's handler can block; the wait is bounded and then logged).
pub const RETIRE_WAIT: Duration = Duration::from_secs(5);

/// Calls `done` until it returns `true` or `timeout` passes, on the host's clock
/// ([`osdep::StdClock`]: spins briefly, then yields, then sleeps in growing steps of at most
/// 1 ms). Returns whether `done` became true.
pub fn poll_until(timeout: Duration, done: impl FnMut() -> bool) -> bool {
    osdep::poll_until(&osdep::StdClock, timeout, done)
}
