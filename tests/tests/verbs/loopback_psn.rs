//! The loopback port checks PSNs as a wire's responder does (one PSN per message there): a
//! request whose PSN is not the responder's next fails (`RETRY_EXC_ERR`, as a requester whose
//! sequence-error retries ran out) and reaches no receive WQE. Found by a user: two processes,
//! each with its own model and no RoCE port, exchanged connection data as `ibv_rc_pingpong`
//! does; each QP found *itself* under the peer's QPN and GID (the models are alike), so the
//! client "completed" every iteration talking to itself while the server waited for ever.

use ib_core::{access, Cq, Mr, Qp, RecvWr, SendWr, Sge, WcStatus, WrOpcode};
use std::time::Duration;
use tests::fixture::*;

/// Brings `q` to RTS towards `remote` with the given PSNs.
fn connect_psn(q: &Qp, remote: u32, gid: [u8; 16], rq_psn: u32, sq_psn: u32) {
    q.modify_to_init(1, access::LOCAL_WRITE).unwrap();
    q.modify_to_rtr(remote, gid, rq_psn, 1024).unwrap();
    q.modify_to_rts(sq_psn).unwrap();
}

/// `to` posts a receive, `from` sends 8 bytes; the send's status, and the receive's if it
/// completed (within a settle time after the send's completion).
fn exchange(from: &Qp, to: &Qp, scq: &Cq, rcq: &Cq, mr: &Mr, wr_id: u64) -> (WcStatus, Option<WcStatus>) {
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    let rsge = [Sge { addr: mr.addr() + 32, length: 8, lkey: mr.lkey() }];
    to.post_recv(&RecvWr { wr_id, sg_list: &rsge }).unwrap();
    let wr = SendWr { wr_id, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
    from.post_send(&wr).unwrap();
    let send = poll_n(scq, 1)[0].status;
    std::thread::sleep(Duration::from_millis(20));
    let mut wc = [ib_core::Wc::default(); 4];
    let n = rcq.poll(&mut wc).unwrap_or(0);
    (send, (n > 0).then(|| wc[0].status))
}

#[test]
fn a_qp_whose_peer_psns_disagree_fails_and_delivers_nothing() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    // Connected to itself as a misconnected process's QP is: it expects the peer's PSN 0x1234
    // but sends from its own, 0xabcde.
    let q = rc_qp(&pd, &scq, &rcq);
    connect_psn(&q, q.qpn(), gid(&dev), 0x1234, 0xabcde);
    assert_eq!(exchange(&q, &q, &scq, &rcq, &mr, 1), (WcStatus::RetryExcErr, Some(WcStatus::WrFlushErr)));
}

#[test]
fn psns_that_agree_carry_every_message_across_the_wrap() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(64, None).unwrap(), dev.create_cq(64, None).unwrap());
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    let (a, b) = (rc_qp(&pd, &scq, &rcq), rc_qp(&pd, &scq, &rcq));
    // As ibv_rc_pingpong connects: each end's receive PSN is the other's send PSN; a's PSNs wrap
    // past 2^24 - 1 on the way.
    let (pa, pb) = (0xff_fffe, 0x42);
    connect_psn(&a, b.qpn(), gid(&dev), pb, pa);
    connect_psn(&b, a.qpn(), gid(&dev), pa, pb);
    for i in 0..6 {
        assert_eq!(exchange(&a, &b, &scq, &rcq, &mr, i), (WcStatus::Success, Some(WcStatus::Success)), "a->b {i}");
        assert_eq!(exchange(&b, &a, &scq, &rcq, &mr, i), (WcStatus::Success, Some(WcStatus::Success)), "b->a {i}");
    }
    // A QP connected to itself with one PSN both ways (pyverbs's loopback test) works too.
    let c = rc_qp(&pd, &scq, &rcq);
    connect_psn(&c, c.qpn(), gid(&dev), 7, 7);
    assert_eq!(exchange(&c, &c, &scq, &rcq, &mr, 9), (WcStatus::Success, Some(WcStatus::Success)));
}
