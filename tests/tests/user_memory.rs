//! MRs over the consumer's own memory (`ibv_reg_mr(pd, addr, length, access)`): the model maps the
//! consumer's pages into its device address space, SGEs and the MR's address space are the
//! consumer's own addresses, and the consumer reads what arrived straight from its buffer.

use ib_core::{access, Error, RecvWr, SendWr, Sge, UserBuffer, UserMemory, WcStatus, WrOpcode};
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
    let (smr, dmr) = (pd.reg_buffer(&src, access::LOCAL_WRITE).unwrap(), pd.reg_buffer(&dst, access::LOCAL_WRITE).unwrap());
    assert_eq!((smr.addr(), dmr.addr()), (src.addr(), dst.addr()), "the MR's addresses are the buffer's");
    let msg: Vec<u8> = (0..6000u32).map(|i| (i * 13) as u8).collect();
    src.write(4000, &msg).unwrap(); // across a page boundary
    let rsge = [Sge { addr: dst.addr() + 5000, length: 6000, lkey: dmr.lkey() }];
    b.post_recv(&RecvWr { wr_id: 1, sg_list: &rsge }).unwrap();
    let ssge = [Sge { addr: src.addr() + 4000, length: 6000, lkey: smr.lkey() }];
    a.post_send(&SendWr { wr_id: 2, sg_list: &ssge, opcode: WrOpcode::Send, signaled: true, solicited: false }).unwrap();
    let wcs = poll_n(&cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let mut got = vec![0u8; 6000];
    dst.read(5000, &mut got).unwrap();
    assert_eq!(got, msg, "the payload is in the consumer's buffer");
    // An SGE outside the MR is the device's to refuse: a completion with an error, no write.
    let outside = [Sge { addr: dst.addr() + 3 * 4096 - 4, length: 8, lkey: dmr.lkey() }];
    b.post_recv(&RecvWr { wr_id: 3, sg_list: &outside }).unwrap();
    a.post_send(&SendWr { wr_id: 4, sg_list: &ssge, opcode: WrOpcode::Send, signaled: true, solicited: false }).unwrap();
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
