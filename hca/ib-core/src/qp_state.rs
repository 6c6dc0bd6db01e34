//! The QP state transition table (IBTA 11.2.5 and 10.3; Linux's `ib_modify_qp_is_ok`): which
//! transitions are legal for a QP type, and which attributes each one requires and allows.

use crate::attr::{QpAttrMask as M, QpState, QpType};
use crate::error::{Error, Result};

/// (required, optional) attributes of `cur -> next` for an RC QP; `None` if illegal.
fn rc(cur: QpState, next: QpState) -> Option<(M, M)> {
    use QpState::*;
    let none = M(0);
    Some(match (cur, next) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
        (Init, Init) => (none, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (Init, Rtr) => (
            M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
        ),
        (Rts, Rts) | (Sqd, Rts) => {
            (none, M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER)
        }
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            none,
            M::PORT
                | M::AV
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC
                | M::ALT_PATH
                | M::ACCESS_FLAGS
                | M::PKEY_INDEX
                | M::MIN_RNR_TIMER
                | M::PATH_MIG_STATE,
        ),
        _ => return None,
    })
}

/// (required, optional) attributes of `cur -> next` for a UD QP (IBTA 11.2.5's UD column, as
/// Linux's `ib_modify_qp_is_ok`): a Q_Key where RC takes its path and connection attributes.
fn ud(cur: QpState, next: QpState) -> Option<(M, M)> {
    use QpState::*;
    let none = M(0);
    let init = M::PKEY_INDEX | M::PORT | M::QKEY;
    let resume = M::CUR_STATE | M::QKEY;
    Some(match (cur, next) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => (init, none),
        (Init, Init) => (none, init),
        (Init, Rtr) => (none, M::PKEY_INDEX | M::QKEY),
        (Rtr, Rts) => (M::SQ_PSN, resume),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (none, resume),
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (none, M::PKEY_INDEX | M::QKEY),
        _ => return None,
    })
}

/// (required, optional) attributes of `cur -> next` for the GSI QP: UD's, but RESET -> INIT
/// takes no port (Linux's `ib_modify_qp_is_ok`: the GSI QP belongs to the port it was made on).
fn gsi(cur: QpState, next: QpState) -> Option<(M, M)> {
    if (cur, next) == (QpState::Reset, QpState::Init) {
        return Some((M::PKEY_INDEX | M::QKEY, M::PORT));
    }
    ud(cur, next)
}

/// The table of a QP type.
fn table(qp_type: QpType) -> fn(QpState, QpState) -> Option<(M, M)> {
    match qp_type {
        QpType::Rc => rc,
        QpType::Ud => ud,
        QpType::Gsi => gsi,
    }
}

/// Whether a consumer's `CUR_STATE` claim of `claimed` can be true of a QP the core last saw in
/// `known`: the device moves a QP on its own only into ERR, from RTS into SQE, and from a
/// draining SQD request into SQD (IBTA 10.3.1). Any other claim is a consumer error, refused
/// rather than sent to a device that would act on a transition the QP cannot make.
pub fn claim_possible(known: QpState, claimed: QpState) -> bool {
    use QpState::*;
    known == claimed || claimed == Err || matches!((known, claimed), (Rts, Sqe) | (Rts, Sqd))
}

/// The mask of a modify from `cur` to `next` that sets exactly what the transition requires
/// (IBTA 11.2.5's table), `STATE` included; `None` for an illegal transition.
pub fn required(cur: QpState, next: QpState, qp_type: QpType) -> Option<M> {
    table(qp_type)(cur, next).map(|(req, _)| req | M::STATE)
}

