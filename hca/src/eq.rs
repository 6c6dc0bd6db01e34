//! Interrupt handling and the two device-written event rings of the DSR (Linux
//! `pvrdma_intr1_handler` / `pvrdma_intrx_handler`, mthca `mthca_eq.c`).
//!
//! [`EventRings`] holds the async-event ring (vector 1), the CQ-notification ring (vector 2) and
//! the tables of live CQs and QPs by handle, each with the verbs core's handler for its events.
//! Each vector is serviced on its own thread that waits with a bound ([`SERVICE_INTERVAL`]) and
//! drains its ring on every wake-up, interrupt or not, so a ring the device filled without raising
//! (QEMU drops the interrupt when its ring is full) never stalls. Where the platform can run a
//! handler on the raising thread (the in-process model), vector 2's handler runs there instead,
//! so a completion event costs no hand-off to the vector thread (design decision 20; decision 2
//! asked for a thread per vector, which stays for what the handler does not get). No handler
//! ever posts a command (design decision 2). Nothing the device writes is trusted: an entry naming no live object, or
//! of a type the driver does not know, is counted and dropped, never passed up.

use crate::health::{Count, Health};
use crate::platform::{Platform, VectorHandler};
use crate::ring::DevRing;
use doorbell::Owner;
use ib_core::provider::{CqDelivery, CqError, CqEventHandler, QpEventHandler, SrqEventHandler};
use ib_core::{AsyncEventType, Error, EventScope, Result};
use parking_lot::{Mutex, RwLock};
use pvrdma_abi::event::{Cqne, Eqe, EqeType};
use pvrdma_abi::regs::IntrVector;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zerocopy::FromBytes;

/// How long a vector thread sleeps before draining its ring anyway (and, for the async thread,
/// checking the device is still there).
pub const SERVICE_INTERVAL: Duration = Duration::from_millis(50);

/// Why the device went fatal: the device said so.
const DEVICE_FATAL_EVENT: &str = "DEVICE_FATAL async event";
/// Why the device went fatal: its async-event ring's indices are out of range or unreadable.
const BAD_ASYNC_RING: &str = "async-event ring index out of range";

/// Pages of each DSR ring, the ring-state page included (page 1 holds the entries).
pub const DSR_RING_PAGES: u32 = 2;
/// Async-event ring entries: one page of 8-byte [`Eqe`]s.
pub const ASYNC_RING_ELEMS: u32 = 4096 / 8;
/// CQ-notification ring entries: one page of 4-byte [`Cqne`]s.
pub const NOTIFY_RING_ELEMS: u32 = 4096 / 4;

/// The arms one drain fired, delivered (dropped) once the ring's lock is released. A drain
/// usually fires one, kept inline; more go to a vector, allocated only then.
#[derive(Default)]
struct Deliveries {
    first: Option<CqDelivery>,
    rest: Vec<CqDelivery>,
}

impl Deliveries {
    fn push(&mut self, d: CqDelivery) {
        match self.first {
            None => self.first = Some(d),
            Some(_) => self.rest.push(d),
        }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }
}

/// What the event paths know of a CQ besides its core handler.
#[derive(Default)]
pub(crate) struct CqFlags {
    /// The device reported CQ_ERR: poll returns what is queued, then `CqOverrun`.
    pub(crate) overrun: AtomicBool,
}

struct CqEntry {
    flags: Arc<CqFlags>,
    handler: Arc<dyn CqEventHandler>,
}

/// An async-event entry resolved to what it names.
enum AsyncEntry {
    Cq(Arc<CqFlags>, Arc<dyn CqEventHandler>),
    Qp(Arc<dyn QpEventHandler>, AsyncEventType),
    Srq(Arc<dyn SrqEventHandler>, AsyncEventType),
    Port(u8, AsyncEventType),
    Fatal(&'static str),
    /// No live object, or a type the driver does not know: (type, info).
    Dropped(u32, u32),
}

impl std::fmt::Debug for AsyncEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cq(..) => write!(f, "CQ_ERR"),
            Self::Qp(_, e) | Self::Srq(_, e) => write!(f, "{e:?}"),
            Self::Port(p, e) => write!(f, "{e:?} on port {p}"),
            Self::Fatal(r) => write!(f, "fatal: {r}"),
            Self::Dropped(t, i) => write!(f, "type {t}, info {i:#x}"),
        }
    }
}

