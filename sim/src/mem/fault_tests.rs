//! The consumer's pages under a mapping (issue 21 §2): registration checks every page as Linux's
//! `ib_umem_get` pins it, and once the program unmaps a page or changes its protection, every
//! access to it fails with [`MemError::Fault`] instead of killing the process; the fallback
//! through `/proc/self/mem` when a sandbox refuses `process_vm_readv`/`writev`.

use super::user::{covered, Access, Piece};
use super::*;
use std::time::{Duration, Instant};
use testpages::{fresh, protect, unmap};

const P: usize = PAGE as usize;

/// Maps `[addr, addr + len)` into `m`, as registration does.
fn map(m: &GuestMemory, addr: usize, len: usize, writable: bool) -> Result<u64, MemError> {
    // SAFETY: only pages of this test's own, which it does not reuse for anything else.
    unsafe { m.map_external(addr, len, writable) }
}

/// Registration answers each range as Linux's pin does: readable pages always, writable ones
/// when the MR may be written; a range straddling a missing page is refused whole.
#[test]
fn registration_checks_every_page_as_linux_pins_it() {
    let m = GuestMemory::new(1 << 20);
    let base = fresh(6);
    unmap(base + P, 1);
    protect(base + 2 * P, 1, libc::PROT_READ);
    protect(base + 3 * P, 1, libc::PROT_NONE);
    let not = |addr, len, writable| Err(MemError::NotMapped { addr: addr as u64, len: len as u64, writable });
    for (what, addr, len, writable) in [
        ("unmapped", base + P, P, false),
        ("read-only, for writing", base + 2 * P, P, true),
        ("PROT_NONE, for reading", base + 3 * P, P, false),
        ("a mapped page then an unmapped one", base, 2 * P, false),
    ] {
        assert_eq!(map(&m, addr, len, writable), not(addr, len, writable), "{what}");
    }
    let ro = map(&m, base + 2 * P, P, false).expect("read-only pages for reading");
    let rw = map(&m, base + 4 * P, 2 * P, true).expect("read/write pages for writing");
    assert_eq!(m.regions(), 2, "only what was accepted is mapped");
    // A region mapped for reading refuses the device's writes even over writable pages.
    let rw_for_reading = map(&m, base + 4 * P, P, false).unwrap();
    assert_eq!(m.write(rw_for_reading, b"x"), Err(MemError::Fault { iova: rw_for_reading, len: 1 }));
    assert!(m.write(rw, b"x").is_ok() && m.read(ro, &mut [0u8; 8]).is_ok());
    for iova in [ro, rw, rw_for_reading] {
        assert!(m.free(iova));
    }
    unmap(base, 1);
    unmap(base + 2 * P, 4);
}

/// Every kind of access to a page the program unmapped, or protected, after registration fails
/// with `Fault` and the process lives on; pages still mapped keep working.
#[test]
fn the_consumers_pages_going_away_fail_every_access_instead_of_faulting() {
    let m = GuestMemory::new(1 << 20);
    let base = fresh(2);
    let iova = map(&m, base, 2 * P, true).unwrap();
    let (second, fault) = (iova + PAGE, |iova, len| Some(MemError::Fault { iova, len }));
    m.write(iova + PAGE - 4, b"across!!").unwrap();
    protect(base + P, 1, libc::PROT_READ);
    assert_eq!(m.write(second, b"x").err(), fault(second, 1), "a page made read-only");
    assert_eq!(m.store_u32(second, 7).err(), fault(second, 4));
    assert_eq!(m.zero(second, 8).err(), fault(second, 8));
    assert_eq!(m.atomic_u64(second + 8, Atomic64::FetchAdd(1)).err(), fault(second + 8, 8));
    let no_match = Atomic64::CmpSwap { compare: 1, swap: 2 };
    assert_eq!(m.atomic_u64(second + 8, no_match), Ok(0), "a COMPARE SWAP that changes nothing writes nothing");
    assert_eq!(m.read_u64(iova + PAGE - 4), Ok(u64::from_le_bytes(*b"across!!")), "reads still work");
    assert_eq!(m.load_u32(second), Ok(u32::from_le_bytes(*b"ss!!")));
    m.write(iova, b"first page").unwrap();
    protect(base + P, 1, libc::PROT_NONE);
    assert_eq!(m.read(second, &mut [0u8; 4]).err(), fault(second, 4), "a page made PROT_NONE");
    assert_eq!(m.load_u32(second).err(), fault(second, 4));
    // One access over a good piece and a gone one fails as a whole.
    let (mut two, pieces) = ([0u8; 8], [(iova, 4), (second, 4)]);
    assert_eq!(m.read_pieces(&pieces, &mut two).err(), fault(iova, 8));
    assert_eq!(m.write_pieces(&pieces, &two).err(), fault(iova, 8));
    unmap(base, 2);
    for at in [iova, second] {
        assert_eq!(m.read(at, &mut [0u8; 16]).err(), fault(at, 16), "unmapped");
        assert_eq!(m.write(at, &[1u8; 16]).err(), fault(at, 16));
        assert_eq!(m.load_u32(at).err(), fault(at, 4));
        assert_eq!(m.atomic_u64(at, Atomic64::FetchAdd(1)).err(), fault(at, 8));
    }
    assert!(m.free(iova));
}

