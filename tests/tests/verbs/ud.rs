//! UD QPs and address handles through the verbs core on the model's loopback port: payload and
//! GRH area verified, the completion's source QP and GRH flag, Q_Key checks (a mismatch and a
//! missing receive WQE drop the datagram, counted; the sender completes SUCCESS), the
//! "own Q_Key" bit, a message over the MTU sends nothing and completes SUCCESS (IBTA
//! C10-93.1.1), immediate data, and `ah_attr_from_wc` answering a completion.

use ib_core::{
    access, ah_attr_from_wc, AhAttr, Cq, GlobalRoute, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, Wc,
    WcStatus, WrOpcode, GRH_LEN,
};
use pvrdma_sim::SimStats;
use std::time::Duration;
use tests::fixture::*;

const QKEY: u32 = 0x1111_1111;

struct Rig {
    dev: ib_core::Device,
    sim: hca::platform::sim::SimPlatform,
    pd: Pd,
    scq: Cq,
    rcq: Cq,
    mr: Mr,
    a: Qp,
    b: Qp,
}

fn ud_qp(pd: &Pd, scq: &Cq, rcq: &Cq, qkey: u32) -> Qp {
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        cap,
        qp_type: QpType::Ud,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let q = pd.create_qp(&attr).expect("create a UD QP");
    q.modify_ud_to_rts(1, qkey, 0).expect("UD to RTS");
    q
}

fn rig() -> Rig {
    let (dev, sim) = hca::open_sim(pvrdma_sim::SimConfig::default()).expect("probe");
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(64, None).unwrap(), dev.create_cq(64, None).unwrap());
    let mr = pd.alloc_mr(8192, access::LOCAL_WRITE).unwrap();
    let a = ud_qp(&pd, &scq, &rcq, QKEY);
    let b = ud_qp(&pd, &scq, &rcq, QKEY);
    Rig { dev, sim, pd, scq, rcq, mr, a, b }
}

impl Rig {
    fn ah(&self) -> ib_core::Ah {
        let grh = GlobalRoute { dgid: gid(&self.dev), sgid_index: 0, hop_limit: 64, traffic_class: 0, flow_label: 0 };
        self.pd.create_ah(&AhAttr { grh, is_global: true, port_num: 1, ..Default::default() }).unwrap()
    }

    fn stats(&self) -> SimStats {
        self.sim.device().stats()
    }

    /// `b` posts a receive of `len` bytes at offset 4096.
    fn recv_b(&self, wr_id: u64, len: u32) {
        let sge = [Sge { addr: self.mr.addr() + 4096, length: len, lkey: self.mr.lkey() }];
        self.b.post_recv(&RecvWr { wr_id, sg_list: &sge }).unwrap();
    }

    /// `a` sends `data` (written at offset 0) to `b` through `ah`; returns its completion.
    fn send_a(&self, ah: &ib_core::Ah, data: &[u8], qkey: u32, imm: Option<u32>) -> Wc {
        self.mr.write(0, data).unwrap();
        let sge = [Sge { addr: self.mr.addr(), length: data.len() as u32, lkey: self.mr.lkey() }];
        let opcode = WrOpcode::UdSend { dest: ah.dest(self.b.qpn(), qkey), imm };
        self.a.post_send(&SendWr { wr_id: 77, sg_list: &sge, opcode, signaled: true, solicited: false }).unwrap();
        poll_n(&self.scq, 1)[0]
    }

    fn received(&self, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        self.mr.read(4096, &mut buf).unwrap();
        buf
    }

    /// Nothing arrives on the receive CQ within a settle time.
    fn nothing_received(&self) -> bool {
        std::thread::sleep(Duration::from_millis(20));
        let mut wc = [Wc::default(); 2];
        self.rcq.poll(&mut wc).unwrap() == 0
    }
}

