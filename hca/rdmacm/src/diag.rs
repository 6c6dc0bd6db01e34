//! What each device's CM has counted, for Rust callers (the crate's tests; not a C entry
//! point): the MADs it took and dropped, with the reason of each drop ([`CmStats`]), and how
//! many communication IDs it holds, so a test can show that a peer's MADs leave no ID behind.

use crate::world::lock;
use rdma_cm::CmStats;

/// The counters of one device's CM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmCounters {
    pub stats: CmStats,
    /// Communication IDs alive, time-wait ones included.
    pub ids_alive: usize,
    pub ids_in_timewait: usize,
}

/// The counters of device `device`'s CM (the index in `rdma_get_devices`' order), or `None`
/// before anything on that device used the CM.
pub fn cm_counters(device: usize) -> Option<CmCounters> {
    let cm = lock().cm(device)?;
    Some(CmCounters { stats: cm.stats(), ids_alive: cm.ids_alive(), ids_in_timewait: cm.ids_in_timewait() })
}