/// A pin for write checks the write permission alone (Linux's `check_vma_flags`), so pages
/// mapped `PROT_WRITE` only register for an MR that may be written, and not for one that is
/// only read. (From a break test of issue 21: both were `NotMapped`, where Linux registers the
/// first.)
#[test]
fn write_only_pages_register_for_writing_only() {
    let m = GuestMemory::new(1 << 20);
    let base = fresh(1);
    protect(base, 1, libc::PROT_WRITE);
    let iova = map(&m, base, P, true).expect("a pin for write of write-only pages");
    assert_eq!(map(&m, base, P, false), Err(MemError::NotMapped { addr: base as u64, len: P as u64, writable: false }));
    assert!(m.free(iova));
    unmap(base, 1);
}

/// The coverage walk over `/proc/self/maps`'s lines: contiguous mappings may cover a range
/// together; a gap, a page without `w` for writing or without `r` for reading refuses it.
#[test]
fn coverage_walks_the_maps_in_address_order() {
    let maps = b"10000-12000 rw-p 00000000 00:00 0\n12000-13000 r--p 00000000 00:00 0 \n\
        13000-14000 rw-p 00000000 00:00 0    [heap]\n20000-21000 ---p 00000000 00:00 0\n\
        00400000-00401000 r-xp 00000000 08:01 1 /bin/x\n00500000-00501000 -w-p 00000000 00:00 0\n";
    for (start, end, writable, want) in [
        (0x10000, 0x12000, true, true),
        (0x10000, 0x14000, false, true),
        (0x10000, 0x14000, true, false),
        (0x13000, 0x14000, true, true),
        (0x13000, 0x15000, false, false),
        (0x20000, 0x21000, false, false),
        (0xf000, 0x11000, false, false),
        (0x400000, 0x401000, false, true),
        (0x500000, 0x501000, true, true),
        (0x500000, 0x501000, false, false),
    ] {
        assert_eq!(covered(maps, start, end, writable), want, "{start:#x}-{end:#x} writable {writable}");
    }
    assert!(!covered(b"garbage\n\n", 0x1000, 0x2000, false));
}

/// The fallback through `/proc/self/mem`: never a fault either; it ignores the protections, so
/// a page made read-only after registration is still written (what a kernel stack does too).
#[test]
fn proc_self_mem_fails_on_missing_pages_and_ignores_protections() {
    let f = std::fs::File::options().read(true).write(true).open("/proc/self/mem").unwrap();
    let a = Access::ProcMem(f);
    let base = fresh(2);
    let piece = |addr, len| [Piece { addr, at: 0, len }];
    a.write(b"0123456789", &piece(base + P - 5, 10)).unwrap();
    protect(base + P, 1, libc::PROT_READ);
    a.write(b"ro", &piece(base + P, 2)).expect("FOLL_FORCE writes a read-only private page");
    let mut got = [0u8; 10];
    a.read(&mut got, &piece(base + P - 5, 10)).unwrap();
    assert_eq!(&got, b"01234ro789");
    assert_eq!(a.atomic_u64(base + P - 8, Atomic64::FetchAdd(1)).map(|_| ()), Ok(()));
    unmap(base + P, 1);
    assert!(a.read(&mut got, &piece(base + P - 5, 10)).is_err(), "a missing page fails");
    assert!(a.write(&got, &piece(base + P, 1)).is_err());
    assert!(a.read(&mut got, &piece(base, 10)).is_ok(), "the page still mapped works");
    unmap(base, 1);
}

/// Set in the child process of [`a_sandbox_refusing_process_vm_rw_gets_the_fallback`].
const SECCOMP_CHILD: &str = "PVRDMA_SIM_SECCOMP_CHILD";

/// Makes `process_vm_readv` and `process_vm_writev` fail with `EPERM` for this thread and the
/// threads it creates, as a seccomp sandbox that refuses them does.
fn refuse_process_vm_rw() {
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JEQ | BPF_K, BPF_RET | BPF_K (linux/bpf_common.h).
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let nr = |n: libc::c_long| n as u32;
    let filter = [
        // The syscall number: `struct seccomp_data`'s first field.
        libc::sock_filter { code: LD_W_ABS, jt: 0, jf: 0, k: 0 },
        libc::sock_filter { code: JEQ_K, jt: 2, jf: 0, k: nr(libc::SYS_process_vm_readv) },
        libc::sock_filter { code: JEQ_K, jt: 1, jf: 0, k: nr(libc::SYS_process_vm_writev) },
        libc::sock_filter { code: RET_K, jt: 0, jf: 0, k: libc::SECCOMP_RET_ALLOW },
        libc::sock_filter { code: RET_K, jt: 0, jf: 0, k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32 },
    ];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: prctl with integer arguments, then with a pointer to `prog`, which lives across
    // the call (the kernel copies the filter).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const _), 0);
    }
}

