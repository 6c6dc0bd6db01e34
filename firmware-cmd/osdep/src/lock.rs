//! The lock the no_std crates use: one name, two implementations chosen by the `std` feature.

/// A mutual-exclusion lock whose `lock()` returns the guard directly (no poisoning).
///
/// With `std`: `parking_lot::Mutex`, which parks a waiter instead of spinning. Without: a
/// `spin::Mutex`, for hosts with no scheduler to park on (keep its sections short there).
#[cfg(feature = "std")]
pub type Mutex<T> = parking_lot::Mutex<T>;
/// The guard of [`Mutex`].
#[cfg(feature = "std")]
pub type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// A mutual-exclusion lock whose `lock()` returns the guard directly (no poisoning).
///
/// With `std`: `parking_lot::Mutex`, which parks a waiter instead of spinning. Without: a
/// `spin::Mutex`, for hosts with no scheduler to park on (keep its sections short there).
#[cfg(not(feature = "std"))]
pub type Mutex<T> = spin::Mutex<T>;
/// The guard of [`Mutex`].
#[cfg(not(feature = "std"))]
pub type MutexGuard<'a, T> = spin::MutexGuard<'a, T>;
