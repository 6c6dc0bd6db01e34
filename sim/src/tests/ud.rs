//! UD QPs at the command and WQE level: the transitions and attributes MODIFY_QP takes for UD
//! (a Q_Key, no path), what a UD send WQE's `wr.ud` must hold (a bound source GID, port 1, a SEND
//! opcode), and the receive completion's fields.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::QueryQp;
use pvrdma_abi::verbs::{qp_attr_mask as m, qp_state, qp_type, send_flags, QpAttr};
use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status, wr_opcode, SqWqeHdr, WrUd};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromZeros, IntoBytes};

const QKEY: u32 = 0x22;

fn ud_qp(d: &mut Drv, pd: u32, cq: u32) -> TestQp {
    let (mut req, mut qp) = d.qp_request(pd, cq, cq, 4, 1);
    req.qp_type = qp_type::UD;
    qp.qpn = d.ok(req).qpn.get();
    qp
}

fn to_rts(d: &mut Drv, qpn: u32) {
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::INIT);
    a.port_num = 1;
    a.qkey = U32::new(QKEY);
    assert_eq!(d.modify(qpn, m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY, a), 0);
    a.qp_state = U32::new(qp_state::RTR);
    assert_eq!(d.modify(qpn, m::STATE, a), 0);
    a.qp_state = U32::new(qp_state::RTS);
    assert_eq!(d.modify(qpn, m::STATE | m::SQ_PSN, a), 0);
}

/// A UD SEND WQE to `dest` through GID index `gid_index` on port `port`.
fn ud_wqe(wr_id: u64, opcode: u32, dest: u32, gid_index: u8, port: u32) -> SqWqeHdr {
    let mut ud = WrUd { remote_qpn: U32::new(dest), remote_qkey: U32::new(QKEY), ..Default::default() };
    ud.av.port_pd = U32::new(port << 24);
    ud.av.dgid = GID0;
    ud.av.gid_index = gid_index;
    let mut hdr = SqWqeHdr {
        wr_id: U64::new(wr_id),
        num_sge: U32::new(1),
        opcode: U32::new(opcode),
        send_flags: U32::new(send_flags::SIGNALED),
        ..Default::default()
    };
    hdr.wr.copy_from_slice(ud.as_bytes());
    hdr
}

#[test]
fn ud_transitions_take_a_qkey_and_refuse_a_path() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 8);
    let qpn = ud_qp(&mut d, pd, cq.handle).qpn;
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::INIT);
    a.port_num = 1;
    assert_eq!(d.modify(qpn, m::STATE | m::PKEY_INDEX | m::PORT, a), 22, "INIT without a Q_Key");
    let init = m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY;
    assert_eq!(d.modify(qpn, init | m::ACCESS_FLAGS, a), 22, "access flags (RC only)");
    a.qkey = U32::new(QKEY);
    assert_eq!(d.modify(qpn, init, a), 0);
    a.qp_state = U32::new(qp_state::RTR);
    assert_eq!(d.modify(qpn, m::STATE | m::DEST_QPN, a), 22, "a destination QPN");
    assert_eq!(d.modify(qpn, m::STATE | m::AV, a), 22, "an address vector");
    assert_eq!(d.modify(qpn, m::STATE | m::PATH_MTU, a), 22, "a path MTU");
    assert_eq!(d.modify(qpn, m::STATE, a), 0);
    a.qp_state = U32::new(qp_state::RTS);
    assert_eq!(d.modify(qpn, m::STATE, a), 22, "RTS without sq_psn");
    assert_eq!(d.modify(qpn, m::STATE | m::SQ_PSN | m::TIMEOUT, a), 22, "a timeout");
    a.sq_psn = U32::new(0x55);
    a.qkey = U32::new(0x77);
    assert_eq!(d.modify(qpn, m::STATE | m::SQ_PSN | m::QKEY, a), 0);
    let q = d.ok(QueryQp { qp_handle: U32::new(qpn), ..Default::default() }).attrs;
    assert_eq!((q.qp_state.get(), q.qkey.get(), q.sq_psn.get()), (qp_state::RTS, 0x77, 0x55));
}

#[test]
fn ud_send_wqes_name_a_bound_gid_port_1_and_a_send() {
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16);
    let (a, b) = (ud_qp(&mut d, pd, cq.handle), ud_qp(&mut d, pd, cq.handle));
    to_rts(&mut d, a.qpn);
    to_rts(&mut d, b.qpn);
    let mr = d.create_mr(pd, 0x10_0000, 4096, 1);
    d.dev.mem().write(mr.iova, b"udp!").unwrap();
    d.recv(&b, 5, &[sge(mr.va + 1024, 1024, mr.lkey)]);
    d.post_wqe(&a, &ud_wqe(1, wr_opcode::SEND, b.qpn, 0, 1), &[sge(mr.va, 4, mr.lkey)]);
    d.qp_doorbell(&a, pvrdma_abi::uar::UAR_QP_SEND);
    let mut cqes = d.wait_cqes(&cq, 2);
    cqes.sort_by_key(|c| c.opcode.get());
    let (s, r) = (cqes[0], cqes[1]);
    assert_eq!((s.wr_id.get(), s.status.get(), s.opcode.get()), (1, wc_status::SUCCESS, wc_opcode::SEND));
    assert_eq!((r.wr_id.get(), r.status.get(), r.opcode.get()), (5, wc_status::SUCCESS, wc_opcode::RECV));
    assert_eq!((r.src_qp.get(), r.byte_len.get()), (a.qpn, 44));
    assert_ne!(r.wc_flags.get() & wc_flags::GRH, 0);
    let mut got = [0u8; 4];
    d.dev.mem().read(mr.iova + 1024 + 40, &mut got).unwrap();
    assert_eq!(&got, b"udp!");
    // An unbound source GID, port 2, an RDMA WRITE: each fails its WQE and moves the QP to ERR.
    for (what, hdr) in [
        ("GID index 3", ud_wqe(2, wr_opcode::SEND, b.qpn, 3, 1)),
        ("port 2", ud_wqe(2, wr_opcode::SEND, b.qpn, 0, 2)),
        ("RDMA WRITE", ud_wqe(2, wr_opcode::RDMA_WRITE, b.qpn, 0, 1)),
    ] {
        let c = ud_qp(&mut d, pd, cq.handle);
        to_rts(&mut d, c.qpn);
        d.post_wqe(&c, &hdr, &[sge(mr.va, 4, mr.lkey)]);
        d.qp_doorbell(&c, pvrdma_abi::uar::UAR_QP_SEND);
        let e = d.wait_cqes(&cq, 1)[0];
        assert_eq!((e.wr_id.get(), e.status.get()), (2, wc_status::LOC_QP_OP_ERR), "{what}");
        assert_eq!(d.dev.qp_state(c.qpn), Some(qp_state::ERR), "{what}");
    }
    assert_eq!(d.dev.stats().ud_delivered, 1);
}
