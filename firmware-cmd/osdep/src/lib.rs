//! What the `no_std` crates of the stack take from their host, as a Linux driver takes them from
//! the kernel (`ktime_get`, `cpu_relax`/`usleep_range`, `spinlock_t`/`mutex`):
//!
//! - [`Clock`]: a monotonic clock and a pause between polls. The command channel waits through
//!   it, so a kernel, a bare-metal loader or a test supplies its own; with `std`,
//!   [`StdClock`] is `Instant` plus spin, yield, then short sleeps.
//! - [`poll_until`]: the one bounded-poll helper of the whole stack (the verbs core's
//!   `ib_core::time` and the device model use it through [`StdClock`]).
//! - [`Mutex`]: `spin::Mutex` where no OS is there (without `std`); `parking_lot::Mutex` with
//!   `std`, because a lock that spins loses badly to preemption on a 2-core machine (a holder
//!   descheduled mid-section keeps the other core spinning for a whole time slice).
//! - With `std` on Linux, [`EventFd`] (an `eventfd(2)` counter: MSI-X vectors under VFIO, the
//!   verbs core's completion channels) and [`poll_readable`], the one bounded `poll(2)` wait of
//!   the stack (the eventfds and the device model's RoCE sockets).
//! - [`words`]: the one byte copy over memory seen as 32-bit atomic words (the model's guest
//!   memory, the VFIO and qtest backends' DMA memory).
#![no_std]
#![warn(missing_docs)]
#![deny(unsafe_code)]

#[cfg(feature = "std")]
extern crate std;

mod clock;
mod lock;
#[cfg(all(feature = "std", target_os = "linux"))]
mod sys;
pub mod words;

#[cfg(feature = "std")]
pub use clock::{deadline_after, StdClock, FAR_FUTURE};
pub use clock::{poll_until, Clock, STALL_POLLS};
pub use lock::{Mutex, MutexGuard};
#[cfg(all(feature = "std", target_os = "linux"))]
pub use sys::{poll_readable, EventFd, EventFdOptions};
