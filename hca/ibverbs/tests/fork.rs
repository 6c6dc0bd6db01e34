//! `fork()` and the library (issue 21 §5, `ibv_fork_init(3)`, `ibv_is_fork_initialized(3)`):
//! fork protection is not needed (`IBV_FORK_UNNEEDED`, as libibverbs answers on kernels that copy
//! DMA pages on fork); a process that forks after registering memory keeps its verbs and data
//! path, the child's writes to the registered pages never reaching it (copy on write: the model
//! runs in the parent); and the child, whose devices are the parent's, gets an error from every
//! verb at once — never a wait without end (its model's threads did not follow it) — while the
//! verbs that touch no device (strings) still answer there.
//!
//! A test binary of its own: `fork()` copies the whole process at that instant; in a binary
//! shared with other tests the child would inherit their devices, descriptors and locks held
//! mid-operation, and what this test checks would depend on them.

mod ports;

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use ports::*;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `enum ibv_fork_status`'s `IBV_FORK_UNNEEDED`.
const IBV_FORK_UNNEEDED: i32 = 2;

#[test]
fn fork_protection_is_unneeded() {
    assert_eq!(ibv_fork_init(), 0);
    assert_eq!(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
}

/// What the child checks, as its exit status: 0 when every verb failed as it should, else the
/// number of the first check that did not. Runs in the child: no allocation, no lock.
fn child_checks(p: &RcPair) -> i32 {
    let mut sg = p.a.sge(0, 16);
    let sg: *mut ibv_sge = &mut sg;
    // SAFETY: the parent's objects, valid memory in the child's copy; each verb must refuse them.
    unsafe {
        // The child scribbles on the registered buffer: its own copy only.
        std::ptr::write_bytes(p.a.buf.as_ptr() as *mut u8, 0xee, 64);
        let checks: [&dyn Fn() -> bool; 10] = [
            &|| ibv_alloc_pd(p.a.ctx).is_null() && errno() == libc::EIO,
            &|| ibv_create_cq(p.a.ctx, 4, null_mut(), null_mut(), 0).is_null(),
            &|| post_send(p.qa, &mut send_wr(1, IBV_WR_SEND, sg, 1)) == libc::EIO,
            &|| post_recv(p.qb, 2, sg, 1) == libc::EIO,
            &|| poll(p.a.scq, &mut [ibv_wc::default(); 4]) == -libc::EIO,
            &|| ibv_destroy_qp(p.qa) == libc::EIO,
            &|| ibv_dereg_mr(p.a.mr) == libc::EIO && ibv_dealloc_pd(p.a.pd) == libc::EIO,
            &|| ibv_close_device(p.a.ctx) == libc::EIO,
            &|| ibv_get_device_list(null_mut()).is_null(),
            &|| *ibv_wc_status_str(5) == b'W' as libc::c_char,
        ];
        checks.iter().position(|c| !c()).map_or(0, |i| i as i32 + 1)
    }
}

/// Forks while another thread of the parent posts and polls, so the child may start with a lock
/// of the model held; waits for the child within a bound (killing it past that) and returns its
/// exit status, or `None` if it had to be killed.
fn fork_and_wait(p: &RcPair) -> Option<i32> {
    let busy = AtomicBool::new(true);
    // The CQ's address, to poll from the other thread (the library's objects are thread-safe).
    let rcq = p.b.rcq as usize;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut wc = [ibv_wc::default(); 4];
            while busy.load(Ordering::Relaxed) {
                poll(rcq as *mut ibv_cq, &mut wc);
            }
        });
        std::thread::sleep(Duration::from_millis(5));
        // SAFETY: the child runs `child_checks` (no allocation) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(child_checks(p)) };
        }
        busy.store(false, Ordering::Relaxed);
        assert!(pid > 0, "fork: errno {}", errno());
        let mut status = 0;
        // SAFETY: waits for our own child without blocking.
        let exited =
            ib_core::time::poll_until(WAIT, || unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid);
        if !exited {
            // SAFETY: our child, hung: killed and reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        Some(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 100 + libc::WTERMSIG(status) })
    })
}

#[test]
fn after_fork_the_parent_works_and_the_child_gets_errors_at_once() {
    // Taken once before the fork, so the child's string lookup allocates nothing.
    let _ = ibv_wc_status_str(0);
    let p = RcPair::new(Port::Loopback);
    let pattern: Vec<u8> = (0..64u8).collect();
    // SAFETY: the registered buffer is ours to write; the device reads it only when posted.
    unsafe { std::ptr::copy_nonoverlapping(pattern.as_ptr(), p.a.buf.as_ptr() as *mut u8, 64) };
    assert_eq!(fork_and_wait(&p), Some(0), "the child's verbs failed at once (0), else the check that did not");
    // The parent's verbs and data path, over the pages the child wrote to in its copy.
    let mut rs = p.b.sge(8192, 64);
    assert_eq!(post_recv(p.qb, 7, &mut rs, 1), 0);
    let mut s = p.a.sge(0, 64);
    assert_eq!(post_send(p.qa, &mut send_wr(8, IBV_WR_SEND, &mut s, 1)), 0);
    assert_eq!(poll_n(p.a.scq, 1)[0].status, 0);
    assert_eq!(poll_n(p.b.rcq, 1)[0].byte_len, 64);
    assert_eq!(&p.b.buf[8192..8256], &pattern[..], "the parent's bytes, not the child's");
    // SAFETY: the parent's PD, still its own.
    let pd = unsafe { ibv_alloc_pd(p.a.ctx) };
    assert!(!pd.is_null());
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_dealloc_pd(pd) }, 0);
    p.close();
}
