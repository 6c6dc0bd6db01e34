//! Time and pauses, injected: the one bounded-poll helper and its clock.

use core::time::Duration;

/// A monotonic clock and the pause a poll loop takes between two looks.
///
/// Implement it over the host's own timer (a kernel's `ktime_get` and `cpu_relax`, a test's
/// scripted time); with `std`, [`StdClock`].
pub trait Clock: Send + Sync {
    /// Time since an arbitrary fixed origin; never goes backwards.
    fn now(&self) -> Duration;
    /// Pauses between two polls. `round` is how many polls failed so far (from 1), so the pause
    /// can grow: spin first, then yield or sleep.
    fn relax(&self, round: u32);
}

/// Polls after which a clock that has not moved forward ends a wait as if its deadline had
/// passed, so a clock that stops or runs backwards still gives a bounded wait. A working clock
/// must tick at least once per this many polls: a 100 Hz jiffies clock polled with `cpu_relax`
/// (tens of nanoseconds) ticks every few hundred thousand; 2^24 polls of `cpu_relax` last a
/// third of a second or more.
pub const STALL_POLLS: u32 = 1 << 24;

/// Calls `done` until it returns `true` or `timeout` has passed on `clock`, relaxing between
/// calls. Returns whether `done` became true. `done` is called at least once, and once more
/// after the deadline is seen, so a condition met during the last pause is not missed. A clock
/// that does not move forward for [`STALL_POLLS`] polls ends the wait too.
pub fn poll_until<C: Clock + ?Sized>(clock: &C, timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = clock.now();
    let (mut last, mut stalled, mut round) = (start, 0u32, 0u32);
    loop {
        if done() {
            return true;
        }
        let now = clock.now();
        if now.saturating_sub(start) >= timeout || stalled >= STALL_POLLS {
            return done();
        }
        if now > last {
            (last, stalled) = (now, 0);
        } else {
            stalled += 1;
        }
        round = round.saturating_add(1);
        clock.relax(round);
    }
}

#[cfg(feature = "std")]
mod std_clock {
    use super::Clock;
    use core::time::Duration;
    use std::sync::OnceLock;
    use std::time::Instant;

    /// What [`deadline_after`] saturates to: about a century.
    pub const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    /// The host's clock: `Instant` since the first use; relax spins 64 rounds, yields 64, then
    /// sleeps `round` µs (at most 1 ms), so a long wait costs little CPU and a short one little
    /// latency.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct StdClock;

    fn origin() -> Instant {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        *ORIGIN.get_or_init(Instant::now)
    }

    impl Clock for StdClock {
        fn now(&self) -> Duration {
            origin().elapsed()
        }

        fn relax(&self, round: u32) {
            match round {
                0..=64 => core::hint::spin_loop(),
                65..=128 => std::thread::yield_now(),
                _ => std::thread::sleep(Duration::from_micros(u64::from(round.min(1000)))),
            }
        }
    }

    /// `now + timeout`, saturating (so `Duration::MAX` means "practically forever", never a panic).
    pub fn deadline_after(timeout: Duration) -> Instant {
        let now = Instant::now();
        now.checked_add(timeout).or_else(|| now.checked_add(FAR_FUTURE)).unwrap_or(now)
    }
}

#[cfg(feature = "std")]
pub use std_clock::{deadline_after, StdClock, FAR_FUTURE};

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU64, Ordering};

    /// A scripted clock: every relax advances time by 1 ms.
    struct Scripted(AtomicU64);
    impl Clock for Scripted {
        fn now(&self) -> Duration {
            Duration::from_millis(self.0.load(Ordering::Relaxed))
        }
        fn relax(&self, _round: u32) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn bounded_on_an_injected_clock() {
        let c = Scripted(AtomicU64::new(0));
        let mut calls = 0;
        assert!(!poll_until(&c, Duration::from_millis(10), || {
            calls += 1;
            false
        }));
        assert_eq!(calls, 12, "10 pauses, the first look and the last look after the deadline");
        let mut n = 0;
        assert!(poll_until(&c, Duration::from_millis(10), || {
            n += 1;
            n == 3
        }));
    }

    /// A clock stuck at one instant, or one running backwards.
    struct Broken(AtomicU64, bool);
    impl Clock for Broken {
        fn now(&self) -> Duration {
            Duration::from_millis(self.0.load(Ordering::Relaxed))
        }
        fn relax(&self, _round: u32) {
            if self.1 {
                let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1));
            }
        }
    }

    /// A coarse clock: 10 ms per 200,000 pauses (a 100 Hz jiffies counter polled with
    /// `cpu_relax`).
    struct Coarse(AtomicU64);
    impl Clock for Coarse {
        fn now(&self) -> Duration {
            Duration::from_millis(self.0.load(Ordering::Relaxed) / 200_000 * 10)
        }
        fn relax(&self, _round: u32) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_coarse_clock_is_not_taken_for_a_stopped_one() {
        let c = Coarse(AtomicU64::new(0));
        let done_at = Duration::from_millis(30);
        assert!(poll_until(&c, Duration::from_secs(5), || c.now() >= done_at));
        let c = Coarse(AtomicU64::new(0));
        let mut calls = 0u64;
        assert!(!poll_until(&c, Duration::from_millis(50), || {
            calls += 1;
            false
        }));
        assert!(calls >= 1_000_000, "timed out by the clock, not the stall guard: {calls}");
    }

    #[test]
    fn a_clock_that_stops_or_runs_backwards_still_ends_the_wait() {
        for backwards in [false, true] {
            let c = Broken(AtomicU64::new(1 << 40), backwards);
            let mut calls = 0u32;
            assert!(!poll_until(&c, Duration::from_secs(1), || {
                calls += 1;
                false
            }));
            assert_eq!(calls, STALL_POLLS + 2, "backwards: {backwards}");
        }
    }

    #[cfg(feature = "std")]
    #[test]
    fn std_clock_saturates_and_bounds() {
        assert!(deadline_after(Duration::MAX) > std::time::Instant::now());
        assert!(!poll_until(&StdClock, Duration::from_millis(5), || false));
    }
}
