//! Memory a program registers is never trusted (issue 21 §2), through the C entry points as a C
//! program calls them: `ibv_reg_mr` over pages that are not mapped, or read-only pages with any
//! access that may write them, is NULL with `EFAULT` (Linux's `ib_umem_get` refuses the pin);
//! pages unmapped or protected after registration fail the work requests that reach them with
//! the status a real HCA gives (`LOC_PROT_ERR` locally, a READ's response included,
//! `REM_ACCESS_ERR` at the requester of a
//! READ, WRITE or atomic the responder refuses), the QPs involved go to ERR, and the process and
//! its other QPs carry on. Every wait is bounded.

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use testpages::ptr::{fresh, protect, unmap};

const P: usize = 4096;
/// `enum ibv_access_flags`.
const LOCAL_WRITE: i32 = 1;
const REMOTE_WRITE: i32 = 2;
const REMOTE_READ: i32 = 4;
const REMOTE_ATOMIC: i32 = 8;
const MW_BIND: i32 = 16;
const ALL: i32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
/// `enum ibv_wc_status`.
const WC_SUCCESS: u32 = 0;
const WC_LOC_PROT_ERR: u32 = 4;
const WC_REM_ACCESS_ERR: u32 = 10;
const WC_REM_OP_ERR: u32 = 11;
/// `IBV_QPS_ERR`, `IBV_QP_STATE`.
const QPS_ERR: u32 = 6;
const QP_STATE: i32 = 1;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// An open context on the default model device, and a PD of it.
fn open() -> (*mut ibv_context, *mut ibv_pd) {
    // SAFETY: the list is NULL-terminated, its first entry a device of this library.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        assert!(!list.is_null() && !(*list).is_null(), "the default model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        assert!(!ctx.is_null());
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        (ctx, pd)
    }
}

/// `ibv_reg_mr(pd, p, len, access)`: the MR, or NULL and the errno.
fn reg(pd: *mut ibv_pd, p: *mut u8, len: usize, access: i32) -> Result<*mut ibv_mr, i32> {
    // SAFETY: a live PD; the memory is the test's own (or deliberately not mapped).
    let mr = unsafe { ibv_reg_mr(pd, p.cast(), len, access) };
    if mr.is_null() {
        Err(errno())
    } else {
        Ok(mr)
    }
}

fn dereg(mr: *mut ibv_mr) {
    // SAFETY: a live MR of this library, not used after.
    assert_eq!(unsafe { ibv_dereg_mr(mr) }, 0);
}

/// (a) A range that is not mapped at all is `EFAULT`, whatever the access: NULL too (Linux pins
/// page 0, which no process maps, and fails the same way).
#[test]
fn reg_mr_over_unmapped_memory_is_efault() {
    let (_ctx, pd) = open();
    let p = fresh(2);
    unmap(p, 2);
    for access in [0, REMOTE_READ, LOCAL_WRITE, ALL] {
        assert_eq!(reg(pd, null_mut(), 16, access), Err(libc::EFAULT), "NULL, access {access:#x}");
        assert_eq!(reg(pd, p, 2 * P, access), Err(libc::EFAULT), "access {access:#x}");
        assert_eq!(reg(pd, p.wrapping_add(100), 10, access), Err(libc::EFAULT), "a few bytes inside");
    }
}

