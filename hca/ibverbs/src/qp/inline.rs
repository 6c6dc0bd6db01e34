//! Inline data (`IBV_SEND_INLINE`, `ibv_wr_set_inline_data`) in the library: pvrdma has none
//! (its QPs are created with `max_inline_data` 0, as QEMU's device and the model require), yet
//! perftest asks for inline sends by default. The semantics are libibverbs's: the bytes are
//! taken when the post returns (the program may reuse its buffer at once) and need no lkey.
//!
//! Each QP with `max_inline_data` > 0 owns a registered bounce buffer on its PD, in slots of
//! `max_inline_data` bytes used round-robin: a post copies the bytes into the next slot and posts
//! one SGE over it. A slot must not be rewritten while the device may still read the WQE that
//! used it. A pvrdma device frees an SQ slot when it consumes the WQE: the model gathers the
//! payload then; QEMU posts it to its backend QP, whose send queue (of the same depth) keeps it
//! until it completes. So at most `2 × depth` WQEs of a QP may still be read (`depth` in the ring,
//! `depth` behind it), and once `2 × depth` posts have succeeded after a WQE it has been read for
//! the last time. Hence `3 × depth` slots, advanced only by posts that succeeded, with at most
//! `depth` inline WQEs staged per post call (the rest are posted first): when a slot is written,
//! at least `2 × depth` posts have succeeded since the WQE that used it before.

use crate::abi::ibv_qp_cap;
use ib_core::{Error, Mr, Pd, Result, Sge};
use parking_lot::{Mutex, MutexGuard};

/// The most inline bytes per WR a QP accepts (`cap.max_inline_data`); more is `EINVAL`, as a
/// provider refuses a cap beyond its own.
pub(crate) const MAX_INLINE: u32 = 512;

/// A QP's bounce buffer.
pub(crate) struct Inline {
    mr: Mr,
    /// Bytes per slot (the QP's `max_inline_data`).
    max: u32,
    slots: u64,
    /// The inline posts that succeeded so far (the next slot, modulo `slots`). Held across a
    /// post call's copies and its post, so the count and the slots stay in step.
    next: Mutex<u64>,
    /// Inline WQEs one post call may stage before posting them (the SQ depth).
    pub(crate) per_call: usize,
}

impl Inline {
    /// The bounce buffer of a QP with the granted `cap` (`None` when it asks for no inline
    /// data); `cap.max_inline_data` is at most [`MAX_INLINE`] (the QP's create refused more).
    ///
    /// Errors: MR allocation errors.
    pub(crate) fn new(pd: &Pd, cap: &ibv_qp_cap) -> Result<Option<Self>> {
        let max = cap.max_inline_data;
        if max == 0 {
            return Ok(None);
        }
        let depth = u64::from(cap.max_send_wr.max(1));
        let slots = 3 * depth;
        let len = usize::try_from(slots * u64::from(max)).map_err(|_| Error::InvalidArgument("inline buffer size"))?;
        let mr = pd.alloc_mr(len, 0)?;
        Ok(Some(Self { mr, max, slots, next: Mutex::new(0), per_call: depth as usize }))
    }

    /// Bytes per WR.
    pub(crate) fn max(&self) -> u32 {
        self.max
    }

    /// Takes the buffer for one post call.
    pub(crate) fn lock(&self) -> Staging<'_> {
        Staging { inline: self, next: self.next.lock() }
    }
}

/// The bounce buffer held by one post call.
pub(crate) struct Staging<'a> {
    inline: &'a Inline,
    next: MutexGuard<'a, u64>,
}

impl Staging<'_> {
    /// Copies `parts` (at most `max` bytes in all, checked by the caller) into the slot of the
    /// `j`-th inline WR of this call; the SGE to post over it.
    pub(crate) fn copy<'p>(&mut self, j: usize, total: u32, parts: impl Iterator<Item = &'p [u8]>) -> Result<Sge> {
        let i = self.inline;
        let slot = (*self.next + j as u64) % i.slots;
        let start = slot as usize * i.max as usize;
        let mut at = start;
        for p in parts {
            i.mr.write(at, p)?;
            at += p.len();
        }
        Ok(Sge { addr: i.mr.addr() + start as u64, length: total, lkey: i.mr.lkey() })
    }

    /// Counts `n` inline WRs of this call as posted.
    pub(crate) fn commit(&mut self, n: usize) {
        *self.next += n as u64;
    }
}
