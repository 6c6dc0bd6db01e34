//! Command failure codes: the positive errno values QEMU 7.2 puts in a response's `err` (and,
//! negated, in `REG_ERR`), from the device ABI's table ([`pvrdma_abi::errno`]).

use crate::mem::MemError;
use pvrdma_abi::errno;

/// A positive errno value carried by a failed command's response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Errno(pub u8);

impl Errno {
    /// Operation not permitted: the object belongs to another context.
    pub const EPERM: Errno = Errno(errno::EPERM);
    /// No such entry (a GID slot that is empty).
    pub const ENOENT: Errno = Errno(errno::ENOENT);
    /// A table is full (handles, keys, UAR pages).
    pub const ENOMEM: Errno = Errno(errno::ENOMEM);
    /// A device address outside guest memory.
    pub const EFAULT: Errno = Errno(errno::EFAULT);
    /// The object is still in use (a PD with QPs or MRs, a CQ with QPs, a context with objects).
    pub const EBUSY: Errno = Errno(errno::EBUSY);
    /// Anything else malformed: bad handle, size, state, flag or opcode.
    pub const EINVAL: Errno = Errno(errno::EINVAL);

    /// The value `REG_ERR` holds after a command that failed with this errno (QEMU stores the
    /// negated errno).
    pub fn reg_value(self) -> u32 {
        errno::reg_value(self.0)
    }
}

impl From<MemError> for Errno {
    /// Any guest-memory fault during a command is `EFAULT`.
    fn from(_: MemError) -> Self {
        Errno::EFAULT
    }
}

/// Result of a command handler.
pub type CmdResult<T> = Result<T, Errno>;