/// (b) Read-only pages: every access that may write the MR (local write, remote write, remote
/// atomic, memory-window bind: Linux's `ib_access_writable`) is `EFAULT`; only remote read or
/// no access registers. Remote write without local write stays `EINVAL`, checked first (as
/// Linux's `ib_check_mr_access` before the pin); on writable pages MW_BIND is the device's
/// `EINVAL` (it has no windows), after the pin.
#[test]
fn reg_mr_over_read_only_pages_is_efault_for_any_access_that_writes() {
    let (_ctx, pd) = open();
    let p = fresh(3);
    protect(p, 3, libc::PROT_READ);
    for (what, access) in [
        ("LOCAL_WRITE", LOCAL_WRITE),
        ("REMOTE_WRITE", LOCAL_WRITE | REMOTE_WRITE),
        ("REMOTE_ATOMIC", LOCAL_WRITE | REMOTE_ATOMIC),
        ("MW_BIND", MW_BIND),
        ("MW_BIND | REMOTE_READ", MW_BIND | REMOTE_READ),
    ] {
        assert_eq!(reg(pd, p, 3 * P, access), Err(libc::EFAULT), "{what}");
        assert_eq!(reg(pd, p.wrapping_add(P + 7), 9, access), Err(libc::EFAULT), "{what}, a few bytes");
    }
    assert_eq!(reg(pd, p, P, REMOTE_WRITE), Err(libc::EINVAL), "remote write without local write");
    for access in [REMOTE_READ, 0] {
        let mr = reg(pd, p.wrapping_add(5), 2 * P, access).expect("read-only pages for reading");
        dereg(mr);
    }
    protect(p, 1, libc::PROT_READ | libc::PROT_WRITE);
    // Writable pages pinned for MW_BIND register: memory windows are refused at ibv_alloc_mw.
    let mr = reg(pd, p, P, MW_BIND | LOCAL_WRITE).expect("MW_BIND over writable pages");
    dereg(mr);
    protect(p, 1, libc::PROT_NONE);
    assert_eq!(reg(pd, p, P, 0), Err(libc::EFAULT), "PROT_NONE cannot be read either");
    unmap(p, 3);
}

/// (c) A range that starts in a mapped page and ends in an unmapped one is refused whole, as the
/// pin of its second page fails; the first page alone registers.
#[test]
fn reg_mr_straddling_an_unmapped_page_is_efault() {
    let (_ctx, pd) = open();
    let p = fresh(3);
    unmap(p.wrapping_add(P), 1);
    for access in [0, LOCAL_WRITE, ALL] {
        assert_eq!(reg(pd, p.wrapping_add(P - 8), 16, access), Err(libc::EFAULT), "access {access:#x}");
        assert_eq!(reg(pd, p, 3 * P, access), Err(libc::EFAULT), "a hole in the middle");
    }
    dereg(reg(pd, p, P, ALL).expect("the mapped page alone"));
    unmap(p, 1);
    unmap(p.wrapping_add(2 * P), 1);
}

/// Two connected RC QPs of `pd`, each with its own CQ.
struct Pair {
    a: *mut ibv_qp,
    b: *mut ibv_qp,
    cq_a: *mut ibv_cq,
    cq_b: *mut ibv_cq,
}

fn rc_qp(pd: *mut ibv_pd, cq: *mut ibv_cq) -> *mut ibv_qp {
    let cap = ibv_qp_cap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 };
    let mut a = ibv_qp_init_attr {
        qp_context: null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: null_mut(),
        cap,
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    };
    // SAFETY: a live PD and CQ of this library.
    let qp = unsafe { ibv_create_qp(pd, &mut a) };
    assert!(!qp.is_null(), "create_qp: errno {}", errno());
    qp
}

fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: i32) {
    // SAFETY: a live QP of this library.
    assert_eq!(unsafe { ibv_modify_qp(qp, a, mask) }, 0, "modify_qp mask {mask:#x}");
}

/// INIT (every remote access), RTR towards `remote` through GID 0, RTS.
fn connect(qp: *mut ibv_qp, remote: *mut ibv_qp) {
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qp_access_flags: ALL as u32, ..Default::default() };
    modify(qp, &mut a, 1 | 1 << 3 | 1 << 4 | 1 << 5);
    let mut g = ibv_gid::default();
    // SAFETY: live QPs and their context.
    let rqpn = unsafe {
        assert_eq!(ibv_query_gid((*qp).context, 1, 0, &mut g), 0);
        (*remote).qp_num
    };
    let grh = ibv_global_route { dgid: g, hop_limit: 64, ..Default::default() };
    let ah_attr = ibv_ah_attr { grh, is_global: 1, port_num: 1, ..Default::default() };
    let mut a = ibv_qp_attr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: rqpn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr,
        ..Default::default()
    };
    modify(qp, &mut a, 1 | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20);
    let mut a =
        ibv_qp_attr { qp_state: 3, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1, ..Default::default() };
    modify(qp, &mut a, 1 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 16);
}

