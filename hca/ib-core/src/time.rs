//! The one deadline helper of the whole stack: every wait in the core, the providers, the command
//! channel and the device model is bounded through [`deadline_after`] or [`poll_until`].

use std::time::{Duration, Instant};

/// How long destroying an object waits for an event delivery or an upcall still running for it
/// (a consumer's handler can block; the wait is bounded and then logged).
pub const RETIRE_WAIT: Duration = Duration::from_secs(5);

/// What [`deadline_after`] saturates to: about a century.
pub const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + timeout`, saturating (so `Duration::MAX` means "practically forever", never a panic).
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).or_else(|| now.checked_add(FAR_FUTURE)).unwrap_or(now)
}

/// Calls `done` until it returns `true` or `timeout` passes: spins briefly, then yields, then
/// sleeps in growing steps of at most 1 ms. Returns whether `done` became true.
pub fn poll_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut round = 0u32;
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        round = round.saturating_add(1);
        match round {
            0..=64 => std::hint::spin_loop(),
            65..=128 => std::thread::yield_now(),
            _ => std::thread::sleep(Duration::from_micros(u64::from(round.min(1000)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturates_and_bounds() {
        assert!(deadline_after(Duration::MAX) > Instant::now());
        assert!(!poll_until(Duration::from_millis(5), || false));
        let mut n = 0;
        assert!(poll_until(Duration::from_secs(1), || {
            n += 1;
            n > 3
        }));
    }
}
