//! Protection domains (Linux `pvrdma_alloc_pd`, mthca `mthca_pd.c`).

use crate::device::DeviceInner;
use crate::error::Result;
use crate::mr::Mr;
use crate::qp::Qp;
use crate::uctx::UctxInner;
use crate::verbs::QpInitAttr;
use pvrdma_abi::cmd::{CreatePd, DestroyPd};
use std::sync::Arc;

/// A protection domain. MRs and QPs hold it, so it is destroyed (DESTROY_PD) after them.
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

/// The PD state its objects hold on to.
pub struct PdInner {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) uctx: Option<Arc<UctxInner>>,
    pub(crate) handle: u32,
}

impl Pd {
    /// CREATE_PD for the kernel (`uctx` None, context handle 0) or a user context.
    pub(crate) fn create(dev: &Arc<DeviceInner>, uctx: Option<&Arc<UctxInner>>) -> Result<Pd> {
        let ctx_handle = uctx.map_or(0, |u| u.handle);
        let resp = dev.cmd.post(CreatePd { ctx_handle: ctx_handle.into(), ..Default::default() })?;
        let inner = PdInner { dev: dev.clone(), uctx: uctx.cloned(), handle: resp.pd_handle.get() };
        Ok(Pd { inner: Arc::new(inner) })
    }

    /// The device's PD handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// Registers a new, driver-allocated memory region of `len` bytes with `access`
    /// ([`pvrdma_abi::verbs::access`] bits). See [`Mr`].
    pub fn reg_mr(&self, len: usize, access: u32) -> Result<Mr> {
        Mr::create(&self.inner, len, access)
    }

    /// Creates a QP in this PD. See [`Qp`].
    pub fn create_qp(&self, attr: &QpInitAttr) -> Result<Qp> {
        Qp::create(&self.inner, attr)
    }
}

impl PdInner {
    /// The owning context's handle, `None` for the kernel.
    pub(crate) fn ctx(&self) -> Option<u32> {
        self.uctx.as_ref().map(|u| u.handle)
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let cmd = DestroyPd { pd_handle: self.handle.into(), ..Default::default() };
        if let Err(e) = self.dev.cmd.post(cmd) {
            tracing::warn!(handle = self.handle, error = %e, "DESTROY_PD failed");
        }
    }
}
