//! The upcall dispatcher (the DAT/kDAPL event-dispatcher model, `dat_evd_modify_upcall`): a
//! consumer callback run for a CQ's completion events under a policy named as DAT names them.
//!
//! Upcalls run on a thread of their own per dispatcher, never on the driver's interrupt threads:
//! a slow upcall delays only its own CQ's upcalls, never another CQ's events, the channels, the
//! notify requests or the async events. The dispatcher is a client of the CQ's arm state machine
//! ([`crate::arm`]); the policy lives there, under the same lock as the arm, so changing it while
//! completions arrive on another CPU cannot slip between an event and its check (what a local
//! interrupt-disabling lock could not do in the kDAPL thread).
//!
//! The consumer pattern (IBTA: CQEs queued before an arm raise no event; the same holds for
//! enabling an upcall): **enable, then poll once more**. Completions that arrived while the upcall
//! was disabled give no upcall; the poll after enabling finds them, and anything later raises an
//! upcall. Inside an upcall, poll until the CQ is empty.

use crate::error::{Error, Result};
use crate::notify::NotifyStatus;
use parking_lot::{Condvar, Mutex};
use std::cell::RefCell;
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
#[derive(Default)]
pub(crate) struct Wake {
    st: Mutex<WakeState>,
    cv: Condvar,
}

#[derive(Default)]
struct WakeState {
    pending: bool,
    stop: bool,
}

impl Wake {
    /// Tells the thread to look for upcalls.
    pub(crate) fn wake(&self) {
        self.st.lock().pending = true;
        self.cv.notify_one();
    }

    fn stop(&self) {
        self.st.lock().stop = true;
        self.cv.notify_one();
    }

    /// Waits for a wake-up; `false` once stopped.
    fn wait(&self) -> bool {
        let mut st = self.st.lock();
        while !st.pending && !st.stop {
            // Bounded, as every wait in the driver: a missed notify costs one interval.
            self.cv.wait_for(&mut st, crate::eq::SERVICE_INTERVAL);
            if !st.pending && !st.stop {
                st.pending = true;
            }
        }
        st.pending = false;
        !st.stop
    }

    fn stopped(&self) -> bool {
        self.st.lock().stop
    }
}

/// A running dispatcher: its thread and its wake-up.
pub(crate) struct Dispatcher {
    wake: Arc<Wake>,
    thread: Option<JoinHandle<()>>,
}

impl Dispatcher {
    /// Starts a thread named `name` that, on every wake-up, runs `step` until it returns `false`
    /// (nothing left to call); the thread ends when stopped or when `step` says the CQ is gone
    /// (`None`).
    pub(crate) fn spawn(
        name: String,
        mut step: impl FnMut(&Wake) -> Option<()> + Send + 'static,
    ) -> Result<Self> {
        let wake = Arc::new(Wake::default());
        let w = wake.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                while w.wait() {
                    if step(&w).is_none() {
                        break;
                    }
                }
            })
            .map_err(|_| Error::Unsupported("cannot start an upcall thread"))?;
        Ok(Self { wake, thread: Some(thread) })
    }

    /// The wake-up the interrupt path signals.
    pub(crate) fn wake(&self) -> Arc<Wake> {
        self.wake.clone()
    }

    /// Stops the thread and waits for it, unless called on it (from inside an upcall): then the
    /// thread ends by itself when the upcall returns.
    pub(crate) fn stop(mut self) {
        self.wake.stop();
        if let Some(t) = self.thread.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        // A dispatcher dropped without `stop` (its CQ object went first): the thread ends on its
        // next wake-up.
        self.wake.stop();
    }
}

/// Whether a dispatcher's step loop should go on after an upcall.
pub(crate) fn keep_going(w: &Wake) -> bool {
    !w.stopped()
}

