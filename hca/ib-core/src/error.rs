//! The verbs error type and the one errno table (`Error::errno`): every verb of the core and of
//! every provider fails with [`Error`]; a C layer returns [`Error::errno`] as libibverbs does.

use std::sync::Arc;
use thiserror::Error;

/// What a verb can fail with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// The device is in its catastrophic state (IBTA "Failure": a fatal device event, a command
    /// timeout, all-ones registers, a ring index out of range). Every verb fails with it afterwards.
    #[error("catastrophic device error")]
    DeviceFatal,
    /// An argument is out of range or names an object that cannot be used here (sizes beyond the
    /// device's caps, an unknown port, an object of another context).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The object is not in a state that allows the operation (e.g. post_send before RTS, an
    /// illegal QP state transition, a modify mask the transition does not take).
    #[error("operation not allowed in the object's current state")]
    InvalidState,
    /// The work queue has no free slot (IBTA: "insufficient resources"; libibverbs: ENOMEM).
    #[error("work queue full")]
    QueueFull,
    /// The CQ overflowed (IBTA "Overrun"): `poll` returned the queued CQEs first.
    #[error("completion queue overrun")]
    CqOverrun,
    /// A CQ or QP cannot be destroyed yet: this many events taken for it (completion events
    /// from its channel, async events from its context) are not acknowledged
    /// (`ibv_destroy_cq` waits for `ibv_ack_cq_events` and `ibv_ack_async_event`).
    #[error("{0} events taken for the object are not acknowledged")]
    EventsNotAcked(u64),
    /// The object is still used by others (a PD by its MRs and QPs, a CQ by its QPs, a channel by
    /// its CQs): libibverbs's EBUSY. Nothing was destroyed.
    #[error("object in use: {0}")]
    Busy(&'static str),
    /// The call would wait for itself (e.g. destroying a CQ from inside its own upcall or
    /// async-event handler); nothing was done.
    #[error("would deadlock: {0}")]
    WouldDeadlock(&'static str),
    /// A bounded wait ended without the awaited event.
    #[error("timed out")]
    Timeout,
    /// A signal handler (one without `SA_RESTART`) ran while a wait without bound slept, and no
    /// event came: the kernel's `read(2)` of the fd gives EINTR then.
    #[error("interrupted by a signal")]
    Interrupted,
    /// Nothing is pending and the channel (or async queue) is non-blocking (`O_NONBLOCK` on its
    /// fd): libibverbs's EAGAIN.
    #[error("no event pending")]
    WouldBlock,
    /// The device or its provider cannot do it (e.g. solicited-only arming on QEMU 7.2).
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// No device of that name, or no provider for what the device is.
    #[error("no such device: {0}")]
    NoDevice(String),
    /// Memory the caller named is not mapped in this process with the access it needs (an MR
    /// over pages that are missing, unreadable, or read-only when the MR may be written, as
    /// Linux's `ib_umem_get` refuses them): libibverbs's EFAULT. Nothing was registered.
    #[error("bad address: {0}")]
    BadAddress(&'static str),
    /// Out of host resources (threads, file descriptors, memory).
    #[error("out of resources: {0}")]
    NoResources(&'static str),
    /// The entry named exists but holds nothing (an empty GID table entry: Linux's
    /// `rdma_get_gid_attr` answers `ENODATA`, libibverbs's `ibv_query_gid_ex` passes it on).
    #[error("no data: {0}")]
    NoData(&'static str),
    /// The device answered with a value the driver cannot use (a handle wider than the ABI
    /// allows, a state it does not know); the object involved was not created.
    #[error("the device answered with an unusable value: {0}")]
    BadResponse(&'static str),
    /// The device or its transport refused the operation; the provider's own error is kept.
    #[error(transparent)]
    Device(DeviceError),
}

/// A provider's own failure (a device status, a transport fault), with its errno.
#[derive(Debug, Clone)]
pub struct DeviceError {
    errno: i32,
    source: Arc<dyn std::error::Error + Send + Sync>,
}

impl DeviceError {
    /// Wraps a provider error that a C caller sees as `errno` (positive, e.g. `libc::EINVAL`).
    pub fn new(errno: i32, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self { errno, source: Arc::new(source) }
    }

    /// The errno a C caller gets.
    pub fn errno(&self) -> i32 {
        self.errno
    }

    /// The provider's error, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.source.downcast_ref::<T>()
    }
}

impl std::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for DeviceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

impl PartialEq for DeviceError {
    fn eq(&self, other: &Self) -> bool {
        self.errno == other.errno && self.source.to_string() == other.source.to_string()
    }
}

impl Eq for DeviceError {}

impl Error {
    /// The errno libibverbs returns (or sets) for this failure: the one table of the stack.
    pub fn errno(&self) -> i32 {
        match self {
            Error::DeviceFatal | Error::BadResponse(_) => libc::EIO,
            Error::InvalidArgument(_) | Error::InvalidState => libc::EINVAL,
            Error::QueueFull | Error::NoResources(_) => libc::ENOMEM,
            Error::CqOverrun => libc::EOVERFLOW,
            Error::EventsNotAcked(_) | Error::Busy(_) => libc::EBUSY,
            Error::WouldDeadlock(_) => libc::EDEADLK,
            Error::Timeout => libc::ETIMEDOUT,
            Error::WouldBlock => libc::EAGAIN,
            Error::Interrupted => libc::EINTR,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::NoDevice(_) => libc::ENODEV,
            Error::NoData(_) => libc::ENODATA,
            Error::BadAddress(_) => libc::EFAULT,
            Error::Device(d) => d.errno(),
        }
    }

    /// The provider's error behind [`Error::Device`], if it is a `T`.
    pub fn device_error<T: std::error::Error + 'static>(&self) -> Option<&T> {
        match self {
            Error::Device(d) => d.downcast_ref(),
            _ => None,
        }
    }
}

/// The verbs result type.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("refused")]
    struct Refused;

    #[test]
    fn errnos_and_provider_errors() {
        assert_eq!(Error::Busy("pd").errno(), libc::EBUSY);
        assert_eq!(Error::WouldBlock.errno(), libc::EAGAIN);
        assert_eq!(Error::NoData("empty GID entry").errno(), libc::ENODATA);
        assert_eq!(Error::BadAddress("unmapped").errno(), libc::EFAULT);
        let e = Error::Device(DeviceError::new(libc::EPERM, Refused));
        assert_eq!(e.errno(), libc::EPERM);
        assert!(e.device_error::<Refused>().is_some());
        assert_eq!(e.to_string(), "refused");
        assert_eq!(e, Error::Device(DeviceError::new(libc::EPERM, Refused)));
    }
}