/// Event state shared by the vector threads and the objects of one device.
pub struct EventRings {
    platform: Arc<dyn Platform>,
    health: Arc<Health>,
    stop: AtomicBool,
    cqs: RwLock<HashMap<u32, CqEntry>>,
    qps: RwLock<HashMap<u32, Arc<dyn QpEventHandler>>>,
    srqs: RwLock<HashMap<u32, Arc<dyn SrqEventHandler>>>,
    /// Held while a CQ or QP is created and registered, or destroyed and unregistered, and while
    /// async entries are resolved to objects (see [`EventRings::destroy_object`]).
    pub(crate) objects: Mutex<()>,
    async_ring: Mutex<DevRing>,
    notify_ring: Mutex<DevRing>,
    /// Async entries taken from the ring and resolved, waiting for the async thread, in the
    /// device's order: whoever takes them (the async thread or a destroy), only the async thread
    /// hands them to the core, one at a time, so every context sees them in the device's order
    /// and no consumer handler runs on a thread that is destroying an object.
    deferred: Mutex<VecDeque<AsyncEntry>>,
}

impl EventRings {
    /// Allocates both DSR rings.
    pub fn new(platform: &Arc<dyn Platform>, health: Arc<Health>) -> Result<Arc<Self>> {
        Ok(Arc::new(Self {
            platform: platform.clone(),
            health,
            stop: AtomicBool::new(false),
            cqs: RwLock::new(HashMap::new()),
            qps: RwLock::new(HashMap::new()),
            srqs: RwLock::new(HashMap::new()),
            objects: Mutex::new(()),
            async_ring: Mutex::new(DevRing::new(platform, ASYNC_RING_ELEMS, 8, Owner::Kernel)?),
            notify_ring: Mutex::new(DevRing::new(platform, NOTIFY_RING_ELEMS, 4, Owner::Kernel)?),
            deferred: Mutex::new(VecDeque::new()),
        }))
    }

    /// (pages, page-directory address) of the async-event ring, for the DSR.
    pub fn async_ring_info(&self) -> (u32, u64) {
        let r = self.async_ring.lock();
        (r.buf().num_pages() as u32, r.buf().dir().dma())
    }

    /// (pages, page-directory address) of the CQ-notification ring, for the DSR.
    pub fn notify_ring_info(&self) -> (u32, u64) {
        let r = self.notify_ring.lock();
        (r.buf().num_pages() as u32, r.buf().dir().dma())
    }

    /// Adds a CQ the device just created (called with the object lock held, once CREATE_CQ was
    /// answered). The reports the device wrote before its answer are consumed first
    /// ([`EventRings::take_reports`]): one written late for a destroyed object that had this
    /// handle (a CQ_ERR after its DESTROY) reaches no object, never the new one. A handle already
    /// live means the device handed it out twice: the device is made fatal (nothing is
    /// destroyed: DESTROY_CQ would hit the live CQ).
    ///
    /// Errors: [`Error::DeviceFatal`] for a duplicate handle.
    pub(crate) fn register_cq(&self, handle: u32, flags: Arc<CqFlags>, handler: Arc<dyn CqEventHandler>) -> Result<()> {
        self.take_reports();
        let mut t = self.cqs.write();
        if t.contains_key(&handle) {
            drop(t);
            return self.duplicate("CQ", handle);
        }
        t.insert(handle, CqEntry { flags, handler });
        Ok(())
    }

    /// Removes a CQ; later entries and events for its handle are dropped and counted.
    pub(crate) fn unregister_cq(&self, handle: u32) {
        self.cqs.write().remove(&handle);
    }

    /// Adds a QP the device just created (as [`EventRings::register_cq`], the reports before it
    /// consumed first).
    pub(crate) fn register_qp(&self, handle: u32, handler: Arc<dyn QpEventHandler>) -> Result<()> {
        self.take_reports();
        let mut t = self.qps.write();
        if t.contains_key(&handle) {
            drop(t);
            return self.duplicate("QP", handle);
        }
        t.insert(handle, handler);
        Ok(())
    }

