//! Memory regions described by page directories with real keys (Linux `pvrdma_mr.c`, design
//! decision 6), over pages the driver allocates or over the consumer's own memory:
//!
//! - **driver-allocated**: the MR's address space starts at the IOVA of its first page;
//! - **the consumer's memory** (`ibv_reg_mr`): its pages are mapped for the device
//!   ([`Platform::map_user`]) and the MR's address space is the consumer's own addresses
//!   (`start` = the buffer's address, which need not be page-aligned: page 0 is the page that
//!   holds it, as Linux's `ib_umem`), so a peer's RDMA names the buffer's address.

use crate::device::{duplicate_handle, DeviceInner, IdKind};
use crate::dma::Abandon;
use crate::error::from_platform;
use crate::pd::Pd;
use crate::pdir::{PageDir, PagedBuf};
use crate::platform::{map_user_memory, Iova, Platform, UserMapping};
use ib_core::provider::{MrOps, UserMemory};
use ib_core::{Error, Result};
use pvrdma_abi::cmd::{CreateMr, DestroyMr};
use pvrdma_abi::pdir::PAGE_DIR_MAX_PAGES;
use pvrdma_abi::PAGE_SIZE;
use std::sync::Arc;

const PAGE: usize = PAGE_SIZE;

/// The memory behind an MR.
enum Backing {
    Owned(PagedBuf),
    /// The consumer's pages, mapped at `iova`; the MR's byte 0 is at `iova + offset`.
    User {
        iova: Iova,
        offset: u64,
        _dir: PageDir,
    },
}

/// A registered memory region. Dropping it sends DESTROY_MR, then unmaps or frees its memory.
pub struct Mr {
    dev: Arc<DeviceInner>,
    handle: u32,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
    backing: Backing,
}

impl Mr {
    /// Allocates `len` bytes of DMA pages, lists them in a page directory and registers them
    /// with CREATE_MR (start = the IOVA of the first page).
    ///
    /// Errors: [`Error::InvalidArgument`] for more pages than a directory holds; those of
    /// [`register`] (a handle or key the device answered while it is live); DMA and command
    /// errors.
    pub(crate) fn alloc(pd: &Pd, len: usize, access: u32) -> Result<Mr> {
        let npages = pages(len)?;
        let buf = PagedBuf::new(&pd.dev.platform, npages)?;
        let (start, dir) = (buf.data().iova(), buf.dir().dma());
        let (handle, lkey, rkey) = match register(pd, start, len, dir, npages, access) {
            Ok(keys) => keys,
            Err(e) => {
                leak_on_fatal(&e, buf);
                return Err(e);
            }
        };
        Ok(Mr { dev: pd.dev.clone(), handle, lkey, rkey, addr: start, len, backing: Backing::Owned(buf) })
    }

    /// Maps the consumer's pages that hold `mem` for the device and registers them with
    /// CREATE_MR at the consumer's address. The pages are mapped for the device to write when
    /// the access flags let anything write them ([`pins_for_write`]); the platform checks them
    /// first, as Linux's `pvrdma_reg_user_mr` pins them (`ib_umem_get`) before it counts pages
    /// or sends the command.
    ///
    /// Errors: [`Error::BadAddress`] for a page that is not mapped, not writable when it must
    /// be, or not readable when it is only read (EFAULT); [`Error::Unsupported`] where the platform cannot map
    /// host memory (qtest); [`Error::InvalidArgument`] for a range that wraps or needs more pages
    /// than a directory holds; those of [`register`]; DMA and command errors.
    pub(crate) fn register_user(pd: &Pd, mem: UserMemory, access: u32) -> Result<Mr> {
        let platform = &pd.dev.platform;
        let mapped = map_user_memory(platform.as_ref(), &mem, pins_for_write(access));
        let UserMapping { first, span, iova } =
            mapped.ok_or(Error::InvalidArgument("MR wraps"))?.map_err(from_platform)?;
        let user = UserPages { platform: platform.clone(), iova, unmap_on_drop: true };
        let npages = pages(span)?;
        let list: Vec<Iova> = (0..npages).map(|i| iova + (i * PAGE) as u64).collect();
        let dir = PageDir::new(platform, &list)?;
        let (handle, lkey, rkey) = match register(pd, mem.addr() as u64, mem.len(), dir.dma(), npages, access) {
            Ok(keys) => keys,
            Err(e) => {
                leak_on_fatal(&e, (user, dir));
                return Err(e);
            }
        };
        let offset = (mem.addr() - first) as u64;
        let backing = Backing::User { iova: user.take(), offset, _dir: dir };
        Ok(Mr { dev: pd.dev.clone(), handle, lkey, rkey, addr: mem.addr() as u64, len: mem.len(), backing })
    }

    fn at(&self, offset: usize) -> (Iova, Option<&PagedBuf>) {
        match &self.backing {
            Backing::Owned(buf) => (offset as u64, Some(buf)),
            Backing::User { iova, offset: o, .. } => (iova + o + offset as u64, None),
        }
    }
}