#[test]
fn a_datagram_arrives_with_its_grh_source_qp_and_payload() {
    let r = rig();
    let ah = r.ah();
    r.recv_b(5, 256);
    let data: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
    let s = r.send_a(&ah, &data, QKEY, None);
    assert_eq!((s.status, s.wr_id, s.byte_len), (WcStatus::Success, 77, 200));
    let w = poll_n(&r.rcq, 1)[0];
    assert_eq!((w.status, w.wr_id, w.qp_num, w.src_qp), (WcStatus::Success, 5, r.b.qpn(), r.a.qpn()));
    assert!(w.grh, "IBV_WC_GRH");
    assert_eq!(w.byte_len as usize, GRH_LEN + 200, "byte_len counts the GRH");
    let buf = r.received(GRH_LEN + 200);
    assert_eq!(&buf[GRH_LEN..], &data[..]);
    let grh: [u8; GRH_LEN] = buf[..GRH_LEN].try_into().unwrap();
    let back = ah_attr_from_wc(&r.dev, 1, &w, &grh).expect("an AH from the completion");
    assert!(back.is_global);
    assert_eq!(back.grh.dgid, gid(&r.dev), "the sender's GID, as the reply's destination");
    assert_eq!(back.grh.sgid_index, 0);
    assert_eq!(back.grh.hop_limit, 64);
    assert_eq!(r.stats().ud_delivered, 1);
}

#[test]
fn immediate_data_and_the_own_qkey_bit() {
    let r = rig();
    let ah = r.ah();
    r.recv_b(1, 128);
    let s = r.send_a(&ah, b"hello", 0x8000_0000, Some(0xdead_beef));
    assert_eq!(s.status, WcStatus::Success);
    let w = poll_n(&r.rcq, 1)[0];
    assert_eq!((w.status, w.imm_data, w.byte_len), (WcStatus::Success, Some(0xdead_beef), 45));
    assert_eq!(&r.received(45)[GRH_LEN..], b"hello");
}

#[test]
fn a_wrong_qkey_or_no_receive_drops_the_datagram_and_the_sender_succeeds() {
    let r = rig();
    let ah = r.ah();
    r.recv_b(1, 128);
    assert_eq!(r.send_a(&ah, b"bad key", QKEY ^ 1, None).status, WcStatus::Success);
    assert!(r.nothing_received());
    assert_eq!(r.stats().ud_dropped_qkey, 1);
    // The receive WQE is still there for a datagram with the right key.
    assert_eq!(r.send_a(&ah, b"good", QKEY, None).status, WcStatus::Success);
    assert_eq!(poll_n(&r.rcq, 1)[0].byte_len, 44);
    // Now no receive is posted: dropped and counted.
    assert_eq!(r.send_a(&ah, b"lost", QKEY, None).status, WcStatus::Success);
    assert!(r.nothing_received());
    assert_eq!(r.stats().ud_dropped_no_recv, 1);
    // To a QPN nobody has: dropped, the sender still succeeds.
    let stranger = ah.dest(0xabcd, QKEY);
    let sge = [Sge { addr: r.mr.addr(), length: 4, lkey: r.mr.lkey() }];
    let wr = SendWr {
        wr_id: 9,
        sg_list: &sge,
        opcode: WrOpcode::UdSend { dest: stranger, imm: None },
        signaled: true,
        solicited: false,
    };
    r.a.post_send(&wr).unwrap();
    assert_eq!(poll_n(&r.scq, 1)[0].status, WcStatus::Success);
    assert_eq!(r.stats().ud_dropped_qp, 1);
}

#[test]
fn a_message_over_the_mtu_sends_nothing_and_completes_success() {
    let r = rig();
    let ah = r.ah();
    r.recv_b(1, 2048);
    let s = r.send_a(&ah, &[0x5a; 1025], QKEY, None);
    assert_eq!(s.status, WcStatus::Success, "IBTA C10-93.1.1: no packet, no error");
    assert!(r.nothing_received());
    assert_eq!(r.stats().ud_oversize_dropped, 1);
    // Exactly the MTU goes.
    assert_eq!(r.send_a(&ah, &[0xa5; 1024], QKEY, None).status, WcStatus::Success);
    let w = poll_n(&r.rcq, 1)[0];
    assert_eq!((w.status, w.byte_len), (WcStatus::Success, 1024 + GRH_LEN as u32));
}

