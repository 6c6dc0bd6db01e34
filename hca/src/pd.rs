//! Protection domains (Linux `pvrdma_alloc_pd`, mthca `mthca_pd.c`).

use crate::device::{duplicate_handle, DeviceInner, IdKind};
use crate::uctx::UctxInner;
use ib_core::provider::PdOps;
use ib_core::{Error, Result};
use pvrdma_abi::cmd::{CreatePd, DestroyPd};
use std::any::Any;
use std::sync::Arc;

/// A protection domain. The verbs core destroys it (DESTROY_PD) after its MRs and QPs.
pub struct Pd {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) uctx: Option<Arc<UctxInner>>,
    pub(crate) handle: u32,
}

impl Pd {
    /// CREATE_PD for the kernel (`uctx` None, context handle 0) or a user context.
    ///
    /// Errors: [`Error::DeviceFatal`] if the device answers the handle of a live PD (the device
    /// is made fatal: nothing is destroyed, DESTROY_PD would reach the live PD); command errors.
    pub(crate) fn create(dev: &Arc<DeviceInner>, uctx: Option<Arc<UctxInner>>) -> Result<Pd> {
        dev.live()?;
        let ctx_handle = uctx.as_ref().map_or(0, |u| u.handle);
        let mut live = dev.live_ids.lock();
        let resp = dev.cmd.post(CreatePd { ctx_handle: ctx_handle.into(), ..Default::default() })?;
        let handle = resp.pd_handle.get();
        live.claim(&[(IdKind::Pd, handle)]).map_err(|_| duplicate_handle(dev, IdKind::Pd, handle))?;
        Ok(Pd { dev: dev.clone(), uctx, handle })
    }

    /// The owning context's handle, `None` for the kernel.
    pub(crate) fn ctx(&self) -> Option<u32> {
        self.uctx.as_ref().map(|u| u.handle)
    }

    /// The provider's PD behind the core's.
    pub(crate) fn of(pd: &dyn PdOps) -> Result<&Pd> {
        pd.as_any().downcast_ref().ok_or(Error::InvalidArgument("a PD of another provider"))
    }
}

impl PdOps for Pd {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn handle(&self) -> u32 {
        self.handle
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        let cmd = DestroyPd { pd_handle: self.handle.into(), ..Default::default() };
        let mut live = self.dev.live_ids.lock();
        // A PD the device did not destroy keeps its handle: the device must not answer it again.
        match self.dev.cmd.post(cmd) {
            Ok(_) => live.release(&[(IdKind::Pd, self.handle)]),
            Err(e) => tracing::warn!(handle = self.handle, error = %e, "DESTROY_PD failed"),
        }
    }
}
