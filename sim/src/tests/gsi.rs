//! The port's GSI QP (`qp/gsi.rs`) at the command and WQE level on the loopback port: CREATE_QP
//! with `PVRDMA_QPT_GSI` answers QPN 1, once per port; what it receives is checked against the
//! GSI Q_Key and one MAD's length; a datagram for QP1 while it does not exist is dropped.

use crate::testutil::minidrv::*;
use crate::{Profile, SimConfig};
use pvrdma_abi::cmd::DestroyQp;
use pvrdma_abi::verbs::{qp_attr_mask as m, qp_state, qp_type, send_flags, QpAttr};
use pvrdma_abi::wqe::{wc_opcode, wc_status, wr_opcode, Cqe, SqWqeHdr, WrUd};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromZeros, IntoBytes};

const GSI_QKEY: u32 = 0x8001_0000;
const UD_QKEY: u32 = 0x22;

fn qp_of(d: &mut Drv, pd: u32, cq: u32, ty: u8) -> (u8, TestQp) {
    let (mut req, mut qp) = d.qp_request(pd, cq, cq, 4, 1);
    req.qp_type = ty;
    let (resp, err) = d.post(req);
    qp.qpn = resp.qpn.get();
    (err, qp)
}

/// RESET -> RTS: the GSI takes a P_Key index and a Q_Key (no port) at INIT, a UD QP a port too.
fn to_rts(d: &mut Drv, qpn: u32, gsi: bool, qkey: u32) {
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::INIT);
    a.port_num = 1;
    a.qkey = U32::new(qkey);
    let init = m::STATE | m::PKEY_INDEX | m::QKEY | if gsi { 0 } else { m::PORT };
    assert_eq!(d.modify(qpn, init, a), 0);
    a.qp_state = U32::new(qp_state::RTR);
    assert_eq!(d.modify(qpn, m::STATE, a), 0);
    a.qp_state = U32::new(qp_state::RTS);
    assert_eq!(d.modify(qpn, m::STATE | m::SQ_PSN, a), 0);
}

fn ud_wqe(wr_id: u64, dest: u32, qkey: u32) -> SqWqeHdr {
    let mut ud = WrUd { remote_qpn: U32::new(dest), remote_qkey: U32::new(qkey), ..Default::default() };
    ud.av.port_pd = U32::new(1 << 24);
    ud.av.dgid = GID0;
    let mut hdr = SqWqeHdr {
        wr_id: U64::new(wr_id),
        num_sge: U32::new(1),
        opcode: U32::new(wr_opcode::SEND),
        send_flags: U32::new(send_flags::SIGNALED),
        ..Default::default()
    };
    hdr.wr.copy_from_slice(ud.as_bytes());
    hdr
}

/// A device with GID 0 bound, a PD, a CQ, an MR of 8 KiB at VA 0x10_0000.
fn setup(cfg: SimConfig) -> (Drv, u32, TestCq, TestMr) {
    let mut d = Drv::new(cfg);
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 32);
    let mr = d.create_mr(pd, 0x10_0000, 8192, 1);
    (d, pd, cq, mr)
}

/// Sends `len` bytes from QP `from` to QP `to` with `qkey`, checks the send's completion and
/// returns the receive completion (`delivered`: one is expected on the shared CQ).
#[allow(clippy::too_many_arguments)]
fn send(
    d: &mut Drv,
    cq: &TestCq,
    from: &TestQp,
    to: u32,
    qkey: u32,
    mr: &TestMr,
    len: u32,
    delivered: bool,
) -> Option<Cqe> {
    d.post_wqe(from, &ud_wqe(1, to, qkey), &[sge(mr.va, len, mr.lkey)]);
    d.qp_doorbell(from, pvrdma_abi::uar::UAR_QP_SEND);
    let cqes = d.wait_cqes(cq, 1 + usize::from(delivered));
    let s = cqes.iter().find(|c| c.opcode.get() == wc_opcode::SEND).expect("the send completes");
    assert_eq!(s.status.get(), wc_status::SUCCESS);
    cqes.into_iter().find(|c| c.opcode.get() == wc_opcode::RECV)
}

