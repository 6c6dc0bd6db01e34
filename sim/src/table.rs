//! The object tables: every live UC, PD, MR, CQ and QP by handle, the MR key maps, and which user
//! context owns which UAR page. Guarded by `Backend::objects`, a leaf lock: it is held only to look
//! up, insert or remove, never across guest-memory work or another object's lock.

use crate::cq::Cq;
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::uctx::Uctx;
use pvrdma_abi::verbs::Gid;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Largest handle (handles travel in the low 24 bits of a doorbell).
pub const HANDLE_MAX: u32 = pvrdma_abi::uar::UAR_HANDLE_MASK;

/// A table of objects by handle, with a rotating allocator: a new object gets the first free
/// handle after the last one given out, so a stale handle rarely names a new object. (QEMU reuses
/// the lowest free handle; the first handles are the same: 1, or 2 for QPs.)
pub struct Table<T> {
    map: BTreeMap<u32, T>,
    min: u32,
    limit: u32,
    cursor: u32,
}

impl<T> Table<T> {
    /// Handles from `min`, at most `limit` objects.
    pub fn new(min: u32, limit: u32) -> Self {
        Self { map: BTreeMap::new(), min, limit, cursor: min }
    }

    /// A free handle, or `None` if `limit` objects exist.
    pub fn alloc(&mut self) -> Option<u32> {
        if self.map.len() >= self.limit as usize {
            return None;
        }
        let mut h = self.cursor;
        while self.map.contains_key(&h) {
            h = if h >= HANDLE_MAX { self.min } else { h + 1 };
        }
        self.cursor = if h >= HANDLE_MAX { self.min } else { h + 1 };
        Some(h)
    }

    /// Inserts under `handle` (from [`Table::alloc`]).
    pub fn insert(&mut self, handle: u32, obj: T) {
        self.map.insert(handle, obj);
    }

    /// The object named `handle`.
    pub fn get(&self, handle: u32) -> Option<&T> {
        self.map.get(&handle)
    }

    /// Removes and returns the object named `handle`.
    pub fn remove(&mut self, handle: u32) -> Option<T> {
        self.map.remove(&handle)
    }

    /// Every object.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.map.values()
    }

    /// Removes every object.
    pub fn take_all(&mut self) -> Vec<T> {
        std::mem::take(&mut self.map).into_values().collect()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// How many objects of each kind the device holds (a leak check's view of the tables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// User contexts (CREATE_UC without DESTROY_UC).
    pub ucs: usize,
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// MR keys still mapped (lkeys plus rkeys).
    pub mr_keys: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
    /// UAR pages bound to a user context.
    pub uar_pages: usize,
}

/// All objects of the device.
pub struct Objects {
    pub ucs: Table<Uctx>,
    pub pds: Table<Pd>,
    pub mrs: Table<Arc<Mr>>,
    /// lkey -> MR handle.
    pub lkeys: HashMap<u32, u32>,
    /// rkey -> MR handle.
    pub rkeys: HashMap<u32, u32>,
    pub cqs: Table<Arc<Cq>>,
    pub qps: Table<Arc<Qp>>,
    pub srqs: Table<Arc<Srq>>,
    /// UAR page index -> owning context handle.
    pub uar_pages: HashMap<u32, u32>,
    key_state: u64,
}

impl Objects {
    /// Empty tables; `seed` seeds MR key generation.
    pub fn new(seed: u64) -> Self {
        use crate::limits::*;
        Self {
            ucs: Table::new(1, MAX_UAR - 1),
            pds: Table::new(1, MAX_PD),
            mrs: Table::new(1, MAX_MR),
            lkeys: HashMap::new(),
            rkeys: HashMap::new(),
            cqs: Table::new(1, MAX_CQ),
            qps: Table::new(2, MAX_QP),
            srqs: Table::new(1, MAX_SRQ),
            uar_pages: HashMap::new(),
            key_state: seed,
        }
    }

    /// How many objects each table holds.
    pub fn live(&self) -> LiveObjects {
        LiveObjects {
            ucs: self.ucs.len(),
            pds: self.pds.len(),
            mrs: self.mrs.len(),
            mr_keys: self.lkeys.len() + self.rkeys.len(),
            cqs: self.cqs.len(),
            qps: self.qps.len(),
            srqs: self.srqs.len(),
            uar_pages: self.uar_pages.len(),
        }
    }

    /// A fresh MR key: nonzero, unused as lkey or rkey, and not derived from the handle.
    pub fn new_key(&mut self) -> u32 {
        loop {
            // splitmix64
            self.key_state = self.key_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.key_state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let key = (z ^ (z >> 31)) as u32;
            if key != 0 && !self.lkeys.contains_key(&key) && !self.rkeys.contains_key(&key) {
                return key;
            }
        }
    }
}

/// One entry of the port's GID table, as CREATE_BIND set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its type: one `PVRDMA_GID_TYPE_FLAG_*` bit (RoCE v1 or v2).
    pub gid_type: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_rotate_and_respect_limits() {
        let mut t: Table<()> = Table::new(2, 2);
        let a = t.alloc().unwrap();
        t.insert(a, ());
        let b = t.alloc().unwrap();
        t.insert(b, ());
        assert_eq!((a, b), (2, 3));
        assert_eq!(t.alloc(), None);
        t.remove(a);
        assert_eq!(t.alloc(), Some(4));
        let mut o = Objects::new(1);
        let k1 = o.new_key();
        o.lkeys.insert(k1, 1);
        assert_ne!(o.new_key(), k1);
    }
}
