//! MRs over the consumer's own memory (`ibv_reg_mr(pd, addr, length, access)`): the model maps the
//! consumer's pages into its device address space, SGEs and the MR's address space are the
//! consumer's own addresses, and the consumer reads what arrived straight from its buffer.

use ib_core::{
    access, Error, QpAttr, QpAttrMask, QpState, RecvWr, SendWr, Sge, UserBuffer, UserMemory, WcStatus, WrOpcode,
};
use tests::fixture::*;

#[test]
fn a_message_goes_from_one_buffer_to_another_at_their_own_addresses() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let (a, b) = (rc_qp(&pd, &cq, &cq), rc_qp(&pd, &cq, &cq));
    connect(&a, b.qpn(), gid(&dev));
    connect(&b, a.qpn(), gid(&dev));
    let (src, dst) = (UserBuffer::new(3 * 4096).unwrap(), UserBuffer::new(3 * 4096).unwrap());
    let (smr, dmr) =
        (pd.reg_buffer(&src, access::LOCAL_WRITE).unwrap(), pd.reg_buffer(&dst, access::LOCAL_WRITE).unwrap());
    assert_eq!((smr.addr(), dmr.addr()), (src.addr(), dst.addr()), "the MR's addresses are the buffer's");
    let msg: Vec<u8> = (0..6000u32).map(|i| (i * 13) as u8).collect();
    src.write(4000, &msg).unwrap(); // across a page boundary
    let rsge = [Sge { addr: dst.addr() + 5000, length: 6000, lkey: dmr.lkey() }];
    b.post_recv(&RecvWr { wr_id: 1, sg_list: &rsge }).unwrap();
    let ssge = [Sge { addr: src.addr() + 4000, length: 6000, lkey: smr.lkey() }];
    a.post_send(&SendWr { wr_id: 2, sg_list: &ssge, opcode: WrOpcode::Send, signaled: true, solicited: false })
        .unwrap();
    let wcs = poll_n(&cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let mut got = vec![0u8; 6000];
    dst.read(5000, &mut got).unwrap();
    assert_eq!(got, msg, "the payload is in the consumer's buffer");
    // An SGE outside the MR is the device's to refuse: a completion with an error, no write.
    let outside = [Sge { addr: dst.addr() + 3 * 4096 - 4, length: 8, lkey: dmr.lkey() }];
    b.post_recv(&RecvWr { wr_id: 3, sg_list: &outside }).unwrap();
    a.post_send(&SendWr { wr_id: 4, sg_list: &ssge, opcode: WrOpcode::Send, signaled: true, solicited: false })
        .unwrap();
    let wcs = poll_n(&cq, 2);
    assert!(wcs.iter().any(|w| w.wr_id == 3 && w.status != WcStatus::Success), "{wcs:?}");
}

#[test]
fn an_mr_may_start_anywhere_in_a_page_and_the_caller_vouches_for_raw_memory() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let mut backing = vec![0u8; 3 * 4096];
    let start = backing.as_mut_ptr().wrapping_add(123);
    // SAFETY: `backing` outlives the MR (dropped at the end of the test, after `mr`), and nothing
    // else touches it meanwhile.
    let mem = unsafe { UserMemory::new(start, 5000) };
    let mr = pd.reg_mr(mem, access::LOCAL_WRITE).unwrap();
    assert_eq!((mr.addr(), mr.len()), (start as u64, 5000));
    mr.write(4990, b"0123456789").unwrap();
    let mut b = [0u8; 10];
    mr.read(4990, &mut b).unwrap();
    assert_eq!(&b, b"0123456789");
    assert!(matches!(mr.write(4991, b"0123456789"), Err(Error::InvalidArgument(_))));
    drop(mr);
    assert_eq!(&backing[123 + 4990..123 + 5000], b"0123456789", "it was the caller's memory");
}

/// Deregistering the receive MR while a message to it is on the wire: nothing is written into the
/// memory after the MR is gone, and the receive does not complete successfully.
#[test]
fn dereg_with_a_message_in_flight_writes_nothing() {
    let cfg = pvrdma_sim::SimConfig { link_latency: std::time::Duration::from_millis(100), ..Default::default() };
    let dev = open_with(cfg);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let (a, b) = (rc_qp(&pd, &cq, &cq), rc_qp(&pd, &cq, &cq));
    connect(&a, b.qpn(), gid(&dev));
    connect(&b, a.qpn(), gid(&dev));
    let mut dst = vec![0u8; 8192];
    let src = UserBuffer::new(4096).unwrap();
    src.write(0, &[0xab; 100]).unwrap();
    let smr = pd.reg_buffer(&src, access::LOCAL_WRITE).unwrap();
    // SAFETY: `dst` outlives the MR, which is dropped below, before `dst`.
    let dmr =
        pd.reg_mr(unsafe { UserMemory::new(dst.as_mut_ptr().wrapping_add(10), 100) }, access::LOCAL_WRITE).unwrap();
    b.post_recv(&RecvWr { wr_id: 1, sg_list: &[Sge { addr: dmr.addr(), length: 100, lkey: dmr.lkey() }] }).unwrap();
    let ssge = [Sge { addr: smr.addr(), length: 100, lkey: smr.lkey() }];
    a.post_send(&SendWr { wr_id: 2, sg_list: &ssge, opcode: WrOpcode::Send, signaled: true, solicited: false })
        .unwrap();
    drop(dmr);
    let wcs = poll_n(&cq, 2);
    let recv = wcs.iter().find(|w| w.wr_id == 1).map(|w| w.status);
    assert_eq!(dst.iter().filter(|&&b| b != 0).count(), 0, "written after dereg: {wcs:?}");
    assert_ne!(recv, Some(WcStatus::Success), "{wcs:?}");
}

