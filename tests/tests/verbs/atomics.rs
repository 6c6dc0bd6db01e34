//! ATOMIC COMPARE SWAP and FETCH ADD through the verbs core (IBTA 9.4.5;
//! `IBV_WR_ATOMIC_CMP_AND_SWP`, `IBV_WR_ATOMIC_FETCH_AND_ADD`) over the model's loopback port:
//! the original value, the responder's memory, the completion, the refusals IBTA names, the caps,
//! and FETCH ADD from several QPs at once onto one address of a program's own buffer — also from
//! two devices that both registered it.

use ib_core::{
    access, AtomicCap, Cq, Device, Error, Mr, Pd, Qp, SendWr, Sge, UserBuffer, Wc, WcOpcode, WcStatus, WrOpcode,
};
use tests::fixture::*;

const ATOMIC: u32 = access::LOCAL_WRITE | access::REMOTE_ATOMIC;

/// A requester and a responder (granting `qp_access`) on one PD, each with its own CQ.
struct Link {
    cq: Cq,
    a: Qp,
    b: Qp,
}

fn link(dev: &Device, pd: &Pd, qp_access: u32) -> Link {
    let cq = dev.create_cq(64, None).unwrap();
    let (a, b) = (rc_qp(pd, &cq, &cq), rc_qp(pd, &cq, &cq));
    let gid = gid(dev);
    connect(&a, b.qpn(), gid);
    b.modify_to_init(1, qp_access).unwrap();
    b.modify_to_rtr(a.qpn(), gid, 0, 1024).unwrap();
    b.modify_to_rts(0).unwrap();
    Link { cq, a, b }
}

fn post(q: &Qp, wr_id: u64, opcode: WrOpcode, res: &Mr, off: u64) -> Result<(), Error> {
    let sge = [Sge { addr: res.addr() + off, length: 8, lkey: res.lkey() }];
    q.post_send(&SendWr { wr_id, sg_list: &sge, opcode, signaled: true, solicited: false })
}

fn cas(mr: &Mr, off: u64, compare: u64, swap: u64) -> WrOpcode {
    WrOpcode::AtomicCmpSwp { remote_addr: mr.addr() + off, rkey: mr.rkey(), compare, swap }
}

fn fadd(addr: u64, rkey: u32, add: u64) -> WrOpcode {
    WrOpcode::AtomicFetchAdd { remote_addr: addr, rkey, add }
}

fn u64_at(mr: &Mr, off: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read(off, &mut b).unwrap();
    u64::from_le_bytes(b)
}

#[test]
fn the_device_reports_atomic_hca() {
    let dev = open();
    let a = dev.query_device();
    assert_eq!(a.atomic_cap, AtomicCap::Hca);
    // Linux's `pvrdma_query_device` leaves `max_res_rd_atom` 0; the per-QP limits are the caps'.
    assert!(a.max_qp_rd_atom >= 1 && a.max_qp_init_rd_atom >= 1);
}

#[test]
fn compare_swap_and_fetch_add_return_the_original_value() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let l = link(&dev, &pd, access::REMOTE_ATOMIC);
    let res = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let target = pd.alloc_mr(8192, ATOMIC).unwrap();
    target.write(4088, &0xfeed_0000_0000_0001u64.to_le_bytes()).unwrap();
    post(&l.a, 1, cas(&target, 4088, 0xfeed_0000_0000_0001, 0x55), &res, 0).unwrap();
    post(&l.a, 2, cas(&target, 4088, 0xfeed_0000_0000_0001, 0x66), &res, 8).unwrap();
    post(&l.a, 3, fadd(target.addr() + 4096, target.rkey(), 1 << 40), &res, 16).unwrap();
    post(&l.a, 4, fadd(target.addr() + 4096, target.rkey(), 3), &res, 24).unwrap();
    let got: Vec<(u64, WcStatus, WcOpcode, u32)> =
        poll_n(&l.cq, 4).iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect();
    let ok = WcStatus::Success;
    assert_eq!(
        got,
        [
            (1, ok, WcOpcode::CompSwap, 8),
            (2, ok, WcOpcode::CompSwap, 8),
            (3, ok, WcOpcode::FetchAdd, 8),
            (4, ok, WcOpcode::FetchAdd, 8)
        ]
    );
    assert_eq!(
        [u64_at(&res, 0), u64_at(&res, 8), u64_at(&res, 16), u64_at(&res, 24)],
        [0xfeed_0000_0000_0001, 0x55, 0, 1 << 40]
    );
    assert_eq!((u64_at(&target, 4088), u64_at(&target, 4096)), (0x55, (1 << 40) + 3));
    std::thread::sleep(SETTLE);
    assert_eq!(l.cq.poll(&mut [Wc::default(); 4]).unwrap(), 0, "no receive completion");
    let _ = l.b;
}

