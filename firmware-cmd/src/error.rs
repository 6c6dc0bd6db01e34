//! Errors of the command channel and the table from device status to error.

use pvrdma_abi::cmd::opcode::name;
use thiserror::Error;

/// A command's failure.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CmdError {
    /// The device ran the command and refused it.
    #[error("command {} ({opcode}) failed on the device: {status}", name(*opcode))]
    Device {
        /// The command's opcode.
        opcode: u32,
        /// What the device answered (the response's `err`).
        status: DeviceStatus,
    },
    /// No response within the timeout (the device may be dead: treat as catastrophic).
    #[error("command {} ({opcode}) timed out after {timeout_ms} ms", name(*opcode))]
    Timeout {
        /// The command's opcode.
        opcode: u32,
        /// The bound that passed, in milliseconds.
        timeout_ms: u64,
    },
    /// A response arrived with the wrong `ack` (not the opcode with bit 31 set).
    #[error("command {} ({opcode}): wrong ack {got:#x}, expected {expected:#x}", name(*opcode))]
    WrongAck {
        /// The command's opcode.
        opcode: u32,
        /// The ack the command expects (its opcode with bit 31 set).
        expected: u32,
        /// The ack that came.
        got: u32,
    },
    /// A response arrived for another request (cookie mismatch): a stale or forged response.
    #[error("command {} ({opcode}): response cookie {got:#x}, expected {expected:#x}", name(*opcode))]
    WrongCookie {
        /// The command's opcode.
        opcode: u32,
        /// The cookie the request carried.
        expected: u64,
        /// The cookie the response carried.
        got: u64,
    },
    /// The platform could not reach the command or response slot.
    #[error("command {} ({opcode}): transport fault: {what}", name(*opcode))]
    Transport {
        /// The command's opcode.
        opcode: u32,
        /// Which access failed.
        what: &'static str,
    },
}

impl CmdError {
    /// Whether the failure means the device can no longer be trusted (IBTA catastrophic error):
    /// every transport fault, but not a refusal of one command.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, CmdError::Device { .. })
    }
}

/// A device status: the positive errno QEMU puts in a response's `err` byte (it puts the negated
/// errno in `REG_ERR`). The table mirrors mthca's status-to-errno table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DeviceStatus {
    /// EINVAL: a bad handle, size, address or attribute.
    #[error("invalid argument (EINVAL)")]
    InvalidArgument,
    /// ENOMEM: a table or the backend is out of resources.
    #[error("out of resources (ENOMEM)")]
    NoResources,
    /// EFAULT: the device could not reach memory (QEMU answers EINVAL for a page directory or
    /// page outside guest memory, as the model does).
    #[error("bad device address (EFAULT)")]
    BadAddress,
    /// EPERM / EACCES: the object belongs to another context.
    #[error("permission denied (EPERM)")]
    PermissionDenied,
    /// ENOENT: no such object.
    #[error("no such object (ENOENT)")]
    NotFound,
    /// EBUSY: the object is still in use.
    #[error("object busy (EBUSY)")]
    Busy,
    /// EOPNOTSUPP / ENOSYS: the command or mode is not supported.
    #[error("not supported (EOPNOTSUPP)")]
    NotSupported,
    /// EIO: the device failed internally.
    #[error("device I/O error (EIO)")]
    Io,
    /// Any other errno.
    #[error("device error {0}")]
    Other(u8),
}

/// The command error codes (one table, in the device ABI).
pub use pvrdma_abi::errno;

impl DeviceStatus {
    /// The status for a response's `err` byte; `None` for 0 (success).
    pub fn from_err(err: u8) -> Option<Self> {
        use errno::*;
        Some(match err {
            0 => return None,
            EINVAL => Self::InvalidArgument,
            ENOMEM => Self::NoResources,
            EFAULT => Self::BadAddress,
            EPERM | EACCES => Self::PermissionDenied,
            ENOENT => Self::NotFound,
            EBUSY => Self::Busy,
            ENOSYS | EOPNOTSUPP => Self::NotSupported,
            EIO => Self::Io,
            other => Self::Other(other),
        })
    }

    /// The errno byte for this status (the inverse of [`DeviceStatus::from_err`]).
    pub fn errno(self) -> u8 {
        use errno::*;
        match self {
            Self::InvalidArgument => EINVAL,
            Self::NoResources => ENOMEM,
            Self::BadAddress => EFAULT,
            Self::PermissionDenied => EPERM,
            Self::NotFound => ENOENT,
            Self::Busy => EBUSY,
            Self::NotSupported => EOPNOTSUPP,
            Self::Io => EIO,
            Self::Other(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table_round_trips() {
        for e in 1..=255u8 {
            let s = DeviceStatus::from_err(e).unwrap();
            if !matches!(e, errno::EACCES | errno::ENOSYS) {
                assert_eq!(s.errno(), e);
            }
        }
        assert_eq!(DeviceStatus::from_err(0), None);
    }
}
