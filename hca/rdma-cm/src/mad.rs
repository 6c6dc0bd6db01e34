//! The CM's wire format: the MAD common header (IBTA Vol. 1 13.4.3) and the CM attributes
//! (IBTA 12.6 and 12.11): REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP, each a
//! 256-byte MAD, big-endian, every field at the bit position IBTA gives it ([`fields`]).
//!
//! [`decode`] takes any bytes from the wire and returns a message or a [`MadError`], never a
//! panic: a MAD must be exactly 256 bytes, base version 1, class 0x07 (CM), class version 2,
//! method Send, and one of the attributes above. [`encode`] writes a message with its
//! transaction ID. [`ip_cm`] is the RDMA IP CM Service header (IBTA Annex A11) that private data
//! starts with.

pub mod bits;
pub mod fields;
pub mod header;
pub mod ip_cm;
pub mod msg;

use crate::transport::MAD_SIZE;
use bits::{MadBuf, HDR_LEN};
use header::{attr, MadHeader, BASE_VERSION, CM_CLASS_VERSION, METHOD_SEND, MGMT_CLASS_CM};
pub use msg::{Drep, Dreq, Mra, Rej, Rep, Req, ReqPath, Rtu, SidrRep, SidrReq};
use zerocopy::{FromBytes, IntoBytes};

/// One CM message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmMad {
    Req(Box<Req>),
    Mra(Box<Mra>),
    Rej(Box<Rej>),
    Rep(Box<Rep>),
    Rtu(Box<Rtu>),
    Dreq(Box<Dreq>),
    Drep(Box<Drep>),
    SidrReq(Box<SidrReq>),
    SidrRep(Box<SidrRep>),
}

impl CmMad {
    /// The message's attribute ID (IBTA Table 103).
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMad::Req(_) => attr::REQ,
            CmMad::Mra(_) => attr::MRA,
            CmMad::Rej(_) => attr::REJ,
            CmMad::Rep(_) => attr::REP,
            CmMad::Rtu(_) => attr::RTU,
            CmMad::Dreq(_) => attr::DREQ,
            CmMad::Drep(_) => attr::DREP,
            CmMad::SidrReq(_) => attr::SIDR_REQ,
            CmMad::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The attribute's name as IBTA gives it ("REQ", "SIDR_REP", ...).
    pub fn name(&self) -> &'static str {
        match self {
            CmMad::Req(_) => "REQ",
            CmMad::Mra(_) => "MRA",
            CmMad::Rej(_) => "REJ",
            CmMad::Rep(_) => "REP",
            CmMad::Rtu(_) => "RTU",
            CmMad::Dreq(_) => "DREQ",
            CmMad::Drep(_) => "DREP",
            CmMad::SidrReq(_) => "SIDR_REQ",
            CmMad::SidrRep(_) => "SIDR_REP",
        }
    }
}

/// Why bytes are not a CM MAD this CM takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MadError {
    #[error("{0} bytes: a MAD is exactly 256")]
    Length(usize),
    #[error("base version {0}, not 1")]
    BaseVersion(u8),
    #[error("management class {0:#x}, not the CM's 0x07")]
    Class(u8),
    #[error("CM class version {0}, not 2")]
    ClassVersion(u8),
    #[error("method {0:#x}: the CM takes only Send")]
    Method(u8),
    #[error("attribute {0:#06x} is not a CM message this CM takes")]
    Attribute(u16),
}

/// A decoded MAD: its header and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub header: MadHeader,
    pub msg: CmMad,
}

/// Decodes bytes from the wire. Never panics, whatever the bytes.
pub fn decode(b: &[u8]) -> Result<Decoded, MadError> {
    let buf: &MadBuf = b.try_into().map_err(|_| MadError::Length(b.len()))?;
    let (header, _) = MadHeader::read_from_prefix(buf).map_err(|_| MadError::Length(b.len()))?;
    check_header(&header)?;
    let msg = match header.attr_id.get() {
        _ if header.method != METHOD_SEND && is_message(header.attr_id.get()) => {
            return Err(MadError::Method(header.method))
        }
        attr::REQ => CmMad::Req(Box::new(Req::read(buf))),
        attr::MRA => CmMad::Mra(Box::new(Mra::read(buf))),
        attr::REJ => CmMad::Rej(Box::new(Rej::read(buf))),
        attr::REP => CmMad::Rep(Box::new(Rep::read(buf))),
        attr::RTU => CmMad::Rtu(Box::new(Rtu::read(buf))),
        attr::DREQ => CmMad::Dreq(Box::new(Dreq::read(buf))),
        attr::DREP => CmMad::Drep(Box::new(Drep::read(buf))),
        attr::SIDR_REQ => CmMad::SidrReq(Box::new(SidrReq::read(buf))),
        attr::SIDR_REP => CmMad::SidrRep(Box::new(SidrRep::read(buf))),
        other => return Err(MadError::Attribute(other)),
    };
    Ok(Decoded { header, msg })
}

fn check_header(h: &MadHeader) -> Result<(), MadError> {
    if h.base_version != BASE_VERSION {
        return Err(MadError::BaseVersion(h.base_version));
    }
    if h.mgmt_class != MGMT_CLASS_CM {
        return Err(MadError::Class(h.mgmt_class));
    }
    if h.class_version != CM_CLASS_VERSION {
        return Err(MadError::ClassVersion(h.class_version));
    }
    Ok(())
}

