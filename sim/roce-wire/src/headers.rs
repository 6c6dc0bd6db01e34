//! The transport headers as values: what [`crate::encode`] writes and [`crate::decode`] reads.

/// BTH fields (IBTA 9.2). `psn` and `dest_qp` are 24-bit; `pad` is the pad count (0..=3), set by
/// [`crate::encode`] from the payload length and reported by [`crate::decode`]. The transport
/// header version is always 0 and the reserved fields are not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bth {
    /// OpCode (see [`crate::opcode`]).
    pub opcode: u8,
    /// SE: the requester asks for a solicited event at the responder.
    pub solicited: bool,
    /// M: the migration state bit (IBTA 9.2.4; APM). Linux rxe and the model send 0 on every
    /// packet (seen in the soft-RoCE stage's capture); the receiver ignores it.
    pub mig_req: bool,
    /// Pad count: bytes added after the payload to reach a multiple of 4.
    pub pad: u8,
    /// Partition key.
    pub pkey: u16,
    /// Destination QP number, 24 bits.
    pub dest_qp: u32,
    /// AckReq: the requester asks for an acknowledge of this packet.
    pub ack_req: bool,
    /// Packet sequence number, 24 bits.
    pub psn: u32,
}

/// RETH (IBTA 9.3.3): virtual address, R_Key, DMA length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reth {
    /// Virtual address at the responder.
    pub va: u64,
    /// R_Key of the responder's memory region.
    pub rkey: u32,
    /// Length of the whole RDMA operation, in bytes.
    pub dma_len: u32,
}

/// AtomicETH (IBTA 9.3.4): the request of a COMPARE SWAP or FETCH ADD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicEth {
    /// Virtual address of the 8 bytes at the responder.
    pub va: u64,
    /// R_Key of the responder's memory region.
    pub rkey: u32,
    /// Swap value (COMPARE SWAP) or the addend (FETCH ADD).
    pub swap_add: u64,
    /// Compare value (COMPARE SWAP).
    pub compare: u64,
}

/// AETH (IBTA 9.3.5): syndrome byte and 24-bit MSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Aeth {
    /// Syndrome (IBTA 9.7.5.2.1); see [`Aeth::syndrome`].
    pub syndrome: u8,
    /// Message sequence number of the last completed message, 24 bits.
    pub msn: u32,
}

/// The syndrome decoded (IBTA 9.7.5.2.1, Tables 43-45).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syndrome {
    /// ACK with the credit count (5 bits; 31 means "no credit information", IBTA 9.7.7.2).
    Ack {
        /// Encoded credit count.
        credits: u8,
    },
    /// RNR NAK with the 5-bit RNR timer code (IBTA Table 45).
    RnrNak {
        /// Encoded minimum RNR NAK timer.
        timer: u8,
    },
    /// NAK with its code.
    Nak(NakCode),
    /// Bit 7 set, or the reserved type `10`: the whole syndrome byte.
    Reserved(u8),
}

/// NAK codes (IBTA 9.7.5.2.1, Table 44).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5..=31: reserved; the 5-bit value.
    Reserved(u8),
}

const TYPE_MASK: u8 = 0x60;
const TYPE_ACK: u8 = 0x00;
const TYPE_RNR_NAK: u8 = 0x20;
const TYPE_NAK: u8 = 0x60;
const VALUE_MASK: u8 = 0x1f;

impl NakCode {
    fn from_bits(v: u8) -> Self {
        match v & VALUE_MASK {
            0 => Self::PsnSequenceError,
            1 => Self::InvalidRequest,
            2 => Self::RemoteAccessError,
            3 => Self::RemoteOperationalError,
            4 => Self::InvalidRdRequest,
            v => Self::Reserved(v),
        }
    }

    fn bits(self) -> u8 {
        match self {
            Self::PsnSequenceError => 0,
            Self::InvalidRequest => 1,
            Self::RemoteAccessError => 2,
            Self::RemoteOperationalError => 3,
            Self::InvalidRdRequest => 4,
            Self::Reserved(v) => v & VALUE_MASK,
        }
    }
}

impl Aeth {
    /// The syndrome byte decoded.
    pub fn syndrome(&self) -> Syndrome {
        let s = self.syndrome;
        if s & 0x80 != 0 {
            return Syndrome::Reserved(s);
        }
        match s & TYPE_MASK {
            TYPE_ACK => Syndrome::Ack { credits: s & VALUE_MASK },
            TYPE_RNR_NAK => Syndrome::RnrNak { timer: s & VALUE_MASK },
            TYPE_NAK => Syndrome::Nak(NakCode::from_bits(s)),
            _ => Syndrome::Reserved(s),
        }
    }

    /// An ACK; `credits` keeps its low 5 bits, `msn` its low 24 bits.
    pub fn ack(msn: u32, credits: u8) -> Self {
        Self { syndrome: TYPE_ACK | (credits & VALUE_MASK), msn: msn & 0xff_ffff }
    }

    /// An RNR NAK; `timer` (IBTA Table 45 code) keeps its low 5 bits, `msn` its low 24 bits.
    pub fn rnr_nak(msn: u32, timer: u8) -> Self {
        Self { syndrome: TYPE_RNR_NAK | (timer & VALUE_MASK), msn: msn & 0xff_ffff }
    }

    /// A NAK with `code`; `msn` keeps its low 24 bits.
    pub fn nak(msn: u32, code: NakCode) -> Self {
        Self { syndrome: TYPE_NAK | code.bits(), msn: msn & 0xff_ffff }
    }
}

/// All headers of one RC packet after the UDP header: the BTH and the extension headers its
/// opcode carries (IBTA 9.2, Table 38).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Headers {
    /// Base transport header.
    pub bth: Bth,
    /// RETH: RDMA WRITE First/Only (with Immediate) and RDMA READ Request.
    pub reth: Option<Reth>,
    /// AETH: RDMA READ response First/Last/Only and Acknowledge.
    pub aeth: Option<Aeth>,
    /// ImmDt: the "with Immediate" opcodes, as it travels (big-endian on the wire).
    pub imm: Option<u32>,
    /// AtomicETH: CmpSwap and FetchAdd.
    pub atomic_eth: Option<AtomicEth>,
    /// AtomicAckETH (IBTA 9.3.7): the original value, on ATOMIC Acknowledge.
    pub atomic_ack: Option<u64>,
}