#[test]
fn the_gsi_qp_is_qpn_1_once_per_port() {
    for profile in [Profile::Ibta, Profile::Qemu72] {
        let (mut d, pd, cq, _) = setup(SimConfig { profile, ..SimConfig::default() });
        let (err, gsi) = qp_of(&mut d, pd, cq.handle, qp_type::GSI);
        assert_eq!((err, gsi.qpn), (0, 1), "{profile:?}");
        let (err, _) = qp_of(&mut d, pd, cq.handle, qp_type::GSI);
        assert_eq!(err, pvrdma_abi::errno::EBUSY, "a second GSI QP while one lives ({profile:?})");
        let (err, ud) = qp_of(&mut d, pd, cq.handle, qp_type::UD);
        assert!(err == 0 && ud.qpn > 1, "other QPs keep their numbers ({profile:?})");
        let (err, _) = qp_of(&mut d, pd, cq.handle, qp_type::SMI);
        assert_eq!(err, pvrdma_abi::errno::EINVAL, "QP0 is not modelled ({profile:?})");
        d.ok(DestroyQp { qp_handle: U32::new(gsi.qpn), ..Default::default() });
        let (err, again) = qp_of(&mut d, pd, cq.handle, qp_type::GSI);
        assert_eq!((err, again.qpn), (0, 1), "after a destroy, a new GSI QP ({profile:?})");
    }
}

#[test]
fn mads_to_qp1_are_checked_against_the_gsi_qkey_and_one_mad() {
    let (mut d, pd, cq, mr) = setup(SimConfig::default());
    let (_, gsi) = qp_of(&mut d, pd, cq.handle, qp_type::GSI);
    let (_, ud) = qp_of(&mut d, pd, cq.handle, qp_type::UD);
    let (_, peer) = qp_of(&mut d, pd, cq.handle, qp_type::UD);
    // The GSI QP's own Q_Key is not what it takes: QP1 takes 0x80010000 only (IBTA 13.4.4). A
    // Q_Key with bit 31 set is sent as the sender's own (IBTA 10.2.5), so `ud` holds the GSI's.
    to_rts(&mut d, gsi.qpn, true, 0x1234);
    to_rts(&mut d, ud.qpn, false, GSI_QKEY);
    to_rts(&mut d, peer.qpn, false, UD_QKEY);
    d.dev.mem().write(mr.iova, &[0x5a; 300]).unwrap();
    for i in 0..2 {
        d.recv(&gsi, 10 + i, &[sge(mr.va + 4096, 40 + 256, mr.lkey)]);
    }
    let before = d.dev.stats();
    send(&mut d, &cq, &ud, 1, 0x1234, &mr, 256, false);
    send(&mut d, &cq, &ud, 1, GSI_QKEY, &mr, 257, false);
    let after = d.dev.stats();
    assert_eq!(after.ud_dropped_qkey - before.ud_dropped_qkey, 1, "a Q_Key other than the GSI's");
    assert_eq!(after.ud_dropped_oversize - before.ud_dropped_oversize, 1, "longer than a MAD");
    assert_eq!(d.dev.qp_state(gsi.qpn), Some(qp_state::RTS), "neither hurt the GSI QP");
    let r = send(&mut d, &cq, &ud, 1, GSI_QKEY, &mr, 256, true).expect("delivered to QP1");
    assert_eq!((r.wr_id.get(), r.status.get(), r.opcode.get()), (10, wc_status::SUCCESS, wc_opcode::RECV));
    assert_eq!((r.qp.get(), r.src_qp.get(), r.byte_len.get()), (1, ud.qpn, 296));
    // The GSI QP's sends leave from QP 1, with the Q_Key of the WQE.
    d.recv(&peer, 20, &[sge(mr.va + 6144, 40 + 256, mr.lkey)]);
    let r = send(&mut d, &cq, &gsi, peer.qpn, UD_QKEY, &mr, 64, true).expect("delivered from QP1");
    assert_eq!((r.wr_id.get(), r.status.get(), r.src_qp.get()), (20, wc_status::SUCCESS, 1));
}

#[test]
fn a_datagram_for_qp1_without_a_gsi_qp_is_dropped_and_counted() {
    let (mut d, pd, cq, mr) = setup(SimConfig::default());
    let (_, ud) = qp_of(&mut d, pd, cq.handle, qp_type::UD);
    to_rts(&mut d, ud.qpn, false, GSI_QKEY);
    let before = d.dev.stats().ud_dropped_qp;
    assert!(send(&mut d, &cq, &ud, 1, GSI_QKEY, &mr, 256, false).is_none());
    assert_eq!(d.dev.stats().ud_dropped_qp - before, 1);
}
