//! Memory regions over driver-allocated pages described by a page directory (Linux
//! `pvrdma_mr.c`, design decision 6). The MR's address space starts at the IOVA of its first
//! page: an SGE names `mr.addr() + offset`.

use crate::error::{Error, Result};
use crate::pd::PdInner;
use crate::pdir::PagedBuf;
use pvrdma_abi::cmd::{CreateMr, DestroyMr};
use pvrdma_abi::pdir::PAGE_DIR_MAX_PAGES;
use pvrdma_abi::verbs::access;
use pvrdma_abi::PAGE_SIZE;
use std::sync::Arc;

/// Every access bit this driver knows.
const KNOWN_ACCESS: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND
    | access::ZERO_BASED;

/// A registered memory region. Dropping it sends DESTROY_MR and frees its pages.
pub struct Mr {
    pd: Arc<PdInner>,
    handle: u32,
    lkey: u32,
    rkey: u32,
    len: usize,
    buf: PagedBuf,
}

/// Checks `access` as IBTA 10.6.3.1 requires: known bits only, and remote write or atomic access
/// only together with local write.
pub fn check_access(access: u32) -> Result<()> {
    if access & !KNOWN_ACCESS != 0 {
        return Err(Error::InvalidArgument("unknown access bits"));
    }
    let needs_local = access & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0;
    if needs_local && access & access::LOCAL_WRITE == 0 {
        return Err(Error::InvalidArgument("remote write or atomic needs local write"));
    }
    Ok(())
}

impl Mr {
    /// Allocates `len` bytes of DMA pages, lists them in a page directory and registers them
    /// with CREATE_MR (start = the IOVA of the first page).
    ///
    /// Errors: [`Error::InvalidArgument`] for 0 bytes, more than `max_mr_size`, more pages than
    /// a directory holds, or bad access bits; DMA and command errors.
    pub(crate) fn create(pd: &Arc<PdInner>, len: usize, access: u32) -> Result<Mr> {
        check_access(access)?;
        let npages = len.div_ceil(PAGE_SIZE);
        if len == 0 || len as u64 > pd.dev.attr.max_mr_size || npages > PAGE_DIR_MAX_PAGES {
            return Err(Error::InvalidArgument("MR length out of range"));
        }
        let buf = PagedBuf::new(&pd.dev.platform, npages)?;
        let resp = pd.dev.cmd.post(CreateMr {
            start: buf.data().iova().into(),
            length: (len as u64).into(),
            pdir_dma: buf.dir().dma().into(),
            pd_handle: pd.handle.into(),
            access_flags: access.into(),
            flags: 0.into(),
            nchunks: (npages as u32).into(),
            ..Default::default()
        })?;
        let (handle, lkey, rkey) = (resp.mr_handle.get(), resp.lkey.get(), resp.rkey.get());
        tracing::debug!(handle, lkey, len, "MR registered");
        Ok(Mr { pd: pd.clone(), handle, lkey, rkey, len, buf })
    }

    /// The device's MR handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Start of the MR's address space (the IOVA of its first page).
    pub fn addr(&self) -> u64 {
        self.buf.data().iova()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the MR has no bytes (never: registration refuses 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `data` into the MR at `offset`.
    ///
    /// Errors: [`Error::InvalidArgument`] if `offset + data.len()` exceeds the MR.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        self.buf.data().write(offset as u64, data)
    }

    /// Copies `buf.len()` bytes at `offset` of the MR into `buf`.
    ///
    /// Errors: [`Error::InvalidArgument`] if `offset + buf.len()` exceeds the MR.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len())?;
        self.buf.data().read(offset as u64, buf)
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::InvalidArgument("access outside the MR")),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let cmd = DestroyMr { mr_handle: self.handle.into(), ..Default::default() };
        if let Err(e) = self.pd.dev.cmd.post(cmd) {
            tracing::warn!(handle = self.handle, error = %e, "DESTROY_MR failed");
        }
    }
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mr(handle {}, lkey {:#x}, {} bytes)", self.handle, self.lkey, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_rules() {
        assert!(check_access(0).is_ok());
        assert!(check_access(access::LOCAL_WRITE | access::REMOTE_WRITE).is_ok());
        assert!(check_access(access::REMOTE_WRITE).is_err());
        assert!(check_access(access::REMOTE_ATOMIC).is_err());
        assert!(check_access(1 << 20).is_err());
    }
}
