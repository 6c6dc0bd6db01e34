//! The upcall dispatcher (the DAT/kDAPL event-dispatcher model, `dat_evd_modify_upcall`): a
//! consumer callback run for a CQ's completion events under a policy named as DAT names them.
//!
//! Upcalls run on a thread of their own per dispatcher, never on the driver's interrupt threads:
//! a slow upcall delays only its own CQ's upcalls, never another CQ's events, the channels, the
//! notify requests or the async events. The dispatcher is a client of the CQ's arm state machine
//! (`arm.rs`); the policy lives there, under the same lock as the arm, so changing it while
//! completions arrive on another CPU cannot slip between an event and its check (what a local
//! interrupt-disabling lock could not do in the kDAPL thread).
//!
//! The consumer pattern (IBTA: CQEs queued before an arm raise no event; the same holds for
//! enabling an upcall): **enable, then poll once more**. Completions that arrived while the upcall
//! was disabled give no upcall; the poll after enabling finds them, and anything later raises an
//! upcall. Inside an upcall, poll until the CQ is empty.

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// When the dispatcher calls its upcall (DAT `DAT_UPCALL_POLICY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpcallPolicy {
    /// `DAT_UPCALL_DISABLE`: no upcalls; the CQ is not armed for the dispatcher.
    Disable,
    /// `DAT_UPCALL_SINGLE_INSTANCE`: one upcall, for the next completion event; then the
    /// dispatcher is disabled until the consumer enables it again.
    SingleInstance,
    /// `DAT_UPCALL_MANY_INSTANCE`: an upcall per completion event; the driver re-arms the CQ
    /// before each upcall runs.
    ManyInstance,
}

/// The wake-up the interrupt path gives a dispatcher thread.
///
/// An idle dispatcher sleeps on the condvar with no timeout: every reason to run is signalled
/// explicitly — an event or a CQ error (a fatal device fails every CQ's machine and delivers
/// that too) or a stop — and each signal
/// is set under the lock the sleeper checks it under, so none is missed. (A periodic wake would
/// cost every idle CQ a thread wake-up per interval: 1024 CQs, ~20 000 wake-ups a second.)
#[derive(Default)]
pub(crate) struct Wake {
    /// An upcall may be pending.
    pending: Mutex<bool>,
    /// Stopped (read without the lock by the arm machine's `take_upcall_if`; set before
    /// the lock is taken to notify, so a sleeper that checked it under the lock cannot miss it).
    stop: AtomicBool,
    cv: Condvar,
}

impl Wake {
    /// Tells the thread to look for upcalls.
    pub(crate) fn wake(&self) {
        *self.pending.lock() = true;
        self.cv.notify_one();
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        drop(self.pending.lock());
        self.cv.notify_one();
    }

    /// Waits for a wake-up; `false` once stopped.
    fn wait(&self) -> bool {
        let mut pending = self.pending.lock();
        while !*pending && !self.stopped() {
            self.cv.wait(&mut pending);
        }
        *pending = false;
        !self.stopped()
    }

    /// Whether the dispatcher was stopped.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// A running dispatcher: its thread and its wake-up.
pub(crate) struct Dispatcher {
    wake: Arc<Wake>,
    thread: Option<JoinHandle<()>>,
    /// Set by the thread as it ends.
    ended: Arc<(Mutex<bool>, Condvar)>,
}

impl Dispatcher {
    /// Starts a thread named `name` that, on every wake-up, runs `step` until it returns `false`
    /// (nothing left to call); the thread ends when stopped or when `step` says the CQ is gone
    /// (`None`).
    pub(crate) fn spawn(name: String, mut step: impl FnMut(&Wake) -> Option<()> + Send + 'static) -> Result<Self> {
        let wake = Arc::new(Wake::default());
        let ended = Arc::new((Mutex::new(false), Condvar::new()));
        let (w, e) = (wake.clone(), ended.clone());
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                ON_DISPATCHER.with(|d| d.set(true));
                while w.wait() {
                    if step(&w).is_none() {
                        break;
                    }
                }
                *e.0.lock() = true;
                e.1.notify_all();
            })
            .map_err(|_| Error::NoResources("cannot start an upcall thread"))?;
        Ok(Self { wake, thread: Some(thread), ended })
    }

    /// The wake-up the interrupt path signals.
    pub(crate) fn wake(&self) -> Arc<Wake> {
        self.wake.clone()
    }

    /// Stops the thread. From a thread that is not a dispatcher, waits for it (a running upcall
    /// returns first). From inside an upcall — its own dispatcher's or *any other* CQ's — it does
    /// not wait: waiting for another dispatcher from a dispatcher can deadlock (CQ A's upcall
    /// destroys B while B's upcall destroys A, each waiting for the other's thread). The thread
    /// is then detached: it ends by itself when its running upcall (if any) returns, holding
    /// only what it owns (its upcall, its wake-up, a weak reference to the CQ object, upgraded
    /// — keeping the CQ alive — only while an upcall runs); it takes no upcall after the stop.
    ///
    /// The wait is bounded by [`crate::time::RETIRE_WAIT`]: an upcall stuck longer is left to finish on
    /// its own (logged), as from a dispatcher.
    pub(crate) fn stop(mut self) {
        self.wake.stop();
        let Some(t) = self.thread.take() else { return };
        if on_dispatcher_thread() {
            return;
        }
        let deadline = std::time::Instant::now() + crate::time::RETIRE_WAIT;
        let mut ended = self.ended.0.lock();
        while !*ended {
            if self.ended.1.wait_until(&mut ended, deadline).timed_out() {
                tracing::warn!("an upcall still runs after the CQ's destroy waited for it: detached");
                return;
            }
        }
        drop(ended);
        let _ = t.join();
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        // A dispatcher dropped without `stop` (its CQ object went first): the thread ends on its
        // next wake-up.
        self.wake.stop();
    }
}