impl Pair {
    fn new(ctx: *mut ibv_context, pd: *mut ibv_pd) -> Pair {
        // SAFETY: an open context.
        let (cq_a, cq_b) = unsafe {
            (ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0), ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0))
        };
        assert!(!cq_a.is_null() && !cq_b.is_null());
        let (a, b) = (rc_qp(pd, cq_a), rc_qp(pd, cq_b));
        connect(a, b);
        connect(b, a);
        Pair { a, b, cq_a, cq_b }
    }

    /// Posts a receive on `b` of `len` bytes at `addr` under `mr`.
    fn recv_b(&self, mr: *mut ibv_mr, addr: *mut u8, len: u32) {
        // SAFETY: a live MR.
        let mut sge = ibv_sge { addr: addr as u64, length: len, lkey: unsafe { (*mr).lkey } };
        let mut w = ibv_recv_wr { wr_id: 2, next: null_mut(), sg_list: &mut sge, num_sge: 1 };
        let mut bad = null_mut();
        // SAFETY: a live QP; the WR is ours.
        assert_eq!(unsafe { ((*(*self.b).context).ops.post_recv.unwrap())(self.b, &mut w, &mut bad) }, 0);
    }

    /// Posts `opcode` on `a` from/into `len` bytes at `addr` under `mr`, towards `remote` under
    /// `rkey` (READ, WRITE, atomic; ignored by a SEND).
    fn send_a(&self, opcode: u32, (mr, addr, len): (*mut ibv_mr, *mut u8, u32), (remote, rkey): (*mut u8, u32)) {
        // SAFETY: a live MR.
        let mut sge = ibv_sge { addr: addr as u64, length: len, lkey: unsafe { (*mr).lkey } };
        // SAFETY: all-zero is a valid `ibv_send_wr` (NULL pointers).
        let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
        (w.wr_id, w.sg_list, w.num_sge, w.opcode, w.send_flags) = (1, &mut sge, 1, opcode, IBV_SEND_SIGNALED);
        w.wr = if opcode == IBV_WR_ATOMIC_FETCH_AND_ADD {
            ibv_send_wr_wr { atomic: ibv_send_wr_atomic { remote_addr: remote as u64, compare_add: 1, swap: 0, rkey } }
        } else {
            ibv_send_wr_wr { rdma: ibv_send_wr_rdma { remote_addr: remote as u64, rkey } }
        };
        let mut bad = null_mut();
        // SAFETY: a live QP; the chain is ours.
        assert_eq!(unsafe { ((*(*self.a).context).ops.post_send.unwrap())(self.a, &mut w, &mut bad) }, 0);
    }

    fn state(qp: *mut ibv_qp) -> u32 {
        let mut attr = ibv_qp_attr::default();
        // SAFETY: all-zero is a valid `ibv_qp_init_attr` (NULL pointers, zero sizes).
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live QP; room for both answers.
        assert_eq!(unsafe { ibv_query_qp(qp, &mut attr, QP_STATE, &mut init) }, 0);
        attr.qp_state
    }

    fn close(self) {
        // SAFETY: objects of this pair, not used after.
        unsafe {
            for q in [self.a, self.b] {
                assert_eq!(ibv_destroy_qp(q), 0);
            }
            for c in [self.cq_a, self.cq_b] {
                assert_eq!(ibv_destroy_cq(c), 0);
            }
        }
    }
}