thread_local! {
    /// CQs (by [`crate::cq::CqState`] uid) whose callback — upcall or async-event handler — runs
    /// on this thread right now.
    static IN_CALLBACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
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

impl crate::Cq {
    /// Installs an upcall dispatcher on the CQ (DAT `dat_evd_modify_upcall` with a new upcall),
    /// replacing any previous one, with `policy`. The upcall runs on a thread of its own with a
    /// view of the CQ (poll it until empty) and a status: [`NotifyStatus::Success`] for a
    /// completion event, [`NotifyStatus::Overrun`] / [`NotifyStatus::Failure`] for a CQ error
    /// (reported unless the policy is DISABLE). A panic in the upcall is caught and logged.
    ///
    /// **Consumer pattern**: enable, then poll once more. CQEs already queued when the upcall is
    /// enabled raise no upcall (IBTA: they came before the arm); the poll after enabling finds
    /// them, and every later CQE raises an upcall.
    ///
    /// ```no_run
    /// # fn f(cq: &hca::Cq, handle: impl Fn(&[hca::Wc])) -> hca::Result<()> {
    /// use hca::{UpcallPolicy, Wc};
    /// cq.set_upcall(UpcallPolicy::ManyInstance, |cq, _status| {
    ///     let mut wc = [Wc::default(); 16];
    ///     while let Ok(n @ 1..) = cq.poll(&mut wc) { /* handle(&wc[..n]) */ let _ = n; }
    /// })?;
    /// let mut wc = [Wc::default(); 16];
    /// while let n @ 1.. = cq.poll(&mut wc)? { handle(&wc[..n]); } // once more, after enabling
    /// # Ok(()) }
    /// ```
    ///
    /// Errors: [`Error::WouldDeadlock`] from inside this CQ's own upcall (the old dispatcher
    /// cannot be stopped from its own thread); [`Error::DeviceFatal`]; thread creation failure.
    pub fn set_upcall(
        &self,
        policy: UpcallPolicy,
        upcall: impl FnMut(&crate::Cq, NotifyStatus) + Send + 'static,
    ) -> Result<()> {
        self.inner.live()?;
        let state = self.inner.state.clone();
        if in_callback(state.uid()) {
            return Err(Error::WouldDeadlock("replacing a CQ's upcall from inside it"));
        }
        let mut slot = self.inner.dispatcher.lock();
        if let Some(old) = slot.take() {
            state.machine().set_policy(None);
            state.set_upcall_wake(None);
            old.stop();
        }
        let weak = std::sync::Arc::downgrade(&self.inner);
        let mut upcall = upcall;
        let name = format!("cq{}-upcall", state.handle());
        let d = Dispatcher::spawn(name, move |wake| {
            let inner = weak.upgrade()?;
            let uid = inner.state.uid();
            while keep_going(wake) {
                let Some(status) = inner.state.machine().take_upcall() else { break };
                let view = crate::Cq { inner: inner.clone(), owner: false };
                let _scope = CallbackScope::enter(uid);
                contained("CQ upcall", || upcall(&view, status));
            }
            Some(())
        })?;
        state.set_upcall_wake(Some(d.wake()));
        *slot = Some(d);
        drop(slot);
        state.machine().set_policy(Some(policy));
        Ok(())
    }

    /// Changes the dispatcher's policy (DAT `dat_evd_modify_upcall`), also from inside the upcall
    /// (re-enabling SINGLE_INSTANCE there is the usual pattern). Enabling arms the CQ; CQEs
    /// already queued raise no upcall — **enable, then poll once more** (see
    /// [`Cq::set_upcall`](crate::Cq::set_upcall)). DISABLE drops an upcall not yet started.
    /// A change never loses a completion: the policy and the arm change under the arm state
    /// machine's lock, which the interrupt path takes too.
    ///
    /// Errors: [`Error::InvalidState`] if the CQ has no dispatcher; [`Error::DeviceFatal`].
    pub fn modify_upcall(&self, policy: UpcallPolicy) -> Result<()> {
        self.inner.live()?;
        if self.inner.state.machine().policy().is_none() {
            return Err(Error::InvalidState);
        }
        self.inner.state.machine().set_policy(Some(policy));
        Ok(())
    }

    /// The dispatcher's policy; `None` without a dispatcher. A SINGLE_INSTANCE that has made its
    /// upcall reads DISABLE until enabled again.
    pub fn upcall_policy(&self) -> Option<UpcallPolicy> {
        self.inner.state.machine().policy()
    }
}
