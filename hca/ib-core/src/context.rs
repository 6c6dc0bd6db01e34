//! Contexts: the kernel's context of a device (what a [`crate::Device`] is for kernel consumers,
//! as an `ib_device`) and user contexts (`ibv_open_device`'s `ibv_context`, with a device context
//! of their own: a UAR page and CREATE_UC on pvrdma). Every object belongs to one context; objects
//! of different contexts cannot be combined. Each context has its async-event queue.

use crate::device::{ContextEvents, DeviceInner};
use crate::error::Result;
use crate::events::async_event::{AsyncElement, AsyncEvent, AsyncEventType, AsyncEvents, AsyncHandler};
use crate::events::channel::CompChannel;
use crate::events::delivery::FatalSink;
use crate::events::refs::next_uid;
use crate::provider::UcontextOps;
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A context. Cheap to clone; its objects hold it, so it goes when the last of them does.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

/// (Fields drop in order: the provider's context, then the device.)
pub(crate) struct ContextInner {
    /// The provider's user context; `None` for the kernel's.
    pub(crate) uctx: Option<Box<dyn UcontextOps>>,
    pub(crate) uid: u64,
    pub(crate) async_events: AsyncEvents,
    /// Fatal flag and sinks, under one lock (see [`ContextInner::add_fatal_sink`]).
    sinks: Mutex<Sinks>,
    pub(crate) device: Arc<DeviceInner>,
}

/// The objects to tell when the device goes fatal, held weakly: a dropped object's entry is
/// pruned when the list has doubled since the last pruning, so adding one costs O(1) amortized
/// however many objects the context holds.
#[derive(Default)]
struct Sinks {
    fatal: bool,
    list: Vec<Weak<dyn FatalSink>>,
    prune_at: usize,
}

impl ContextInner {
    /// Errors: [`crate::Error::DeviceFatal`] once the device is fatal.
    pub(crate) fn live(&self) -> Result<()> {
        self.device.live()
    }

    pub(crate) fn uctx(&self) -> Option<&dyn UcontextOps> {
        self.uctx.as_deref()
    }

    /// Adds a sink; one added after the device went fatal hears of it at once.
    pub(crate) fn add_fatal_sink(&self, sink: Arc<dyn FatalSink>) {
        let mut s = self.sinks.lock();
        if s.fatal {
            drop(s);
            return sink.fatal();
        }
        if s.list.len() >= s.prune_at {
            s.list.retain(|w| w.strong_count() > 0);
            s.prune_at = (2 * s.list.len()).max(64);
        }
        let weak: Weak<dyn FatalSink> = Arc::downgrade(&sink) as Weak<dyn FatalSink>;
        s.list.push(weak);
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        self.device.events.remove(self.uid);
    }
}

impl ContextEvents for ContextInner {
    fn port_event(&self, port: u8, event: AsyncEventType) {
        self.async_events.dispatch(AsyncEvent { event_type: event, element: AsyncElement::Port(port) });
    }

    fn fatal(&self) {
        let sinks: Vec<_> = {
            let mut s = self.sinks.lock();
            s.fatal = true;
            s.list.iter().filter_map(Weak::upgrade).collect()
        };
        for s in sinks {
            s.fatal();
        }
        let ev = AsyncEvent { event_type: AsyncEventType::DeviceFatal, element: AsyncElement::Device };
        self.async_events.dispatch(ev);
        self.async_events.set_fatal();
    }
}

impl Context {
    /// A new context of `device`: the kernel's (`uctx` None) or a user context.
    pub(crate) fn new(device: Arc<DeviceInner>, uctx: Option<Box<dyn UcontextOps>>) -> Result<Self> {
        let inner = Arc::new(ContextInner {
            uctx,
            uid: next_uid(),
            async_events: AsyncEvents::new()?,
            sinks: Mutex::new(Sinks::default()),
            device,
        });
        let weak: Weak<dyn ContextEvents> = Arc::downgrade(&inner) as Weak<dyn ContextEvents>;
        inner.device.events.add(inner.uid, weak);
        Ok(Self { inner })
    }