    /// Adds an SRQ the device just created (as [`EventRings::register_cq`], the reports before
    /// it consumed first).
    pub(crate) fn register_srq(&self, handle: u32, handler: Arc<dyn SrqEventHandler>) -> Result<()> {
        self.take_reports();
        let mut t = self.srqs.write();
        if t.contains_key(&handle) {
            drop(t);
            return self.duplicate("SRQ", handle);
        }
        t.insert(handle, handler);
        Ok(())
    }

    /// Removes an SRQ; later events for its handle are dropped and counted.
    pub(crate) fn unregister_srq(&self, handle: u32) {
        self.srqs.write().remove(&handle);
    }

    /// Removes a QP; later events for its handle are dropped and counted.
    pub(crate) fn unregister_qp(&self, handle: u32) {
        self.qps.write().remove(&handle);
    }

    fn duplicate(&self, what: &'static str, handle: u32) -> Result<()> {
        tracing::error!(handle, "device returned a {what} handle that is in use");
        self.health.set_fatal("device returned an object handle that is in use");
        Err(Error::DeviceFatal)
    }

    /// The core's handler of QP `handle`, if it is live.
    pub(crate) fn qp_handler(&self, handle: u32) -> Option<Arc<dyn QpEventHandler>> {
        self.qps.read().get(&handle).cloned()
    }

    /// The core's handler of SRQ `handle`, if it is live.
    pub(crate) fn srq_handler(&self, handle: u32) -> Option<Arc<dyn SrqEventHandler>> {
        self.srqs.read().get(&handle).cloned()
    }

    /// The core's handler of CQ `handle`, if it is live.
    pub(crate) fn cq_handler(&self, handle: u32) -> Option<Arc<dyn CqEventHandler>> {
        self.cqs.read().get(&handle).map(|e| e.handler.clone())
    }

    /// Consumes every CQ-notification entry (the vector-2 interrupt, the periodic tick): each one
    /// goes to its CQ's core handler, which fires the CQ's arm if it was armed. Entries for an
    /// unknown or unarmed CQ are counted as spurious (QEMU 7.2 writes one per CQE).
    pub fn drain_notifications(&self) {
        self.fenced(|| ());
    }

    /// Runs `change` (a change of some CQ's arm state, and the doorbell it rings) after draining
    /// the CQ-notification ring, with the ring's lock still held: no entry is consumed while it
    /// runs, so every entry the device wrote before the arm is spent on the state before it, and
    /// none written before it fires it (design decision 3). Lock order: the ring, then the CQ's
    /// arm state machine (as the interrupt path). `change` must not drain. The arms the entries
    /// fired reach their consumers after the lock is released: a consumer woken by one re-arms
    /// at once, and would otherwise find the ring still locked by its waker.
    pub(crate) fn fenced<R>(&self, change: impl FnOnce() -> R) -> R {
        if self.health.is_fatal() {
            return change();
        }
        let mut ring = self.notify_ring.lock();
        if ring.pending() == Ok(0) {
            // Nothing to drain (every arm of a CQ already armed lands here): no delivery to hold.
            return change();
        }
        let mut fired = Deliveries::default();
        let out = match self.drain_locked(&mut ring, &mut fired) {
            Ok(()) => {
                let out = change();
                drop(ring);
                out
            }
            Err(reason) => {
                drop(ring);
                self.health.set_fatal(reason);
                change()
            }
        };
        drop(fired);
        out
    }

