//! A program's registered pages that go away or lose their protection after registration
//! (issue 21 §2), through the verbs core on both of the model's ports — the in-process
//! loopback port and the RoCE v2 port (two QPs of one device over its own loopback address):
//! each work request that reaches them completes with the status a real HCA gives
//! (`LOC_PROT_ERR` for a local gather or scatter, a READ's response included, `REM_OP_ERR` at the sender of a receive the
//! responder could not place, `REM_ACCESS_ERR` at the requester of a READ, WRITE or atomic the
//! responder NAKs), the QPs involved go to ERR, and the process and its other QPs carry on; and
//! registration over such pages answers `Error::BadAddress` (EFAULT). Every wait is bounded.

use ib_core::{access, Cq, Device, Error, Mr, Pd, Qp, QpState, RecvWr, SendWr, Sge, UserMemory, WcStatus, WrOpcode};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::SimConfig;
use tests::fixture::{open, poll_n, rc_qp};

use testpages::ptr::{fresh, protect, unmap};

const P: usize = 4096;
const ALL: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// `len` bytes at `p` registered with `access`.
fn reg(pd: &Pd, p: *mut u8, len: usize, access: u32) -> ib_core::Result<Mr> {
    // SAFETY: the test's own pages, deregistered before they are reused for anything.
    pd.reg_mr(unsafe { UserMemory::new(p, len) }, access)
}

/// A device whose RoCE port holds a 127/8 address of its own (`tests::fixture::open_roce`).
fn roce_device() -> Device {
    tests::fixture::open_roce(RoceConfig::new(Vec::new()), SimConfig::default()).0
}

/// A device and the GID its QPs connect through: GID 0 on the loopback port, the RoCE v2 GID
/// (index 1) on the RoCE port.
struct Port {
    dev: Device,
    sgid_index: u8,
}

impl Port {
    fn loopback() -> Port {
        Port { dev: open(), sgid_index: 0 }
    }

    fn roce() -> Port {
        Port { dev: roce_device(), sgid_index: 1 }
    }

    /// Brings `q` to RTS towards `remote` with every remote access granted.
    fn connect(&self, q: &Qp, remote: u32) {
        let dgid = self.dev.query_gid(1, u32::from(self.sgid_index)).expect("the GID");
        tests::fixture::connect_roce_with(q, remote, dgid, self.sgid_index, ALL, 10);
    }
}

/// Two connected QPs, each with its own CQ.
struct Pair {
    a: Qp,
    b: Qp,
    cq_a: Cq,
    cq_b: Cq,
}

impl Pair {
    fn new(port: &Port, pd: &Pd) -> Pair {
        let (cq_a, cq_b) = (port.dev.create_cq(16, None).unwrap(), port.dev.create_cq(16, None).unwrap());
        let (a, b) = (rc_qp(pd, &cq_a, &cq_a), rc_qp(pd, &cq_b, &cq_b));
        port.connect(&a, b.qpn());
        port.connect(&b, a.qpn());
        Pair { a, b, cq_a, cq_b }
    }

    fn recv_b(&self, mr: &Mr, addr: *mut u8, length: u32) {
        let sge = [Sge { addr: addr as u64, length, lkey: mr.lkey() }];
        self.b.post_recv(&RecvWr { wr_id: 2, sg_list: &sge }).unwrap();
    }

    fn send_a(&self, opcode: WrOpcode, mr: &Mr, addr: *mut u8, length: u32) {
        let sge = [Sge { addr: addr as u64, length, lkey: mr.lkey() }];
        self.a.post_send(&SendWr { wr_id: 1, sg_list: &sge, opcode, signaled: true, solicited: false }).unwrap();
    }
}

/// One operation on a fresh pair, and what it completes with: the requester's status and, for a
/// receive, the receiver's.
type Case<'a> = (&'static str, &'a dyn Fn(&Pair), WcStatus, Option<WcStatus>);

