//! The UD row of the real-QEMU differential (`tests::differential`): two UD QPs of one device,
//! an address handle to the device's own GID, SEND and SEND with immediate, the receive's
//! source QP, GRH flag, `byte_len` with the 40 GRH bytes, the GRH area and the payload after
//! it, and a datagram with the wrong Q_Key dropped. QEMU 7.2 carries UD through its backend
//! (`hw/rdma/rdma_backend.c`: a backend UD QP, an AH per destination GID, the WQE's remote QPN
//! and Q_Key; every WQE a plain SEND), so the sides agree but for the named differences.

use crate::differential::{Difference, Target};
use crate::fixture::gid;
use ib_core::{
    access, AhAttr, GlobalRoute, Mr, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
    GRH_LEN,
};

const QKEY: u32 = 0x1111_0001;

fn ud_qp(t: &Target, pd: &ib_core::Pd, cq: &ib_core::Cq) -> Qp {
    let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr =
        QpInitAttr { send_cq: cq, recv_cq: cq, cap, qp_type: QpType::Ud, sq_sig_all: false, qp_context: 0, srq: None };
    let q = pd.create_qp(&attr).unwrap_or_else(|e| panic!("{:?}: create a UD QP: {e}", t.side));
    q.modify_ud_to_rts(1, QKEY, 0).unwrap_or_else(|e| panic!("{:?}: UD to RTS: {e}", t.side));
    q
}

fn send(q: &Qp, mr: &Mr, dest: ib_core::UdDest, data: &[u8], imm: Option<u32>) {
    mr.write(0, data).unwrap();
    let sge = [Sge { addr: mr.addr(), length: data.len() as u32, lkey: mr.lkey() }];
    let wr =
        SendWr { wr_id: 50, sg_list: &sge, opcode: WrOpcode::UdSend { dest, imm }, signaled: true, solicited: false };
    q.post_send(&wr).unwrap();
}

fn recv(q: &Qp, mr: &Mr, wr_id: u64) {
    let sge = [Sge { addr: mr.addr() + 1024, length: 1024, lkey: mr.lkey() }];
    q.post_recv(&RecvWr { wr_id, sg_list: &sge }).unwrap();
}

/// UD SEND/RECV between two QPs of the device through an AH to its own GID (index 0).
pub fn ud_send_recv(t: &Target) {
    let dev = &t.dev;
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(32, None).unwrap();
    let (a, b) = (ud_qp(t, &pd, &cq), ud_qp(t, &pd, &cq));
    let (mr_a, mr_b) =
        (pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap(), pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap());
    let me = gid(dev);
    let grh = GlobalRoute { dgid: me, sgid_index: 0, hop_limit: 64, traffic_class: 0, flow_label: 0 };
    let ah = pd.create_ah(&AhAttr { grh, is_global: true, port_num: 1, ..Default::default() }).unwrap();

    recv(&b, &mr_b, 7);
    send(&a, &mr_a, ah.dest(b.qpn(), QKEY), b"datagram", None);
    let mut wcs = t.poll_n(&cq, 2);
    wcs.sort_by_key(|w| w.opcode.is_recv());
    let (s, r) = (wcs[0], wcs[1]);
    assert_eq!(
        (s.wr_id, s.status, s.opcode, s.qp_num),
        (50, WcStatus::Success, WcOpcode::Send, a.qpn()),
        "{:?}",
        t.side
    );
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.qp_num),
        (7, WcStatus::Success, WcOpcode::Recv, b.qpn()),
        "{:?}",
        t.side
    );
    assert_eq!((r.src_qp, r.grh, r.byte_len), (a.qpn(), true, GRH_LEN as u32 + 8), "{:?}: {r:?}", t.side);
    let mut area = [0u8; GRH_LEN + 8];
    mr_b.read(1024, &mut area).unwrap();
    assert_eq!(&area[GRH_LEN..], b"datagram", "{:?}: payload after the GRH area", t.side);
    if t.side.differs(Difference::UdGrhFromBackend) {
        assert_eq!(&area[..20], &[0u8; 20], "{:?}", t.side);
        assert_eq!((area[20], area[29]), (0x45, 17), "{:?}: IPv4 header, UDP", t.side);
        assert_eq!((&area[32..36], &area[36..40]), (&me[12..], &me[12..]), "{:?}: addresses", t.side);
    } else {
        assert_eq!((area[0] >> 4, area[6]), (6, 0x1b), "{:?}: an IB GRH for the RoCE v1 GID", t.side);
        assert_eq!((&area[8..24], &area[24..40]), (&me[..], &me[..]), "{:?}: GIDs", t.side);
    }

    // A datagram with another Q_Key is dropped: the receive stays for the next one.
    recv(&b, &mr_b, 8);
    send(&a, &mr_a, ah.dest(b.qpn(), QKEY ^ 0x10), b"wrong key", None);
    assert_eq!(t.poll_n(&cq, 1)[0].status, WcStatus::Success, "{:?}: UD sends complete", t.side);
    send(&a, &mr_a, ah.dest(b.qpn(), QKEY), b"right key", Some(0xabcd));
    let mut wcs = t.poll_n(&cq, 2);
    wcs.sort_by_key(|w| w.opcode.is_recv());
    let r = wcs[1];
    assert_eq!((r.wr_id, r.byte_len), (8, GRH_LEN as u32 + 9), "{:?}", t.side);
    let imm = if t.side.differs(Difference::SendWqeFlattened) { None } else { Some(0xabcd) };
    assert_eq!(r.imm_data, imm, "{:?}: immediate data", t.side);
    let mut got = [0u8; 9];
    mr_b.read(1024 + GRH_LEN, &mut got).unwrap();
    assert_eq!(&got, b"right key", "{:?}", t.side);
}
