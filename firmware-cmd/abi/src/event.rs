//! Entries of the async-event ring and the CQ-notification ring.

use crate::assert_layout;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Async-event ring entry (`struct pvrdma_eqe`). Device-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct Eqe {
    /// An [`EqeType`] value.
    pub type_: U32,
    /// The object's handle (CQ, QP, SRQ) or port number.
    pub info: U32,
}
assert_layout!(Eqe, 8, type_ = 0, info = 4);

/// CQ-notification ring entry (`struct pvrdma_cqne`). Device-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct Cqne {
    /// The CQ handle.
    pub info: U32,
}
assert_layout!(Cqne, 4, info = 0);

/// Async event types (`enum pvrdma_eqe_type`, 1:1 with `enum ib_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum EqeType {
    CqErr = 0,
    QpFatal = 1,
    QpReqErr = 2,
    QpAccessErr = 3,
    CommEst = 4,
    SqDrained = 5,
    PathMig = 6,
    PathMigErr = 7,
    DeviceFatal = 8,
    PortActive = 9,
    PortErr = 10,
    LidChange = 11,
    PkeyChange = 12,
    SmChange = 13,
    SrqErr = 14,
    SrqLimitReached = 15,
    QpLastWqeReached = 16,
    ClientReregister = 17,
    GidChange = 18,
}

impl TryFrom<u32> for EqeType {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        use EqeType::*;
        const ALL: [EqeType; 19] = [
            CqErr,
            QpFatal,
            QpReqErr,
            QpAccessErr,
            CommEst,
            SqDrained,
            PathMig,
            PathMigErr,
            DeviceFatal,
            PortActive,
            PortErr,
            LidChange,
            PkeyChange,
            SmChange,
            SrqErr,
            SrqLimitReached,
            QpLastWqeReached,
            ClientReregister,
            GidChange,
        ];
        ALL.get(v as usize).copied().ok_or(v)
    }
}