/// Whether an MR with `access` flags may have its memory written, so its pages are mapped for
/// writing: any of local write, remote write, remote atomic or memory-window bind, as Linux's
/// `ib_access_writable` decides when `ib_umem_get` pins them (`FOLL_WRITE`).
fn pins_for_write(access: u32) -> bool {
    use ib_core::access::{LOCAL_WRITE, MW_BIND, REMOTE_ATOMIC, REMOTE_WRITE};
    access & (LOCAL_WRITE | REMOTE_WRITE | REMOTE_ATOMIC | MW_BIND) != 0
}

/// Pages of `len` bytes, at most what one page directory lists.
fn pages(len: usize) -> Result<usize> {
    let n = len.div_ceil(PAGE);
    if n == 0 || n > PAGE_DIR_MAX_PAGES {
        return Err(Error::InvalidArgument("MR length out of range"));
    }
    Ok(n)
}

/// The rkey QEMU 7.2 answers for every MR (`-1`: it gives no remote access through pvrdma). It
/// names no MR, so it may be shared and is not claimed.
const NO_RKEY: u32 = u32::MAX;

/// The handle and keys of an MR as [`LiveIds`](crate::device::LiveIds) holds them.
fn ids(handle: u32, lkey: u32, rkey: u32) -> Vec<(IdKind, u32)> {
    let mut ids = vec![(IdKind::MrHandle, handle), (IdKind::Lkey, lkey)];
    if rkey != NO_RKEY {
        ids.push((IdKind::Rkey, rkey));
    }
    ids
}

/// CREATE_MR; returns (handle, lkey, rkey), each claimed as live.
///
/// Errors: [`Error::DeviceFatal`] for the handle of a live MR (the device is made fatal; the
/// caller must not free the memory, the device may be using it); [`Error::BadResponse`] for the
/// lkey or rkey of a live MR (a WQE or a peer naming it could reach either MR): the new MR is
/// destroyed; command errors.
fn register(pd: &Pd, start: u64, len: usize, dir: Iova, npages: usize, access: u32) -> Result<(u32, u32, u32)> {
    let mut live = pd.dev.live_ids.lock();
    let resp = pd.dev.cmd.post(CreateMr {
        start: start.into(),
        length: (len as u64).into(),
        pdir_dma: dir.into(),
        pd_handle: pd.handle.into(),
        access_flags: access.into(),
        flags: 0.into(),
        nchunks: (npages as u32).into(),
        ..Default::default()
    })?;
    let (handle, lkey, rkey) = (resp.mr_handle.get(), resp.lkey.get(), resp.rkey.get());
    match live.claim(&ids(handle, lkey, rkey)) {
        Ok(()) => {}
        Err((IdKind::MrHandle, _)) => return Err(duplicate_handle(&pd.dev, IdKind::MrHandle, handle)),
        Err(_) => {
            if destroy_mr(&pd.dev, handle) {
                return Err(Error::BadResponse("CREATE_MR: a key of a live MR"));
            }
            return Err(Error::DeviceFatal);
        }
    }
    tracing::debug!(handle, lkey, len, "MR registered");
    Ok((handle, lkey, rkey))
}

/// DESTROY_MR; whether the device took it.
fn destroy_mr(dev: &DeviceInner, handle: u32) -> bool {
    let cmd = DestroyMr { mr_handle: handle.into(), ..Default::default() };
    dev.cmd.post(cmd).inspect_err(|e| tracing::warn!(handle, error = %e, "DESTROY_MR failed")).is_ok()
}

/// Keeps memory the device may still be using out of the allocator for good: after
/// [`Error::DeviceFatal`] from [`register`] (a handle answered twice, or a refused MR the device
/// would not destroy).
fn leak_on_fatal(e: &Error, mut memory: impl Abandon) {
    if *e == Error::DeviceFatal {
        memory.abandon();
    }
}

/// A user mapping undone on drop unless [`UserPages::take`]n by an MR that owns it (or
/// abandoned: the device may still reach it).
struct UserPages {
    platform: Arc<dyn Platform>,
    iova: Iova,
    unmap_on_drop: bool,
}

impl UserPages {
    fn take(mut self) -> Iova {
        self.unmap_on_drop = false;
        self.iova
    }
}

impl Abandon for UserPages {
    fn abandon(&mut self) {
        self.unmap_on_drop = false;
    }
}

impl Drop for UserPages {
    fn drop(&mut self) {
        if self.unmap_on_drop {
            self.platform.unmap_user(self.iova);
        }
    }
}

impl MrOps for Mr {
    fn handle(&self) -> u32 {
        self.handle
    }

    fn lkey(&self) -> u32 {
        self.lkey
    }

    fn rkey(&self) -> u32 {
        self.rkey
    }

    fn addr(&self) -> u64 {
        self.addr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        match self.at(offset) {
            (off, Some(owned)) => owned.data().read(off, buf),
            (iova, None) => self.dev.platform.dma_read(iova, buf).map_err(from_platform),
        }
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        match self.at(offset) {
            (off, Some(owned)) => owned.data().write(off, data),
            (iova, None) => self.dev.platform.dma_write(iova, data).map_err(from_platform),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let mut live = self.dev.live_ids.lock();
        // An MR the device did not destroy keeps its ids: the device must not answer them again.
        if destroy_mr(&self.dev, self.handle) {
            live.release(&ids(self.handle, self.lkey, self.rkey));
        }
        drop(live);
        if let Backing::User { iova, .. } = self.backing {
            self.dev.platform.unmap_user(iova);
        }
    }
}
