//! What `ibv_poll_cq` reports for each operation, through the C entry points, on the loopback
//! port and on the RoCE v2 port alike (issue 21 §5, checked against `ibv_poll_cq(3)` and Linux
//! rxe's `make_send_cqe` / `do_complete`): `opcode`, `byte_len`, `wc_flags`, `imm_data` (the
//! program's big-endian bytes end to end), `qp_num` and `src_qp` of both sides of every RC
//! operation and of UD, zero-length operations, and error and flushed completions.

use crate::ports::*;
use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;

/// `enum ibv_wc_status` values.
const IBV_WC_SUCCESS: u32 = 0;
const IBV_WC_WR_FLUSH_ERR: u32 = 5;
const IBV_WC_REM_ACCESS_ERR: u32 = 10;

/// Immediate data as a program writes it (`htonl(0x01020304)`): bytes 1, 2, 3, 4 in memory.
const IMM: u32 = u32::from_ne_bytes([1, 2, 3, 4]);

/// The fields compared: (opcode, byte_len, wc_flags, imm_data, qp_num, src_qp).
fn fields(w: &ibv_wc) -> (u32, u32, u32, u32, u32, u32) {
    assert_eq!((w.status, w.vendor_err), (IBV_WC_SUCCESS, 0), "wr_id {}", w.wr_id);
    (w.opcode, w.byte_len, w.wc_flags, w.imm_data, w.qp_num, w.src_qp)
}

/// Posts `wr` on `p.qa` (RC), for `opcode` on `len` bytes at offset 0 of `a`'s buffer, RDMA at
/// offset 16384 of `b`'s, with [`IMM`].
fn post_op(p: &RcPair, wr_id: u64, opcode: u32, len: u32) {
    let mut s = p.a.sge(0, len);
    let mut w = send_wr(wr_id, opcode, &mut s, 1);
    w.imm_data = IMM;
    w.wr.rdma = ibv_send_wr_rdma { remote_addr: p.b.addr(16384), rkey: p.b.rkey() };
    if matches!(opcode, IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD) {
        w.wr.atomic = ibv_send_wr_atomic { remote_addr: p.b.addr(16384), compare_add: 5, swap: 9, rkey: p.b.rkey() };
    }
    assert_eq!(post_send(p.qa, &mut w), 0, "post opcode {opcode}");
}

/// The sender's completion of each RC operation: the WR's length (8 for an atomic), the
/// operation's opcode (RDMA_WRITE for a WRITE with immediate), `IBV_WC_WITH_IMM` for SEND and
/// WRITE with immediate with `imm_data` 0, `src_qp` 0 — as rxe's `make_send_cqe`.
#[test]
fn the_sender_completes_every_rc_operation_as_rxe_does() {
    run(|| {
        for port in PORTS {
            let p = RcPair::new(port);
            let qa = qpn(p.qa);
            let cases = [
                (IBV_WR_SEND, 100, (IBV_WC_SEND, 100, 0)),
                (IBV_WR_SEND_WITH_IMM, 100, (IBV_WC_SEND, 100, IBV_WC_WITH_IMM)),
                (IBV_WR_RDMA_WRITE, 300, (IBV_WC_RDMA_WRITE, 300, 0)),
                (IBV_WR_RDMA_WRITE_WITH_IMM, 300, (IBV_WC_RDMA_WRITE, 300, IBV_WC_WITH_IMM)),
                (IBV_WR_RDMA_READ, 2000, (IBV_WC_RDMA_READ, 2000, 0)),
                (IBV_WR_ATOMIC_CMP_AND_SWP, 8, (IBV_WC_COMP_SWAP, 8, 0)),
                (IBV_WR_ATOMIC_FETCH_AND_ADD, 8, (IBV_WC_FETCH_ADD, 8, 0)),
            ];
            for (i, (opcode, len, (wc_opcode, byte_len, flags))) in cases.into_iter().enumerate() {
                let mut rs = p.b.sge(8192, 4096);
                assert_eq!(post_recv(p.qb, 900 + i as u64, &mut rs, 1), 0);
                post_op(&p, i as u64, opcode, len);
                let w = poll_n(p.a.scq, 1)[0];
                assert_eq!(w.wr_id, i as u64);
                assert_eq!(fields(&w), (wc_opcode, byte_len, flags, 0, qa, 0), "{port:?}: opcode {opcode}");
            }
            // The receives the SENDs and the WRITE with immediate took; the rest stay posted.
            assert_eq!(poll_n(p.b.rcq, 3).len(), 3);
            p.close();
        }
    });
}

