//! User contexts (Linux `pvrdma_alloc_ucontext`, mthca `mthca_alloc_ucontext`): a UAR page of
//! the context's own, registered with CREATE_UC, through which the context's objects ring their
//! doorbells (as user space would through its mmapped UAR). The device honours a doorbell on that
//! page only for the context's own objects (design decision 5).

use crate::channel::CompChannel;
use crate::cq::Cq;
use crate::device::DeviceInner;
use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::uar::UarTap;
use doorbell::{Doorbells, UarPage};
use pvrdma_abi::cmd::{CreateUc, DestroyUc};
use std::sync::Arc;

/// A user context. Dropping it (after all its objects) sends DESTROY_UC and releases its page.
pub struct UserContext {
    pub(crate) inner: Arc<UctxInner>,
}

/// The context state its objects hold on to.
pub struct UctxInner {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) handle: u32,
    page: UarPage,
    pub(crate) db: Doorbells,
}

impl UserContext {
    /// Allocates a UAR page and registers it with CREATE_UC.
    ///
    /// Errors: [`Error::Uar`] when BAR2 has no free page; [`Error::InvalidArgument`] if the pfn
    /// does not fit the command's 32 bits; command errors.
    pub(crate) fn create(dev: &Arc<DeviceInner>) -> Result<Self> {
        dev.live()?;
        let page = dev.uar.alloc()?;
        let created = u32::try_from(page.pfn())
            .map_err(|_| Error::InvalidArgument("UAR pfn beyond 32 bits"))
            .and_then(|pfn| dev.cmd.post(CreateUc { pfn: pfn.into(), ..Default::default() }));
        let resp = match created {
            Ok(r) => r,
            Err(e) => {
                let _ = dev.uar.release(page);
                return Err(e);
            }
        };
        let handle = resp.ctx_handle.get();
        let tap = UarTap::new(dev.platform.clone(), dev.hub.clone(), dev.encoding, Some(handle));
        let db = Doorbells::new(Arc::new(tap), page);
        tracing::debug!(handle, page = page.index(), "user context created");
        Ok(Self { inner: Arc::new(UctxInner { dev: dev.clone(), handle, page, db }) })
    }

    /// The device's context handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The doorbells of this context's own UAR page.
    pub fn doorbells(&self) -> &Doorbells {
        &self.inner.db
    }

    /// The context's UAR page.
    pub fn uar_page(&self) -> UarPage {
        self.inner.page
    }

    /// Allocates a protection domain of this context.
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::create(&self.inner.dev, Some(&self.inner))
    }

    /// Creates a CQ of this context; its `req_notify` and poll doorbells ring this context's
    /// page, and it also gets a kernel-page arm doorbell ([`Cq::kernel_arm_doorbell`]).
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        Cq::create(&self.inner.dev, Some(&self.inner), cqe, channel)
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
