//! A sender's packets held back on the loopback wire, and when they are tried again: the
//! loopback's terms for what the RoCE requester (`roce/requester.rs`) does after an RNR NAK
//! (IBTA 9.7.5.2.8) and on its local ACK timeout (IBTA 9.7.6.1.3), with the same attributes and
//! the same timers (`crate::timers`).
//!
//! - RNR: the head found no receive WQE at its responder. Each time that happens costs one of
//!   the sender's `rnr_retry` ([`RNR_RETRY_INFINITE`]: never exhausted); the one that finds none
//!   left completes the head `RNR_RETRY_EXC_ERR` (so `rnr_retry` 0 fails on the first RNR, as an
//!   RNR NAK does). Otherwise the head is tried again after the responder's
//!   `rnr_delay(min_rnr_timer)` (the RNR NAK's timer, Table 45), and at once when the responder
//!   posts a receive (a kick: an attempt that still finds none costs nothing, as if it was not
//!   made).
//! - No answer: no responder took the head (its QP missing, not in RTR/RTS, not pointing back,
//!   its GID not on the port, a PSN it does not expect). It is tried again once the sender's
//!   `retransmit_timeout(timeout)` ran out, up to `retry_cnt` times, and then completes
//!   `RETRY_EXC_ERR`; `timeout` 0 never runs out (the head waits until its sender is reset,
//!   destroyed or moved to ERR, which flushes it).
//!
//! Both counts start over when the head leaves the wire (forward progress, IBTA 9.7.6.1.3). The
//! packets behind the head were never tried: they keep the sender's order (a responder that
//! becomes ready takes them after the head).

use crate::packet::Packet;
use crate::timers::{rnr_delay, Retry, RNR_RETRY_INFINITE};
use pvrdma_abi::wqe::wc_status;
use std::collections::VecDeque;
use std::time::Instant;

/// What the head of a stall waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Not tried yet (the stall's previous head left the wire).
    Untried,
    /// A receive WQE at QP `dest` (RNR).
    Receive { dest: u32 },
    /// A responder to answer.
    Answer,
}

/// Why the head of a stall is tried now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Its first try, or the first since the packet before it left the wire.
    First,
    /// Its timer ran out.
    Timer,
    /// Its responder posted a receive, or changed state.
    Kick,
}

/// The packets of one sender (one QP's uid) held back, oldest first, and the head's retry state.
#[derive(Debug)]
pub(crate) struct Stall {
    /// The sender's uid (every packet's `src_uid`).
    pub(crate) uid: u64,
    /// The sender's QPN.
    pub(crate) src: u32,
    pub(crate) pkts: VecDeque<Packet>,
    pub(crate) wait: Wait,
    /// When the head is tried again (`None`: only when kicked, or never).
    pub(crate) due: Option<Instant>,
    /// What is left of `retry_cnt` and of `rnr_retry` since the last progress (`None`: all).
    retries: Option<u8>,
    rnr_retries: Option<u8>,
}

impl Stall {
    /// An empty stall of the sender of `pkt` (allocates nothing until a packet is held).
    pub(crate) fn of(pkt: &Packet) -> Self {
        Self {
            uid: pkt.src_uid,
            src: pkt.src,
            pkts: VecDeque::new(),
            wait: Wait::Untried,
            due: None,
            retries: None,
            rnr_retries: None,
        }
    }

    /// Whether the head waits for a receive WQE at QP `qpn`.
    pub(crate) fn waits_at(&self, qpn: u32) -> bool {
        self.wait == (Wait::Receive { dest: qpn })
    }

    /// Whether a kick of QP `qpn` concerns the stall: the head waits for a receive WQE there, or
    /// `qpn` is the sender (which may have flushed or been reset or destroyed).
    pub(crate) fn kicked_by(&self, qpn: u32) -> bool {
        self.src == qpn || self.waits_at(qpn)
    }

    /// The head, tried for reason `why`, found no receive WQE at `dest`, whose `min_rnr_timer`
    /// is `timer`. `Err(RNR_RETRY_EXC_ERR)` once the sender's `rnr_retry` (`retry`) is spent;
    /// else the head waits.
    pub(crate) fn rnr(&mut self, retry: &Retry, dest: u32, timer: u8, why: Attempt) -> Result<(), u32> {
        if why == Attempt::Kick && self.waits_at(dest) {
            return Ok(());
        }
        if retry.rnr_retry != RNR_RETRY_INFINITE {
            let left = self.rnr_retries.get_or_insert(retry.rnr_retry);
            if *left == 0 {
                return Err(wc_status::RNR_RETRY_EXC_ERR);
            }
            *left -= 1;
        }
        self.wait = Wait::Receive { dest };
        self.due = Some(osdep::deadline_after(rnr_delay(timer)));
        Ok(())
    }

    /// The head went unanswered: it waits the sender's local ACK timeout (`retry`).
    pub(crate) fn unanswered(&mut self, retry: &Retry) {
        self.retries.get_or_insert(retry.retry_cnt);
        self.wait = Wait::Answer;
        self.due = retry.timeout.map(osdep::deadline_after);
    }

    /// The timer of an unanswered head ran out: `Ok` to send it again (one retry spent),
    /// `Err(RETRY_EXC_ERR)` if none is left.
    pub(crate) fn timed_out(&mut self) -> Result<(), u32> {
        match &mut self.retries {
            Some(0) => Err(wc_status::RETRY_EXC_ERR),
            Some(left) => {
                *left -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The head left the wire: the next one is untried and the counts start over.
    pub(crate) fn progress(&mut self) {
        self.wait = Wait::Untried;
        self.due = None;
        self.retries = None;
        self.rnr_retries = None;
    }
}
