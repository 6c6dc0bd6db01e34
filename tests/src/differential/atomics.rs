//! The atomics row of the real-QEMU differential (`tests::differential`): what each device does
//! with an ATOMIC FETCH ADD WQE (IBTA 9.4.5) between two RC QPs of one device, and the atomic
//! caps it reports. QEMU 7.2 (`hw/rdma/vmw/pvrdma_qp_ops.c` and `hw/rdma/rdma_backend.c`) hands
//! every send WQE to its backend as `IBV_WR_SEND` and completes it as `IBV_WC_SEND`, and its DSR
//! caps leave `atomic_ops` 0: see [`Difference::AtomicsAsSend`] and [`Difference::NoAtomicCaps`].

use crate::differential::{Difference, Target};
use crate::fixture::rc_qp;
use ib_core::{access, AtomicCap, Qp, RecvWr, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};

/// INIT (with remote atomic access) -> RTR -> RTS towards `remote`.
fn connect_atomic(q: &Qp, remote: u32, gid: [u8; 16]) {
    q.modify_to_init(1, access::LOCAL_WRITE | access::REMOTE_ATOMIC).expect("INIT");
    q.modify_to_rtr(remote, gid, 0, 1024).expect("RTR");
    q.modify_to_rts(0).expect("RTS");
}

/// One FETCH ADD of 2 onto a word holding 40, with a receive WQE posted at the responder (which
/// only QEMU consumes).
pub fn atomics(t: &Target) {
    let dev = &t.dev;
    let caps = dev.query_device().atomic_cap;
    let want = if t.side.differs(Difference::NoAtomicCaps) { AtomicCap::None } else { AtomicCap::Hca };
    assert_eq!(caps, want, "{:?}: atomic_cap", t.side);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let (a, b) = (rc_qp(&pd, &cq, &cq), rc_qp(&pd, &cq, &cq));
    let gid = crate::fixture::gid(dev);
    connect_atomic(&a, b.qpn(), gid);
    connect_atomic(&b, a.qpn(), gid);
    let res = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let target = pd.alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_ATOMIC).unwrap();
    let inbox = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    target.write(0, &40u64.to_le_bytes()).unwrap();
    res.write(0, b"8 bytes!").unwrap();
    let rsge = [Sge { addr: inbox.addr(), length: 64, lkey: inbox.lkey() }];
    b.post_recv(&RecvWr { wr_id: 7, sg_list: &rsge }).unwrap();
    let sge = [Sge { addr: res.addr(), length: 8, lkey: res.lkey() }];
    let op = WrOpcode::AtomicFetchAdd { remote_addr: target.addr(), rkey: target.rkey(), add: 2 };
    a.post_send(&SendWr { wr_id: 9, sg_list: &sge, opcode: op, signaled: true, solicited: false }).unwrap();
    let word = |mr: &ib_core::Mr| {
        let mut w = [0u8; 8];
        mr.read(0, &mut w).unwrap();
        w
    };
    if t.side.differs(Difference::AtomicsAsSend) {
        let mut wcs = t.poll_n(&cq, 2);
        wcs.sort_by_key(|w| w.wr_id);
        let (recv, send) = (wcs[0], wcs[1]);
        assert_eq!((recv.wr_id, recv.status, recv.opcode, recv.byte_len), (7, WcStatus::Success, WcOpcode::Recv, 8));
        assert_eq!(&word(&inbox), b"8 bytes!", "{:?}: the SGE went as a SEND", t.side);
        assert_eq!((send.wr_id, send.status), (9, WcStatus::GeneralErr), "{:?}: a SEND CQE for an atomic", t.side);
        assert_eq!(u64::from_le_bytes(word(&target)), 40, "{:?}: memory untouched", t.side);
        assert_eq!(&word(&res), b"8 bytes!", "{:?}: no original value", t.side);
    } else {
        let w = t.poll_n(&cq, 1)[0];
        assert_eq!(
            (w.wr_id, w.status, w.opcode, w.byte_len),
            (9, WcStatus::Success, WcOpcode::FetchAdd, 8),
            "{:?}",
            t.side
        );
        assert_eq!(u64::from_le_bytes(word(&res)), 40, "{:?}: the original value", t.side);
        assert_eq!(u64::from_le_bytes(word(&target)), 42, "{:?}", t.side);
        std::thread::sleep(t.settle);
        assert_eq!(cq.poll(&mut [ib_core::Wc::default(); 2]).unwrap(), 0, "{:?}: no receive consumed", t.side);
    }
}