/// Checks a modify of a `qp_type` QP from `cur` to `next` with `mask`.
///
/// Errors: [`Error::InvalidState`] for an illegal transition (or `CUR_STATE` outside RTR, RTS,
/// SQD and SQE); [`Error::InvalidArgument`] for a required attribute missing from `mask` or one
/// the transition does not take.
pub fn check(cur: QpState, next: QpState, qp_type: QpType, mask: M) -> Result<()> {
    let cur_ok = matches!(cur, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe);
    if mask.contains(M::CUR_STATE) && !cur_ok {
        return Err(Error::InvalidState);
    }
    let (req, opt) = table(qp_type)(cur, next).ok_or(Error::InvalidState)?;
    if !mask.contains(req) {
        return Err(Error::InvalidArgument("a required QP attribute is missing from the mask"));
    }
    if mask.without(req | opt | M::STATE).bits() != 0 {
        return Err(Error::InvalidArgument("the mask names an attribute this transition does not take"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    const ERR: QpState = QpState::Err;

    #[test]
    fn rc_transitions_as_ibta() {
        let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        assert_eq!(check(Reset, Init, QpType::Rc, init), Ok(()));
        assert!(matches!(check(Reset, Init, QpType::Rc, M::STATE | M::PORT), Err(Error::InvalidArgument(_))));
        assert!(matches!(check(Reset, Init, QpType::Rc, init | M::SQ_PSN), Err(Error::InvalidArgument(_))));
        assert_eq!(check(Reset, Rtr, QpType::Rc, M::STATE), Err(Error::InvalidState));
        assert_eq!(check(Init, Rts, QpType::Rc, M::STATE), Err(Error::InvalidState));
        let rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        assert_eq!(check(Init, Rtr, QpType::Rc, rtr), Ok(()));
        let rts = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
        assert_eq!(check(Rtr, Rts, QpType::Rc, rts), Ok(()));
        for s in [Reset, Init, Rtr, Rts, Sqd, Sqe, ERR] {
            assert_eq!(check(s, ERR, QpType::Rc, M::STATE), Ok(()), "{s:?} -> ERR");
            assert_eq!(check(s, Reset, QpType::Rc, M::STATE), Ok(()), "{s:?} -> RESET");
        }
        assert_eq!(check(ERR, Rts, QpType::Rc, M::STATE), Err(Error::InvalidState));
        assert_eq!(check(Sqe, Rts, QpType::Rc, M::STATE), Err(Error::InvalidState), "SQE->RTS is UD/UC only");
        assert_eq!(check(Init, Init, QpType::Rc, M::STATE | M::CUR_STATE), Err(Error::InvalidState));
    }

    #[test]
    fn cur_state_claims_only_what_the_device_could_have_done() {
        assert!(claim_possible(Rts, Rts) && claim_possible(Rts, Sqe) && claim_possible(Rts, Sqd));
        assert!(claim_possible(Init, ERR) && claim_possible(Reset, ERR));
        assert!(!claim_possible(Reset, Rts) && !claim_possible(Init, Rtr) && !claim_possible(ERR, Rts));
    }

    #[test]
    fn required_is_the_tables_required_set_with_state() {
        let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        assert_eq!(required(Reset, Init, QpType::Rc), Some(init));
        assert_eq!(required(Reset, Rtr, QpType::Rc), None);
        let rts = required(Rtr, Rts, QpType::Rc).unwrap();
        assert_eq!(check(Rtr, Rts, QpType::Rc, rts), Ok(()));
    }

    #[test]
    fn the_gsi_qp_takes_uds_transitions_without_a_port_at_init() {
        let init = M::STATE | M::PKEY_INDEX | M::QKEY;
        assert_eq!(check(Reset, Init, QpType::Gsi, init), Ok(()));
        assert_eq!(check(Reset, Init, QpType::Gsi, init | M::PORT), Ok(()), "a port may be named");
        assert!(matches!(check(Reset, Init, QpType::Gsi, M::STATE | M::PKEY_INDEX), Err(Error::InvalidArgument(_))));
        assert_eq!(required(Reset, Init, QpType::Gsi), Some(init));
        assert_eq!(required(Rtr, Rts, QpType::Gsi), required(Rtr, Rts, QpType::Ud));
        assert_eq!(check(Init, Rts, QpType::Gsi, M::STATE), Err(Error::InvalidState));
    }
}
