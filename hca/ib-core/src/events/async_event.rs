//! Asynchronous events (IBTA 11.6.3; `ibv_get_async_event` / `ibv_ack_async_event`): one queue
//! per context, with a pollable fd, read and acknowledged by the consumer — or, when the consumer
//! installed a handler, handed to it on the provider's event thread and acknowledged when it
//! returns.
//!
//! An event for a CQ or QP goes to the context that owns the object; port and device events go
//! to every context of the device. Destroying a CQ or QP removes its events still queued (no
//! consumer gets an event for an object it no longer has), waits until those taken from the queue
//! are acknowledged, and waits for a handler running for it (`delivery.rs`); from inside that
//! handler it is refused instead (`Error::WouldDeadlock`), as it would wait for itself.

use super::queue::EventQueue;
use super::refs::{Acks, CqRef, QpRef};
use super::upcall::{contained, CallbackScope};
use crate::error::Result;
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The kind of an async event (`enum ibv_event_type`, same numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEventType {
    /// The CQ is in error (overflow: Overrun; a ring fault: Failure).
    CqErr = 0,
    /// The QP hit a fatal error and is in ERR.
    QpFatal = 1,
    /// The QP received an invalid request (IBTA: invalid request local work queue error).
    QpReqErr = 2,
    /// A remote access violation on the QP.
    QpAccessErr = 3,
    /// The first packet arrived on a QP in RTR (communication established).
    CommEst = 4,
    /// The QP's send queue drained (SQD).
    SqDrained = 5,
    /// The QP migrated to its alternate path.
    PathMig = 6,
    /// Path migration failed.
    PathMigErr = 7,
    /// The device is in its catastrophic state.
    DeviceFatal = 8,
    /// The port became active.
    PortActive = 9,
    /// The port went down.
    PortErr = 10,
    /// The port's LID changed.
    LidChange = 11,
    /// The port's P_Key table changed.
    PkeyChange = 12,
    /// The port's subnet manager changed.
    SmChange = 13,
    /// The SRQ is in error.
    SrqErr = 14,
    /// The SRQ fell below its limit.
    SrqLimitReached = 15,
    /// The last WQE of a QP on an SRQ was reached.
    QpLastWqeReached = 16,
    /// The subnet manager asks clients to re-register.
    ClientReregister = 17,
    /// The port's GID table changed.
    GidChange = 18,
}

impl AsyncEventType {
    const ALL: [AsyncEventType; 19] = {
        use AsyncEventType::*;
        [
            CqErr,
            QpFatal,
            QpReqErr,
            QpAccessErr,
            CommEst,
            SqDrained,
            PathMig,
            PathMigErr,
            DeviceFatal,
            PortActive,
            PortErr,
            LidChange,
            PkeyChange,
            SmChange,
            SrqErr,
            SrqLimitReached,
            QpLastWqeReached,
            ClientReregister,
            GidChange,
        ]
    };

    /// Decodes an `ibv_event_type` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Self::ALL.get(v as usize).copied()
    }

    /// The `ibv_event_type` value.
    pub fn raw(self) -> u32 {
        self as u32
    }

    /// What the event is about, as IBTA groups them.
    pub fn scope(self) -> EventScope {
        use AsyncEventType::*;
        match self {
            CqErr => EventScope::Cq,
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr | QpLastWqeReached => {
                EventScope::Qp
            }
            SrqErr | SrqLimitReached => EventScope::Srq,
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister | GidChange => EventScope::Port,
            DeviceFatal => EventScope::Device,
        }
    }
}

/// What an [`AsyncEventType`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventScope {
    /// A CQ.
    Cq,
    /// A QP.
    Qp,
    /// An SRQ.
    Srq,
    /// A port.
    Port,
    /// The whole device.
    Device,
}

/// The object an async event is for (`ibv_async_event.element`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AsyncElement {
    /// A CQ of the context.
    Cq(CqRef),
    /// A QP of the context.
    Qp(QpRef),
    /// An SRQ of the context.
    Srq(super::refs::SrqRef),
    /// A port of the device.
    Port(u8),
    /// The device.
    Device,
}

/// One async event. Acknowledge it with [`AsyncEvent::ack`] once done with it: destroying its
/// CQ or QP waits for that.
#[derive(Debug)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: AsyncEventType,
    /// To what.
    pub element: AsyncElement,
}

impl AsyncEvent {
    /// The CQ, for a CQ event.
    pub fn cq(&self) -> Option<&CqRef> {
        match &self.element {
            AsyncElement::Cq(c) => Some(c),
            _ => None,
        }
    }

    /// The QP, for a QP event.
    pub fn qp(&self) -> Option<&QpRef> {
        match &self.element {
            AsyncElement::Qp(q) => Some(q),
            _ => None,
        }
    }

    /// The SRQ, for an SRQ event.
    pub fn srq(&self) -> Option<&super::refs::SrqRef> {
        match &self.element {
            AsyncElement::Srq(s) => Some(s),
            _ => None,
        }
    }

