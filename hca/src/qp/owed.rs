//! The WQEs of one work queue still owed a completion, so a CQE the device writes is believed
//! only for a WQE the consumer posted (IBTA 11.4.2.1: a completion reports a posted work
//! request). pvrdma frees a slot when the device's consumer index passes it, before its CQE is
//! polled, so a queue of `depth` slots can have more WQEs owed than that: the record holds
//! twice the depth.
//!
//! A successful CQE completes only a WQE of its kind (its opcode: a SEND, RDMA WRITE or RDMA
//! READ completes as what was posted; a receive as RECV or, for an RDMA WRITE with immediate,
//! RECV_RDMA_WITH_IMM); an error CQE's opcode is undefined (IBTA 11.4.2.1) and is not matched.
//!
//! A CQE retires the WQE it completes and every older one: those completed without a CQE of
//! their own (unsignaled sends) or whose CQE was lost (QEMU 7.2 drops CQEs that do not fit). A
//! successful CQE completes the oldest *signaled* WQE with its `wr_id` (IBTA: a successful
//! unsignaled WQE has no CQE, so a consumer reusing one `wr_id` for every send, as perftest
//! does, is matched right), or, if none is owed, the oldest unsignaled one: QEMU 7.2 completes
//! unsignaled sends as well (`SendWqeFlattened`, docs/qemu.md). An error CQE (a flush completes
//! everything) completes the oldest WQE with its `wr_id`.
//!
//! Where a device drops CQEs silently (QEMU 7.2 on a full CQ) or completes unsignaled sends
//! (QEMU 7.2) while the consumer reuses a `wr_id`, a CQE cannot name its WQE: the oldest match
//! is taken, so a receive may be measured against a lost one's buffer, and QEMU's extra
//! completion of an unsignaled send sharing a later signaled send's `wr_id` is refused.

use ib_core::WcOpcode;

/// One posted WQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Posted {
    pub(crate) wr_id: u64,
    /// Bytes its SGEs cover (a receive's buffer, an RDMA READ's length).
    pub(crate) len: u32,
    /// It asked for a completion (a receive always does).
    pub(crate) signaled: bool,
    /// What its successful completion says: `Send`, `RdmaWrite`, `RdmaRead` or `Recv`.
    pub(crate) opcode: WcOpcode,
}

/// Whether a successful CQE with `cqe` completes a WQE posted as `posted`.
fn completes(posted: WcOpcode, cqe: WcOpcode) -> bool {
    posted == cqe || (posted == WcOpcode::Recv && cqe == WcOpcode::RecvRdmaWithImm)
}

/// The owed WQEs of one work queue, oldest first: a ring of twice the queue's depth, allocated
/// once (posting and polling allocate nothing).
pub(crate) struct Owed {
    slots: Box<[Posted]>,
    /// Index of the oldest owed WQE (wrapping).
    head: u32,
    /// Index after the newest (wrapping).
    tail: u32,
}

impl Owed {
    /// A record for a queue of `depth` slots (a power of two).
    pub(crate) fn new(depth: u32) -> Self {
        let cap = depth.max(1).saturating_mul(2) as usize;
        Self { slots: vec![Posted::default(); cap].into_boxed_slice(), head: 0, tail: 0 }
    }

    fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head) as usize
    }

    fn at(&self, k: usize) -> Posted {
        self.slots[(self.head as usize).wrapping_add(k) % self.slots.len()]
    }

    /// Makes room for one more WQE. A full record forgets its oldest WQE if that one is owed no
    /// completion (unsignaled); if it is owed one, the consumer has more work outstanding than
    /// it may (IBTA: a WQE is outstanding until its completion is polled) and `false` says so.
    pub(crate) fn reserve(&mut self) -> bool {
        if self.len() < self.slots.len() {
            return true;
        }
        if self.at(0).signaled {
            return false;
        }
        self.head = self.head.wrapping_add(1);
        true
    }

    /// Records a WQE just written (after [`Owed::reserve`]).
    pub(crate) fn push(&mut self, p: Posted) {
        debug_assert!(self.len() < self.slots.len(), "push without a reserve");
        let n = self.slots.len();
        self.slots[self.tail as usize % n] = p;
        self.tail = self.tail.wrapping_add(1);
    }

    /// Retires the owed WQE a CQE with `wr_id` completes, and every older one: for a successful
    /// CQE (`success` = its opcode) the oldest signaled WQE of that kind, else the oldest of that
    /// kind; for an error CQE (`None`) the oldest. `None` (and nothing retired) if no owed WQE
    /// matches.
    pub(crate) fn complete(&mut self, wr_id: u64, success: Option<WcOpcode>) -> Option<Posted> {
        let with_id = |k: &usize| {
            let p = self.at(*k);
            // A match, not `is_none_or`: MSRV 1.81.
            let kind = match success {
                Some(op) => completes(p.opcode, op),
                None => true,
            };
            p.wr_id == wr_id && kind
        };
        let oldest = (0..self.len()).find(with_id)?;
        let k = if success.is_some() && !self.at(oldest).signaled {
            (oldest..self.len()).filter(with_id).find(|&k| self.at(k).signaled).unwrap_or(oldest)
        } else {
            oldest
        };
        let p = self.at(k);
        if k > 0 {
            tracing::debug!(skipped = k, "completion retires older WQEs without CQEs of their own");
        }
        self.head = self.head.wrapping_add(k as u32 + 1);
        Some(p)
    }

    /// [`Owed::complete`]; and when a successful CQE names no owed WQE of its kind but one of
    /// another kind with its `wr_id` (QEMU 7.2 reports an RDMA WRITE as a SEND), retires that one
    /// as an error CQE would, so the record never fills with WQEs no CQE can retire. The WQE and
    /// whether the kinds agreed (the caller reports a disagreement as an error).
    pub(crate) fn retire(&mut self, wr_id: u64, success: Option<WcOpcode>) -> Option<(Posted, bool)> {
        if let Some(p) = self.complete(wr_id, success) {
            return Some((p, true));
        }
        success?;
        self.complete(wr_id, None).map(|p| (p, false))
    }

    /// Forgets every WQE (the queue was reset).
    pub(crate) fn clear(&mut self) {
        self.head = self.tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: Option<WcOpcode> = Some(WcOpcode::Send);

    fn p(wr_id: u64, signaled: bool) -> Posted {
        Posted { wr_id, len: 10, signaled, opcode: WcOpcode::Send }
    }

    #[test]
    fn completions_retire_in_order_and_only_what_was_posted() {
        let mut o = Owed::new(2);
        assert_eq!(o.complete(1, OK), None, "nothing posted");
        for id in 1..=3 {
            assert!(o.reserve());
            o.push(p(id, true));
        }
        assert_eq!(o.complete(9, OK), None);
        assert_eq!(o.complete(2, OK).map(|p| p.wr_id), Some(2), "1 retired with it");
        assert_eq!(o.complete(1, OK), None);
        assert_eq!(o.complete(3, OK).map(|p| p.wr_id), Some(3));
        assert_eq!(o.complete(3, OK), None, "once only");
    }

    #[test]
    fn a_successful_cqe_completes_the_signaled_wqe_of_a_shared_wr_id() {
        let mut o = Owed::new(4);
        for signaled in [false, true, false, true] {
            o.push(p(0, signaled));
        }
        assert!(o.complete(0, OK).is_some_and(|p| p.signaled), "the first signaled send");
        assert!(o.complete(0, OK).is_some_and(|p| p.signaled), "the second: all retired");
        assert_eq!(o.complete(0, OK), None);
        o.push(p(5, false));
        assert!(o.complete(5, OK).is_some_and(|p| !p.signaled), "QEMU 7.2 completes it too");
        o.push(p(6, false));
        o.push(p(6, true));
        assert!(o.complete(6, None).is_some_and(|p| !p.signaled), "a flush completes each in order");
        assert!(o.complete(6, None).is_some_and(|p| p.signaled));
    }

    #[test]
    fn a_full_record_forgets_unsignaled_work_but_not_owed_completions() {
        let mut o = Owed::new(1);
        for _ in 0..100 {
            assert!(o.reserve(), "unsignaled sends never fill it");
            o.push(p(7, false));
        }
        o.clear();
        o.push(p(1, true));
        o.push(p(2, true));
        assert!(!o.reserve(), "two completions owed on a one-slot queue");
        assert!(o.complete(1, OK).is_some());
        assert!(o.reserve());
    }

    #[test]
    fn a_successful_cqe_completes_only_a_wqe_of_its_kind() {
        let mut o = Owed::new(4);
        let write = Posted { opcode: WcOpcode::RdmaWrite, ..p(1, true) };
        o.push(write);
        assert_eq!(o.complete(1, OK), None, "a SEND CQE for a posted WRITE");
        assert_eq!(o.complete(1, Some(WcOpcode::RdmaRead)), None);
        assert_eq!(o.complete(1, Some(WcOpcode::RdmaWrite)), Some(write));
        o.push(Posted { opcode: WcOpcode::RdmaRead, ..p(2, true) });
        assert!(o.complete(2, None).is_some(), "an error CQE's opcode is not matched");
        let recv = Posted { opcode: WcOpcode::Recv, ..p(3, true) };
        o.push(recv);
        o.push(recv);
        assert_eq!(o.complete(3, Some(WcOpcode::RecvRdmaWithImm)), Some(recv));
        assert_eq!(o.complete(3, Some(WcOpcode::Recv)), Some(recv));
        assert_eq!(o.complete(3, Some(WcOpcode::Recv)), None);
    }

    #[test]
    fn a_cqe_of_the_wrong_kind_still_retires_what_it_names_so_the_record_never_fills() {
        let mut o = Owed::new(1);
        let write = Posted { opcode: WcOpcode::RdmaWrite, ..p(1, true) };
        for _ in 0..100 {
            assert!(o.reserve(), "QEMU 7.2's SEND CQEs for WRITEs retire them");
            o.push(write);
            assert_eq!(o.retire(1, OK), Some((write, false)), "retired, the kinds disagreeing");
        }
        o.push(write);
        assert_eq!(o.retire(1, Some(WcOpcode::RdmaWrite)), Some((write, true)));
        assert_eq!(o.retire(1, OK), None, "nothing owed");
    }
}
