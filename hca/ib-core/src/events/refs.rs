//! What an event carries of the object it is for: [`CqRef`] and [`QpRef`] name one object
//! unambiguously (a number no other object of the process has, since device handles are reused),
//! carry the consumer's own context value given at create (`cq_context`, `qp_context`), and count
//! the events taken for the object and acknowledged, which destroying the object waits on
//! (`ibv_ack_cq_events`, `ibv_ack_async_event`).

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

static UIDS: AtomicU64 = AtomicU64::new(1);

/// A number no other object of this process has had.
pub(crate) fn next_uid() -> u64 {
    UIDS.fetch_add(1, Ordering::Relaxed)
}

/// How often a wait for acknowledgements asks whether to give up.
const GIVE_UP_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Events taken by a consumer for one object, and how many of them it acknowledged.
#[derive(Default, Debug)]
pub(crate) struct Acks {
    counts: Mutex<(u64, u64)>,
    cv: Condvar,
}

impl Acks {
    /// A consumer took one event.
    pub(crate) fn taken(&self) {
        self.counts.lock().0 += 1;
    }

    /// Acknowledges up to `n` taken events; returns how many.
    pub(crate) fn ack(&self, n: u64) -> u64 {
        let mut c = self.counts.lock();
        let k = n.min(c.0 - c.1);
        c.1 += k;
        self.cv.notify_all();
        k
    }

    /// Taken and not acknowledged.
    pub(crate) fn unacked(&self) -> u64 {
        let c = self.counts.lock();
        c.0 - c.1
    }

    /// Waits until every taken event is acknowledged, `deadline` passes or `give_up` says so
    /// (asked every [`GIVE_UP_POLL`]: a fatal device, whose consumer may never ack); returns how
    /// many are still unacknowledged (0 also when it gave up).
    pub(crate) fn wait_acked(&self, deadline: Instant, give_up: impl Fn() -> bool) -> u64 {
        let mut c = self.counts.lock();
        while c.0 > c.1 {
            if give_up() {
                return 0;
            }
            let slice = deadline.min(Instant::now() + GIVE_UP_POLL);
            if self.cv.wait_until(&mut c, slice).timed_out() && Instant::now() >= deadline {
                break;
            }
        }
        c.0 - c.1
    }
}

/// A CQ as its events name it.
#[derive(Debug)]
pub(crate) struct CqShared {
    pub(crate) uid: u64,
    pub(crate) handle: u32,
    pub(crate) cq_context: u64,
    /// Completion events taken from the CQ's channel.
    pub(crate) comp: Acks,
    /// Async events taken from the context's queue.
    pub(crate) async_: Acks,
}

/// The CQ a completion or async event is for. Cheap to clone; holds no resource of the CQ.
#[derive(Clone, Debug)]
pub struct CqRef(pub(crate) Arc<CqShared>);

impl CqRef {
    pub(crate) fn new(handle: u32, cq_context: u64) -> Self {
        let shared = CqShared { uid: next_uid(), handle, cq_context, comp: Acks::default(), async_: Acks::default() };
        Self(Arc::new(shared))
    }

    /// The device's CQ handle (reused by the device after the CQ is destroyed).
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// The consumer's value given when the CQ was created (`cq_context`).
    pub fn cq_context(&self) -> u64 {
        self.0.cq_context
    }

    /// Acknowledges `n` completion events taken for this CQ (`ibv_ack_cq_events`); more than
    /// were taken and not yet acknowledged counts as that many.
    pub fn ack_events(&self, n: u32) {
        self.0.comp.ack(u64::from(n));
    }

    pub(crate) fn uid(&self) -> u64 {
        self.0.uid
    }
}

impl PartialEq for CqRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.uid == other.0.uid
    }
}

impl Eq for CqRef {}

/// A QP as its async events name it.
#[derive(Debug)]
pub(crate) struct QpShared {
    pub(crate) uid: u64,
    pub(crate) qp_num: u32,
    pub(crate) qp_context: u64,
    pub(crate) async_: Acks,
}

/// The QP an async event is for. Cheap to clone; holds no resource of the QP.
#[derive(Clone, Debug)]
pub struct QpRef(pub(crate) Arc<QpShared>);

impl QpRef {
    pub(crate) fn new(qp_num: u32, qp_context: u64) -> Self {
        Self(Arc::new(QpShared { uid: next_uid(), qp_num, qp_context, async_: Acks::default() }))
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }

    /// The consumer's value given when the QP was created (`qp_context`).
    pub fn qp_context(&self) -> u64 {
        self.0.qp_context
    }

    pub(crate) fn uid(&self) -> u64 {
        self.0.uid
    }
}

impl PartialEq for QpRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.uid == other.0.uid
    }
}

impl Eq for QpRef {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_count_per_object_and_wait_is_bounded() {
        let a = CqRef::new(3, 0);
        let b = CqRef::new(3, 0);
        assert_ne!(a, b, "same handle, two objects");
        a.0.comp.taken();
        b.ack_events(1);
        assert_eq!(a.0.comp.unacked(), 1, "another CQ's ack does not count");
        assert_eq!(a.0.comp.wait_acked(Instant::now(), || false), 1);
        let t = Instant::now();
        assert_eq!(a.0.comp.wait_acked(t + std::time::Duration::from_secs(5), || t.elapsed().as_millis() > 100), 0);
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "gave up on being told to");
        a.ack_events(5);
        assert_eq!(a.0.comp.wait_acked(Instant::now(), || false), 0);
    }
}

/// An SRQ as its async events name it.
#[derive(Debug)]
pub(crate) struct SrqShared {
    pub(crate) uid: u64,
    pub(crate) handle: u32,
    pub(crate) srq_context: u64,
    pub(crate) async_: Acks,
}

/// The SRQ an async event is for. Cheap to clone; holds no resource of the SRQ.
#[derive(Clone, Debug)]
pub struct SrqRef(pub(crate) Arc<SrqShared>);

impl SrqRef {
    pub(crate) fn new(handle: u32, srq_context: u64) -> Self {
        Self(Arc::new(SrqShared { uid: next_uid(), handle, srq_context, async_: Acks::default() }))
    }

    /// The device's SRQ handle.
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// The consumer's value given when the SRQ was created (`srq_context`).
    pub fn srq_context(&self) -> u64 {
        self.0.srq_context
    }

    pub(crate) fn uid(&self) -> u64 {
        self.0.uid
    }
}

impl PartialEq for SrqRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.uid == other.0.uid
    }
}

impl Eq for SrqRef {}