/// In a child process whose sandbox refuses `process_vm_readv`/`writev`, detection picks
/// `/proc/self/mem`, and a page that went away still fails without a fault. (Run with the
/// variable set, the test is that child.)
#[test]
fn a_sandbox_refusing_process_vm_rw_gets_the_fallback() {
    if std::env::var_os(SECCOMP_CHILD).is_none() {
        return in_sandbox("mem::fault_tests::a_sandbox_refusing_process_vm_rw_gets_the_fallback");
    }
    refuse_process_vm_rw();
    let a = Access::detect();
    assert!(matches!(a, Some(Access::ProcMem(_))), "the fallback is chosen: {a:?}");
    let Some(a) = a else { return };
    let base = fresh(1);
    unmap(base, 1);
    assert!(a.read(&mut [0u8; 4], &[Piece { addr: base, at: 0, len: 4 }]).is_err());
    println!("{SANDBOX_PASSED}");
}

/// On the `/proc/self/mem` fallback, a forked child's copies reach its own memory, never its
/// parent's: a descriptor of that file names the address space of the process that opened it,
/// and the child inherits the parent's. (From a break test of issue 21: the child read its
/// parent's value and its write landed in the parent.) Run with the variable set, the test is
/// the sandboxed child, which forks.
#[test]
fn a_forked_child_on_the_fallback_reaches_its_own_memory() {
    if std::env::var_os(SECCOMP_CHILD).is_none() {
        return in_sandbox("mem::fault_tests::a_forked_child_on_the_fallback_reaches_its_own_memory");
    }
    refuse_process_vm_rw();
    let a = super::user::access().expect("a way to reach this process's memory");
    assert!(matches!(a, Access::ProcMem(_)), "the fallback is chosen: {a:?}");
    let page = fresh(1);
    set_word(page, 1);
    let piece = [Piece { addr: page, at: 0, len: 8 }];
    let mut got = [0u8; 8];
    a.read(&mut got, &piece).unwrap();
    assert_eq!(u64::from_le_bytes(got), 1);
    let child = in_child(|| {
        set_word(page, 2);
        let read = a.read(&mut got, &piece).is_ok() && u64::from_le_bytes(got) == 2;
        read && a.write(&3u64.to_le_bytes(), &piece).is_ok() && word(page) == 3
    });
    assert_eq!(child, 0, "the child reads and writes its own page");
    assert_eq!(word(page), 1, "the parent's page is untouched");
    unmap(page, 1);
    println!("{SANDBOX_PASSED}");
}

/// What a sandboxed child prints when its test passed.
const SANDBOX_PASSED: &str = "sandboxed child passed";

/// Runs the test `name` again in a child process with [`SECCOMP_CHILD`] set (it installs the
/// sandbox itself) and asserts it passed.
fn in_sandbox(name: &str) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(SECCOMP_CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the child did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success() && out.contains(SANDBOX_PASSED), "{status}: {out}");
}

/// Stores `v` in the first 8 bytes of the test's own page `page`.
fn set_word(page: usize, v: u64) {
    // SAFETY: the first 8 bytes of a page of the test's own; nothing else touches them.
    unsafe { std::ptr::write_volatile(page as *mut u64, v) }
}

/// The first 8 bytes of the test's own page `page`.
fn word(page: usize) -> u64 {
    // SAFETY: as `set_word`; the device's copies wrote them behind the compiler, hence volatile.
    unsafe { std::ptr::read_volatile(page as *const u64) }
}

/// Forks a child that runs `body` and leaves with `_exit` (0 if `body` said so, else 1); waits
/// for it (at most 10 s) and returns its exit status.
fn in_child(body: impl FnOnce() -> bool) -> i32 {
    // SAFETY: the child runs only `body` (copies and stores into the test's own pages, no
    // allocation) and leaves with `_exit`.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    if child == 0 {
        let ok = body();
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut status = 0;
    // SAFETY: waits for this test's own child; `status` lives across the call.
    while unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == 0 {
        assert!(Instant::now() < deadline, "the child did not exit within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(libc::WIFEXITED(status), "the child ended with {status:#x}");
    libc::WEXITSTATUS(status)
}

/// The process id the copies name is kept, and forgotten in a forked child: the child's copies
/// reach its own memory, never its parent's (whose page holds another value by then).
#[test]
fn a_forked_child_reaches_its_own_memory() {
    let page = fresh(1);
    set_word(page, 1);
    let mut got = [0u8; 8];
    let piece = [Piece { addr: page, at: 0, len: 8 }];
    Access::VmRw.read(&mut got, &piece).unwrap();
    assert_eq!(u64::from_le_bytes(got), 1, "the id is kept from here on");
    let child = in_child(|| {
        set_word(page, 2);
        Access::VmRw.read(&mut got, &piece).is_ok() && u64::from_le_bytes(got) == 2
    });
    assert_eq!(child, 0, "the child read its own page");
    unmap(page, 1);
}
