//! What the core keeps of a probed device: its provider, its name, and the fan-out of device and
//! port events to every context of the device (Linux's `ib_dispatch_event`).

use crate::error::{Error, Result};
use crate::events::async_event::AsyncEventType;
use crate::provider::{DeviceEventHandler, DeviceOps};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// What a context does with device-wide events.
pub(crate) trait ContextEvents: Send + Sync {
    fn port_event(&self, port: u8, event: AsyncEventType);
    fn fatal(&self);
}

/// The core's sink for a device's events (the provider holds it).
#[derive(Default)]
pub(crate) struct DeviceEvents {
    fatal: AtomicBool,
    /// The live contexts by their uid: added and removed in O(1), so opening a context costs
    /// the same however many are open.
    contexts: Mutex<HashMap<u64, Weak<dyn ContextEvents>>>,
}

impl DeviceEvents {
    /// Adds a context. The fatal flag is read under the list's lock, which [`DeviceEvents::fatal`]
    /// takes after setting it: either the fan-out finds the context or the context sees the flag.
    pub(crate) fn add(&self, uid: u64, ctx: Weak<dyn ContextEvents>) {
        let mut list = self.contexts.lock();
        if self.fatal.load(Ordering::Acquire) {
            drop(list);
            if let Some(c) = ctx.upgrade() {
                c.fatal();
            }
            return;
        }
        list.insert(uid, ctx);
    }

    /// Removes a context that is going away.
    pub(crate) fn remove(&self, uid: u64) {
        self.contexts.lock().remove(&uid);
    }

    fn live(&self) -> Vec<Arc<dyn ContextEvents>> {
        self.contexts.lock().values().filter_map(Weak::upgrade).collect()
    }

    pub(crate) fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }
}

impl DeviceEventHandler for DeviceEvents {
    fn port_event(&self, port: u8, event: AsyncEventType) {
        for c in self.live() {
            c.port_event(port, event);
        }
    }

    fn fatal(&self) {
        if self.fatal.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!("device fatal: failing every context's CQs, channels and waiters");
        for c in self.live() {
            c.fatal();
        }
    }
}

/// A probed device as the core holds it.
pub(crate) struct DeviceInner {
    pub(crate) ops: Arc<dyn DeviceOps>,
    pub(crate) events: Arc<DeviceEvents>,
    prefix: &'static str,
    index: u32,
}

impl DeviceInner {
    /// Registers `ops` under the lowest free name `<prefix><N>`.
    pub(crate) fn new(ops: Arc<dyn DeviceOps>, prefix: &'static str) -> Self {
        let events = Arc::new(DeviceEvents::default());
        ops.set_event_handler(events.clone());
        Self { ops, events, prefix, index: alloc_index(prefix) }
    }

    /// `vmw_pvrdma0` and the like.
    pub(crate) fn name(&self) -> String {
        format!("{}{}", self.prefix, self.index)
    }

    /// Errors: [`Error::DeviceFatal`] once the device is in its catastrophic state.
    pub(crate) fn live(&self) -> Result<()> {
        if self.events.is_fatal() || self.ops.is_fatal() {
            return Err(Error::DeviceFatal);
        }
        Ok(())
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        NAMES.lock().remove(&(self.prefix, self.index));
    }
}

static NAMES: Mutex<BTreeSet<(&str, u32)>> = Mutex::new(BTreeSet::new());

/// The lowest N no live device named `<prefix>N` has.
fn alloc_index(prefix: &'static str) -> u32 {
    let mut used = NAMES.lock();
    let i = (0..).find(|i| !used.contains(&(prefix, *i))).unwrap_or(u32::MAX);
    used.insert((prefix, i));
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reuse_the_lowest_free_index_per_prefix() {
        let a = alloc_index("t_names");
        let b = alloc_index("t_names");
        let other = alloc_index("t_other");
        assert_eq!((a, b, other), (0, 1, 0));
        NAMES.lock().remove(&("t_names", a));
        assert_eq!(alloc_index("t_names"), 0);
    }
}
