//! The `ibv_qp_ex` API (`ibv_wr_start` ... `ibv_wr_complete`) through the C entry points: batches,
//! a batch with an error posting nothing, chains mixing inline and plain sends, and atomics posted
//! through `ibv_post_send` and through the `ibv_qp_ex` functions.

use super::*;

#[test]
fn the_qp_ex_api_posts_batches() {
    let fx = fixture();
    let ops = IBV_QP_EX_WITH_SEND
        | IBV_QP_EX_WITH_SEND_WITH_IMM
        | IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | IBV_QP_EX_WITH_RDMA_READ;
    let a = NonNull::new(create_ex(&fx, cap(8, 32), IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, ops))
        .expect("qp_ex");
    let b = create(&fx, cap(8, 0));
    connect(a, qpn(b), fx.gid);
    connect(b, qpn(a), fx.gid);
    let x = qpx(a);
    assert!(x.wr_atomic_write.is_none() && x.wr_set_ud_addr.is_none());
    assert!(x.wr_atomic_cmp_swp.is_some() && x.wr_atomic_fetch_add.is_some());
    for (i, off) in [(1u64, 10_000u64), (2, 10_100), (3, 10_200)] {
        let mut r = sge(&fx, off, 64);
        assert_eq!(recv(b, i, &mut r), 0);
    }
    fx.buf.write(0, b"by sge").unwrap();
    fx.buf.write(200, b"remote!").unwrap();
    let mut inl = *b"inline bytes";
    let list = [sge(&fx, 0, 3), sge(&fx, 3, 3)];
    // SAFETY: the QP's own functions on its ibv_qp_ex; every buffer outlives its call.
    unsafe {
        let xp: *mut ibv_qp_ex = x;
        (x.wr_start.unwrap())(xp);
        (*xp).wr_id = 100;
        (*xp).wr_flags = IBV_SEND_SIGNALED;
        (x.wr_send.unwrap())(xp);
        (x.wr_set_sge_list.unwrap())(xp, 2, list.as_ptr());
        (*xp).wr_id = 101;
        (x.wr_send_imm.unwrap())(xp, 0xabcdu32.to_be());
        (x.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr(), 2);
        (*xp).wr_id = 102;
        (*xp).wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        (x.wr_send.unwrap())(xp);
        (x.wr_set_inline_data.unwrap())(xp, inl.as_mut_ptr().cast(), inl.len());
        inl.fill(0);
        (*xp).wr_id = 103;
        (*xp).wr_flags = IBV_SEND_SIGNALED;
        (x.wr_rdma_write.unwrap())(xp, fx.rkey, fx.buf.addr() + 20_000);
        (x.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr() + 200, 7);
        (*xp).wr_id = 104;
        (x.wr_rdma_read.unwrap())(xp, fx.rkey, fx.buf.addr() + 200);
        (x.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr() + 30_000, 7);
        assert_eq!((x.wr_complete.unwrap())(xp), 0);
    }
    let wcs = poll(fx.cq, 8);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    for id in 100..=104 {
        assert!(wcs.iter().any(|w| w.wr_id == id), "send {id} completed: {wcs:?}");
    }
    let imm = wcs.iter().find(|w| w.wr_id == 2).expect("second receive");
    assert_eq!((imm.imm_data, imm.byte_len), (Some(0xabcd), 2));
    assert_eq!(read(&fx, 10_000, 6), b"by sge");
    assert_eq!(read(&fx, 10_200, 12), b"inline bytes");
    assert_eq!(read(&fx, 20_000, 7), b"remote!");
    assert_eq!(read(&fx, 30_000, 7), b"remote!");
}

#[test]
fn a_qp_ex_batch_with_an_error_posts_nothing() {
    let fx = fixture();
    let ops = IBV_QP_EX_WITH_SEND;
    let a = NonNull::new(create_ex(&fx, cap(8, 16), IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, ops))
        .expect("qp_ex");
    let b = create(&fx, cap(8, 0));
    connect(a, qpn(b), fx.gid);
    connect(b, qpn(a), fx.gid);
    let x = qpx(a);
    let mut r = sge(&fx, 5000, 64);
    assert_eq!(recv(b, 1, &mut r), 0);
    // Past the 32 bytes granted (16 asked, raised to the two SGEs' room).
    let long = [7u8; 33];
    // SAFETY: as in the test above.
    unsafe {
        let xp: *mut ibv_qp_ex = x;
        (x.wr_start.unwrap())(xp);
        (*xp).wr_id = 200;
        (*xp).wr_flags = IBV_SEND_SIGNALED;
        (x.wr_send.unwrap())(xp);
        (x.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr(), 4);
        (x.wr_send.unwrap())(xp);
        (x.wr_set_inline_data.unwrap())(xp, long.as_ptr() as *mut _, long.len());
        assert_eq!((x.wr_complete.unwrap())(xp), libc::ENOMEM, "inline data beyond max_inline_data");
        (x.wr_start.unwrap())(xp);
        (x.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr(), 4);
        assert_eq!((x.wr_complete.unwrap())(xp), libc::EINVAL, "a setter without a WR");
        (x.wr_start.unwrap())(xp);
        (x.wr_send.unwrap())(xp);
        (x.wr_abort.unwrap())(xp);
        (x.wr_start.unwrap())(xp);
        (*xp).wr_id = 201;
        (x.wr_send.unwrap())(xp);
        (x.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr(), 4);
        assert_eq!((x.wr_complete.unwrap())(xp), 0);
    }
    let wcs = poll(fx.cq, 2);
    assert!(wcs.iter().any(|w| w.wr_id == 201), "{wcs:?}");
    assert!(wcs.iter().all(|w| w.wr_id != 200), "the failed batch posted nothing: {wcs:?}");
}

