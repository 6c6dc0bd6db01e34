//! A message on the device's wire as the two ports carry it ([`Packet`]), and what it asks of the
//! responder ([`Op`]). The loopback port (`port`) delivers it in process; the RoCE port (`roce`)
//! cuts it into RoCE v2 packets.

pub mod ud;

use pvrdma_abi::verbs::Gid;

/// What a request packet asks of the responder (IBTA 9.4: the RC operations the model carries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// SEND, with immediate data as on the wire for SEND with immediate (IBTA 9.4.1).
    Send {
        /// Immediate data (big-endian bytes).
        imm: Option<[u8; 4]>,
    },
    /// RDMA WRITE of the payload at `remote_addr` of the MR `rkey` names (IBTA 9.4.3); with
    /// immediate data it also consumes a receive WQE at the responder.
    Write {
        /// Virtual address in the responder's MR (the RETH's VA).
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// Immediate data (big-endian bytes) of RDMA WRITE with immediate.
        imm: Option<[u8; 4]>,
    },
    /// RDMA READ of `len` bytes at `remote_addr` of the MR `rkey` names (IBTA 9.4.4); the
    /// response data is scattered into the requester WQE's SGEs.
    Read {
        /// Virtual address in the responder's MR.
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// Bytes to read (the RETH's DMA length).
        len: u32,
    },
    /// COMPARE SWAP or FETCH ADD on the 8 bytes at `remote_addr` of the MR `rkey` names (IBTA
    /// 9.4.5): the responder returns the original value, written into the requester WQE's SGE.
    Atomic {
        /// Virtual address in the responder's MR (8-byte aligned).
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// The operation and its operands.
        op: crate::mem::Atomic64,
    },
}

/// One RC request message on the wire.
#[derive(Debug)]
pub struct Packet {
    /// Sender QPN.
    pub src: u32,
    /// Sender's unique id (a QPN may be reused).
    pub src_uid: u64,
    /// The send's sequence number on its QP.
    pub seq: u64,
    /// Its PSN on the loopback port (one per message, from the sender's `sq_psn`; the RoCE
    /// port numbers its packets itself).
    pub psn: u32,
    /// Destination QPN.
    pub dest: u32,
    /// Destination GID from the sender's address vector.
    pub dgid: Gid,
    /// The sender's source GID index (`sgid_index`): a responder takes an RC request only from
    /// the GID its own address vector names, as a wire's responder takes it only from its
    /// peer's address.
    pub sgid_index: u8,
    /// The operation.
    pub op: Op,
    /// The solicited-event flag.
    pub solicited: bool,
    /// The gathered message of a SEND or WRITE; empty for a READ.
    pub payload: Vec<u8>,
    /// A UD datagram's DETH Q_Key and GRH (`None` for RC).
    pub ud: Option<Box<ud::Datagram>>,
}
