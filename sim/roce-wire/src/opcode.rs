//! RC opcodes (IBTA 9.2, Table 38: transport bits 000 for RC, the operation in bits 4:0).

/// SEND First.
pub const RC_SEND_FIRST: u8 = 0x00;
/// SEND Middle.
pub const RC_SEND_MIDDLE: u8 = 0x01;
/// SEND Last.
pub const RC_SEND_LAST: u8 = 0x02;
/// SEND Last with Immediate.
pub const RC_SEND_LAST_WITH_IMMEDIATE: u8 = 0x03;
/// SEND Only.
pub const RC_SEND_ONLY: u8 = 0x04;
/// SEND Only with Immediate.
pub const RC_SEND_ONLY_WITH_IMMEDIATE: u8 = 0x05;
/// RDMA WRITE First.
pub const RC_RDMA_WRITE_FIRST: u8 = 0x06;
/// RDMA WRITE Middle.
pub const RC_RDMA_WRITE_MIDDLE: u8 = 0x07;
/// RDMA WRITE Last.
pub const RC_RDMA_WRITE_LAST: u8 = 0x08;
/// RDMA WRITE Last with Immediate.
pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = 0x09;
/// RDMA WRITE Only.
pub const RC_RDMA_WRITE_ONLY: u8 = 0x0a;
/// RDMA WRITE Only with Immediate.
pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x0b;
/// RDMA READ Request.
pub const RC_RDMA_READ_REQUEST: u8 = 0x0c;
/// RDMA READ response First.
pub const RC_RDMA_READ_RESPONSE_FIRST: u8 = 0x0d;
/// RDMA READ response Middle.
pub const RC_RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0e;
/// RDMA READ response Last.
pub const RC_RDMA_READ_RESPONSE_LAST: u8 = 0x0f;
/// RDMA READ response Only.
pub const RC_RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
/// Acknowledge.
pub const RC_ACKNOWLEDGE: u8 = 0x11;
/// ATOMIC Acknowledge (AETH and AtomicAckETH).
pub const RC_ATOMIC_ACKNOWLEDGE: u8 = 0x12;
/// CmpSwap (AtomicETH).
pub const RC_COMPARE_SWAP: u8 = 0x13;
/// FetchAdd (AtomicETH).
pub const RC_FETCH_ADD: u8 = 0x14;

/// Every RC opcode this crate knows, in numeric order.
pub const ALL: [u8; 21] = [
    RC_SEND_FIRST,
    RC_SEND_MIDDLE,
    RC_SEND_LAST,
    RC_SEND_LAST_WITH_IMMEDIATE,
    RC_SEND_ONLY,
    RC_SEND_ONLY_WITH_IMMEDIATE,
    RC_RDMA_WRITE_FIRST,
    RC_RDMA_WRITE_MIDDLE,
    RC_RDMA_WRITE_LAST,
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    RC_RDMA_WRITE_ONLY,
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    RC_RDMA_READ_REQUEST,
    RC_RDMA_READ_RESPONSE_FIRST,
    RC_RDMA_READ_RESPONSE_MIDDLE,
    RC_RDMA_READ_RESPONSE_LAST,
    RC_RDMA_READ_RESPONSE_ONLY,
    RC_ACKNOWLEDGE,
    RC_ATOMIC_ACKNOWLEDGE,
    RC_COMPARE_SWAP,
    RC_FETCH_ADD,
];

/// Which headers follow the BTH for one opcode, and whether it carries a payload (IBTA 9.2,
/// Table 38's header columns), in wire order: RETH, then ImmDt; or AETH (then AtomicAckETH);
/// or AtomicETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// A RETH follows the BTH.
    pub reth: bool,
    /// An AETH follows the BTH.
    pub aeth: bool,
    /// An ImmDt follows the BTH (and the RETH, if any).
    pub imm: bool,
    /// The packet may carry payload (RDMA READ Request and Acknowledge carry none).
    pub payload: bool,
    /// An AtomicETH follows the BTH (CmpSwap, FetchAdd).
    pub atomic_eth: bool,
    /// An AtomicAckETH follows the AETH (ATOMIC Acknowledge).
    pub atomic_ack_eth: bool,
}

/// The header layout of `op`, or `None` for an opcode that is not RC SEND, RDMA WRITE, RDMA
/// READ, ATOMIC or an acknowledge (other transports, reserved values).
pub fn layout(op: u8) -> Option<Layout> {
    let l =
        |reth, aeth, imm, payload| Some(Layout { reth, aeth, imm, payload, atomic_eth: false, atomic_ack_eth: false });
    let none =
        Layout { reth: false, aeth: false, imm: false, payload: false, atomic_eth: false, atomic_ack_eth: false };
    match op {
        RC_COMPARE_SWAP | RC_FETCH_ADD => Some(Layout { atomic_eth: true, ..none }),
        RC_ATOMIC_ACKNOWLEDGE => Some(Layout { aeth: true, atomic_ack_eth: true, ..none }),
        RC_SEND_FIRST
        | RC_SEND_MIDDLE
        | RC_SEND_LAST
        | RC_SEND_ONLY
        | RC_RDMA_WRITE_MIDDLE
        | RC_RDMA_WRITE_LAST
        | RC_RDMA_READ_RESPONSE_MIDDLE => l(false, false, false, true),
        RC_SEND_LAST_WITH_IMMEDIATE | RC_SEND_ONLY_WITH_IMMEDIATE | RC_RDMA_WRITE_LAST_WITH_IMMEDIATE => {
            l(false, false, true, true)
        }
        RC_RDMA_WRITE_FIRST | RC_RDMA_WRITE_ONLY => l(true, false, false, true),
        RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => l(true, false, true, true),
        RC_RDMA_READ_REQUEST => l(true, false, false, false),
        RC_RDMA_READ_RESPONSE_FIRST | RC_RDMA_READ_RESPONSE_LAST | RC_RDMA_READ_RESPONSE_ONLY => {
            l(false, true, false, true)
        }
        RC_ACKNOWLEDGE => l(false, true, false, false),
        _ => None,
    }
}