#[test]
fn a_chain_mixes_inline_and_plain_sends() {
    let fx = fixture();
    let (a, b) = pair(&fx, cap(8, 32));
    for i in 0..4u64 {
        let mut r = sge(&fx, 40_000 + 100 * i, 64);
        assert_eq!(recv(b, 500 + i, &mut r), 0);
    }
    fx.buf.write(0, b"plain").unwrap();
    let mut texts = [*b"first", *b"secnd", *b"third"];
    let mut sgs: Vec<[ibv_sge; 1]> =
        texts.iter().map(|t| [ibv_sge { addr: t.as_ptr() as u64, length: 5, lkey: 0 }]).collect();
    sgs.push([sge(&fx, 0, 5)]);
    let mut wrs: Vec<ibv_send_wr> = sgs
        .iter_mut()
        .enumerate()
        .map(|(i, sg)| send_wr(i as u64, sg, IBV_WR_SEND, IBV_SEND_SIGNALED | if i < 3 { IBV_SEND_INLINE } else { 0 }))
        .collect();
    for i in 0..3 {
        let next: *mut ibv_send_wr = &mut wrs[i + 1];
        wrs[i].next = next;
    }
    let mut bad = null_mut();
    // SAFETY: a live QP; the chain outlives the call.
    assert_eq!(unsafe { post_send(a.as_ptr(), wrs.as_mut_ptr(), &mut bad) }, 0);
    texts.iter_mut().for_each(|t| t.fill(0));
    let wcs = poll(fx.cq, 8);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    for (i, want) in [b"first", b"secnd", b"third", b"plain"].iter().enumerate() {
        assert_eq!(read(&fx, 40_000 + 100 * i, 5), *want, "message {i}");
    }
}

#[test]
fn atomics_post_through_ibv_post_send_and_the_qp_ex_api() {
    let fx = fixture();
    // SAFETY: the fixture's PD, of this library.
    let pd = unsafe { crate::pd::pd(fx.pd) }.expect("PD");
    let target = pd.core.reg_buffer(&fx.buf, access::LOCAL_WRITE | access::REMOTE_ATOMIC).expect("atomic MR");
    let ops = IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    let a = NonNull::new(create_ex(&fx, cap(8, 0), IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, ops))
        .expect("qp_ex");
    let b = create(&fx, cap(8, 0));
    connect(a, qpn(b), fx.gid);
    connect(b, qpn(a), fx.gid);
    let mut grant = ibv_qp_attr { qp_state: 3, qp_access_flags: 15, ..Default::default() };
    assert_eq!(modify(b, &mut grant, STATE | 1 << 3), 0, "RTS -> RTS with REMOTE_ATOMIC");
    let word = fx.buf.addr() + 40_000;
    fx.buf.write(40_000, &100u64.to_le_bytes()).unwrap();
    let atomic = |compare_add, swap| ibv_send_wr_wr {
        atomic: ibv_send_wr_atomic { remote_addr: word, compare_add, swap, rkey: target.rkey() },
    };
    let mut sg = [sge(&fx, 41_000, 8)];
    let mut cas = send_wr(1, &mut sg, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_SEND_SIGNALED);
    cas.wr = atomic(100, 200);
    let mut sg2 = [sge(&fx, 41_008, 8)];
    let mut fadd = send_wr(2, &mut sg2, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_SIGNALED);
    fadd.wr = atomic(5, 0);
    cas.next = &mut fadd;
    assert_eq!(send(a, &mut cas), 0);
    // Issue 21 §3: IBV_SEND_INLINE on an atomic changes nothing (pvrdma has no inline data:
    // its SGE is the original value's), as rdma-core's provider posts it.
    let mut sg5 = [sge(&fx, 41_032, 8)];
    let mut inline = send_wr(5, &mut sg5, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    inline.wr = atomic(0, 0);
    assert_eq!(send(a, &mut inline), 0, "an atomic flagged inline");
    let x = qpx(a);
    // SAFETY: the QP's own functions on its ibv_qp_ex.
    unsafe {
        let xp: *mut ibv_qp_ex = x;
        (x.wr_start.unwrap())(xp);
        (*xp).wr_id = 3;
        (*xp).wr_flags = IBV_SEND_SIGNALED;
        (x.wr_atomic_fetch_add.unwrap())(xp, target.rkey(), word, 1);
        (x.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr() + 41_016, 8);
        (*xp).wr_id = 4;
        (x.wr_atomic_cmp_swp.unwrap())(xp, target.rkey(), word, 206, 7);
        (x.wr_set_sge.unwrap())(xp, fx.lkey, fx.buf.addr() + 41_024, 8);
        assert_eq!((x.wr_complete.unwrap())(xp), 0);
    }
    let mut wcs: Vec<ibv_wc> = poll(fx.cq, 5).iter().map(crate::cq::to_ibv_wc).collect();
    wcs.sort_by_key(|w| w.wr_id);
    let got: Vec<(u64, u32, u32, u32)> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect();
    let fadd = IBV_WC_FETCH_ADD;
    assert_eq!(
        got,
        [(1, 0, IBV_WC_COMP_SWAP, 8), (2, 0, fadd, 8), (3, 0, fadd, 8), (4, 0, IBV_WC_COMP_SWAP, 8), (5, 0, fadd, 8)]
    );
    let originals: Vec<u64> =
        (0..5).map(|k| u64::from_le_bytes(read(&fx, 41_000 + 8 * k, 8).try_into().unwrap())).collect();
    assert_eq!(originals, [100, 200, 205, 206, 205]);
    assert_eq!(read(&fx, 40_000, 8), 7u64.to_le_bytes());
}