/// One completion from `cq` within 10 s: its status.
fn status(cq: *mut ibv_cq) -> u32 {
    let end = Instant::now() + Duration::from_secs(10);
    let mut wc = [ibv_wc::default(); 1];
    loop {
        // SAFETY: a live CQ; room for one entry.
        let n = unsafe { ((*(*cq).context).ops.poll_cq.unwrap())(cq, 1, wc.as_mut_ptr()) };
        assert!(n >= 0, "poll: {n}");
        if n == 1 {
            return wc[0].status;
        }
        assert!(Instant::now() < end, "no completion within 10 s");
        std::thread::yield_now();
    }
}

/// What each work request that reaches memory the program took away completes with, on a fresh
/// pair of QPs each (an error moves them to ERR): (what, a's status, b's status for a receive).
type Case<'a> = (&'static str, &'a dyn Fn(&Pair), u32, Option<u32>);

fn run(ctx: *mut ibv_context, pd: *mut ibv_pd, cases: &[Case<'_>]) {
    for (what, post, want_a, want_b) in cases {
        let p = Pair::new(ctx, pd);
        post(&p);
        assert_eq!(status(p.cq_a), *want_a, "{what}: the requester");
        if let Some(b) = want_b {
            assert_eq!(status(p.cq_b), *b, "{what}: the receive");
        }
        if *want_a != WC_SUCCESS {
            assert_eq!(Pair::state(p.a), QPS_ERR, "{what}: the requester's QP is in ERR");
        }
        p.close();
    }
}

/// A good buffer of the test's own, registered with every access.
struct Good {
    buf: Vec<u8>,
    mr: *mut ibv_mr,
}

fn good(pd: *mut ibv_pd) -> Good {
    let mut buf = vec![0u8; 4 * P];
    let mr = reg(pd, buf.as_mut_ptr(), buf.len(), ALL).expect("a good MR");
    Good { buf, mr }
}

impl Good {
    fn at(&self, off: usize) -> *mut u8 {
        self.buf.as_ptr().cast_mut().wrapping_add(off)
    }

    fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).rkey }
    }
}

/// (d) Pages unmapped after registration: a SEND from them and a receive into them complete
/// `LOC_PROT_ERR` (the sender of that receive `REM_OP_ERR`, the responder's NAK), as does a
/// READ's response into them; a READ from them, a WRITE and a FETCH ADD into them
/// `REM_ACCESS_ERR` at the requester. The process lives,
/// and a SEND on fresh QPs afterwards completes.
#[test]
fn pages_unmapped_after_registration_fail_their_work_requests_and_nothing_else() {
    let (ctx, pd) = open();
    let g = good(pd);
    let gone = fresh(2);
    let mr = reg(pd, gone, 2 * P, ALL).expect("mapped at registration");
    // SAFETY: a live MR.
    let rkey = unsafe { (*mr).rkey };
    unmap(gone, 2);
    let inside = gone.wrapping_add(P - 8);
    run(
        ctx,
        pd,
        &[
            (
                "SEND from unmapped pages",
                &|p| {
                    p.recv_b(g.mr, g.at(0), 64);
                    p.send_a(IBV_WR_SEND, (mr, inside, 64), (null_mut(), 0));
                },
                WC_LOC_PROT_ERR,
                None,
            ),
            (
                "a receive into unmapped pages",
                &|p| {
                    p.recv_b(mr, inside, 64);
                    p.send_a(IBV_WR_SEND, (g.mr, g.at(0), 64), (null_mut(), 0));
                },
                WC_REM_OP_ERR,
                Some(WC_LOC_PROT_ERR),
            ),
            (
                "a READ from unmapped pages",
                &|p| p.send_a(IBV_WR_RDMA_READ, (g.mr, g.at(0), 64), (inside, rkey)),
                WC_REM_ACCESS_ERR,
                None,
            ),
            (
                "a WRITE into unmapped pages",
                &|p| p.send_a(IBV_WR_RDMA_WRITE, (g.mr, g.at(0), 64), (inside, rkey)),
                WC_REM_ACCESS_ERR,
                None,
            ),
            (
                "a FETCH ADD on unmapped pages",
                &|p| p.send_a(IBV_WR_ATOMIC_FETCH_AND_ADD, (g.mr, g.at(0), 8), (gone, rkey)),
                WC_REM_ACCESS_ERR,
                None,
            ),
            (
                "a READ's response into unmapped pages",
                &|p| p.send_a(IBV_WR_RDMA_READ, (mr, inside, 64), (g.at(0), g.rkey())),
                WC_LOC_PROT_ERR,
                None,
            ),
            (
                "a SEND between good buffers afterwards",
                &|p| {
                    p.recv_b(g.mr, g.at(P), 64);
                    p.send_a(IBV_WR_SEND, (g.mr, g.at(0), 64), (null_mut(), 0));
                },
                WC_SUCCESS,
                Some(WC_SUCCESS),
            ),
        ],
    );
    dereg(mr);
    dereg(g.mr);
}

