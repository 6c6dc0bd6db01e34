//! User contexts (Linux `pvrdma_alloc_ucontext`, mthca `mthca_alloc_ucontext`): a UAR page of the
//! context's own, registered with CREATE_UC, through which the context's QPs ring their doorbells
//! and its CQs their POLL doorbell (as user space would through its mmapped UAR). The device
//! honours a doorbell on that page only for the context's own objects (design decision 5). CQ arms
//! go through the kernel's page for every CQ (the arm mthca could not give user CQs).

use crate::device::DeviceInner;
use crate::error::from_uar;
use crate::uar::UarDirect;
use doorbell::{Doorbells, UarPage};
use ib_core::provider::UcontextOps;
use ib_core::{Error, Result};
use pvrdma_abi::cmd::{CreateUc, DestroyUc};
use std::any::Any;
use std::sync::Arc;

/// A user context of the device. Dropping it sends DESTROY_UC and releases its page.
pub struct Ucontext {
    pub(crate) inner: Arc<UctxInner>,
}

pub(crate) struct UctxInner {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) handle: u32,
    page: UarPage,
    pub(crate) db: Doorbells,
}

impl Ucontext {
    /// Allocates a UAR page and registers it with CREATE_UC.
    ///
    /// Errors: [`Error::Device`] when BAR2 has no free page or the device refuses;
    /// [`Error::InvalidArgument`] if the pfn does not fit the command's 32 bits.
    pub(crate) fn create(dev: &Arc<DeviceInner>) -> Result<Self> {
        dev.live()?;
        let page = dev.uar.alloc().map_err(from_uar)?;
        let created = u32::try_from(page.pfn())
            .map_err(|_| Error::InvalidArgument("UAR pfn beyond 32 bits"))
            .and_then(|pfn| dev.cmd.post(CreateUc { pfn: pfn.into(), ..Default::default() }));
        let resp = created.inspect_err(|_| {
            let _ = dev.uar.release(page);
        })?;
        let handle = resp.ctx_handle.get();
        let db = Doorbells::new(Arc::new(UarDirect(dev.platform.clone())), page);
        tracing::debug!(handle, page = page.index(), "user context created");
        Ok(Self { inner: Arc::new(UctxInner { dev: dev.clone(), handle, page, db }) })
    }

    /// Raw doorbells of this context's own UAR page. MMIO writes only: an arm rung here is the
    /// device's, not the driver's (it raises no completion event); the device refuses one for
    /// another context's object.
    pub fn doorbells(&self) -> &Doorbells {
        &self.inner.db
    }

    /// The context's UAR page.
    pub fn uar_page(&self) -> UarPage {
        self.inner.page
    }
}

impl UcontextOps for Ucontext {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn handle(&self) -> u32 {
        self.inner.handle
    }
}

impl Drop for UctxInner {
    fn drop(&mut self) {
        let cmd = DestroyUc { ctx_handle: self.handle.into(), ..Default::default() };
        if let Err(e) = self.dev.cmd.post(cmd) {
            tracing::warn!(handle = self.handle, error = %e, "DESTROY_UC failed");
        }
        if let Err(e) = self.dev.uar.release(self.page) {
            tracing::warn!(error = %e, "UAR page release failed");
        }
    }
}

/// The provider's context behind a core context's `uctx` (`None`: the kernel's).
pub(crate) fn of(uctx: Option<&dyn UcontextOps>) -> Result<Option<Arc<UctxInner>>> {
    match uctx {
        None => Ok(None),
        Some(u) => u
            .as_any()
            .downcast_ref::<Ucontext>()
            .map(|c| Some(c.inner.clone()))
            .ok_or(Error::InvalidArgument("a user context of another provider")),
    }
}
