//! MODIFY_QP refuses what Linux's driver never sends: address vectors outside their fields,
//! attributes a transition does not take, RTR without a path MTU.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::*;
use pvrdma_abi::errno::EINVAL;
use pvrdma_abi::verbs::{qp_attr_mask as m, qp_state, QpAttr};
use zerocopy::little_endian::{U16, U32};

// (Values Linux passes through unchecked are taken since issue 21: `modify_values.rs`.)

type AttrEdit = fn(&mut QpAttr);

/// From issue 10's third round of attacks on the model.
#[test]
fn an_address_vector_outside_its_fields_is_refused() {
    // (The SL, static rate, flow label, source path bits and destination QPN are taken whatever
    // they hold since issue 21, as Linux passes them: see `modify_values.rs`.)
    let cases: [(&str, AttrEdit); 5] = [
        ("ah port_num 0", |a| a.ah_attr.port_num = 0),
        ("ah port_num 2", |a| a.ah_attr.port_num = 2),
        ("ah_flags 0 (RoCE needs a GRH)", |a| a.ah_attr.ah_flags = 0),
        ("ah_flags 0x81 (unknown bit)", |a| a.ah_attr.ah_flags = 0x81),
        ("vlan_id 4096 (12 bits)", |a| a.ah_attr.vlan_id = U16::new(4096)),
    ];
    let mut accepted = Vec::new();
    for (what, edit) in cases {
        let mut d = Drv::new(SimConfig::default());
        let qp = init_qp(&mut d);
        let mut a = rtr(qp);
        edit(&mut a);
        if d.modify(qp, RTR_MASK, a) != EINVAL {
            accepted.push(what);
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}

/// From issue 10's third round of attacks on the model.
#[test]
fn a_good_address_vector_still_connects() {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    assert_eq!(d.modify(qp, RTR_MASK, rtr(qp)), 0);
    let q = d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() });
    assert_eq!((q.attrs.qp_state.get(), q.attrs.path_mtu.get()), (qp_state::RTR, 3));
    assert_eq!(q.attrs.ah_attr.grh.dgid, GID0);
}

/// A QP of `d` in `state` (RESET, INIT or RTS).
fn qp_in(d: &mut Drv, state: u32) -> u32 {
    if state == qp_state::RESET {
        d.bind_gid(0, GID0);
        let pd = d.create_pd(0);
        let cq = d.create_cq(0, 16).handle;
        return d.create_qp(pd, cq, cq, 8).qpn;
    }
    let qp = init_qp(d);
    if state == qp_state::RTS {
        let mut a = rtr(qp);
        assert_eq!(d.modify(qp, RTR_MASK, a), 0);
        a.qp_state = U32::new(qp_state::RTS);
        assert_eq!(d.modify(qp, m::STATE | m::SQ_PSN, a), 0);
    }
    qp
}

/// From issue 10's third round of attacks on the model.
#[test]
fn attributes_a_transition_does_not_take_are_refused() {
    // (from, to, attribute): none is an optional or required attribute of that RC transition.
    let cases: [(u32, u32, &str, u32); 20] = [
        (qp_state::RESET, qp_state::INIT, "CUR_STATE", m::CUR_STATE),
        (qp_state::RESET, qp_state::INIT, "MIN_RNR_TIMER", m::MIN_RNR_TIMER),
        (qp_state::INIT, qp_state::INIT, "MAX_QP_RD_ATOMIC", m::MAX_QP_RD_ATOMIC),
        (qp_state::RESET, qp_state::INIT, "QKEY (UD only)", m::QKEY),
        (qp_state::RESET, qp_state::INIT, "DEST_QPN", m::DEST_QPN),
        (qp_state::RESET, qp_state::INIT, "AV", m::AV),
        (qp_state::RESET, qp_state::INIT, "SQ_PSN", m::SQ_PSN),
        (qp_state::RESET, qp_state::INIT, "PATH_MTU", m::PATH_MTU),
        (qp_state::INIT, qp_state::INIT, "QKEY (UD only)", m::QKEY),
        (qp_state::INIT, qp_state::INIT, "DEST_QPN", m::DEST_QPN),
        (qp_state::INIT, qp_state::INIT, "AV", m::AV),
        (qp_state::INIT, qp_state::INIT, "TIMEOUT", m::TIMEOUT),
        (qp_state::RTS, qp_state::RTS, "DEST_QPN", m::DEST_QPN),
        (qp_state::RTS, qp_state::RTS, "AV", m::AV),
        (qp_state::RTS, qp_state::RTS, "PATH_MTU", m::PATH_MTU),
        (qp_state::RTS, qp_state::RTS, "RQ_PSN", m::RQ_PSN),
        (qp_state::RTS, qp_state::RTS, "SQ_PSN", m::SQ_PSN),
        (qp_state::RTS, qp_state::RTS, "PORT", m::PORT),
        (qp_state::RTS, qp_state::RTS, "PKEY_INDEX", m::PKEY_INDEX),
        (qp_state::RTS, qp_state::RTS, "TIMEOUT", m::TIMEOUT),
    ];
    let mut accepted = Vec::new();
    for (from, to, what, bit) in cases {
        let mut d = Drv::new(SimConfig::default());
        let qp = qp_in(&mut d, from);
        let mut a = rtr(qp + 100);
        a.qp_state = U32::new(to);
        a.cur_qp_state = U32::new(from);
        a.port_num = 1;
        if d.modify(qp, m::STATE | bit, a) != EINVAL {
            accepted.push(format!("{from}->{to} {what}"));
        }
    }
    assert_eq!(accepted, Vec::<String>::new());
}

/// From issue 10's third round of attacks on the model.
#[test]
fn rtr_without_a_path_mtu_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    let err = d.modify(qp, RTR_MASK & !m::PATH_MTU, rtr(qp));
    let q = d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() });
    assert!(
        err == EINVAL || pvrdma_abi::verbs::mtu::bytes(q.attrs.path_mtu.get()).is_some(),
        "RTR accepted (err {err}) and QUERY_QP reports path_mtu {}",
        q.attrs.path_mtu.get()
    );
}
