//! Helpers for the completion-notification tests: CQEs to inject through the model's
//! `SimDevice::post_cqe`, and bounded waits.

use ib_core::{Cq, Wc};
use pvrdma_abi::wqe::{wc_opcode, wc_status, Cqe};
use std::time::{Duration, Instant};

/// A successful receive CQE carrying `wr_id` (the QP is not on the CQ: it polls as `GeneralErr`
/// with `wr_id` intact, which is all these tests look at).
pub fn cqe(wr_id: u64) -> Cqe {
    let mut c = Cqe::default();
    c.wr_id.set(wr_id);
    c.opcode.set(wc_opcode::RECV);
    c
}

/// An error CQE (a flush) carrying `wr_id`.
pub fn err_cqe(wr_id: u64) -> Cqe {
    let mut c = cqe(wr_id);
    c.status.set(wc_status::WR_FLUSH_ERR);
    c
}

/// Waits up to `limit` for `cond`; panics with `what` if it never held.
pub fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Polls `cq` until it is empty (or a poll fails); returns the wr_ids it found.
pub fn drain(cq: &Cq) -> Vec<u64> {
    let mut out = Vec::new();
    let mut wc = [Wc::default(); 16];
    while let Ok(n @ 1..) = cq.poll(&mut wc) {
        out.extend(wc[..n].iter().map(|w| w.wr_id));
    }
    out
}