thread_local! {
    /// This thread is an upcall dispatcher's.
    static ON_DISPATCHER: Cell<bool> = const { Cell::new(false) };
    /// Objects (CQs and QPs, by uid) whose callback — upcall or async-event handler — runs
    /// on this thread right now.
    static IN_CALLBACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Whether the current thread is an upcall dispatcher's (of any CQ of any device).
pub(crate) fn on_dispatcher_thread() -> bool {
    ON_DISPATCHER.with(Cell::get)
}

/// Marks the current thread as running a callback for CQ `uid` until dropped.
pub(crate) struct CallbackScope(u64);

impl CallbackScope {
    pub(crate) fn enter(uid: u64) -> Self {
        IN_CALLBACK.with(|v| v.borrow_mut().push(uid));
        Self(uid)
    }
}

impl Drop for CallbackScope {
    fn drop(&mut self) {
        IN_CALLBACK.with(|v| {
            let mut v = v.borrow_mut();
            if let Some(i) = v.iter().rposition(|&u| u == self.0) {
                v.remove(i);
            }
        });
    }
}

/// Whether the current thread is inside a callback for CQ `uid` (destroying it from there would
/// wait for itself).
pub(crate) fn in_callback(uid: u64) -> bool {
    IN_CALLBACK.with(|v| v.borrow().contains(&uid))
}

/// Runs `f`, catching a panic (logged as `what`), so a consumer bug does not kill a driver thread.
pub(crate) fn contained(what: &'static str, f: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        let msg = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(non-string panic payload)");
        tracing::error!(panic = msg, "{what} panicked");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::{Duration, Instant};

    /// Item 6: an idle dispatcher sleeps until it is woken or stopped; it used to run its step
    /// every 50 ms with nothing to do (1024 idle CQs: ~20 000 thread wake-ups a second).
    #[test]
    fn an_idle_dispatcher_does_not_wake_until_signalled() {
        let steps = Arc::new(AtomicU32::new(0));
        let d = Dispatcher::spawn("idle-test".into(), {
            let steps = steps.clone();
            move |_| {
                steps.fetch_add(1, Ordering::SeqCst);
                Some(())
            }
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(steps.load(Ordering::SeqCst), 0, "an idle dispatcher ran its step");
        d.wake().wake();
        let deadline = Instant::now() + Duration::from_secs(5);
        while steps.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "a wake-up was missed");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(steps.load(Ordering::SeqCst), 1, "one wake-up, one step");
        let t = Instant::now();
        d.stop();
        assert!(t.elapsed() < Duration::from_secs(1), "stop woke the idle thread at once");
    }

    /// Item 5: stopping a dispatcher from another dispatcher's thread does not wait for it (the
    /// two could be waiting for each other); from any other thread it does.
    #[test]
    fn a_dispatcher_never_waits_for_another_dispatcher() {
        let (in_b, in_b_rx) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let b = Dispatcher::spawn("b".into(), move |_| {
            let _ = in_b.send(());
            let _ = release_rx.lock().recv_timeout(Duration::from_secs(10));
            Some(())
        })
        .unwrap();
        b.wake().wake();
        in_b_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let b = Mutex::new(Some(b));
        let (stopped, stopped_rx) = std::sync::mpsc::channel();
        let a = Dispatcher::spawn("a".into(), move |_| {
            if let Some(b) = b.lock().take() {
                let t = Instant::now();
                b.stop(); // b is busy until released: a dispatcher must not wait for it
                let _ = stopped.send(t.elapsed());
            }
            Some(())
        })
        .unwrap();
        a.wake().wake();
        let took = stopped_rx.recv_timeout(Duration::from_secs(5)).expect("stop waited for b");
        assert!(took < Duration::from_secs(1), "{took:?}");
        release.send(()).unwrap();
        a.stop();
    }
}
