//! Issue 21 §3: the values Linux's vmw_pvrdma passes to the device unchecked, and QEMU 7.2
//! takes, are taken by the model too — CREATE_MR's access hints, MODIFY_QP's path MTU, timers,
//! retry counts, RDMA READ depths, access flags, destination QPN, PSNs, migration state,
//! SQ-drained flag and the address vector's SL, rate, path bits and flow label — each kept as the
//! device's field holds it (QUERY_QP reads that back).

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::QueryQp;
use pvrdma_abi::verbs::{access, qp_attr_mask as m, qp_state, QpAttr};
use zerocopy::little_endian::U32;
use zerocopy::FromZeros;

/// A fresh QP moved to RTR with `edit` applied to good attributes (the modify must succeed), and
/// what QUERY_QP then reads.
fn rtr_with(edit: impl Fn(&mut QpAttr), extra: u32) -> QpAttr {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    let mut a = rtr(qp);
    edit(&mut a);
    assert_eq!(d.modify(qp, RTR_MASK | extra, a), 0, "the modify is taken");
    d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() }).attrs
}

#[test]
fn create_mr_takes_the_access_bits_linux_passes() {
    for (what, acc) in [
        ("MW_BIND", access::LOCAL_WRITE | access::MW_BIND),
        ("HUGETLB", access::LOCAL_WRITE | 1 << 7),
        ("RELAXED_ORDERING", access::LOCAL_WRITE | access::REMOTE_READ | 1 << 20),
        ("the last optional bit", 1 << 29),
    ] {
        let mut d = Drv::new(SimConfig::default());
        let pd = d.create_pd(0);
        let mr = d.create_mr(pd, 0x10_0000, 4096, acc);
        assert_ne!(mr.lkey, 0, "{what}");
    }
}

#[test]
fn path_mtus_beyond_the_port_are_taken_as_the_ports() {
    for code in [4u32, 5, 0, 99, u32::MAX] {
        let q = rtr_with(|a| a.path_mtu = U32::new(code), 0);
        assert_eq!(q.path_mtu.get(), 3, "path_mtu {code}: the port's 1024");
    }
    assert_eq!(rtr_with(|a| a.path_mtu = U32::new(2), 0).path_mtu.get(), 2, "512 stays 512");
}

#[test]
fn destination_qpns_psns_and_flow_labels_keep_their_field_bits() {
    let q = rtr_with(|a| a.dest_qp_num = U32::new(1 << 24 | 5), 0);
    assert_eq!(q.dest_qp_num.get(), 5);
    assert_eq!(rtr_with(|a| a.dest_qp_num = U32::new(u32::MAX), 0).dest_qp_num.get(), 0xff_ffff);
    for special in [0, 1] {
        assert_eq!(rtr_with(|a| a.dest_qp_num = U32::new(special), 0).dest_qp_num.get(), special, "QP{special}");
    }
    let q = rtr_with(|a| a.rq_psn = U32::new(0xff12_3456), m::RQ_PSN);
    assert_eq!(q.rq_psn.get(), 0x12_3456);
    let q = rtr_with(|a| a.ah_attr.grh.flow_label = U32::new(0xfff1_2345), 0);
    assert_eq!(q.ah_attr.grh.flow_label.get(), 0x1_2345, "the low 20 bits");
}

#[test]
fn address_vector_fields_linux_passes_are_taken() {
    let q = rtr_with(
        |a| {
            a.ah_attr.sl = 16;
            a.ah_attr.static_rate = 200;
            a.ah_attr.src_path_bits = 1;
            a.ah_attr.grh.hop_limit = 0;
            a.ah_attr.grh.traffic_class = 0xff;
        },
        0,
    );
    assert_eq!((q.ah_attr.sl, q.ah_attr.static_rate, q.ah_attr.grh.hop_limit), (16, 200, 0));
}

#[test]
fn timers_retry_counts_and_read_depths_keep_their_field_bits() {
    let mut d = Drv::new(SimConfig::default());
    let qp = init_qp(&mut d);
    let mut a = rtr(qp);
    a.min_rnr_timer = 0xff;
    a.max_dest_rd_atomic = 255;
    assert_eq!(d.modify(qp, RTR_MASK | m::MIN_RNR_TIMER | m::MAX_DEST_RD_ATOMIC, a), 0);
    a.qp_state = U32::new(qp_state::RTS);
    (a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic) = (200, 9, 15, 255);
    a.sq_psn = U32::new(1 << 24 | 9);
    a.path_mig_state = U32::new(3);
    let rts = m::STATE | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::MAX_QP_RD_ATOMIC | m::SQ_PSN | m::PATH_MIG_STATE;
    assert_eq!(d.modify(qp, rts, a), 0);
    let q = d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() }).attrs;
    assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry, q.min_rnr_timer), (200 & 31, 9 & 7, 7, 31));
    assert_eq!((q.max_rd_atomic, q.max_dest_rd_atomic), (16, 16), "within the caps (16)");
    assert_eq!((q.sq_psn.get(), q.path_mig_state.get()), (9, 0), "a migration state of none kept as it was");
    a.qp_state = U32::new(qp_state::SQD);
    a.en_sqd_async_notify = 2;
    assert_eq!(d.modify(qp, m::STATE | m::EN_SQD_ASYNC_NOTIFY, a), 0);
    let q = d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() }).attrs;
    assert_eq!((q.qp_state.get(), q.en_sqd_async_notify), (qp_state::SQD, 1));
}

#[test]
fn qp_access_flags_are_taken_as_linux_passes_them() {
    for flags in [1u32 << 6, u32::MAX, access::MW_BIND, access::ZERO_BASED] {
        let mut d = Drv::new(SimConfig::default());
        let qp = init_qp(&mut d);
        let mut a = QpAttr::new_zeroed();
        a.qp_state = U32::new(qp_state::INIT);
        a.qp_access_flags = U32::new(flags);
        assert_eq!(d.modify(qp, m::STATE | m::ACCESS_FLAGS, a), 0, "{flags:#x}");
        let q = d.ok(QueryQp { qp_handle: U32::new(qp), ..Default::default() }).attrs;
        assert_eq!(q.qp_access_flags.get(), flags);
    }
}
