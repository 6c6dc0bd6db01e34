//! The soak test's machinery (`tests/tests/soak.rs`, issue 10): workers that each drive their
//! own groups of contexts, CQs and RC pairs over the model with a seeded random step sequence,
//! keep a ledger of every work request, and check every completion, message and event.
//!
//! - `ledger`: the pure bookkeeping (a QP's outstanding requests, the messages on a connection,
//!   payloads);
//! - `group`: creating, connecting and indexing the objects;
//! - `worker`: the step loop, posting, polling and the completion checks;
//! - `events`: arming, random and with a bounded wait for the event the arm must raise;
//! - `churn`: QP errors, recovery (RESET or destroy), CQ and context churn, and teardown.

mod churn;
mod events;
pub mod group;
pub mod ledger;
mod worker;

pub use worker::{Shared, Worker};

use std::time::Duration;

/// Bound on every wait of a worker: an event, a notify request, a drain of a QP's requests.
pub const WAIT: Duration = Duration::from_secs(5);

macro_rules! stats {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// What a worker did (summed over workers at the end).
        #[derive(Clone, Debug, Default)]
        pub struct Stats {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Stats {
            /// Adds `o` into `self`.
            pub fn add(&mut self, o: &Stats) {
                $(self.$name += o.$name;)*
            }
        }
    };
}

stats! {
    /// Messages received successfully with their payload checked.
    messages,
    /// Send work requests posted.
    sends_posted,
    /// Receive work requests posted.
    recvs_posted,
    /// Sends completed successfully (with a CQE, or silently before a later one).
    sends_ok,
    /// Sends completed with WR_FLUSH_ERR.
    sends_flushed,
    /// Sends completed with RETRY_EXC_ERR (their peer was in ERR).
    sends_retry_exc,
    /// Receives completed with WR_FLUSH_ERR.
    recvs_flushed,
    /// CQEs polled.
    cqes,
    /// Messages sent that never arrived (their send failed).
    undelivered,
    /// `req_notify` calls.
    arms,
    /// Completion events taken from channels.
    events,
    /// Bounded waits for the event an arm must raise (channel or notify request) that ended with it.
    waits,
    /// Of those, notify requests.
    notify_requests,
    /// `req_notify` calls that reported missed events.
    missed_reported,
    /// QPs the test moved to ERR while they carried traffic.
    qp_errors,
    /// Pairs brought back through RESET.
    pair_resets,
    /// QPs destroyed.
    qps_destroyed,
    /// CQs destroyed.
    cqs_destroyed,
    /// Destroys of a CQ in use refused (EBUSY), as they must be.
    busy_refused,
    /// User contexts destroyed.
    contexts_destroyed,
    /// Async events taken.
    async_events,
}
