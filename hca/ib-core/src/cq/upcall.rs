//! The upcall dispatcher's verbs on a CQ (DAT `dat_evd_modify_upcall`): install one with a
//! policy, change the policy, read it. The dispatcher itself is in `events/upcall.rs`; its policy lives
//! in the CQ's arm state machine.

use super::Cq;
use crate::error::{Error, Result};
use crate::events::notify::NotifyStatus;
use crate::events::upcall::{contained, in_callback, CallbackScope, Dispatcher, UpcallPolicy};

impl Cq {
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
    /// # fn f(cq: &ib_core::Cq, handle: impl Fn(&[ib_core::Wc])) -> ib_core::Result<()> {
    /// use ib_core::{UpcallPolicy, Wc};
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
        upcall: impl FnMut(&Cq, NotifyStatus) + Send + 'static,
    ) -> Result<()> {
        self.inner.ctx.live()?;
        let events = self.inner.events.clone();
        if in_callback(events.cq.uid()) {
            return Err(Error::WouldDeadlock("replacing a CQ's upcall from inside it"));
        }
        let mut slot = self.inner.dispatcher.lock();
        if let Some(old) = slot.take() {
            events.machine.set_policy(None);
            events.set_upcall_wake(None);
            old.stop();
        }
        let weak = std::sync::Arc::downgrade(&self.inner);
        let mut upcall = upcall;
        let name = format!("cq{}-upcall", events.cq.handle());
        let d = Dispatcher::spawn(name, move |wake| {
            let inner = weak.upgrade()?;
            let uid = inner.events.cq.uid();
            // A stopped dispatcher takes nothing more (asked under the machine's lock): what is
            // pending stays for the dispatcher that replaced it.
            while let Some(status) = inner.events.machine.take_upcall_if(|| !wake.stopped()) {
                let view = Cq { inner: inner.clone(), owner: false };
                let _scope = CallbackScope::enter(uid);
                contained("CQ upcall", || upcall(&view, status));
            }
            Some(())
        })?;
        events.set_upcall_wake(Some(d.wake()));
        *slot = Some(d);
        drop(slot);
        events.machine.set_policy(Some(policy));
        events.wake_if_upcall_pending();
        Ok(())
    }

    /// Changes the dispatcher's policy (DAT `dat_evd_modify_upcall`), also from inside the upcall
    /// (re-enabling SINGLE_INSTANCE there is the usual pattern). Enabling arms the CQ; CQEs
    /// already queued raise no upcall — **enable, then poll once more** (see
    /// [`Cq::set_upcall`](Cq::set_upcall)). DISABLE drops an upcall not yet started.
    /// A change never loses a completion: the policy and the arm change under the arm state
    /// machine's lock, which the interrupt path takes too.
    ///
    /// Errors: [`Error::InvalidState`] if the CQ has no dispatcher; [`Error::DeviceFatal`].
    pub fn modify_upcall(&self, policy: UpcallPolicy) -> Result<()> {
        self.inner.ctx.live()?;
        let events = &self.inner.events;
        if events.machine.policy().is_none() {
            return Err(Error::InvalidState);
        }
        events.machine.set_policy(Some(policy));
        events.wake_if_upcall_pending();
        Ok(())
    }

    /// The dispatcher's policy; `None` without a dispatcher. A SINGLE_INSTANCE that has made its
    /// upcall reads DISABLE until enabled again.
    pub fn upcall_policy(&self) -> Option<UpcallPolicy> {
        self.inner.events.machine.policy()
    }
}