/// The receiver's completion of SEND, SEND with immediate and RDMA WRITE with immediate: opcode
/// RECV or RECV_RDMA_WITH_IMM, `byte_len` the bytes received (a WRITE with immediate: the bytes
/// written, not the receive buffer's), `IBV_WC_GRH` (rxe sets it on every RoCE receive),
/// `IBV_WC_WITH_IMM` with the sender's bytes unchanged, the receiving QP, `src_qp` 0 (defined
/// for UD only; rxe reports 0).
#[test]
fn the_receiver_completes_sends_and_writes_with_immediate_as_rxe_does() {
    run(|| {
        for port in PORTS {
            let p = RcPair::new(port);
            let qb = qpn(p.qb);
            let cases = [
                (IBV_WR_SEND, 100, (IBV_WC_RECV, 100, IBV_WC_GRH, 0)),
                (IBV_WR_SEND_WITH_IMM, 1500, (IBV_WC_RECV, 1500, IBV_WC_GRH | IBV_WC_WITH_IMM, IMM)),
                (
                    IBV_WR_RDMA_WRITE_WITH_IMM,
                    3000,
                    (IBV_WC_RECV_RDMA_WITH_IMM, 3000, IBV_WC_GRH | IBV_WC_WITH_IMM, IMM),
                ),
            ];
            for (i, (opcode, len, want)) in cases.into_iter().enumerate() {
                // A small receive buffer: a WRITE with immediate does not scatter into it.
                let mut rs = p.b.sge(8192, if opcode == IBV_WR_RDMA_WRITE_WITH_IMM { 4 } else { 4096 });
                assert_eq!(post_recv(p.qb, 50 + i as u64, &mut rs, 1), 0);
                post_op(&p, i as u64, opcode, len);
                poll_n(p.a.scq, 1);
                let w = poll_n(p.b.rcq, 1)[0];
                assert_eq!(w.wr_id, 50 + i as u64);
                let (op, byte_len, flags, imm) = want;
                assert_eq!(fields(&w), (op, byte_len, flags, imm, qb, 0), "{port:?}: opcode {opcode}");
                assert_eq!(w.imm_data.to_ne_bytes(), if imm == 0 { [0; 4] } else { [1, 2, 3, 4] }, "network order");
            }
            p.close();
        }
    });
}

/// A UD send and its receive: the sender's `byte_len` is the payload (with `IBV_WC_WITH_IMM` for
/// SEND with immediate); the receiver's counts the 40-byte GRH area, says `IBV_WC_GRH` and the
/// sender's QP number.
#[test]
fn ud_sends_and_receives_complete_as_rxe_does() {
    run(|| {
        for port in PORTS {
            let (a, b) = sides(port);
            let (ua, ub) = (a.qp(IBV_QPT_UD, null_mut()), b.qp(IBV_QPT_UD, null_mut()));
            ud_rts(ua);
            ud_rts(ub);
            let mut attr = a.ah_attr(&b);
            // SAFETY: `a`'s PD; the attributes are ours.
            let ah = unsafe { ibv_create_ah(a.pd, &mut attr) };
            assert!(!ah.is_null());
            for (i, (opcode, flags)) in
                [(IBV_WR_SEND, 0), (IBV_WR_SEND_WITH_IMM, IBV_WC_WITH_IMM)].into_iter().enumerate()
            {
                let mut rs = b.sge(8192, 4096);
                assert_eq!(post_recv(ub, 70 + i as u64, &mut rs, 1), 0);
                let mut s = a.sge(0, 500);
                let mut w = send_wr(i as u64, opcode, &mut s, 1);
                w.imm_data = IMM;
                w.wr.ud = ibv_send_wr_ud { ah, remote_qpn: qpn(ub), remote_qkey: QKEY };
                assert_eq!(post_send(ua, &mut w), 0);
                let s = poll_n(a.scq, 1)[0];
                assert_eq!(fields(&s), (IBV_WC_SEND, 500, flags, 0, qpn(ua), 0), "{port:?}: sender, opcode {opcode}");
                let r = poll_n(b.rcq, 1)[0];
                let imm = if flags == 0 { 0 } else { IMM };
                assert_eq!(
                    fields(&r),
                    (IBV_WC_RECV, 540, IBV_WC_GRH | flags, imm, qpn(ub), qpn(ua)),
                    "{port:?}: receiver"
                );
            }
            // SAFETY: an AH of ours, no WR uses it any more.
            assert_eq!(unsafe { ibv_destroy_ah(ah) }, 0);
            destroy_qp(ua);
            destroy_qp(ub);
            a.close();
            b.close();
        }
    });
}

