//! User contexts (Linux `pvrdma_alloc_ucontext`, mthca `mthca_alloc_ucontext`): a UAR page of the
//! context's own, registered with CREATE_UC and reached by mapping offset 0, one page (Linux's
//! `pvrdma_mmap`; rdma-core's pvrdma provider maps it so at context creation). The context's QPs
//! ring their doorbells and its CQs their POLL doorbell through that mapping, which rings only
//! the context's own objects; the device checks the same (design decision 5). CQ arms go through
//! the kernel's page for every CQ (the arm mthca could not give user CQs). Releasing the context
//! revokes the mapping before DESTROY_UC, and the page is reused only after both.

use crate::device::{duplicate_handle, DeviceInner, IdKind};
use crate::error::{device_status, from_uar};
use doorbell::{ContextUar, Doorbells, Owner, UarPage};
use firmware_cmd::DeviceStatus;
use ib_core::provider::UcontextOps;
use ib_core::{Error, Result};
use pvrdma_abi::cmd::{CreateUc, DestroyUc};
use pvrdma_abi::uar::UAR_PAGE_SIZE;
use std::any::Any;
use std::sync::Arc;

/// A user context of the device. Dropping it sends DESTROY_UC and releases its page.
pub struct Ucontext {
    pub(crate) inner: Arc<UctxInner>,
}

pub(crate) struct UctxInner {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) handle: u32,
    uar: ContextUar,
    /// The context's mapping of its page (offset 0, one page).
    pub(crate) db: Doorbells,
}

impl Ucontext {
    /// Allocates a UAR page and registers it with CREATE_UC.
    ///
    /// Errors: [`Error::Device`] when BAR2 has no free page or the device refuses;
    /// [`Error::InvalidArgument`] if the pfn does not fit the command's 32 bits;
    /// [`Error::DeviceFatal`] if the device answers the handle of a live context (the device is
    /// made fatal, the page retired).
    pub(crate) fn create(dev: &Arc<DeviceInner>) -> Result<Self> {
        dev.live()?;
        let mut uar = dev.uar.alloc().map_err(from_uar)?;
        let page = uar.page();
        // An error drops `uar`: its page goes to the back of the table's free queue...
        let pfn = u32::try_from(page.pfn()).map_err(|_| Error::InvalidArgument("UAR pfn beyond 32 bits"))?;
        let mut live = dev.live_ids.lock();
        let resp = match dev.cmd.post(CreateUc { pfn: pfn.into(), ..Default::default() }) {
            // ...unless the device says the page is bound already: then no context can have it.
            Err(e) if device_status(&e) == Some(DeviceStatus::Busy) => {
                tracing::warn!(page = page.index(), "CREATE_UC: page bound on the device, retired");
                uar.retire();
                return Err(e);
            }
            r => r?,
        };
        let handle = resp.ctx_handle.get();
        if live.claim(&[(IdKind::Ucontext, handle)]).is_err() {
            // Two contexts under one handle would share objects and pages: nothing is destroyed
            // (DESTROY_UC would reach the live context) and the page stays bound for good.
            uar.retire();
            return Err(duplicate_handle(dev, IdKind::Ucontext, handle));
        }
        drop(live);
        let db = uar.map(0, UAR_PAGE_SIZE).map_err(from_uar)?;
        tracing::debug!(handle, page = page.index(), "user context created");
        let inner = UctxInner { dev: dev.clone(), handle, uar, db };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The typed doorbells of the context's mapping of its UAR page: they ring only the
    /// context's own objects. An arm rung here is the device's, not the driver's (it raises no
    /// completion event).
    pub fn doorbells(&self) -> &Doorbells {
        &self.inner.db
    }

    /// Maps the context's UAR page again, as `mmap` on Linux's device file: offset 0 and one
    /// page only. The mapping is revoked with the context.
    ///
    /// Errors: [`Error::Device`] (EINVAL, as `pvrdma_mmap`) for any other offset or length.
    pub fn mmap(&self, offset: u64, len: u64) -> Result<Doorbells> {
        self.inner.uar.map(offset, len).map_err(from_uar)
    }

    /// The context's UAR page.
    pub fn uar_page(&self) -> UarPage {
        self.inner.uar.page()
    }

    /// The owner tag of the context's objects' doorbell handles.
    pub fn owner(&self) -> Owner {
        self.inner.owner()
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

impl UctxInner {
    /// The owner tag of the context's objects' doorbell handles.
    pub(crate) fn owner(&self) -> Owner {
        self.uar.owner()
    }
}

impl Drop for UctxInner {
    /// Revokes the mappings, then DESTROY_UC; the page returns to the table when `uar` drops
    /// (and no write through a mapping is still in flight).
    /// If DESTROY_UC fails the device may still bind the page to this context, so the page is
    /// retired (kept out of circulation for good) rather than given to a context whose CREATE_UC
    /// the device would refuse for it.
    fn drop(&mut self) {
        self.uar.revoke();
        let cmd = DestroyUc { ctx_handle: self.handle.into(), ..Default::default() };
        let mut live = self.dev.live_ids.lock();
        match self.dev.cmd.post(cmd) {
            Ok(_) => live.release(&[(IdKind::Ucontext, self.handle)]),
            Err(e) => {
                tracing::warn!(handle = self.handle, page = self.uar.page().index(), error = %e, "DESTROY_UC failed: UAR page retired");
                self.uar.retire();
            }
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