/// Ranges `ibv_reg_mr` refuses with EINVAL — empty, beyond `max_mr_size`, wrapping — are refused
/// before the device sees them; address 0 is EFAULT, as Linux's pin of page 0 answers (issue 21
/// §2); one byte at a page's last byte is fine.
#[test]
fn bad_ranges_are_refused() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let mut backing = vec![0u8; 3 * 4096];
    let base = backing.as_mut_ptr() as usize;
    let max = dev.query_device().max_mr_size as usize;
    let refused = [
        ("empty", base, 0),
        ("huge", base, usize::MAX / 2),
        ("beyond max_mr_size", base, max + 1),
        ("wraps", usize::MAX - 100, 200),
        ("ends at the top", usize::MAX - 4095, 4096),
    ];
    for (what, addr, len) in refused {
        // SAFETY: refused before anything reaches the memory.
        let r = pd.reg_mr(unsafe { UserMemory::new(addr as *mut u8, len) }, access::LOCAL_WRITE);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{what}: {r:?}");
    }
    // SAFETY: refused before anything reaches the memory.
    let r = pd.reg_mr(unsafe { UserMemory::new(std::ptr::null_mut(), 16) }, access::LOCAL_WRITE);
    assert!(matches!(r, Err(Error::BadAddress(_))), "address 0: {r:?}");
    let last = (base + 4096) & !4095;
    // SAFETY: inside `backing`, which outlives the MR.
    let mr = pd.reg_mr(unsafe { UserMemory::new((last - 1) as *mut u8, 1) }, access::LOCAL_WRITE).unwrap();
    mr.write(0, b"z").unwrap();
    assert!(mr.write(1, b"z").is_err());
    drop(mr);
    assert_eq!(backing[last - 1 - base], b'z');
}

/// An SGE naming another PD's MR, another device's MR or a user context's MR is refused by the
/// device with a local protection error; no byte of that memory moves (IBTA 10.6.3).
#[test]
fn foreign_lkeys_are_refused() {
    let dev = open();
    let dev2 = open();
    let pd = dev.alloc_pd().unwrap();
    let pd_other = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    let other_pd_mr = pd_other.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let other_dev_mr = dev2.alloc_pd().unwrap().alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let ctx = dev.alloc_ucontext().unwrap();
    let user_mr = ctx.alloc_pd().unwrap().alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    for mr in [&other_pd_mr, &other_dev_mr, &user_mr] {
        mr.write(0, b"SECRET").unwrap();
    }
    let cases = [
        ("other PD", other_pd_mr.addr(), other_pd_mr.lkey()),
        ("other device", other_dev_mr.addr(), other_dev_mr.lkey()),
        ("other context", user_mr.addr(), user_mr.lkey()),
        ("own address, other PD's key", p.mr_a.addr(), other_pd_mr.lkey()),
    ];
    for (id, (what, addr, lkey)) in (10..).zip(cases) {
        p.recv_b(id, 0, 64);
        let sge = [Sge { addr, length: 6, lkey }];
        p.a.post_send(&SendWr {
            wr_id: 100 + id,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            signaled: true,
            solicited: false,
        })
        .unwrap();
        let wc = poll_n(&cq, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (100 + id, WcStatus::LocProtErr), "{what}");
        let mut got = [0u8; 6];
        p.mr_b.read(0, &mut got).unwrap();
        assert_ne!(&got, b"SECRET", "{what}: data moved through a foreign lkey");
        for (q, remote) in [(&p.a, p.b.qpn()), (&p.b, p.a.qpn())] {
            q.modify_qp(&QpAttr { qp_state: QpState::Reset, ..Default::default() }, QpAttrMask::STATE).unwrap();
            connect(q, remote, gid(&dev));
        }
        tests::events::drain(&cq);
    }
}

/// A 1-byte user buffer: an 8-byte message into it completes in error and writes nothing past it.
#[test]
fn a_message_larger_than_a_tiny_user_mr_writes_nothing() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    let buf = UserBuffer::new(4096).unwrap();
    // SAFETY: one byte of `buf`, which outlives the MR.
    let small = unsafe { UserMemory::new(buf.addr() as *mut u8, 1) };
    let mr = pd.reg_mr(small, access::LOCAL_WRITE).unwrap();
    let sge = [Sge { addr: mr.addr(), length: 8, lkey: mr.lkey() }];
    p.b.post_recv(&RecvWr { wr_id: 9, sg_list: &sge }).unwrap();
    p.send_a(1, 0, b"ABCDEFGH", WrOpcode::Send, false);
    let wcs = poll_n(&cq, 2);
    assert!(wcs.iter().all(|w| w.status != WcStatus::Success), "{wcs:?}");
    let mut got = [0u8; 8];
    buf.read(0, &mut got).unwrap();
    assert_eq!(got, [0; 8]);
    drop(mr);
}
