//! Notify requests (the winverbs `CQ::Notify` model): an asynchronous request on a CQ that
//! completes, with a status, when the CQ's next (or next solicited) completion event fires, when
//! the CQ errs, or when the request is withdrawn.
//!
//! A request is one client of its CQ's arm state machine (`arm.rs`): making one
//! joins its kind into the CQ's hardware arm; the event that fires the arm completes every
//! outstanding NEXT and SOLICITED request of the CQ at once (Sean Hefty's "all should get
//! completed"). An ERROR_ONLY request does not arm the CQ at all: it completes only on a CQ error
//! or a cancel ("error notifications, but not rearm").
//!
//! Statuses (winverbs' richer status, as the seed thread asks): [`NotifyStatus::Overrun`] for a CQ
//! overflow (pvrdma's CQ_ERR, `STATUS_DATA_OVERRUN`), [`NotifyStatus::Failure`] for a catastrophic
//! device or CQ error (`STATUS_FAILURE`), [`NotifyStatus::Cancelled`] when the request was
//! withdrawn or its CQ destroyed.

use crate::error::{Error, Result};
use crate::sync::{lock, wait_until, Arc, Condvar, Mutex};
use std::time::Duration;

/// What a notify request waits for (winverbs `WV_CQ_NOTIFY_TYPE`, extended as the seed thread
/// proposes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotifyKind {
    /// The next completion of any kind (IBTA 11.4.2.5 NEXT_COMPLETION).
    Next,
    /// The next solicited completion: the responder's receive CQE of a message sent with the
    /// solicited flag, or any error CQE (IBTA 11.4.2.5 SOLICITED). Not expressible on QEMU 7.2.
    Solicited,
    /// No completion at all: only a CQ error ([`NotifyStatus::Overrun`], [`NotifyStatus::Failure`])
    /// or a cancel completes it. It does not arm the CQ.
    ErrorOnly,
}

/// How a notify request completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotifyStatus {
    /// The awaited completion event fired (or, with `report_missed`, CQEs were already queued
    /// when the request was made: poll them).
    Success,
    /// The CQ overflowed (pvrdma CQ_ERR; IBTA CQ overrun): it is in its error state; `poll`
    /// returns the CQEs queued before the overflow, then [`Error::CqOverrun`].
    Overrun,
    /// A catastrophic error: the device is fatal (DEVICE_FATAL, a command timeout, all-ones
    /// registers, a ring index out of range, a device the health check found gone), or this CQ's
    /// ring is unusable.
    Failure,
    /// The request was withdrawn ([`NotifyRequest::cancel`], or the handle dropped) or its CQ was
    /// destroyed.
    Cancelled,
}

/// The shared completion slot of one request: the status, once completed, and a condvar for the
/// waiters. Completed at most once; the first status wins.
pub(crate) struct RequestSlot {
    kind: NotifyKind,
    status: Mutex<Option<NotifyStatus>>,
    cv: Condvar,
}

impl RequestSlot {
    pub(crate) fn new(kind: NotifyKind) -> Arc<Self> {
        Arc::new(Self { kind, status: Mutex::new(None), cv: Condvar::new() })
    }

    pub(crate) fn kind(&self) -> NotifyKind {
        self.kind
    }

    /// Completes the request with `status` unless it already completed; wakes every waiter.
    /// Returns whether this call completed it.
    pub(crate) fn complete(&self, status: NotifyStatus) -> bool {
        let mut s = lock(&self.status);
        if s.is_some() {
            return false;
        }
        *s = Some(status);
        self.cv.notify_all();
        true
    }

    /// The status, if completed.
    pub(crate) fn status(&self) -> Option<NotifyStatus> {
        *lock(&self.status)
    }
}

/// An outstanding notify request on a CQ ([`crate::Cq::notify`]). Wait on it, poll its status or
/// cancel it from any thread. Dropping the handle withdraws a request that has not completed.
pub struct NotifyRequest {
    slot: Arc<RequestSlot>,
}

impl NotifyRequest {
    pub(crate) fn new(slot: Arc<RequestSlot>) -> Self {
        Self { slot }
    }

    /// What the request waits for.
    pub fn kind(&self) -> NotifyKind {
        self.slot.kind()
    }

    /// The status if the request has completed, without waiting.
    pub fn status(&self) -> Option<NotifyStatus> {
        self.slot.status()
    }

    /// Waits up to `timeout` for the request to complete and returns its status. `Duration::MAX`
    /// waits (practically) forever; every other wait has its bound.
    ///
    /// Errors: [`Error::Timeout`] if it has not completed by then (it stays outstanding).
    pub fn wait(&self, timeout: Duration) -> Result<NotifyStatus> {
        let deadline = crate::time::deadline_after(timeout);
        let mut s = lock(&self.slot.status);
        loop {
            if let Some(st) = *s {
                return Ok(st);
            }
            if cfg!(not(loom)) && std::time::Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            s = wait_until(&self.slot.cv, s, deadline);
        }
    }

    /// Withdraws the request: it completes with [`NotifyStatus::Cancelled`] unless it completed
    /// already. Returns its final status. The CQ's hardware arm is not withdrawn (an arm cannot
    /// be): if it fires later, the event finds one client fewer.
    pub fn cancel(&self) -> NotifyStatus {
        self.slot.complete(NotifyStatus::Cancelled);
        self.slot.status().unwrap_or(NotifyStatus::Cancelled)
    }
}

impl Drop for NotifyRequest {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Unwinding (e.g. loom reporting a deadlock): leave the slot as it is.
            return;
        }
        self.slot.complete(NotifyStatus::Cancelled);
    }
}

impl std::fmt::Debug for NotifyRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NotifyRequest({:?}, {:?})", self.kind(), self.status())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn completes_once_and_wakes_waiters() {
        let slot = RequestSlot::new(NotifyKind::Next);
        let req = NotifyRequest::new(slot.clone());
        assert_eq!(req.status(), None);
        assert_eq!(req.wait(Duration::from_millis(5)), Err(Error::Timeout));
        let waiter = std::thread::spawn({
            let slot = slot.clone();
            move || NotifyRequest::new(slot).wait(Duration::from_secs(10))
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(slot.complete(NotifyStatus::Overrun));
        assert!(!slot.complete(NotifyStatus::Success));
        assert_eq!(waiter.join().unwrap(), Ok(NotifyStatus::Overrun));
        assert_eq!(req.cancel(), NotifyStatus::Overrun);
        assert_eq!(req.wait(Duration::MAX), Ok(NotifyStatus::Overrun));
    }

    #[test]
    fn cancel_and_drop_withdraw() {
        let slot = RequestSlot::new(NotifyKind::ErrorOnly);
        let req = NotifyRequest::new(slot.clone());
        assert_eq!(req.cancel(), NotifyStatus::Cancelled);
        let slot = RequestSlot::new(NotifyKind::Solicited);
        drop(NotifyRequest::new(slot.clone()));
        assert_eq!(slot.status(), Some(NotifyStatus::Cancelled));
    }
}