/// (e) Pages made read-only after registration still give what they hold (a SEND from them, a
/// READ of them) but take nothing: a receive or a READ's response into them `LOC_PROT_ERR`, a
/// WRITE or FETCH ADD into them `REM_ACCESS_ERR`. Made `PROT_NONE`, they give nothing either.
#[test]
fn pages_protected_after_registration_fail_the_accesses_they_no_longer_allow() {
    let (ctx, pd) = open();
    let g = good(pd);
    let pages = fresh(2);
    let mr = reg(pd, pages, 2 * P, ALL).expect("writable at registration");
    // SAFETY: a live MR.
    let rkey = unsafe { (*mr).rkey };
    protect(pages, 2, libc::PROT_READ);
    let send_from = |p: &Pair| {
        p.recv_b(g.mr, g.at(0), 64);
        p.send_a(IBV_WR_SEND, (mr, pages, 64), (null_mut(), 0));
    };
    let read_from = |p: &Pair| p.send_a(IBV_WR_RDMA_READ, (g.mr, g.at(0), 64), (pages, rkey));
    run(
        ctx,
        pd,
        &[
            ("a SEND from read-only pages", &send_from, WC_SUCCESS, Some(WC_SUCCESS)),
            ("a READ of read-only pages", &read_from, WC_SUCCESS, None),
            (
                "a receive into read-only pages",
                &|p| {
                    p.recv_b(mr, pages, 64);
                    p.send_a(IBV_WR_SEND, (g.mr, g.at(0), 64), (null_mut(), 0));
                },
                WC_REM_OP_ERR,
                Some(WC_LOC_PROT_ERR),
            ),
            (
                "a WRITE into read-only pages",
                &|p| p.send_a(IBV_WR_RDMA_WRITE, (g.mr, g.at(0), 64), (pages, rkey)),
                WC_REM_ACCESS_ERR,
                None,
            ),
            (
                "a FETCH ADD on read-only pages",
                &|p| p.send_a(IBV_WR_ATOMIC_FETCH_AND_ADD, (g.mr, g.at(0), 8), (pages, rkey)),
                WC_REM_ACCESS_ERR,
                None,
            ),
            (
                "a READ's response into read-only pages",
                &|p| p.send_a(IBV_WR_RDMA_READ, (mr, pages, 64), (g.at(0), g.rkey())),
                WC_LOC_PROT_ERR,
                None,
            ),
        ],
    );
    protect(pages, 2, libc::PROT_NONE);
    run(
        ctx,
        pd,
        &[
            ("a SEND from PROT_NONE pages", &send_from, WC_LOC_PROT_ERR, None),
            ("a READ of PROT_NONE pages", &read_from, WC_REM_ACCESS_ERR, None),
        ],
    );
    dereg(mr);
    unmap(pages, 2);
    dereg(g.mr);
}