    /// Creates a completion channel of this context (`ibv_create_comp_channel`). Waiters wake with
    /// [`crate::Error::DeviceFatal`] if the device goes fatal.
    ///
    /// Errors: [`crate::Error::NoResources`] without a free file descriptor.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        let channel = CompChannel::new(self.inner.uid)?;
        self.inner.add_fatal_sink(channel.fatal_sink());
        Ok(channel)
    }

    /// Whether this is a user context.
    pub fn is_user(&self) -> bool {
        self.inner.uctx.is_some()
    }

    /// The device's handle of a user context; `None` for the kernel's.
    pub fn handle(&self) -> Option<u32> {
        self.inner.uctx().map(UcontextOps::handle)
    }

    /// The provider's own user context, if it is a `T` (e.g. to reach its UAR page).
    pub fn provider_context<T: 'static>(&self) -> Option<&T> {
        self.inner.uctx().and_then(|u| u.as_any().downcast_ref())
    }

    /// Waits up to `timeout` for the next async event of this context (`ibv_get_async_event`):
    /// events of its CQs and QPs, and of the device's ports and the device. Acknowledge it with
    /// [`AsyncEvent::ack`]. With a handler installed ([`Context::set_async_event_handler`]) events
    /// go to the handler instead.
    ///
    /// Errors: [`crate::Error::Timeout`]; [`crate::Error::WouldBlock`] with `O_NONBLOCK` on the
    /// async fd and nothing pending; [`crate::Error::DeviceFatal`] once the device is fatal and
    /// every event (its DEVICE_FATAL included) has been taken.
    pub fn get_async_event(&self, timeout: Duration) -> Result<AsyncEvent> {
        self.inner.async_events.get(timeout)
    }

    /// Waits without bound for the next async event, as `ibv_get_async_event`'s `read(2)` of the
    /// kernel's async fd does: a signal handler without `SA_RESTART` ends the wait.
    ///
    /// Errors: [`crate::Error::Interrupted`]; the others as [`Context::get_async_event`].
    pub fn wait_async_event(&self) -> Result<AsyncEvent> {
        self.inner.async_events.wait()
    }

    /// Installs `f` to receive this context's async events on the provider's event thread (it
    /// must not block for long; a panic in it is caught and logged). Each event is acknowledged
    /// when `f` returns. A handler that owns a [`crate::Device`] or this context keeps them alive:
    /// capture what it needs instead.
    pub fn set_async_event_handler(&self, f: impl Fn(&AsyncEvent) + Send + Sync + 'static) {
        let h: AsyncHandler = Arc::new(f);
        self.inner.async_events.set_handler(Some(h));
    }

    /// Removes the handler: events are queued for [`Context::get_async_event`] again.
    pub fn clear_async_event_handler(&self) {
        self.inner.async_events.set_handler(None);
    }

    /// The async-event fd (`ibv_context.async_fd`), for `poll`/`epoll`: readable exactly while an
    /// event is queued (or once the device is fatal).
    pub fn async_fd(&self) -> RawFd {
        self.inner.async_events.fd()
    }

    /// Sets or clears `O_NONBLOCK` on the async fd.
    pub fn set_async_nonblocking(&self, on: bool) -> Result<()> {
        self.inner.async_events.set_nonblocking(on)
    }

    /// (async events delivered to this context, events removed unread because their object was
    /// destroyed).
    pub fn async_event_counts(&self) -> (u64, u64) {
        self.inner.async_events.counts()
    }

    /// Whether the device is in its catastrophic state.
    pub fn is_fatal(&self) -> bool {
        self.inner.live().is_err()
    }

    /// Whether `self` and `other` are the same context.
    pub fn same(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.handle() {
            Some(h) => write!(f, "Context(user {h} of {})", self.inner.device.name()),
            None => write!(f, "Context(kernel of {})", self.inner.device.name()),
        }
    }
}
