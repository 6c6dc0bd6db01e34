//! The driver's error type: one enum for every verb, with transport faults (commands, platform)
//! kept apart from refusals the caller can act on.

use crate::platform::PlatformError;
use doorbell::UarError;
use firmware_cmd::CmdError;
use thiserror::Error;

/// What a verb of this driver can fail with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// `REG_VERSION` holds a device API version this driver does not speak (17 and 18 are accepted,
    /// as Linux's `pvrdma_pci_probe` does).
    #[error("unsupported device API version {0} (17 or 18 expected)")]
    UnsupportedVersion(u32),
    /// The device's capabilities rule it out (not RoCE, no RoCE v1 GIDs, no port).
    #[error("unsupported device: {0}")]
    UnsupportedDevice(&'static str),
    /// `REG_ERR` was not 0 after `CTL_ACTIVATE` (Linux: "failed to activate device").
    #[error("device activation failed: REG_ERR = {0:#x}")]
    ActivationFailed(u32),
    /// The device is in a catastrophic state (IBTA "Failure"): a DEVICE_FATAL async event, an
    /// all-ones register read, a ring index out of range, or a command transport fault. Every
    /// verb fails with it afterwards.
    #[error("catastrophic device error")]
    DeviceFatal,
    /// A command failed: the device refused it ([`CmdError::Device`]) or the transport faulted
    /// (which also makes the device fatal, see [`CmdError::is_fatal`]).
    #[error(transparent)]
    Command(#[from] CmdError),
    /// The platform could not reach DMA memory or allocate it.
    #[error(transparent)]
    Platform(#[from] PlatformError),
    /// No UAR page is free for a user context.
    #[error(transparent)]
    Uar(#[from] UarError),
    /// An argument is out of range (sizes beyond the device's caps, an SGE list too long, an
    /// offset outside an MR, an unknown port or index).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The object is not in a state that allows the operation (e.g. post_send before RTS).
    #[error("operation not allowed in the object's current state")]
    InvalidState,
    /// The work queue has no free slot (IBTA: post fails with "insufficient resources").
    #[error("work queue full")]
    QueueFull,
    /// The CQ overflowed (pvrdma CQ_ERR, IBTA "Overrun"): the queued CQEs were returned first.
    #[error("completion queue overrun")]
    CqOverrun,
    /// A CQ cannot be destroyed yet: this many events taken from its completion channel have not
    /// been acknowledged on it (`ibv_destroy_cq` waits for `ibv_ack_cq_events`).
    #[error("{0} completion events taken for the CQ are not acknowledged")]
    EventsNotAcked(u64),
    /// The call would wait for itself (e.g. destroying a CQ from inside its own upcall or
    /// async-event handler); nothing was done.
    #[error("would deadlock: {0}")]
    WouldDeadlock(&'static str),
    /// A bounded wait ended without the awaited event.
    #[error("timed out")]
    Timeout,
    /// The device or this driver cannot do it (e.g. solicited-only arming on QEMU 7.2).
    #[error("not supported: {0}")]
    Unsupported(&'static str),
}

/// The driver's result type.
pub type Result<T> = std::result::Result<T, Error>;
