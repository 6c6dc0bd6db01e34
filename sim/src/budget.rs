//! The device's host-memory budget: what its objects cost the process the model runs in.
//!
//! A guest pays for an object with guest memory (`SimConfig::mem_limit`), but the model's copy of
//! it costs host memory that the guest does not see: an MR's page list (8 bytes per page however
//! few distinct pages its page directory names, so a 1 GiB MR over one aliased page table costs
//! 2 MiB), a CQ's or QP's resolved ring pages and queues, the structures themselves. Every object
//! is charged that cost when it is created (a CQ's new ring again at RESIZE_CQ) and releases it
//! when the model lets go of it; a
//! command whose charge would pass `SimConfig::host_budget` fails with `ENOMEM`, as a device out
//! of resources does. The payload buffered on the wire has its own bounds
//! (`device_bytes_in_flight`), so the model's host memory stays below the sum of the three.
//! `SimStats::host_bytes` and `SimStats::host_budget` report it.

use crate::errno::{CmdResult, Errno};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes charged per object on top of its own size: the allocation's header, the `Arc` counts,
/// its table slot and key-map entries.
const OBJECT_OVERHEAD: u64 = 64;

/// The budget: a limit and what is charged against it now.
#[derive(Debug)]
pub struct HostBudget {
    limit: u64,
    used: AtomicU64,
}

impl HostBudget {
    /// A budget of `limit` bytes with nothing charged.
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self { limit, used: AtomicU64::new(0) })
    }

    /// Charges `bytes`, released when the returned [`Charge`] drops. Errors: `ENOMEM` if that
    /// would pass the limit (nothing is charged then).
    pub fn charge(self: &Arc<Self>, bytes: u64) -> CmdResult<Charge> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .map_err(|_| Errno::ENOMEM)?;
        Ok(Charge { budget: self.clone(), bytes })
    }

    /// Charges an object of type `T` that owns `extra` heap bytes besides itself.
    pub fn charge_object<T>(self: &Arc<Self>, extra: u64) -> CmdResult<Charge> {
        let own = OBJECT_OVERHEAD + core::mem::size_of::<T>() as u64;
        self.charge(own.saturating_add(extra))
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

/// Bytes held against a [`HostBudget`] for as long as this lives.
pub struct Charge {
    budget: Arc<HostBudget>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl core::fmt::Debug for Charge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Charge({} bytes)", self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_up_to_the_limit_and_releases_on_drop() {
        let b = HostBudget::new(100);
        let a = b.charge(60).unwrap();
        assert_eq!(b.charge(41).unwrap_err(), Errno::ENOMEM);
        assert_eq!(b.used(), 60);
        let c = b.charge(40).unwrap();
        assert_eq!(b.used(), 100);
        drop(a);
        assert_eq!(b.used(), 40);
        drop(c);
        assert_eq!(b.used(), 0);
        assert!(b.charge(u64::MAX).is_err());
    }
}
