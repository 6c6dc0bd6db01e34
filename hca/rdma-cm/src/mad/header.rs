//! The MAD common header (IBTA 13.4.3, Table 145) as the CM uses it: base version 1, management
//! class 0x07 (Communication Management), class version 2, method Send (IBTA 12.6.1).

use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Base version of every MAD (IBTA 13.4.3).
pub const BASE_VERSION: u8 = 1;
/// Management class of the CM (IBTA Table 144).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version (IBTA 12.6.1; Linux's `IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Get (ClassPortInfo).
pub const METHOD_GET: u8 = 0x01;
/// Method Send: every CM message (IBTA 12.6.1).
pub const METHOD_SEND: u8 = 0x03;
/// Method GetResp.
pub const METHOD_GET_RESP: u8 = 0x81;

/// The CM attribute IDs (IBTA 12.6.1, Table 103).
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001A;
}

/// The 24-byte common header, big-endian on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct MadHeader {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// Bit 7 is the response bit (R).
    pub method: u8,
    pub status: U16,
    pub class_specific: U16,
    /// Transaction ID: the sender's for a request; a response carries the request's.
    pub tid: U64,
    pub attr_id: U16,
    pub reserved: U16,
    pub attr_mod: U32,
}

const _: () = assert!(size_of::<MadHeader>() == super::bits::HDR_LEN);

impl MadHeader {
    /// The header of a CM Send of attribute `attr_id` with transaction ID `tid`.
    pub fn cm_send(attr_id: u16, tid: u64) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: U16::new(0),
            class_specific: U16::new(0),
            tid: U64::new(tid),
            attr_id: U16::new(attr_id),
            reserved: U16::new(0),
            attr_mod: U32::new(0),
        }
    }
}