    fn drain_locked(&self, ring: &mut DevRing, fired: &mut Deliveries) -> std::result::Result<(), &'static str> {
        const BAD_INDEX: &str = "CQ-notification ring index out of range";
        const UNREACHABLE: &str = "CQ-notification ring unreachable";
        let n = ring.pending().map_err(|_| BAD_INDEX)?;
        for k in 0..n {
            let mut b = [0u8; 4];
            ring.read(k, &mut b).map_err(|_| UNREACHABLE)?;
            let handle = Cqne::read_from_bytes(&b).map(|e| e.info.get()).unwrap_or(u32::MAX);
            self.notify_cq(handle, fired);
        }
        ring.advance(n).map_err(|_| UNREACHABLE)?;
        if n >= ring.elems() {
            self.recover_dropped(fired);
        }
        Ok(())
    }

    /// The recovery pass after the CQ-notification ring was found full (design decision 3):
    /// entries may have been dropped since (QEMU 7.2 drops entry and interrupt and leaves the CQ
    /// armed on its side; the IBTA model drops the entry of an arm it already spent). For every
    /// live CQ the core re-arms what it believes armed and fires those holding unpolled CQEs
    /// ([`CqEventHandler::recover_dropped`]). Runs under the ring's lock, and holds the CQ
    /// table's read lock, so a CQ being destroyed (it unregisters before its ring is freed) is
    /// either skipped or still has its ring.
    fn recover_dropped(&self, fired: &mut Deliveries) {
        self.health.count(Count::NotifyRingFull);
        let cqs = self.cqs.read();
        let before = fired.len();
        for d in cqs.values().filter_map(|e| e.handler.recover_dropped()) {
            fired.push(d);
        }
        let n = fired.len() - before;
        tracing::warn!(cqs = cqs.len(), fired = n, "CQ-notification ring was full: recovered the armed CQs");
    }

    fn notify_cq(&self, handle: u32, fired: &mut Deliveries) {
        let delivery = self.cq_handler(handle).and_then(|h| h.completion());
        self.health.count(if delivery.is_some() { Count::CqEvent } else { Count::Spurious });
        if let Some(d) = delivery {
            fired.push(d);
        }
    }

    /// Consumes every async-event entry and passes each, by the object it names, to the core, in
    /// the device's order (with those a destroy took meanwhile). The async thread's work.
    fn drain_async(&self) {
        if self.health.is_fatal() {
            // Nothing more reaches the consumer, and a queued entry holds its object's handler,
            // which holds the object and through it the device: drop them, or they never go.
            let queued = std::mem::take(&mut *self.deferred.lock());
            drop(queued);
            return;
        }
        if let Some(reason) = self.fatal_pending() {
            self.health.set_fatal(reason);
            return;
        }
        {
            // A create or destroy may hold the lock across a command that a device going dead
            // never answers; the DEVICE_FATAL entry that ends that wait can arrive while this
            // thread waits here, so it looks again between bounded waits.
            let _objects = loop {
                if let Some(g) = self.objects.try_lock_for(SERVICE_INTERVAL) {
                    break g;
                }
                self.health_check();
                if self.health.is_fatal() {
                    return;
                }
                if let Some(reason) = self.fatal_pending() {
                    self.health.set_fatal(reason);
                    return;
                }
            };
            self.take_async();
        }
        loop {
            let next = self.deferred.lock().pop_front();
            match next {
                Some(e) => self.deliver_async(e),
                None => break,
            }
        }
    }

    /// Takes every async-event entry, resolves each to the object it names now and queues it for
    /// the async thread. Called with the object lock held ([`EventRings::objects`]), so an entry
    /// is never resolved to an object that took a destroyed one's handle after the entry was
    /// written, and takers append in the ring's order.
    fn take_async(&self) {
        let entries = match self.read_async(true) {
            Ok(raw) => raw.into_iter().map(|(t, info)| self.resolve(t, info)).collect(),
            Err(_) => vec![AsyncEntry::Fatal(BAD_ASYNC_RING)],
        };
        self.deferred.lock().extend(entries);
    }

    /// The pending async entries as (type, info), consumed from the ring if `consume`.
    fn read_async(&self, consume: bool) -> Result<Vec<(u32, u32)>> {
        let mut ring = self.async_ring.lock();
        let n = ring.pending()?;
        let mut out = Vec::with_capacity(n as usize);
        for k in 0..n {
            let mut b = [0u8; 8];
            ring.read(k, &mut b)?;
            let e = Eqe::read_from_bytes(&b).map_err(|_| Error::DeviceFatal)?;
            out.push((e.type_.get(), e.info.get()));
        }
        if consume {
            ring.advance(n)?;
        }
        Ok(out)
    }

    /// Why the device must be declared fatal before the async ring's entries are taken, if it
    /// must: a DEVICE_FATAL entry waiting (read, not consumed, or already taken by a destroy
    /// into the entries waiting for this thread) or an unreadable ring. The async
    /// thread looks before it takes the object lock, which a destroy holds across a command that
    /// a dead device never answers: declaring the device fatal at once ends that wait.
    fn fatal_pending(&self) -> Option<&'static str> {
        let taken = self.deferred.lock().iter().find_map(|e| match e {
            AsyncEntry::Fatal(reason) => Some(*reason),
            _ => None,
        });
        if taken.is_some() {
            return taken;
        }
        let fatal = EqeType::DeviceFatal as u32;
        match self.read_async(false) {
            Err(_) => Some(BAD_ASYNC_RING),
            Ok(v) if v.iter().any(|&(t, _)| t == fatal) => Some(DEVICE_FATAL_EVENT),
            Ok(_) => None,
        }
    }

    fn resolve(&self, type_: u32, info: u32) -> AsyncEntry {
        self.health.count(Count::AsyncEvent);
        let Some(event) = event_type(type_) else { return AsyncEntry::Dropped(type_, info) };
        let found = match event.scope() {
            EventScope::Cq => self.cqs.read().get(&info).map(|e| AsyncEntry::Cq(e.flags.clone(), e.handler.clone())),
            EventScope::Qp => self.qps.read().get(&info).map(|h| AsyncEntry::Qp(h.clone(), event)),
            EventScope::Port => u8::try_from(info).ok().filter(|&p| p >= 1).map(|p| AsyncEntry::Port(p, event)),
            EventScope::Device => Some(AsyncEntry::Fatal(DEVICE_FATAL_EVENT)),
            EventScope::Srq => self.srqs.read().get(&info).map(|h| AsyncEntry::Srq(h.clone(), event)),
        };
        found.unwrap_or(AsyncEntry::Dropped(type_, info))
    }

    /// Hands a resolved entry to the core with no lock held: the core runs the consumer's
    /// handler, which may create or destroy objects.
    fn deliver_async(&self, e: AsyncEntry) {
        let delivered = match &e {
            AsyncEntry::Cq(flags, handler) => {
                // CQ_ERR: the CQ overflowed (the model's only reason for it, decision 7).
                flags.overrun.store(true, Ordering::Release);
                handler.error(CqError::Overrun)
            }
            AsyncEntry::Qp(handler, event) => handler.event(*event),
            AsyncEntry::Srq(handler, event) => handler.event(*event),
            AsyncEntry::Port(port, event) => self.health.core().map(|c| c.port_event(*port, *event)).is_some(),
            AsyncEntry::Fatal(reason) => {
                self.health.set_fatal(reason);
                true
            }
            AsyncEntry::Dropped(..) => false,
        };
        if !delivered {
            tracing::warn!(entry = ?e, "async event for no live object (or of an unknown type): dropped");
            self.health.count(Count::DroppedAsync);
        }
    }

    /// Runs `destroy` (the object's DESTROY command) and `forget` (its removal from the tables)
    /// under the object lock, consuming in between every report the device wrote: CQ-notification
    /// entries and async events are resolved while the object is still in the tables, so they
    /// reach the object being destroyed (whose core handler drops them) and never an object that
    /// later takes its handle. Creation takes the same lock ([`EventRings::objects`]), so a handle
    /// the device reuses is registered only once the old owner is gone from the tables. The async
    /// entries taken here, other objects' and ports' included, are delivered by the async thread,
    /// never on the destroying thread.
    pub(crate) fn destroy_object(&self, destroy: impl FnOnce(), forget: impl FnOnce()) {
        let _objects = self.objects.lock();
        destroy();
        self.take_reports();
        forget();
    }

    /// Consumes every report the device wrote so far, resolving each to the objects in the
    /// tables now: CQ-notification entries go to their CQs, async entries are queued for the
    /// async thread. Called with the object lock held, between a command and the table change it
    /// brings (a destroy's removal, a create's registration).
    fn take_reports(&self) {
        self.drain_notifications();
        if !self.health.is_fatal() {
            self.take_async();
        }
    }

    /// The bounded health check: a register reading all-ones means the function is gone, and the
    /// device becomes fatal.
    pub fn health_check(&self) {
        self.health.check_registers(self.platform.as_ref());
    }

    /// Asks the vector threads to exit (they notice within [`SERVICE_INTERVAL`]) and takes the
    /// CQ-notification handler back from the platform.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.platform.set_vector_handler(IntrVector::Cq as u16, None);
    }

    /// The CQ-notification interrupt (vector 2): `n` interrupts arrived; drain the ring.
    fn cq_interrupt(&self, n: u32) {
        self.health.count_interrupts(IntrVector::Cq as u16, n);
        self.drain_notifications();
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// The core's event type for a pvrdma EQE type (`enum pvrdma_eqe_type`, 1:1 with IBTA's).
fn event_type(type_: u32) -> Option<AsyncEventType> {
    use AsyncEventType as A;
    Some(match EqeType::try_from(type_).ok()? {
        EqeType::CqErr => A::CqErr,
        EqeType::QpFatal => A::QpFatal,
        EqeType::QpReqErr => A::QpReqErr,
        EqeType::QpAccessErr => A::QpAccessErr,
        EqeType::CommEst => A::CommEst,
        EqeType::SqDrained => A::SqDrained,
        EqeType::PathMig => A::PathMig,
        EqeType::PathMigErr => A::PathMigErr,
        EqeType::DeviceFatal => A::DeviceFatal,
        EqeType::PortActive => A::PortActive,
        EqeType::PortErr => A::PortErr,
        EqeType::LidChange => A::LidChange,
        EqeType::PkeyChange => A::PkeyChange,
        EqeType::SmChange => A::SmChange,
        EqeType::SrqErr => A::SrqErr,
        EqeType::SrqLimitReached => A::SrqLimitReached,
        EqeType::QpLastWqeReached => A::QpLastWqeReached,
        EqeType::ClientReregister => A::ClientReregister,
        EqeType::GidChange => A::GidChange,
    })
}

/// Starts the async (vector 1) and CQ-notification (vector 2) threads, and gives vector 2's
/// handler to a platform that can run it on the raising thread (the in-process model): an event
/// then costs no hand-off to the vector thread, which stays for what the handler does not get
/// (design decision 20). The handler only drains the ring and hands events to the core, which
/// wakes channel waiters and upcall threads; it takes no lock a thread holds across a doorbell
/// or a command, so it may run inside either.
///
/// Errors: [`Error::NoResources`] if a thread cannot be started.
pub fn spawn_threads(rings: &Arc<EventRings>, name: &str) -> Result<Vec<JoinHandle<()>>> {
    let weak = Arc::downgrade(rings);
    let handler: VectorHandler = Arc::new(move || {
        if let Some(rings) = weak.upgrade() {
            rings.cq_interrupt(1);
        }
    });
    rings.platform.set_vector_handler(IntrVector::Cq as u16, Some(handler));
    [IntrVector::Async, IntrVector::Cq]
        .into_iter()
        .map(|v| {
            let rings = rings.clone();
            std::thread::Builder::new()
                .name(format!("{name}-irq{}", v as u16))
                .spawn(move || service(&rings, v))
                .map_err(|_| Error::NoResources("cannot start interrupt threads"))
        })
        .collect()
}

/// A vector thread. Both threads also run the health check every [`SERVICE_INTERVAL`] on their
/// own clocks, interrupts or not: a dead device stormed with interrupts is still found, and the
/// CQ thread, which never runs consumer code, finds it while the async thread runs a consumer's
/// async-event handler.
fn service(rings: &EventRings, vector: IntrVector) {
    let mut next_check = ib_core::time::deadline_after(SERVICE_INTERVAL);
    while !rings.stopped() {
        let n = rings.platform.wait_vector(vector as u16, SERVICE_INTERVAL);
        match vector {
            IntrVector::Async => {
                rings.health.count_interrupts(vector as u16, n);
                rings.drain_async();
            }
            IntrVector::Cq => rings.cq_interrupt(n),
            IntrVector::Response => {}
        }
        if Instant::now() >= next_check {
            rings.health_check();
            next_check = ib_core::time::deadline_after(SERVICE_INTERVAL);
        }
    }
}
