//! RC SEND/RECV between two QPs over the model's loopback port.

use ib_core::{WcOpcode, WcStatus, WrOpcode};
use tests::fixture::*;

#[test]
fn send_recv_delivers_the_payload() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(32, None).unwrap(), dev.create_cq(32, None).unwrap());
    let p = pair(&dev, &pd, (&scq, &rcq), (&scq, &rcq));
    let msg: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
    p.recv_b(11, 100, 4096);
    p.send_a(21, 0, &msg, WrOpcode::Send, false);
    let s = poll_n(&scq, 1)[0];
    assert_eq!((s.wr_id, s.status, s.opcode, s.qp_num), (21, WcStatus::Success, WcOpcode::Send, p.a.qpn()));
    let r = poll_n(&rcq, 1)[0];
    assert_eq!((r.wr_id, r.status, r.opcode), (11, WcStatus::Success, WcOpcode::Recv));
    // RC: no source QP (IBTA 11.4.2.1 defines it for UD), 0 as Linux rxe reports (issue 21 §5).
    assert_eq!((r.byte_len, r.qp_num, r.src_qp, r.imm_data), (1500, p.b.qpn(), 0, None));
    let mut got = vec![0u8; msg.len()];
    p.mr_b.read(100, &mut got).unwrap();
    assert_eq!(got, msg);
}

#[test]
fn send_with_immediate_and_many_messages() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(64, None).unwrap(), dev.create_cq(64, None).unwrap());
    let p = pair(&dev, &pd, (&scq, &rcq), (&scq, &rcq));
    p.recv_b(1, 0, 64);
    p.send_a(2, 0, b"imm", WrOpcode::SendWithImm(0x1234_5678), false);
    poll_n(&scq, 1);
    let r = poll_n(&rcq, 1)[0];
    assert_eq!((r.imm_data, r.byte_len), (Some(0x1234_5678), 3));
    // More messages than either queue holds, so both rings wrap.
    for i in 0..40u64 {
        p.recv_b(100 + i, 0, 64);
        p.send_a(200 + i, 0, &i.to_le_bytes(), WrOpcode::Send, false);
        assert_eq!(poll_n(&scq, 1)[0].wr_id, 200 + i);
        assert_eq!(poll_n(&rcq, 1)[0].wr_id, 100 + i);
        let mut b = [0u8; 8];
        p.mr_b.read(0, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), i);
    }
}

#[test]
fn user_context_qps_ring_their_own_page() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    p.recv_b(5, 0, 16);
    p.send_a(6, 0, b"from user", WrOpcode::Send, false);
    let wcs = poll_n(&cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(sim.device().stats().refused_doorbells, 0);
}

/// `ibv_post_send`/`ibv_post_recv` with a chain: the list is posted in order with one doorbell;
/// the first request that cannot be posted stops it (`bad_wr`), and those before it complete.
#[test]
fn a_list_posts_with_one_doorbell_and_stops_at_its_first_bad_request() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(64, None).unwrap(), dev.create_cq(64, None).unwrap());
    let p = pair(&dev, &pd, (&scq, &scq), (&rcq, &rcq));
    let doorbells = || sim.device().stats().doorbells;
    let rsge = [ib_core::Sge { addr: p.mr_b.addr(), length: 64, lkey: p.mr_b.lkey() }];
    let recvs: Vec<_> = (0..8).map(|i| ib_core::RecvWr { wr_id: i, sg_list: &rsge }).collect();
    let before = doorbells();
    p.b.post_recv_list(&recvs).unwrap();
    assert_eq!(doorbells() - before, 1, "eight receives, one RECV doorbell");
    assert_eq!(p.a.post_send_list(&[]), Ok(()));
    assert_eq!(doorbells() - before, 1, "an empty list rings nothing");
    let sge = [ib_core::Sge { addr: p.mr_a.addr(), length: 8, lkey: p.mr_a.lkey() }];
    let three = [sge[0]; 3];
    let send =
        |wr_id, sg_list| ib_core::SendWr { wr_id, sg_list, opcode: WrOpcode::Send, signaled: true, solicited: false };
    let sends = [send(10, &sge[..]), send(11, &sge[..]), send(12, &three[..]), send(13, &sge[..])];
    let Err((bad, e)) = p.a.post_send_list(&sends) else { panic!("three SGEs on a QP of two") };
    assert_eq!(bad, 2, "bad_wr is the third request");
    assert!(matches!(e, ib_core::Error::InvalidArgument(_)), "{e:?}");
    assert_eq!(doorbells() - before, 2, "the two before it went with one SEND doorbell");
    let done: Vec<u64> = poll_n(&scq, 2).iter().map(|w| w.wr_id).collect();
    assert_eq!(done, vec![10, 11]);
    assert_eq!(poll_n(&rcq, 2).iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1]);
    // More than the SQ holds: the list stops where the queue is full.
    let many: Vec<_> = (0..20).map(|i| send(100 + i, &sge[..])).collect();
    let depth = cap().max_send_wr as usize;
    let r = p.a.post_send_list(&many);
    assert!(matches!(r, Err((k, ib_core::Error::QueueFull)) if k >= depth), "{r:?}");
}