#[test]
fn a_receive_buffer_too_short_for_grh_and_payload_completes_loc_len_err() {
    let r = rig();
    let ah = r.ah();
    r.recv_b(3, 60);
    assert_eq!(r.send_a(&ah, &[1; 64], QKEY, None).status, WcStatus::Success);
    let w = poll_n(&r.rcq, 1)[0];
    assert_eq!((w.wr_id, w.status), (3, WcStatus::LocLenErr));
}

#[test]
fn ud_and_rc_opcodes_do_not_mix_and_ah_checks_hold() {
    let r = rig();
    let sge = [Sge { addr: r.mr.addr(), length: 4, lkey: r.mr.lkey() }];
    let rc_send = SendWr { wr_id: 1, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
    assert!(matches!(r.a.post_send(&rc_send), Err(ib_core::Error::InvalidArgument(_))));
    let no_grh = AhAttr { port_num: 1, ..Default::default() };
    assert!(matches!(r.pd.create_ah(&no_grh), Err(ib_core::Error::InvalidArgument(_))));
    let ah = r.ah();
    let pd = r.pd;
    let (pd, e) = pd.dealloc().expect_err("a PD with an AH is busy");
    assert!(matches!(e, ib_core::Error::Busy(_)));
    drop(ah);
    drop((r.a, r.b, r.mr));
    pd.dealloc().map_err(|(_, e)| e).expect("dealloc once the AH is gone");
}

#[test]
fn max_ah_address_handles_and_no_more() {
    let r = rig();
    let max = r.dev.query_device().max_ah as usize;
    assert!(max > 0);
    let mut ahs: Vec<_> = (0..max).map(|_| r.ah()).collect();
    let grh = GlobalRoute { dgid: gid(&r.dev), ..Default::default() };
    let attr = AhAttr { grh, is_global: true, port_num: 1, ..Default::default() };
    assert!(matches!(r.pd.create_ah(&attr), Err(ib_core::Error::NoResources(_))), "AH {} of {max}", max + 1);
    ahs.pop();
    let again = r.pd.create_ah(&attr).expect("room again after a destroy");
    assert_eq!(again.attr(), &attr);
}

#[test]
fn datagrams_beyond_the_wire_budget_wait_their_turn_and_all_arrive() {
    let cfg = pvrdma_sim::SimConfig {
        device_packets_in_flight: 1,
        link_latency: Duration::from_millis(2),
        ..Default::default()
    };
    let (dev, sim) = hca::open_sim(cfg).expect("probe");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let mr = pd.alloc_mr(8192, access::LOCAL_WRITE).unwrap();
    let (a, b) = (ud_qp(&pd, &cq, &cq, QKEY), ud_qp(&pd, &cq, &cq, QKEY));
    let grh = GlobalRoute { dgid: gid(&dev), hop_limit: 64, ..Default::default() };
    let ah = pd.create_ah(&AhAttr { grh, is_global: true, port_num: 1, ..Default::default() }).unwrap();
    for i in 0..8u64 {
        let sge = [Sge { addr: mr.addr() + 1024 + i * 128, length: 128, lkey: mr.lkey() }];
        b.post_recv(&RecvWr { wr_id: 100 + i, sg_list: &sge }).unwrap();
    }
    for i in 0..8u64 {
        mr.write(i as usize * 8, &i.to_le_bytes()).unwrap();
        let sge = [Sge { addr: mr.addr() + i * 8, length: 8, lkey: mr.lkey() }];
        let opcode = WrOpcode::UdSend { dest: ah.dest(b.qpn(), QKEY), imm: None };
        a.post_send(&SendWr { wr_id: i, sg_list: &sge, opcode, signaled: true, solicited: false }).unwrap();
    }
    let wcs = poll_n(&cq, 16);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let sends: Vec<u64> = wcs.iter().filter(|w| !w.opcode.is_recv()).map(|w| w.wr_id).collect();
    assert_eq!(sends, (0..8).collect::<Vec<_>>(), "send completions in SQ order");
    for i in 0..8u64 {
        let mut got = [0u8; 8];
        mr.read(1024 + i as usize * 128 + GRH_LEN, &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), i);
    }
    assert!(sim.device().stats().sq_throttled > 0, "the budget held the SQ back");
}