/// Zero-length operations (IBTA C9-88: a zero-length RDMA operation needs no valid address or
/// R_Key, and rxe checks none): SENDs with no SGE and with one SGE of length 0, WRITE, WRITE
/// with immediate and READ of 0 bytes under an R_Key that names nothing, each received by a
/// WQE with no SGE; every completion succeeds with `byte_len` 0.
#[test]
fn zero_length_operations_succeed_with_byte_len_0() {
    run(|| {
        for port in PORTS {
            let p = RcPair::new(port);
            let mut empty = p.a.sge(0, 0);
            empty.lkey = 0xdead_beef;
            let cases = [
                (IBV_WR_SEND, 0, Some((IBV_WC_RECV, IBV_WC_GRH))),
                (IBV_WR_SEND, 1, Some((IBV_WC_RECV, IBV_WC_GRH))),
                (IBV_WR_SEND_WITH_IMM, 0, Some((IBV_WC_RECV, IBV_WC_GRH | IBV_WC_WITH_IMM))),
                (IBV_WR_RDMA_WRITE, 0, None),
                (IBV_WR_RDMA_WRITE_WITH_IMM, 1, Some((IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_GRH | IBV_WC_WITH_IMM))),
                (IBV_WR_RDMA_READ, 0, None),
            ];
            for (i, (opcode, num_sge, recv)) in cases.into_iter().enumerate() {
                if recv.is_some() {
                    assert_eq!(post_recv(p.qb, 40 + i as u64, null_mut(), 0), 0);
                }
                let mut w = send_wr(i as u64, opcode, &mut empty, num_sge);
                w.imm_data = IMM;
                w.wr.rdma = ibv_send_wr_rdma { remote_addr: 0, rkey: 0x00de_ad00 };
                assert_eq!(post_send(p.qa, &mut w), 0);
                let s = poll_n(p.a.scq, 1)[0];
                let flags = if matches!(opcode, IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM) {
                    IBV_WC_WITH_IMM
                } else {
                    0
                };
                let op = match opcode {
                    IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
                    IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
                    _ => IBV_WC_SEND,
                };
                assert_eq!(fields(&s), (op, 0, flags, 0, qpn(p.qa), 0), "{port:?}: case {i}");
                if let Some((op, flags)) = recv {
                    let r = poll_n(p.b.rcq, 1)[0];
                    let imm = if flags & IBV_WC_WITH_IMM != 0 { IMM } else { 0 };
                    assert_eq!(fields(&r), (op, 0, flags, imm, qpn(p.qb), 0), "{port:?}: case {i} received");
                }
            }
            p.close();
        }
    });
}

/// An error completion carries only what `ibv_poll_cq(3)` says is valid — `wr_id`, `status`,
/// `qp_num` — and zeros elsewhere (opcode `IBV_WC_SEND`, `byte_len` 0, no flags), as rxe
/// reports one: the failed WRITE (remote access error), the SEND flushed behind it, and the
/// receive flushed when the responder's QP went to ERR.
#[test]
fn error_and_flushed_completions_carry_wr_id_status_and_qp_num_only() {
    run(|| {
        for port in PORTS {
            let p = RcPair::new(port);
            let mut rs = p.b.sge(8192, 64);
            assert_eq!(post_recv(p.qb, 30, &mut rs, 1), 0);
            let mut s = p.a.sge(0, 100);
            let mut write = send_wr(31, IBV_WR_RDMA_WRITE_WITH_IMM, &mut s, 1);
            write.imm_data = IMM;
            write.wr.rdma = ibv_send_wr_rdma { remote_addr: p.b.addr(0), rkey: p.b.rkey() ^ 0x100 };
            let mut send = send_wr(32, IBV_WR_SEND_WITH_IMM, &mut s, 1);
            write.next = &mut send;
            assert_eq!(post_send(p.qa, &mut write), 0);
            let sent = poll_n(p.a.scq, 2);
            let got: Vec<_> = sent.iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect();
            assert_eq!(got, [(31, IBV_WC_REM_ACCESS_ERR, qpn(p.qa)), (32, IBV_WC_WR_FLUSH_ERR, qpn(p.qa))], "{port:?}");
            // The responder's QP went to ERR (IBTA Class C): its receive is flushed.
            let r = poll_n(p.b.rcq, 1)[0];
            assert_eq!((r.wr_id, r.status, r.qp_num), (30, IBV_WC_WR_FLUSH_ERR, qpn(p.qb)), "{port:?}");
            for w in sent.iter().chain([&r]) {
                let rest = (w.opcode, w.byte_len, w.wc_flags, w.imm_data, w.src_qp, w.vendor_err);
                assert_eq!(rest, (IBV_WC_SEND, 0, 0, 0, 0, 0), "{port:?}: wr_id {}", w.wr_id);
            }
            // Posted in ERR: flushed the same way.
            assert_eq!(post_recv(p.qb, 33, &mut rs, 1), 0);
            let r = poll_n(p.b.rcq, 1)[0];
            assert_eq!(
                (r.wr_id, r.status, r.opcode, r.byte_len, r.wc_flags),
                (33, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, 0)
            );
            p.close();
        }
    });
}
