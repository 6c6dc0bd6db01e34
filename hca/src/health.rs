//! The device's health and counters: the catastrophic state (once set, every verb fails with
//! `DeviceFatal` and the verbs core hears of it) and the counters the driver keeps itself
//! (design decision 13: interrupts are counted in the driver, not read from sticky mailboxes).

use crate::platform::Platform;
use ib_core::provider::DeviceEventHandler;
use pvrdma_abi::regs::REG_VERSION;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Counters of one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Interrupts taken per MSI-X vector: 0 command, 1 async event, 2 CQ notification.
    pub interrupts: [u64; 3],
    /// CQ-notification entries that fired an armed CQ (each one completion event).
    pub cq_events: u64,
    /// Async-event ring entries consumed.
    pub async_events: u64,
    /// CQ-notification entries that fired nothing: an unknown handle, a CQ being destroyed, or a
    /// CQ the driver had not armed (QEMU 7.2 writes one per CQE).
    pub spurious_cq_notifications: u64,
    /// Async events dropped: for a handle that names no live object (never created, destroyed,
    /// being destroyed), or of a type the driver does not know.
    pub dropped_async_events: u64,
    /// Times the CQ-notification ring was found full (entries may have been dropped; the driver
    /// ran its recovery pass over every armed CQ).
    pub notify_ring_full: u64,
}

/// The health of one device.
#[derive(Default)]
pub struct Health {
    fatal: AtomicBool,
    interrupts: [AtomicU64; 3],
    cq_events: AtomicU64,
    async_events: AtomicU64,
    spurious: AtomicU64,
    dropped_async: AtomicU64,
    notify_ring_full: AtomicU64,
    core: OnceLock<Arc<dyn DeviceEventHandler>>,
}

/// A counter of [`Health`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Count {
    CqEvent,
    AsyncEvent,
    Spurious,
    DroppedAsync,
    NotifyRingFull,
}

impl Health {
    /// Whether the device is in its catastrophic state.
    pub fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }

    /// Puts the device in its catastrophic state (once) and tells the verbs core, which fails
    /// every CQ's clients, wakes every waiter and raises DEVICE_FATAL in every context.
    pub fn set_fatal(&self, reason: &str) {
        if self.fatal.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!(reason, "pvrdma device is fatal");
        if let Some(h) = self.core.get() {
            let h = h.clone();
            off_thread("pvrdma-fatal", move || h.fatal());
        }
    }

    /// The bounded liveness check: a register reading all-ones means the function is gone
    /// (surprise removal, a dead device), and the device becomes fatal. Run on a clock by the
    /// async thread and by a command waiter between its slices, so neither an interrupt storm
    /// nor a blocked thread hides a dead device.
    pub(crate) fn check_registers(&self, platform: &dyn Platform) {
        if !self.is_fatal() && platform.reg_read(REG_VERSION) == u32::MAX {
            self.set_fatal("device registers read all-ones");
        }
    }

    /// The verbs core's sink for device events (set once, at registration).
    pub(crate) fn set_core(&self, h: Arc<dyn DeviceEventHandler>) {
        if self.core.set(h).is_ok() && self.is_fatal() {
            if let Some(h) = self.core.get() {
                h.fatal();
            }
        }
    }

    pub(crate) fn core(&self) -> Option<&Arc<dyn DeviceEventHandler>> {
        self.core.get()
    }

    pub(crate) fn count_interrupts(&self, vector: u16, n: u32) {
        if let Some(c) = self.interrupts.get(usize::from(vector)) {
            c.fetch_add(u64::from(n), Ordering::Relaxed);
        }
    }

    pub(crate) fn count(&self, what: Count) {
        let c = match what {
            Count::CqEvent => &self.cq_events,
            Count::AsyncEvent => &self.async_events,
            Count::Spurious => &self.spurious,
            Count::DroppedAsync => &self.dropped_async,
            Count::NotifyRingFull => &self.notify_ring_full,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> DriverStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DriverStats {
            interrupts: [l(&self.interrupts[0]), l(&self.interrupts[1]), l(&self.interrupts[2])],
            cq_events: l(&self.cq_events),
            async_events: l(&self.async_events),
            spurious_cq_notifications: l(&self.spurious),
            dropped_async_events: l(&self.dropped_async),
            notify_ring_full: l(&self.notify_ring_full),
        }
    }

    /// Zeroes every counter: the probe's own traffic (its self-test) is not the consumer's.
    pub(crate) fn reset_counts(&self) {
        let all = [&self.cq_events, &self.async_events, &self.spurious, &self.dropped_async, &self.notify_ring_full];
        for c in self.interrupts.iter().chain(all) {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Runs `f` — a report to the verbs core, which runs the consumer's handlers — on a thread of its
/// own, so it never runs inside whatever the reporting thread holds (a verb's locks, a command).
/// Inline only if no thread can be started.
pub(crate) fn off_thread(name: &str, f: impl FnOnce() + Send + 'static) {
    let f = std::sync::Arc::new(parking_lot::Mutex::new(Some(f)));
    let g = f.clone();
    let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
        if let Some(f) = g.lock().take() {
            f()
        }
    });
    if spawned.is_err() {
        if let Some(f) = f.lock().take() {
            f()
        }
    }
}

/// Whether the device broke one of its objects (a CQ, QP or SRQ whose ring state it wrote out
/// of range): once marked, every verb on the object fails at once with
/// [`ib_core::Error::DeviceFatal`], whichever thread found the fault, and the core hears of it
/// once, on a thread of its own ([`off_thread`]). The device itself may live on.
#[derive(Default)]
pub(crate) struct ObjectHealth(AtomicBool);

impl ObjectHealth {
    /// `Err(DeviceFatal)` once the device (`device`) is fatal or the object broken.
    pub(crate) fn check(&self, device: &Health) -> ib_core::Result<()> {
        if device.is_fatal() || self.0.load(Ordering::Acquire) {
            return Err(ib_core::Error::DeviceFatal);
        }
        Ok(())
    }

    /// Whether the object is broken.
    pub(crate) fn is_broken(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Marks the object broken; the first time, logs `what` and runs `report` (the report to
    /// the core) off this thread — unless the device (`device`) is fatal, which every object's
    /// consumer hears of already.
    pub(crate) fn mark(
        &self,
        device: &Health,
        what: &'static str,
        handle: u32,
        report: Option<impl FnOnce() + Send + 'static>,
    ) {
        if self.0.swap(true, Ordering::AcqRel) || device.is_fatal() {
            return;
        }
        tracing::error!(object = what, handle, "ring index out of range: object unusable");
        if let Some(report) = report {
            off_thread("pvrdma-obj-fault", report);
        }
    }
}
