//! RC SEND/RECV and a user context's data path, on each side.

use super::{Difference, Target};
use crate::fixture::pair;
use ib_core::Wc;
use ib_core::{WcOpcode, WcStatus, WrOpcode};

/// RC SEND/RECV between two QPs through the kernel's UAR page: payload, completion fields, send
/// with immediate, and enough messages that both rings wrap.
pub fn rc_send_recv(t: &Target) {
    let dev = &t.dev;
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(32, None).unwrap(), dev.create_cq(32, None).unwrap());
    let p = pair(dev, &pd, (&scq, &rcq), (&scq, &rcq));
    let msg: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
    p.recv_b(11, 100, 4096);
    p.send_a(21, 0, &msg, WrOpcode::Send, false);
    let s = t.poll_n(&scq, 1)[0];
    assert_eq!((s.wr_id, s.status, s.opcode, s.qp_num), (21, WcStatus::Success, WcOpcode::Send, p.a.qpn()));
    let r = t.poll_n(&rcq, 1)[0];
    assert_eq!((r.wr_id, r.status, r.opcode), (11, WcStatus::Success, WcOpcode::Recv), "{:?}", t.side);
    assert_eq!((r.byte_len, r.qp_num, r.imm_data), (1500, p.b.qpn(), None), "{:?}", t.side);
    // IBTA defines a completion's source QP only for UD: the model reports 0 for an RC receive,
    // as QEMU passes on its backend's (rxe's) value (issue 21 §5).
    assert_eq!(r.src_qp, 0, "{:?}: RC source QP", t.side);
    let mut got = vec![0u8; msg.len()];
    p.mr_b.read(100, &mut got).unwrap();
    assert_eq!(got, msg, "{:?}: payload", t.side);

    p.recv_b(1, 0, 64);
    p.send_a(2, 0, b"imm", WrOpcode::SendWithImm(0x1234_5678), false);
    t.poll_n(&scq, 1);
    let r = t.poll_n(&rcq, 1)[0];
    if t.side.differs(Difference::SendWqeFlattened) {
        assert_eq!((r.opcode, r.imm_data, r.byte_len), (WcOpcode::Recv, None, 3), "{:?}: {r:?}", t.side);
    } else {
        assert_eq!((r.opcode, r.imm_data, r.byte_len), (WcOpcode::Recv, Some(0x1234_5678), 3));
    }

    // An unsignaled send, then a signaled one: IBTA completes only the signaled one.
    p.recv_b(3, 0, 64);
    p.recv_b(4, 0, 64);
    p.mr_a.write(0, b"quiet").unwrap();
    let sge = [ib_core::Sge { addr: p.mr_a.addr(), length: 5, lkey: p.mr_a.lkey() }];
    let quiet = ib_core::SendWr { wr_id: 5, sg_list: &sge, opcode: WrOpcode::Send, signaled: false, solicited: false };
    p.a.post_send(&quiet).unwrap();
    p.send_a(6, 0, b"loud", WrOpcode::Send, false);
    t.poll_n(&rcq, 2);
    std::thread::sleep(t.settle);
    let mut wc = [Wc::default(); 4];
    let n = scq.poll(&mut wc).unwrap();
    let ids: Vec<u64> = wc[..n].iter().map(|w| w.wr_id).collect();
    if t.side.differs(Difference::SendWqeFlattened) {
        assert_eq!(ids, [5, 6], "{:?}: QEMU signals every send", t.side);
    } else {
        assert_eq!(ids, [6], "{:?}", t.side);
    }

    // More messages than either queue (16) holds, so SQ, RQ and both CQ rings wrap.
    for i in 0..40u64 {
        p.recv_b(100 + i, 0, 64);
        p.send_a(200 + i, 0, &i.to_le_bytes(), WrOpcode::Send, false);
        assert_eq!(t.poll_n(&scq, 1)[0].wr_id, 200 + i);
        assert_eq!(t.poll_n(&rcq, 1)[0].wr_id, 100 + i);
        let mut b = [0u8; 8];
        p.mr_b.read(0, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), i);
    }
}

/// RC SEND/RECV of a user context's QPs, rung through the context's own UAR page.
pub fn user_context_data_path(t: &Target) {
    let dev = &t.dev;
    let ctx = dev.alloc_ucontext().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    p.recv_b(5, 0, 16);
    p.send_a(6, 0, b"from user", WrOpcode::Send, false);
    let wcs = t.poll_n(&cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{:?}: {wcs:?}", t.side);
    let mut b = [0u8; 9];
    p.mr_b.read(0, &mut b).unwrap();
    assert_eq!(&b, b"from user");
    assert_eq!(t.refused_doorbells(), 0);
}
