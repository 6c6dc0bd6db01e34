//! Interrupts: one eventfd per MSI-X vector, which VFIO signals
//! (`VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER`), waited on with the host's bounded
//! `poll(2)` ([`osdep::EventFd`]).

use osdep::{EventFd, EventFdOptions};
use std::io;
use std::time::Duration;

/// A vector's eventfd: a counter (a read takes every interrupt since the last one), non-blocking,
/// so two threads waiting on one vector cannot block forever in `read` (the loser polls on until
/// its deadline).
pub(super) fn vector_eventfd() -> io::Result<EventFd> {
    EventFd::new(EventFdOptions { semaphore: false, nonblocking: true })
}

/// Waits up to `timeout` for `vector`'s eventfd and takes its counter: the interrupts since the
/// last take, 0 on timeout (or on a failed wait, which is logged).
pub(super) fn wait(efd: &EventFd, vector: u16, timeout: Duration) -> u32 {
    match efd.read_within(timeout) {
        Ok(n) => u32::try_from(n).unwrap_or(u32::MAX),
        Err(e) => {
            tracing::warn!(vector, error = %e, "waiting for an MSI-X eventfd failed");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_wait_returns_the_counter_and_resets_it() {
        let e = vector_eventfd().unwrap();
        e.add(1).unwrap();
        e.add(2).unwrap();
        assert_eq!(wait(&e, 0, Duration::from_secs(5)), 3);
        let t = Instant::now();
        assert_eq!(wait(&e, 0, Duration::from_millis(20)), 0);
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert_eq!(wait(&e, 0, Duration::ZERO), 0);
    }

    #[test]
    fn a_wait_wakes_on_a_signal_from_another_thread() {
        let e = Arc::new(vector_eventfd().unwrap());
        let e2 = Arc::clone(&e);
        let t = Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            e2.add(1).unwrap();
        });
        assert_eq!(wait(&e, 0, Duration::from_secs(10)), 1);
        assert!(t.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
    }
}
