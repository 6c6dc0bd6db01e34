//! UD queue pairs (IBTA 9.8.3 and 10.2.5): the transitions a UD QP takes, the send WQE's `wr.ud`
//! (remote QPN, remote Q_Key and the address vector, as Linux's `pvrdma_post_send` fills it),
//! the GRH a receiver finds in the first 40 bytes of its buffer, and the receive side's checks
//! (state, Q_Key, a posted receive WQE). UD is unreliable: a datagram the receiver refuses is
//! dropped and counted, and its sender completes `SUCCESS` once it was sent.

use super::Qp;
use pvrdma_abi::verbs::{qp_attr_mask as m, qp_state};

/// Why a UD datagram was not delivered (each counted in [`crate::SimStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// No QP of that number (QP1 while no GSI QP exists), not UD or GSI, or not in RTR, RTS or SQD.
    Qp,
    /// The DETH's Q_Key is not the receiver's (IBTA 10.2.5: silently dropped).
    Qkey,
    /// No receive WQE posted.
    NoRecv,
    /// Longer than the receiver takes: more than a MAD for the GSI QP.
    Oversize,
}

/// The attributes a UD transition `cur -> new` requires and allows (IBTA 11.2.5, Table 93's UD
/// column, as Linux's `ib_modify_qp_is_ok`), SQD's included; `None` if illegal. No path,
/// destination QPN, MTU, timers or RDMA attributes: a UD QP is not connected.
pub(crate) fn transition(cur: u32, new: u32) -> Option<(u32, u32)> {
    use qp_state::*;
    const INIT_ATTRS: u32 = m::PKEY_INDEX | m::PORT | m::QKEY;
    Some(match (cur, new) {
        (_, RESET) | (_, ERR) => (0, 0),
        (RESET, INIT) => (INIT_ATTRS, 0),
        (INIT, INIT) => (0, INIT_ATTRS),
        (INIT, RTR) => (0, m::PKEY_INDEX | m::QKEY),
        (RTR, RTS) => (m::SQ_PSN, m::CUR_STATE | m::QKEY),
        (RTS, RTS) | (SQD, RTS) => (0, m::CUR_STATE | m::QKEY),
        (RTS, SQD) => (0, m::EN_SQD_ASYNC_NOTIFY),
        (SQD, SQD) => (0, m::PKEY_INDEX | m::QKEY),
        _ => return None,
    })
}

impl Qp {
    /// Whether this is a UD QP.
    pub(crate) fn is_ud(&self) -> bool {
        self.qp_type == pvrdma_abi::verbs::qp_type::UD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ud_transitions_take_a_qkey_and_no_path() {
        use qp_state::*;
        assert_eq!(transition(RESET, INIT), Some((m::PKEY_INDEX | m::PORT | m::QKEY, 0)));
        assert_eq!(transition(RTR, RTS).map(|t| t.0), Some(m::SQ_PSN));
        assert_eq!(transition(INIT, RTR).map(|t| t.0 & m::AV), Some(0));
        assert_eq!(transition(RESET, RTS), None);
        assert_eq!(transition(RTS, SQD), Some((0, m::EN_SQD_ASYNC_NOTIFY)));
        assert_eq!(transition(SQD, RTS).map(|t| t.0), Some(0));
        assert_eq!(transition(RTR, SQD), None);
    }
}
