//! The port's GSI QP (QP1, IBTA 13.5.1): the one QP of a port that carries General Services MADs.
//! Linux's `vmw_pvrdma` creates it with `PVRDMA_QPT_GSI` in CREATE_QP (`pvrdma_create_qp` for
//! `IB_QPT_GSI`) and QEMU 7.2 answers QPN 1 for it (`hw/rdma/rdma_backend.c`: QP1 has no backend
//! QP; its MADs go through rdmacm-mux). The model makes it a UD QP whose QPN is 1: its sends leave
//! as UD datagrams with DETH source QP 1, and datagrams for QP 1 are delivered to it, checked
//! against the GSI Q_Key (IBTA 13.4.4 / C13-3: `0x80010000`, whatever Q_Key the QP was given) and
//! bounded to one MAD. One per port: a second CREATE_QP of a GSI QP while one lives is `EBUSY`.

use super::Qp;
use pvrdma_abi::verbs::{qp_attr_mask as m, qp_state};

/// The QPN of the GSI QP (IBTA 13.5.1).
pub const GSI_QPN: u32 = 1;
/// The Q_Key every MAD to QP1 carries (IBTA 13.4.4, `IB_QP1_QKEY` in Linux).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The largest MAD (IBTA 13.4.2: a MAD is 256 bytes): a longer datagram to QP1 is dropped.
pub const MAD_SIZE: usize = 256;

/// The attributes a GSI transition `cur -> new` requires and allows: UD's, without a port (Linux's
/// `ib_modify_qp_is_ok` has the GSI take a P_Key index and a Q_Key at RESET -> INIT; the port is
/// the one the QP was created on).
pub(crate) fn transition(cur: u32, new: u32) -> Option<(u32, u32)> {
    use qp_state::*;
    if (cur, new) == (RESET, INIT) {
        return Some((m::PKEY_INDEX | m::QKEY, m::PORT));
    }
    super::ud::transition(cur, new)
}

impl Qp {
    /// Whether this is the port's GSI QP.
    pub(crate) fn is_gsi(&self) -> bool {
        self.qp_type == pvrdma_abi::verbs::qp_type::GSI
    }

    /// Whether the QP carries datagrams: UD or the GSI QP.
    pub(crate) fn is_datagram(&self) -> bool {
        self.is_ud() || self.is_gsi()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gsi_init_takes_a_pkey_index_and_a_qkey_and_no_port() {
        use qp_state::*;
        assert_eq!(transition(RESET, INIT), Some((m::PKEY_INDEX | m::QKEY, m::PORT)));
        assert_eq!(transition(RTR, RTS).map(|t| t.0), Some(m::SQ_PSN));
        assert_eq!(transition(RESET, RTS), None);
    }
}
