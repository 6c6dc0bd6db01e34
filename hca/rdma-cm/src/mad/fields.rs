//! Where every CM field sits: IBTA Vol. 1 12.6.5 (REQ, Table 106), 12.6.6 (MRA, Table 107),
//! 12.6.7 (REJ, Table 108), 12.6.8 (REP, Table 110), 12.6.9 (RTU, Table 111), 12.6.10 (DREQ,
//! Table 112), 12.6.11 (DREP, Table 113), 12.11.1 (SIDR_REQ, Table 119) and 12.11.2 (SIDR_REP,
//! Table 120), as `Byte[Bit]` and width from the end of the MAD header, the way Linux's
//! `include/rdma/ibta_vol1_c12.h` lists them. The `const` checks below prove at compile time
//! that each message's private data has the size IBTA gives and ends the 256-byte MAD.

use super::bits::{Bytes, Field};
use crate::transport::MAD_SIZE;

/// REQ (IBTA 12.6.5).
pub mod req {
    use super::*;
    pub const LOCAL_COMM_ID: Field = Field::cm(0, 0, 32);
    pub const SERVICE_ID: Field = Field::cm(8, 0, 64);
    pub const LOCAL_CA_GUID: Field = Field::cm(16, 0, 64);
    pub const LOCAL_Q_KEY: Field = Field::cm(28, 0, 32);
    pub const LOCAL_QPN: Field = Field::cm(32, 0, 24);
    pub const RESPONDER_RESOURCES: Field = Field::cm(35, 0, 8);
    pub const LOCAL_EECN: Field = Field::cm(36, 0, 24);
    pub const INITIATOR_DEPTH: Field = Field::cm(39, 0, 8);
    pub const REMOTE_EECN: Field = Field::cm(40, 0, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Field = Field::cm(43, 0, 5);
    pub const TRANSPORT_SERVICE_TYPE: Field = Field::cm(43, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Field = Field::cm(43, 7, 1);
    pub const STARTING_PSN: Field = Field::cm(44, 0, 24);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Field = Field::cm(47, 0, 5);
    pub const RETRY_COUNT: Field = Field::cm(47, 5, 3);
    pub const PARTITION_KEY: Field = Field::cm(48, 0, 16);
    pub const PATH_PACKET_PAYLOAD_MTU: Field = Field::cm(50, 0, 4);
    pub const RDC_EXISTS: Field = Field::cm(50, 4, 1);
    pub const RNR_RETRY_COUNT: Field = Field::cm(50, 5, 3);
    pub const MAX_CM_RETRIES: Field = Field::cm(51, 0, 4);
    pub const SRQ: Field = Field::cm(51, 4, 1);
    pub const EXTENDED_TRANSPORT_TYPE: Field = Field::cm(51, 5, 3);

    /// A path of the REQ (the primary at byte 52, the alternate at byte 96): IBTA Table 106.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct PathFields {
        pub local_port_lid: Field,
        pub remote_port_lid: Field,
        pub local_port_gid: Bytes,
        pub remote_port_gid: Bytes,
        pub flow_label: Field,
        pub packet_rate: Field,
        pub traffic_class: Field,
        pub hop_limit: Field,
        pub sl: Field,
        pub subnet_local: Field,
        pub local_ack_timeout: Field,
    }

    const fn path(at: usize) -> PathFields {
        PathFields {
            local_port_lid: Field::cm(at, 0, 16),
            remote_port_lid: Field::cm(at + 2, 0, 16),
            local_port_gid: Bytes::cm(at + 4, 16),
            remote_port_gid: Bytes::cm(at + 20, 16),
            flow_label: Field::cm(at + 36, 0, 20),
            packet_rate: Field::cm(at + 39, 2, 6),
            traffic_class: Field::cm(at + 40, 0, 8),
            hop_limit: Field::cm(at + 41, 0, 8),
            sl: Field::cm(at + 42, 0, 4),
            subnet_local: Field::cm(at + 42, 4, 1),
            local_ack_timeout: Field::cm(at + 43, 0, 5),
        }
    }

    pub const PRIMARY: PathFields = path(52);
    pub const ALTERNATE: PathFields = path(96);
    pub const SAP_SUPPORTED: Field = Field::cm(139, 5, 1);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(140, 92);
}

/// MRA (IBTA 12.6.6).
pub mod mra {
    use super::*;
    pub const LOCAL_COMM_ID: Field = Field::cm(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = Field::cm(4, 0, 32);
    pub const MESSAGE_MRAED: Field = Field::cm(8, 0, 2);
    pub const SERVICE_TIMEOUT: Field = Field::cm(9, 0, 5);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(10, 222);
}

/// REJ (IBTA 12.6.7).
pub mod rej {
    use super::*;
    pub const LOCAL_COMM_ID: Field = Field::cm(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = Field::cm(4, 0, 32);
    pub const MESSAGE_REJECTED: Field = Field::cm(8, 0, 2);
    pub const REJECTED_INFO_LENGTH: Field = Field::cm(9, 0, 7);
    pub const REASON: Field = Field::cm(10, 0, 16);
    pub const ARI: Bytes = Bytes::cm(12, 72);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(84, 148);
}

/// REP (IBTA 12.6.8).
pub mod rep {
    use super::*;
    pub const LOCAL_COMM_ID: Field = Field::cm(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = Field::cm(4, 0, 32);
    pub const LOCAL_Q_KEY: Field = Field::cm(8, 0, 32);
    pub const LOCAL_QPN: Field = Field::cm(12, 0, 24);
    pub const LOCAL_EECN: Field = Field::cm(16, 0, 24);
    pub const STARTING_PSN: Field = Field::cm(20, 0, 24);
    pub const RESPONDER_RESOURCES: Field = Field::cm(24, 0, 8);
    pub const INITIATOR_DEPTH: Field = Field::cm(25, 0, 8);
    pub const TARGET_ACK_DELAY: Field = Field::cm(26, 0, 5);
    pub const FAILOVER_ACCEPTED: Field = Field::cm(26, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Field = Field::cm(26, 7, 1);
    pub const RNR_RETRY_COUNT: Field = Field::cm(27, 0, 3);
    pub const SRQ: Field = Field::cm(27, 3, 1);
    pub const LOCAL_CA_GUID: Field = Field::cm(28, 0, 64);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(36, 196);
}

/// RTU (IBTA 12.6.9).
pub mod rtu {
    use super::*;
    pub const LOCAL_COMM_ID: Field = Field::cm(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = Field::cm(4, 0, 32);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(8, 224);
}

/// DREQ (IBTA 12.6.10).
pub mod dreq {
    use super::*;
    pub const LOCAL_COMM_ID: Field = Field::cm(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = Field::cm(4, 0, 32);
    pub const REMOTE_QPN_EECN: Field = Field::cm(8, 0, 24);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(12, 220);
}

/// DREP (IBTA 12.6.11).
pub mod drep {
    use super::*;
    pub const LOCAL_COMM_ID: Field = Field::cm(0, 0, 32);
    pub const REMOTE_COMM_ID: Field = Field::cm(4, 0, 32);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(8, 224);
}

/// SIDR_REQ (IBTA 12.11.1).
pub mod sidr_req {
    use super::*;
    pub const REQUEST_ID: Field = Field::cm(0, 0, 32);
    pub const PARTITION_KEY: Field = Field::cm(4, 0, 16);
    pub const SERVICE_ID: Field = Field::cm(8, 0, 64);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(16, 216);
}

/// SIDR_REP (IBTA 12.11.2).
pub mod sidr_rep {
    use super::*;
    pub const REQUEST_ID: Field = Field::cm(0, 0, 32);
    pub const STATUS: Field = Field::cm(4, 0, 8);
    pub const ADDITIONAL_INFORMATION_LENGTH: Field = Field::cm(5, 0, 8);
    pub const QPN: Field = Field::cm(8, 0, 24);
    pub const SERVICE_ID: Field = Field::cm(12, 0, 64);
    pub const Q_KEY: Field = Field::cm(20, 0, 32);
    pub const ADDITIONAL_INFORMATION: Bytes = Bytes::cm(24, 72);
    pub const PRIVATE_DATA: Bytes = Bytes::cm(96, 136);
}

/// Private data sizes (IBTA 12.6.5 ... 12.11.2; Linux's `IB_CM_*_PRIVATE_DATA_SIZE`).
pub const REQ_PRIVATE_DATA: usize = 92;
pub const MRA_PRIVATE_DATA: usize = 222;
pub const REJ_PRIVATE_DATA: usize = 148;
pub const REP_PRIVATE_DATA: usize = 196;
pub const RTU_PRIVATE_DATA: usize = 224;
pub const DREQ_PRIVATE_DATA: usize = 220;
pub const DREP_PRIVATE_DATA: usize = 224;
pub const SIDR_REQ_PRIVATE_DATA: usize = 216;
pub const SIDR_REP_PRIVATE_DATA: usize = 136;
/// The REJ's Additional Rejection Information and the SIDR_REP's Additional Information.
pub const ARI_LEN: usize = 72;

const fn ends_mad(b: Bytes, len: usize) -> bool {
    b.len == len && b.end() == MAD_SIZE
}

const _: () = {
    assert!(ends_mad(req::PRIVATE_DATA, REQ_PRIVATE_DATA));
    assert!(ends_mad(mra::PRIVATE_DATA, MRA_PRIVATE_DATA));
    assert!(ends_mad(rej::PRIVATE_DATA, REJ_PRIVATE_DATA));
    assert!(ends_mad(rep::PRIVATE_DATA, REP_PRIVATE_DATA));
    assert!(ends_mad(rtu::PRIVATE_DATA, RTU_PRIVATE_DATA));
    assert!(ends_mad(dreq::PRIVATE_DATA, DREQ_PRIVATE_DATA));
    assert!(ends_mad(drep::PRIVATE_DATA, DREP_PRIVATE_DATA));
    assert!(ends_mad(sidr_req::PRIVATE_DATA, SIDR_REQ_PRIVATE_DATA));
    assert!(ends_mad(sidr_rep::PRIVATE_DATA, SIDR_REP_PRIVATE_DATA));
    // The REJ's ARI and the SIDR_REP's Additional Information run up to their private data.
    assert!(rej::ARI.end() == rej::PRIVATE_DATA.offset && rej::ARI.len == ARI_LEN);
    assert!(sidr_rep::ADDITIONAL_INFORMATION.end() == sidr_rep::PRIVATE_DATA.offset);
    // The REQ's alternate path ends where SAP Supported's byte is; its primary path is 44 bytes.
    assert!(req::ALTERNATE.local_port_lid.bit - req::PRIMARY.local_port_lid.bit == 44 * 8);
};
