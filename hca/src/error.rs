//! The provider's failures as the verbs core's [`Error`]: one conversion per source, each keeping
//! the provider's own error for [`Error::device_error`].

use crate::platform::PlatformError;
use doorbell::UarError;
use firmware_cmd::{CmdError, DeviceStatus};
use ib_core::{DeviceError, Error};

/// A command failure: the device's refusal carries its status's errno (QEMU's positive errno in
/// the response); a transport fault (timeout, wrong ack or cookie) is EIO.
pub(crate) fn from_cmd(e: CmdError) -> Error {
    let errno = match &e {
        CmdError::Device { status, .. } => i32::from(status.errno()),
        _ => libc::EIO,
    };
    Error::Device(DeviceError::new(errno, e))
}

/// A platform fault: an access outside DMA memory is EFAULT, out of memory ENOMEM, anything the
/// backend cannot do is [`Error::Unsupported`], memory to map that is not mapped with the access
/// it needs is [`Error::BadAddress`] (EFAULT, as `ibv_reg_mr` answers it on Linux).
pub(crate) fn from_platform(e: PlatformError) -> Error {
    let errno = match &e {
        PlatformError::BadDma { .. } => libc::EFAULT,
        PlatformError::Misaligned(_) => libc::EINVAL,
        PlatformError::NoMemory(_) => libc::ENOMEM,
        PlatformError::Io(_) => libc::EIO,
        PlatformError::Unsupported(what) => return Error::Unsupported(what),
        PlatformError::NotMapped { addr, len, writable } => {
            tracing::debug!(addr, len, writable, "user memory not mapped with the access the MR needs");
            let what = if *writable { "memory not mapped writable" } else { "memory not mapped readable" };
            return Error::BadAddress(what);
        }
    };
    Error::Device(DeviceError::new(errno, e))
}

/// A UAR failure: no page left for a user context (ENOMEM), or a mapping refused (EINVAL).
pub(crate) fn from_uar(e: UarError) -> Error {
    let errno = match e {
        UarError::Exhausted(_) => libc::ENOMEM,
        UarError::BadMapping { .. } | UarError::Revoked(_) => libc::EINVAL,
    };
    Error::Device(DeviceError::new(errno, e))
}

/// The device status behind an error, if the device refused a command.
pub fn device_status(e: &Error) -> Option<DeviceStatus> {
    match e.device_error::<CmdError>()? {
        CmdError::Device { status, .. } => Some(*status),
        _ => None,
    }
}