/// One of the attributes [`decode`] reads (the others are [`MadError::Attribute`] whatever
/// their method).
fn is_message(attr_id: u16) -> bool {
    (attr::REQ..=attr::SIDR_REP).contains(&attr_id)
}

/// Encodes `msg` as a CM Send MAD with transaction ID `tid`.
pub fn encode(tid: u64, msg: &CmMad) -> [u8; MAD_SIZE] {
    let mut b = [0u8; MAD_SIZE];
    b[..HDR_LEN].copy_from_slice(MadHeader::cm_send(msg.attr_id(), tid).as_bytes());
    match msg {
        CmMad::Req(m) => m.write(&mut b),
        CmMad::Mra(m) => m.write(&mut b),
        CmMad::Rej(m) => m.write(&mut b),
        CmMad::Rep(m) => m.write(&mut b),
        CmMad::Rtu(m) => m.write(&mut b),
        CmMad::Dreq(m) => m.write(&mut b),
        CmMad::Drep(m) => m.write(&mut b),
        CmMad::SidrReq(m) => m.write(&mut b),
        CmMad::SidrRep(m) => m.write(&mut b),
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::fields::*;

    fn req() -> Req {
        let mut b = [0u8; MAD_SIZE];
        b[HDR_LEN..].iter_mut().enumerate().for_each(|(i, x)| *x = i as u8);
        Req::read(&b)
    }

    /// Byte offsets from the start of the MAD, against IBTA Table 106 and 110 (24 + the offset
    /// Linux's `ibta_vol1_c12.h` gives).
    #[test]
    fn fields_land_at_ibta_offsets() {
        let r = req();
        assert_eq!(r.local_comm_id, 0x0001_0203);
        assert_eq!(r.service_id, 0x0809_0a0b_0c0d_0e0f);
        assert_eq!(r.local_ca_guid, 0x1011_1213_1415_1617);
        assert_eq!(r.local_qkey, 0x1c1d_1e1f);
        assert_eq!(r.local_qpn, 0x20_2122);
        assert_eq!(r.responder_resources, 0x23);
        assert_eq!(r.starting_psn, 0x2c_2d2e);
        assert_eq!(r.partition_key, 0x3031);
        // Byte 43 = 0x2b = 00101 01 1: response timeout 5, transport 1 (UC), flow control.
        assert_eq!((r.remote_cm_response_timeout, r.transport_service_type, r.end_to_end_flow_control), (5, 1, true));
        // Byte 51 = 0x33 = 0011 0 011: max retries 3, SRQ 0, extended transport 3.
        assert_eq!((r.max_cm_retries, r.srq, r.extended_transport_type), (3, false, 3));
        assert_eq!(r.primary.local_port_lid, 0x3435);
        assert_eq!(r.primary.local_port_gid[0], 56);
        assert_eq!(r.primary.remote_port_gid[0], 72);
        assert_eq!(r.primary.flow_label, 0x5_8595, "20 bits from byte 88");
        assert_eq!(r.primary.traffic_class, 92);
        assert_eq!(r.primary.hop_limit, 93);
        assert_eq!(r.alternate.local_port_gid[0], 100);
        assert_eq!(r.private_data[0], 140);
        let out = encode(0, &CmMad::Req(Box::new(r)));
        assert_eq!(out[HDR_LEN + 140], 140);
        assert_eq!(&out[HDR_LEN + 8..HDR_LEN + 16], &[8, 9, 10, 11, 12, 13, 14, 15]);
        let mut b = [0u8; MAD_SIZE];
        b[HDR_LEN..].iter_mut().enumerate().for_each(|(i, x)| *x = i as u8);
        let rep = Rep::read(&b);
        assert_eq!((rep.local_qpn, rep.starting_psn, rep.local_ca_guid), (0x0c_0d0e, 0x14_1516, 0x1c1d_1e1f_2021_2223));
        assert_eq!(rep.private_data[0], 36);
        let rej = Rej::read(&b);
        assert_eq!((rej.reason, rej.ari[0], rej.private_data[0]), (0x0a0b, 12, 84));
        assert_eq!(rej.ari_length, 9 >> 1, "7 bits from bit 0 of byte 9");
        let s = SidrRep::read(&b);
        assert_eq!(
            (s.qpn, s.service_id, s.qkey, s.private_data[0]),
            (0x08_090a, 0x0c0d_0e0f_1011_1213, 0x1415_1617, 96)
        );
        assert_eq!(REQ_PRIVATE_DATA + 140 + HDR_LEN, MAD_SIZE);
    }

    #[test]
    fn header_checks() {
        let m =
            encode(0x1122, &CmMad::Rtu(Box::new(Rtu { local_comm_id: 1, remote_comm_id: 2, private_data: [0; 224] })));
        assert_eq!(&m[..4], &[1, 7, 2, 3]);
        assert_eq!(&m[8..16], &0x1122u64.to_be_bytes());
        assert_eq!(&m[16..18], &[0x00, 0x14]);
        assert!(decode(&m).is_ok());
        assert_eq!(decode(&m[..255]), Err(MadError::Length(255)));
        let mut bad = m;
        bad[3] = 0x81;
        assert_eq!(decode(&bad), Err(MadError::Method(0x81)));
        bad = m;
        bad[16..18].copy_from_slice(&attr::LAP.to_be_bytes());
        assert_eq!(decode(&bad), Err(MadError::Attribute(attr::LAP)));
    }
}
