//! Memory regions (`ibv_reg_mr` / `ibv_dereg_mr`): over the consumer's own memory at its own
//! address ([`Pd::reg_buffer`] for a [`UserBuffer`], [`Pd::reg_mr`] for any memory the caller
//! vouches for), or over memory the provider allocates ([`Pd::alloc_mr`]).

use crate::attr::access;
use crate::error::{Error, Result};
use crate::pd::{Pd, PdInner};
use crate::provider::{MrOps, UserMemory};
use crate::user_memory::UserBuffer;
use std::sync::Arc;

/// A registered memory region. Dropping it deregisters it. (Fields drop in order: the provider's
/// MR, then the buffer it was over, then the PD.)
pub struct Mr {
    ops: Box<dyn MrOps>,
    /// The buffer it is registered over, kept alive until the MR is gone.
    _buffer: Option<UserBuffer>,
    pd: Arc<PdInner>,
}

impl Pd {
    /// Registers the consumer's memory `mem` with `access` ([`access`] flags): the MR's address
    /// space is the memory's own addresses, so an SGE or a peer's RDMA names `mem.addr() + offset`
    /// (`ibv_reg_mr(pd, addr, length, access)`).
    ///
    /// Errors: [`Error::InvalidArgument`] for an empty range, one beyond the device's
    /// `max_mr_size`, one past the end of the address space, or bad access flags (IBTA
    /// 10.6.3.1); [`Error::BadAddress`] (EFAULT) for a page of the range that is not mapped
    /// (page 0 included, which a process does not map: Linux's pin fails there too), not
    /// writable when `access_flags` let the MR be written (local or remote write, remote atomic,
    /// memory-window bind), or not readable when they do not, as Linux's pinning refuses it;
    /// [`Error::Unsupported`] where the platform cannot map host memory for the device;
    /// provider errors.
    pub fn reg_mr(&self, mem: UserMemory, access_flags: u32) -> Result<Mr> {
        self.check(mem.len(), access_flags)?;
        if mem.addr().checked_add(mem.len()).is_none() {
            return Err(Error::InvalidArgument("MR wraps"));
        }
        let ops = self.inner.ctx.device.ops.reg_user_mr(&*self.inner.ops, mem, access_flags)?;
        Ok(self.wrap(ops, None))
    }

    /// Registers `buffer` (all of it) at its own address: [`Pd::reg_mr`] with the buffer kept
    /// alive by the MR, so no promise is needed. Read what the device wrote with
    /// [`UserBuffer::read`] once a completion says it is there.
    ///
    /// Errors: as [`Pd::reg_mr`].
    pub fn reg_buffer(&self, buffer: &UserBuffer, access_flags: u32) -> Result<Mr> {
        self.check(buffer.len(), access_flags)?;
        let ops = self.inner.ctx.device.ops.reg_user_mr(&*self.inner.ops, buffer.memory(), access_flags)?;
        Ok(self.wrap(ops, Some(buffer.clone())))
    }

    /// Registers `len` bytes of memory the provider allocates (zeroed): reach it with
    /// [`Mr::read`] and [`Mr::write`]; its address space starts at [`Mr::addr`].
    ///
    /// Errors: as [`Pd::reg_mr`].
    pub fn alloc_mr(&self, len: usize, access_flags: u32) -> Result<Mr> {
        self.check(len, access_flags)?;
        let ops = self.inner.ctx.device.ops.alloc_mr(&*self.inner.ops, len, access_flags)?;
        Ok(self.wrap(ops, None))
    }

    fn check(&self, len: usize, access_flags: u32) -> Result<()> {
        self.inner.ctx.live()?;
        access::check(access_flags)?;
        let max = self.inner.ctx.device.ops.query_device().max_mr_size;
        if len == 0 || len as u64 > max {
            return Err(Error::InvalidArgument("MR length out of range"));
        }
        Ok(())
    }

    fn wrap(&self, ops: Box<dyn MrOps>, buffer: Option<UserBuffer>) -> Mr {
        self.inner.hold();
        Mr { pd: self.inner.clone(), ops, _buffer: buffer }
    }
}

impl Mr {
    /// The device's MR handle.
    pub fn handle(&self) -> u32 {
        self.ops.handle()
    }

    /// Local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.ops.lkey()
    }

    /// Remote key, for a peer's RDMA.
    pub fn rkey(&self) -> u32 {
        self.ops.rkey()
    }

    /// Start of the MR's address space.
    pub fn addr(&self) -> u64 {
        self.ops.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the MR has no bytes (never: registration refuses 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `data` into the MR at byte `offset`.
    ///
    /// Errors: [`Error::InvalidArgument`] if `offset + data.len()` exceeds the MR.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        self.ops.write(offset, data)
    }

    /// Copies `buf.len()` bytes at byte `offset` of the MR into `buf`.
    ///
    /// Errors: [`Error::InvalidArgument`] if `offset + buf.len()` exceeds the MR.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len())?;
        self.ops.read(offset, buf)
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::InvalidArgument("access outside the MR")),
        }
    }

    /// Deregisters the MR (`ibv_dereg_mr`); the same as dropping it.
    pub fn dereg(self) {}
}

impl Drop for Mr {
    fn drop(&mut self) {
        self.pd.release();
    }
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mr(handle {}, lkey {:#x}, {} bytes)", self.handle(), self.lkey(), self.len())
    }
}
