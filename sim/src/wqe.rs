//! Work queue entries as the device reads them from a ring: the SGE list of a send or receive WQE
//! (QP SQ and RQ, SRQ).

use crate::limits;
use crate::mem::GuestMemory;
use crate::ring::{Consumer, Slot};
use pvrdma_abi::wqe::Sge;
use smallvec::SmallVec;
use zerocopy::{FromZeros, IntoBytes};

/// Bytes of one SGE in a WQE.
const SGE: usize = core::mem::size_of::<Sge>();

/// The SGEs of one WQE (at most the device's `MAX_SGE` of them, kept inline).
pub(crate) type Sges = SmallVec<[Sge; limits::MAX_SGE as usize]>;

/// The `n` SGEs at byte `at` of the WQE in `slot` of `ring` (a QP's RQ or SQ, or an SRQ; inside
/// the slot, already range-checked by the ring).
pub(crate) fn read_sges(mem: &GuestMemory, ring: &Consumer, slot: Slot, at: usize, n: usize) -> Option<Sges> {
    (0..n)
        .map(|k| {
            let mut sge = Sge::new_zeroed();
            ring.read(mem, slot, at + k * SGE, sge.as_mut_bytes()).ok().map(|()| sge)
        })
        .collect()
}