    /// The port, for a port event.
    pub fn port(&self) -> Option<u8> {
        match self.element {
            AsyncElement::Port(p) => Some(p),
            _ => None,
        }
    }

    /// Acknowledges the event (`ibv_ack_async_event`).
    pub fn ack(self) {
        if let Some(a) = self.acks() {
            a.ack(1);
        }
    }

    fn acks(&self) -> Option<&Acks> {
        match &self.element {
            AsyncElement::Cq(c) => Some(&c.0.async_),
            AsyncElement::Qp(q) => Some(&q.0.async_),
            AsyncElement::Srq(s) => Some(&s.0.async_),
            _ => None,
        }
    }

    fn uid(&self) -> Option<u64> {
        match &self.element {
            AsyncElement::Cq(c) => Some(c.uid()),
            AsyncElement::Qp(q) => Some(q.uid()),
            AsyncElement::Srq(s) => Some(s.uid()),
            _ => None,
        }
    }
}

/// A consumer's async-event handler: runs on the provider's event thread; must not block long.
pub type AsyncHandler = Arc<dyn Fn(&AsyncEvent) + Send + Sync>;

/// The async-event queue of one context.
pub(crate) struct AsyncEvents {
    queue: EventQueue<AsyncEvent>,
    handler: Mutex<Option<AsyncHandler>>,
    delivered: AtomicU64,
    purged: AtomicU64,
}

impl AsyncEvents {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            queue: EventQueue::new()?,
            handler: Mutex::new(None),
            delivered: AtomicU64::new(0),
            purged: AtomicU64::new(0),
        })
    }

    /// Hands `ev` to the handler (a panic in it is caught; the caller's delivery guard keeps the
    /// object's destruction waiting until it returns) or queues it for [`AsyncEvents::get`].
    pub(crate) fn dispatch(&self, ev: AsyncEvent) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        let handler = self.handler.lock().clone();
        let Some(h) = handler else { return self.queue.push(ev) };
        let _scope = ev.uid().map(CallbackScope::enter);
        contained("async-event handler", || h(&ev));
    }

    /// Takes the next event, waiting up to `timeout`; it counts as taken for its object.
    pub(crate) fn get(&self, timeout: Duration) -> Result<AsyncEvent> {
        self.queue.wait(timeout, |ev| {
            if let Some(a) = ev.acks() {
                a.taken();
            }
        })
    }

    /// Takes the next event, waiting without bound in `read(2)` (a signal handler without
    /// `SA_RESTART` ends the wait with [`crate::Error::Interrupted`]).
    pub(crate) fn wait(&self) -> Result<AsyncEvent> {
        self.queue.wait_interruptible(|ev| {
            if let Some(a) = ev.acks() {
                a.taken();
            }
        })
    }

    /// Removes the queued events of the object `uid` (being destroyed).
    pub(crate) fn purge(&self, uid: u64) {
        let n = self.queue.purge(|e| e.uid() == Some(uid));
        self.purged.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn set_handler(&self, h: Option<AsyncHandler>) {
        *self.handler.lock() = h;
    }

    pub(crate) fn set_fatal(&self) {
        self.queue.set_fatal();
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.queue.fd()
    }

    pub(crate) fn set_nonblocking(&self, on: bool) -> Result<()> {
        self.queue.set_nonblocking(on)
    }

    /// (events delivered, events removed unread because their object was destroyed).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.delivered.load(Ordering::Relaxed), self.purged.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_round_trip_and_scope() {
        for v in 0..19 {
            assert_eq!(AsyncEventType::from_raw(v).unwrap().raw(), v);
        }
        assert_eq!(AsyncEventType::from_raw(19), None);
        assert_eq!(AsyncEventType::CqErr.scope(), EventScope::Cq);
        assert_eq!(AsyncEventType::PortActive.scope(), EventScope::Port);
    }

    #[test]
    fn queued_events_count_as_taken_and_purge_removes_only_that_object() {
        let q = AsyncEvents::new().unwrap();
        let (a, b) = (CqRef::new(1, 10), CqRef::new(2, 20));
        for cq in [&a, &b, &a] {
            q.dispatch(AsyncEvent { event_type: AsyncEventType::CqErr, element: AsyncElement::Cq(cq.clone()) });
        }
        let ev = q.get(Duration::ZERO).unwrap();
        assert_eq!(ev.cq().map(CqRef::cq_context), Some(10));
        assert_eq!(a.0.async_.unacked(), 1);
        q.purge(a.uid());
        assert_eq!(q.counts(), (3, 1));
        let ev2 = q.get(Duration::ZERO).unwrap();
        assert_eq!(ev2.cq(), Some(&b));
        ev.ack();
        ev2.ack();
        assert_eq!((a.0.async_.unacked(), b.0.async_.unacked()), (0, 0));
        assert!(q.get(Duration::ZERO).is_err());
    }
}