fn run(port: &Port, pd: &Pd, cases: &[Case<'_>]) {
    for (what, post, want_a, want_b) in cases {
        let p = Pair::new(port, pd);
        post(&p);
        assert_eq!(poll_n(&p.cq_a, 1)[0].status, *want_a, "{what}: the requester");
        if let Some(b) = want_b {
            assert_eq!(poll_n(&p.cq_b, 1)[0].status, *b, "{what}: the receive");
        }
        if *want_a != WcStatus::Success {
            assert_eq!(p.a.state(), Ok(QpState::Err), "{what}: the requester's QP is in ERR");
        }
    }
}

/// (d) on each port: pages unmapped after registration.
fn unmapped_after_registration(port: &Port) {
    let pd = port.dev.alloc_pd().unwrap();
    let mut good = vec![0u8; 2 * P];
    let g = good.as_mut_ptr();
    let gmr = reg(&pd, g, good.len(), ALL).unwrap();
    let gone = fresh(2);
    let mr = reg(&pd, gone, 2 * P, ALL).expect("mapped at registration");
    unmap(gone, 2);
    let (inside, rkey) = (gone.wrapping_add(P - 8), mr.rkey());
    let remote = |remote_addr: *mut u8| (remote_addr as u64, rkey);
    run(
        port,
        &pd,
        &[
            (
                "SEND from unmapped pages",
                &|p| {
                    p.recv_b(&gmr, g, 64);
                    p.send_a(WrOpcode::Send, &mr, inside, 64);
                },
                WcStatus::LocProtErr,
                None,
            ),
            (
                "a receive into unmapped pages",
                &|p| {
                    p.recv_b(&mr, inside, 64);
                    p.send_a(WrOpcode::Send, &gmr, g, 64);
                },
                WcStatus::RemOpErr,
                Some(WcStatus::LocProtErr),
            ),
            (
                "a READ from unmapped pages",
                &|p| {
                    let (remote_addr, rkey) = remote(inside);
                    p.send_a(WrOpcode::RdmaRead { remote_addr, rkey }, &gmr, g, 64);
                },
                WcStatus::RemAccessErr,
                None,
            ),
            (
                "a WRITE into unmapped pages",
                &|p| {
                    let (remote_addr, rkey) = remote(inside);
                    p.send_a(WrOpcode::RdmaWrite { remote_addr, rkey }, &gmr, g, 64);
                },
                WcStatus::RemAccessErr,
                None,
            ),
            (
                "a FETCH ADD on unmapped pages",
                &|p| {
                    let (remote_addr, rkey) = remote(gone);
                    p.send_a(WrOpcode::AtomicFetchAdd { remote_addr, rkey, add: 1 }, &gmr, g, 8);
                },
                WcStatus::RemAccessErr,
                None,
            ),
            (
                "a READ's response into unmapped pages",
                &|p| {
                    p.send_a(WrOpcode::RdmaRead { remote_addr: g as u64, rkey: gmr.rkey() }, &mr, inside, 64);
                },
                WcStatus::LocProtErr,
                None,
            ),
            (
                "a SEND between good buffers afterwards",
                &|p| {
                    p.recv_b(&gmr, g.wrapping_add(P), 64);
                    p.send_a(WrOpcode::Send, &gmr, g, 64);
                },
                WcStatus::Success,
                Some(WcStatus::Success),
            ),
        ],
    );
    // Registering over the pages now is the pin's EFAULT.
    assert!(matches!(reg(&pd, gone, P, 0), Err(Error::BadAddress(_))));
    drop((mr, gmr));
}

/// (e) on each port: pages made read-only, then `PROT_NONE`, after registration.
fn protected_after_registration(port: &Port) {
    let pd = port.dev.alloc_pd().unwrap();
    let mut good = vec![0u8; 2 * P];
    let g = good.as_mut_ptr();
    let gmr = reg(&pd, g, good.len(), ALL).unwrap();
    let pages = fresh(2);
    let mr = reg(&pd, pages, 2 * P, ALL).expect("writable at registration");
    let (remote_addr, rkey) = (pages as u64, mr.rkey());
    protect(pages, 2, libc::PROT_READ);
    let send_from = |p: &Pair| {
        p.recv_b(&gmr, g, 64);
        p.send_a(WrOpcode::Send, &mr, pages, 64);
    };
    let read_from = |p: &Pair| p.send_a(WrOpcode::RdmaRead { remote_addr, rkey }, &gmr, g, 64);
    run(
        port,
        &pd,
        &[
            ("a SEND from read-only pages", &send_from, WcStatus::Success, Some(WcStatus::Success)),
            ("a READ of read-only pages", &read_from, WcStatus::Success, None),
            (
                "a receive into read-only pages",
                &|p| {
                    p.recv_b(&mr, pages, 64);
                    p.send_a(WrOpcode::Send, &gmr, g, 64);
                },
                WcStatus::RemOpErr,
                Some(WcStatus::LocProtErr),
            ),
            (
                "a WRITE into read-only pages",
                &|p| p.send_a(WrOpcode::RdmaWrite { remote_addr, rkey }, &gmr, g, 64),
                WcStatus::RemAccessErr,
                None,
            ),
            (
                "a FETCH ADD on read-only pages",
                &|p| {
                    p.send_a(WrOpcode::AtomicFetchAdd { remote_addr, rkey, add: 1 }, &gmr, g, 8);
                },
                WcStatus::RemAccessErr,
                None,
            ),
            (
                "a READ's response into read-only pages",
                &|p| {
                    p.send_a(WrOpcode::RdmaRead { remote_addr: g as u64, rkey: gmr.rkey() }, &mr, pages, 64);
                },
                WcStatus::LocProtErr,
                None,
            ),
        ],
    );
    assert!(matches!(reg(&pd, pages, P, access::LOCAL_WRITE), Err(Error::BadAddress(_))), "read-only for writing");
    protect(pages, 2, libc::PROT_NONE);
    run(
        port,
        &pd,
        &[
            ("a SEND from PROT_NONE pages", &send_from, WcStatus::LocProtErr, None),
            ("a READ of PROT_NONE pages", &read_from, WcStatus::RemAccessErr, None),
        ],
    );
    drop(mr);
    unmap(pages, 2);
    drop(gmr);
}

/// (f) on each port: an MR whose second page goes away after registration, and accesses that
/// straddle the first page, still mapped, and the second: each fails, as an access to a
/// page wholly gone, and one inside the first page still succeeds.
fn half_unmapped_after_registration(port: &Port) {
    let pd = port.dev.alloc_pd().unwrap();
    let mut good = vec![0u8; 2 * P];
    let g = good.as_mut_ptr();
    let gmr = reg(&pd, g, good.len(), ALL).unwrap();
    let half = fresh(2);
    let mr = reg(&pd, half, 2 * P, ALL).expect("mapped at registration");
    unmap(half.wrapping_add(P), 1);
    let (straddle, rkey) = (half.wrapping_add(P - 32), mr.rkey());
    run(
        port,
        &pd,
        &[
            (
                "SEND across the boundary",
                &|p| {
                    p.recv_b(&gmr, g, 64);
                    p.send_a(WrOpcode::Send, &mr, straddle, 64);
                },
                WcStatus::LocProtErr,
                None,
            ),
            (
                "a receive across the boundary",
                &|p| {
                    p.recv_b(&mr, straddle, 64);
                    p.send_a(WrOpcode::Send, &gmr, g, 64);
                },
                WcStatus::RemOpErr,
                Some(WcStatus::LocProtErr),
            ),
            (
                "a READ across the boundary",
                &|p| {
                    p.send_a(WrOpcode::RdmaRead { remote_addr: straddle as u64, rkey }, &gmr, g, 64);
                },
                WcStatus::RemAccessErr,
                None,
            ),
            (
                "a WRITE across the boundary",
                &|p| {
                    p.send_a(WrOpcode::RdmaWrite { remote_addr: straddle as u64, rkey }, &gmr, g, 64);
                },
                WcStatus::RemAccessErr,
                None,
            ),
            (
                "a SEND from the page still mapped",
                &|p| {
                    p.recv_b(&gmr, g, 32);
                    p.send_a(WrOpcode::Send, &mr, straddle, 32);
                },
                WcStatus::Success,
                Some(WcStatus::Success),
            ),
        ],
    );
    drop((mr, gmr));
    unmap(half, 1);
}

#[test]
fn accesses_straddling_a_page_that_went_away_fail_on_the_loopback_port() {
    half_unmapped_after_registration(&Port::loopback());
}

#[test]
fn accesses_straddling_a_page_that_went_away_fail_on_the_roce_port() {
    half_unmapped_after_registration(&Port::roce());
}

#[test]
fn unmapped_pages_fail_their_work_requests_on_the_loopback_port() {
    unmapped_after_registration(&Port::loopback());
}

#[test]
fn unmapped_pages_fail_their_work_requests_on_the_roce_port() {
    unmapped_after_registration(&Port::roce());
}

#[test]
fn protected_pages_fail_the_accesses_they_no_longer_allow_on_the_loopback_port() {
    protected_after_registration(&Port::loopback());
}

#[test]
fn protected_pages_fail_the_accesses_they_no_longer_allow_on_the_roce_port() {
    protected_after_registration(&Port::roce());
}
