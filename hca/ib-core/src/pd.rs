//! Protection domains (`ibv_alloc_pd` / `ibv_dealloc_pd`).

use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::provider::PdOps;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A protection domain. Its MRs and QPs hold it, so dropping it first is safe: it is deallocated
/// on the device after them.
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

/// (Fields drop in order: the provider's PD, then the context.)
pub(crate) struct PdInner {
    pub(crate) ops: Box<dyn PdOps>,
    /// MRs and QPs of the PD.
    pub(crate) users: AtomicU32,
    pub(crate) ctx: Arc<ContextInner>,
}

impl PdInner {
    pub(crate) fn hold(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn release(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Context {
    /// Allocates a protection domain of this context (`ibv_alloc_pd`).
    ///
    /// Errors: [`Error::DeviceFatal`]; provider errors.
    pub fn alloc_pd(&self) -> Result<Pd> {
        self.inner.live()?;
        let ops = self.inner.device.ops.alloc_pd(self.inner.uctx())?;
        let inner = PdInner { ops, users: AtomicU32::new(0), ctx: self.inner.clone() };
        Ok(Pd { inner: Arc::new(inner) })
    }
}

impl Pd {
    /// The device's PD handle.
    pub fn handle(&self) -> u32 {
        self.inner.ops.handle()
    }

    /// Deallocates the PD (`ibv_dealloc_pd`).
    ///
    /// Errors: [`Error::Busy`] while an MR or QP of it exists; the PD is handed back.
    pub fn dealloc(self) -> std::result::Result<(), (Pd, Error)> {
        if self.inner.users.load(Ordering::Acquire) > 0 {
            return Err((self, Error::Busy("the PD still has MRs or QPs")));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pd({})", self.handle())
    }
}