/// What the responder refuses completes with IBTA's status and changes nothing; so does what
/// the requester refuses (one 8-byte SGE, an 8-aligned address), which neither Linux's
/// vmw_pvrdma nor rdma-core's pvrdma provider checks at post time: the device does (issue 21 §3).
#[test]
fn refusals() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let res = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let target = pd.alloc_mr(4096, ATOMIC).unwrap();
    let no_atomic = pd.alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE).unwrap();
    let cases = [
        ("bad R_Key", access::REMOTE_ATOMIC, fadd(target.addr(), target.rkey() ^ 0x80, 1)),
        ("MR without REMOTE_ATOMIC", access::REMOTE_ATOMIC, fadd(no_atomic.addr(), no_atomic.rkey(), 1)),
        ("QP without REMOTE_ATOMIC", access::REMOTE_WRITE, fadd(target.addr(), target.rkey(), 1)),
        ("past the MR", access::REMOTE_ATOMIC, fadd(target.addr() + 4096, target.rkey(), 1)),
    ];
    for (what, qp_access, op) in cases {
        let l = link(&dev, &pd, qp_access);
        post(&l.a, 9, op, &res, 0).unwrap();
        let w = poll_n(&l.cq, 1)[0];
        assert_eq!((w.wr_id, w.status), (9, WcStatus::RemAccessErr), "{what}");
        assert_eq!((u64_at(&target, 0), u64_at(&no_atomic, 0)), (0, 0), "{what}: nothing changed");
    }
    let l = link(&dev, &pd, access::REMOTE_ATOMIC);
    let misaligned = fadd(target.addr() + 4, target.rkey(), 1);
    post(&l.a, 1, misaligned, &res, 0).unwrap();
    let w = poll_n(&l.cq, 1)[0];
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemInvReqErr), "misaligned");
    let l = link(&dev, &pd, access::REMOTE_ATOMIC);
    let sge = [Sge { addr: res.addr(), length: 4, lkey: res.lkey() }];
    let short = SendWr {
        wr_id: 2,
        sg_list: &sge,
        opcode: fadd(target.addr(), target.rkey(), 1),
        signaled: true,
        solicited: false,
    };
    l.a.post_send(&short).unwrap();
    let w = poll_n(&l.cq, 1)[0];
    assert_eq!((w.wr_id, w.status), (2, WcStatus::LocLenErr), "a 4-byte SGE");
    assert_eq!(u64_at(&target, 0), 0, "nothing changed");
}

/// `threads` requester QPs (each on its own thread, its own responder QP) FETCH ADD 1 `n` times
/// each onto the first word of `target` (an MR of the responders' PD); returns the originals.
fn add_from(dev: &Device, pd: &Pd, target: &Mr, threads: usize, n: u64) -> Vec<u64> {
    let links: Vec<Link> = (0..threads).map(|_| link(dev, pd, access::REMOTE_ATOMIC)).collect();
    let (addr, rkey) = (target.addr(), target.rkey());
    std::thread::scope(|s| {
        let hs: Vec<_> = links
            .iter()
            .map(|l| {
                s.spawn(move || {
                    let res = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
                    let mut seen = Vec::new();
                    for k in 0..n {
                        post(&l.a, k, fadd(addr, rkey, 1), &res, 8 * (k % 8)).unwrap();
                        let w = poll_n(&l.cq, 1)[0];
                        assert_eq!((w.wr_id, w.status, w.opcode), (k, WcStatus::Success, WcOpcode::FetchAdd));
                        seen.push(u64_at(&res, 8 * (k % 8) as usize));
                    }
                    seen
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

/// FETCH ADD from four QPs at once onto one address of the program's own buffer: the final
/// value is the sum, each original value seen once.
#[test]
fn fetch_add_from_four_qps_at_once_sums_exactly_on_a_program_buffer() {
    const N: u64 = 500;
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let buf = UserBuffer::new(4096).unwrap();
    let target = pd.reg_buffer(&buf, ATOMIC).unwrap();
    let mut seen = add_from(&dev, &pd, &target, 4, N);
    let mut word = [0u8; 8];
    buf.read(0, &mut word).unwrap();
    assert_eq!(u64::from_le_bytes(word), 4 * N, "the sum, in the program's own memory");
    seen.sort_unstable();
    assert!(seen.iter().enumerate().all(|(i, &v)| v == i as u64), "each original value once");
}

/// Two devices (two models, each with its own port thread) registered the same buffer: their
/// atomics on one word run truly at once, and are atomic against each other because the
/// read-modify-write on a program's memory takes one lock of the whole process, not a lock of
/// one device (`ATOMIC_HCA`: atomic between the HCA's own operations, `docs/memory.md`).
#[test]
fn two_devices_adding_to_one_buffer_lose_nothing() {
    const N: u64 = 500;
    let buf = UserBuffer::new(4096).unwrap();
    let (d1, d2) = (open(), open());
    let (p1, p2) = (d1.alloc_pd().unwrap(), d2.alloc_pd().unwrap());
    let (t1, t2) = (p1.reg_buffer(&buf, ATOMIC).unwrap(), p2.reg_buffer(&buf, ATOMIC).unwrap());
    let seen: Vec<u64> = std::thread::scope(|s| {
        let h1 = s.spawn(|| add_from(&d1, &p1, &t1, 2, N));
        let h2 = s.spawn(|| add_from(&d2, &p2, &t2, 2, N));
        [h1.join().unwrap(), h2.join().unwrap()].concat()
    });
    let mut word = [0u8; 8];
    buf.read(0, &mut word).unwrap();
    assert_eq!(u64::from_le_bytes(word), 4 * N);
    let mut sorted = seen;
    sorted.sort_unstable();
    assert!(sorted.iter().enumerate().all(|(i, &v)| v == i as u64), "each original value once");
}
