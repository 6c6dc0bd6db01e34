//! The consumer's own memory (an external region, [`super::GuestMemory::map_external`]) reached
//! without ever faulting (`docs/memory.md`).
//!
//! User space cannot pin a page against the program's own `munmap` or `mprotect`, so the device
//! never dereferences a pointer into that memory: every access is a copy the kernel makes for
//! this process, which answers a page that is gone or lacks the protection with an error instead
//! of a signal. The way is chosen once per process ([`access`]):
//!
//! - [`Access::VmRw`]: `process_vm_readv(2)`/`process_vm_writev(2)` on this process itself: one
//!   system call per access, with one iovec per piece of a gathered or scattered SGE list (up to
//!   `UIO_MAXIOV` per call). The kernel honours the protections the program set (a write to a
//!   page made read-only fails), as a pinned page's IOMMU mapping would honour its permissions.
//! - [`Access::ProcMem`], when the kernel or a sandbox (seccomp) refuses those calls:
//!   `pread(2)`/`pwrite(2)` on `/proc/self/mem`. Still never a fault, but the kernel's access
//!   there ignores the protections (`FOLL_FORCE`): after `mprotect(PROT_READ)` the device's
//!   writes still land, as a kernel stack's would into its pinned pages. The open file names the
//!   address space of the process that opened it, so a forked child reopens it for its own
//!   ([`follow_forks`]).
//! - neither: the process cannot reach its memory safely, and registration is refused
//!   ([`super::MemError::Unsupported`]) rather than risking a fault.
//!
//! Registration checks the range as Linux's `ib_umem_get` pins it ([`check_mapped`]): every page
//! mapped writable when the MR may be written, readable otherwise. The check reads `/proc/self/maps`;
//! without it (no `/proc`), each page is probed with a one-byte read instead, which proves
//! readability only (a page that cannot be written then fails at the first write, in a
//! completion). An 8-byte atomic ([`Access::atomic_u64`]) is a read, the operation and a write
//! under one lock of the whole process: atomic against every other device atomic of the process
//! (two devices mapping the same pages included), which is what `IBV_ATOMIC_HCA` promises, and
//! not against the CPU's own atomics.

use super::Atomic64;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

/// Most iovecs one `process_vm_readv`/`process_vm_writev` call takes (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;
/// Bytes of one page (the check's unit, as the pin's).
const PAGE: usize = 4096;
/// What zeroing copies from.
static ZEROS: [u8; PAGE] = [0; PAGE];
/// Serializes every device atomic on the consumer's memory in this process (see the module docs).
static ATOMICS: Mutex<()> = Mutex::new(());

/// This process's id once read, 0 before (and again in the child of a `fork`): see [`pid`].
static PID: AtomicI32 = AtomicI32::new(0);

/// This process's id. `getpid` is a system call (about a tenth of the copy's own cost here), so
/// the id is kept, and forgotten in the child of every `fork` by a `pthread_atfork` handler: a
/// child never reaches its parent's memory through a stale id. Without the handler (its
/// registration failed) the id is read at every call.
fn pid() -> libc::pid_t {
    static KEEP: OnceLock<bool> = OnceLock::new();
    let kept = PID.load(Ordering::Relaxed);
    if kept != 0 {
        return kept;
    }
    // SAFETY: getpid takes no arguments and cannot fail.
    let id = unsafe { libc::getpid() };
    if *KEEP.get_or_init(forget_at_fork) {
        PID.store(id, Ordering::Relaxed);
    }
    id
}

/// Registers the child handler that forgets [`PID`]; whether it could.
fn forget_at_fork() -> bool {
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    // SAFETY: registers a child handler that only stores to an atomic (async-signal-safe, as a
    // handler run in the child of a multithreaded fork must be); no prepare or parent handler.
    let r = unsafe { libc::pthread_atfork(None, None, Some(forget)) };
    if r != 0 {
        tracing::warn!(errno = r, "pthread_atfork failed: the process id is read at every access");
    }
    r == 0
}

/// An access that did not complete: a page it touched is unmapped or lacks the protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fault;

/// One piece of a vectored access: `len` bytes at the process address `addr`, and byte `at` of
/// the local buffer they come from or go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub addr: usize,
    pub at: usize,
    pub len: usize,
}

/// Pieces of one vectored access, merged where they continue each other.
#[derive(Default)]
pub(crate) struct Pieces(SmallVec<[Piece; 8]>);

impl Pieces {
    /// Adds `p`, extending the last piece when `p` continues it in both memories.
    pub(crate) fn push(&mut self, p: Piece) {
        match self.0.last_mut() {
            Some(last) if last.addr.checked_add(last.len) == Some(p.addr) && last.at + last.len == p.at => {
                last.len += p.len;
            }
            _ => self.0.push(p),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn as_slice(&self) -> &[Piece] {
        &self.0
    }
}

/// The way this process reaches its own memory without faulting (see the module docs).
#[derive(Debug)]
pub(crate) enum Access {
    /// `process_vm_readv`/`process_vm_writev` on this process.
    VmRw,
    /// `pread`/`pwrite` on `/proc/self/mem`, kept open.
    ProcMem(File),
}

/// The way chosen for this process, detected at the first call; `None` if there is none.
pub(crate) fn access() -> Option<&'static Access> {
    static CHOSEN: OnceLock<Option<Access>> = OnceLock::new();
    CHOSEN.get_or_init(|| Access::detect().filter(follow_forks)).as_ref()
}

/// The descriptor of the process's `/proc/self/mem` ([`access`]'s fallback), -1 without one.
static PROC_MEM_FD: AtomicI32 = AtomicI32::new(-1);
/// Set in a forked child that could not reopen `/proc/self/mem`: the descriptor still names the
/// parent's memory, so every access through it fails.
static PROC_MEM_STALE: AtomicBool = AtomicBool::new(false);

/// Makes the chosen way (`chosen`) keep reaching this process's own memory in a forked child;
/// whether it can. [`Access::VmRw`] names the process by id ([`pid`]). A descriptor of
/// `/proc/self/mem` names the address space of the process that opened it, and a child inherits
/// its parent's: a `pthread_atfork` handler reopens the file in the child onto the same
/// descriptor number ([`reopen_proc_mem`]). Without the handler the fallback is refused: a
/// child's device would read and write its parent's memory.
fn follow_forks(chosen: &Access) -> bool {
    let Access::ProcMem(file) = chosen else { return true };
    PROC_MEM_FD.store(file.as_raw_fd(), Ordering::Relaxed);
    // SAFETY: registers a child handler that makes only async-signal-safe calls (open, dup3,
    // close) and stores to atomics, as a handler run in the child of a multithreaded fork must.
    let r = unsafe { libc::pthread_atfork(None, None, Some(reopen_proc_mem)) };
    if r != 0 {
        tracing::warn!(errno = r, "pthread_atfork failed: /proc/self/mem is not used");
    }
    r == 0
}

/// In a forked child: opens the child's own `/proc/self/mem` in place of the parent's (the same
/// descriptor number, close-on-exec as before), or marks the old one stale if it cannot.
extern "C" fn reopen_proc_mem() {
    let fd = PROC_MEM_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // SAFETY: open with a NUL-terminated path, dup3 onto the descriptor the process-wide `File`
    // owns (replacing the file it names, atomically: no other thread runs in a fresh child),
    // close of the descriptor just opened. All three are async-signal-safe.
    let replaced = unsafe {
        let new = libc::open(c"/proc/self/mem".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        let ok = new >= 0 && libc::dup3(new, fd, libc::O_CLOEXEC) == fd;
        if new >= 0 {
            libc::close(new);
        }
        ok
    };
    if !replaced {
        PROC_MEM_STALE.store(true, Ordering::Relaxed);
    }
}

impl Access {
    /// The first way that works here: each is tried on memory of this function's own.
    pub(crate) fn detect() -> Option<Access> {
        if Access::VmRw.works() {
            return Some(Access::VmRw);
        }
        tracing::warn!("process_vm_readv/writev refused: the model reaches registered memory through /proc/self/mem");
        let file = File::options().read(true).write(true).open("/proc/self/mem");
        match file.map(Access::ProcMem) {
            Ok(a) if a.works() => return Some(a),
            Ok(_) => tracing::warn!("/proc/self/mem refused"),
            Err(e) => tracing::warn!(error = %e, "/proc/self/mem cannot be opened"),
        }
        tracing::warn!("no fault-safe way to reach this process's memory: user memory cannot be registered");
        None
    }

    /// Whether a read and a write of this stack frame's bytes go through.
    fn works(&self) -> bool {
        let (src, mut dst) = ([0xa5u8; 8], [0u8; 8]);
        let read = self.read(&mut dst, &[Piece { addr: src.as_ptr() as usize, at: 0, len: 8 }]);
        let mut target = [0u8; 8];
        let write = self.write(&src, &[Piece { addr: target.as_mut_ptr() as usize, at: 0, len: 8 }]);
        // The kernel wrote `target` behind the compiler's back: read it as volatile.
        // SAFETY: `target` is a live local array; a volatile read of it is always valid.
        let target = unsafe { std::ptr::read_volatile(&target) };
        read.is_ok() && write.is_ok() && dst == src && target == src
    }

    /// Copies each piece's `len` bytes at `addr` into `buf[at..at + len]`.
    ///
    /// Errors: [`Fault`] if a byte could not be read (what was read before may have landed); a
    /// piece outside `buf` is a fault too, with nothing read.
    pub(crate) fn read(&self, buf: &mut [u8], pieces: &[Piece]) -> Result<(), Fault> {
        in_bounds(buf.len(), pieces)?;
        match self {
            // SAFETY: `buf` is a live buffer of its length, writable, and the pieces lie in it.
            Access::VmRw => unsafe { vm_rw(buf.as_mut_ptr(), pieces, false) },
            Access::ProcMem(f) => pieces.iter().try_for_each(|p| {
                proc_mem_live(f)?;
                f.read_exact_at(&mut buf[p.at..p.at + p.len], p.addr as u64).map_err(|_| Fault)
            }),
        }
    }

    /// Copies each piece's `len` bytes of `data` at `at` to `addr`.
    ///
    /// Errors: as [`Access::read`].
    pub(crate) fn write(&self, data: &[u8], pieces: &[Piece]) -> Result<(), Fault> {
        in_bounds(data.len(), pieces)?;
        match self {
            // SAFETY: `data` is a live buffer of its length and the pieces lie in it; the kernel
            // only reads the local side of a write.
            Access::VmRw => unsafe { vm_rw(data.as_ptr().cast_mut(), pieces, true) },
            Access::ProcMem(f) => pieces.iter().try_for_each(|p| {
                proc_mem_live(f)?;
                f.write_all_at(&data[p.at..p.at + p.len], p.addr as u64).map_err(|_| Fault)
            }),
        }
    }

    /// Fills `len` bytes at `addr` with zero.
    pub(crate) fn zero(&self, addr: usize, len: usize) -> Result<(), Fault> {
        let mut done = 0;
        while done < len {
            let mut pieces: SmallVec<[Piece; 64]> = SmallVec::new();
            while done < len && pieces.len() < 64 {
                let n = PAGE.min(len - done);
                pieces.push(Piece { addr: addr.checked_add(done).ok_or(Fault)?, at: 0, len: n });
                done += n;
            }
            self.write(&ZEROS, &pieces)?;
        }
        Ok(())
    }

    /// Applies `op` to the 8 bytes at `addr` (little-endian) under the process-wide atomics
    /// lock and returns what they held; an operation that leaves the value as it was (a
    /// COMPARE SWAP that does not match) writes nothing.
    ///
    /// Errors: [`Fault`] if the bytes cannot be read, or cannot be written when they change
    /// (then nothing changed).
    pub(crate) fn atomic_u64(&self, addr: usize, op: Atomic64) -> Result<u64, Fault> {
        let _serial = ATOMICS.lock();
        let mut b = [0u8; 8];
        self.read(&mut b, &[Piece { addr, at: 0, len: 8 }])?;
        let old = u64::from_le_bytes(b);
        let new = op.apply(old);
        if new != old {
            self.write(&new.to_le_bytes(), &[Piece { addr, at: 0, len: 8 }])?;
        }
        Ok(old)
    }
}

/// [`Fault`] if `f` is the process's `/proc/self/mem` and still names a parent's memory (this
/// forked child could not reopen it, [`reopen_proc_mem`]).
fn proc_mem_live(f: &File) -> Result<(), Fault> {
    let stale = PROC_MEM_STALE.load(Ordering::Relaxed) && PROC_MEM_FD.load(Ordering::Relaxed) == f.as_raw_fd();
    if stale {
        Err(Fault)
    } else {
        Ok(())
    }
}

/// Whether every piece lies inside a local buffer of `len` bytes.
fn in_bounds(len: usize, pieces: &[Piece]) -> Result<(), Fault> {
    let inside = |p: &Piece| p.at.checked_add(p.len).is_some_and(|end| end <= len);
    if pieces.iter().all(inside) {
        Ok(())
    } else {
        Err(Fault)
    }
}

/// `process_vm_readv` (into `local`) or `process_vm_writev` (from `local`) of `pieces` on this
/// process, [`IOV_MAX`] pieces per call.
///
/// # Safety
/// Every piece's `[at, at + len)` lies inside one live buffer at `local`, writable for a read
/// (the kernel writes it) and readable for a write.
unsafe fn vm_rw(local: *mut u8, pieces: &[Piece], write: bool) -> Result<(), Fault> {
    for chunk in pieces.chunks(IOV_MAX) {
        let iov = |base: *mut u8, len| libc::iovec { iov_base: base.cast(), iov_len: len };
        // `wrapping_add` keeps the local pointers inside the buffer (checked by the caller).
        let locals: SmallVec<[libc::iovec; 8]> = chunk.iter().map(|p| iov(local.wrapping_add(p.at), p.len)).collect();
        let remotes: SmallVec<[libc::iovec; 8]> = chunk.iter().map(|p| iov(p.addr as *mut u8, p.len)).collect();
        let want: usize = chunk.iter().map(|p| p.len).sum();
        let n = locals.len() as libc::c_ulong;
        let pid = pid();
        // The remote iovecs are only addresses: the kernel checks them against the mappings of
        // process `pid`, this one (a forked child's own: see `pid`), and fails instead of faulting.
        // SAFETY: the local iovecs cover the caller's buffer (writable for a read, readable for a
        // write: the function's contract); both arrays hold `n` entries and outlive the call.
        let done = unsafe {
            if write {
                libc::process_vm_writev(pid, locals.as_ptr(), n, remotes.as_ptr(), n, 0)
            } else {
                libc::process_vm_readv(pid, locals.as_ptr(), n, remotes.as_ptr(), n, 0)
            }
        };
        if usize::try_from(done).ok() != Some(want) {
            return Err(Fault);
        }
    }
    Ok(())
}

/// Checks that every page holding `[addr, addr + len)` is mapped writable if `writable`, else
/// readable: what Linux's `ib_umem_get` demands when it pins them (`check_vma_flags`: a pin for
/// write, `FOLL_WRITE`, needs `VM_WRITE` alone, so a write-only mapping pins for a writable MR;
/// a pin for read needs `VM_READ`).
///
/// Errors: [`Fault`] for a page that is not mapped or lacks the protection.
pub(crate) fn check_mapped(access: &Access, addr: usize, len: usize, writable: bool) -> Result<(), Fault> {
    let start = addr & !(PAGE - 1);
    let end = addr.checked_add(len).and_then(|e| e.checked_next_multiple_of(PAGE)).ok_or(Fault)?;
    match std::fs::read("/proc/self/maps") {
        Ok(maps) if covered(&maps, start, end, writable) => Ok(()),
        Ok(_) => Err(Fault),
        Err(e) => {
            tracing::debug!(error = %e, "no /proc/self/maps: probing each page for reading");
            probe_pages(access, start, end)
        }
    }
}

/// Reads one byte of each page of `[start, end)` (page-aligned).
fn probe_pages(access: &Access, start: usize, end: usize) -> Result<(), Fault> {
    let pages = (end - start) / PAGE;
    let mut sink = [0u8; IOV_MAX];
    for first in (0..pages).step_by(IOV_MAX) {
        let n = (pages - first).min(IOV_MAX);
        let pieces: Vec<Piece> = (0..n).map(|k| Piece { addr: start + (first + k) * PAGE, at: k, len: 1 }).collect();
        access.read(&mut sink[..n], &pieces)?;
    }
    Ok(())
}

/// Whether the mappings `maps` lists (`/proc/self/maps`'s text: `start-end perms ...` per line,
/// in address order) cover `[start, end)` without a gap, each writable if `writable`, else
/// readable (see [`check_mapped`]).
pub(crate) fn covered(maps: &[u8], start: usize, end: usize, writable: bool) -> bool {
    let mut need = start;
    for line in maps.split(|&b| b == b'\n') {
        let Some((lo, hi, perms)) = parse_line(line) else { continue };
        if hi <= need {
            continue;
        }
        let allowed = if writable { perms.get(1) == Some(&b'w') } else { perms.first() == Some(&b'r') };
        if lo > need || !allowed {
            return false;
        }
        need = hi;
        if need >= end {
            return true;
        }
    }
    need >= end
}

/// A maps line's start, end and permission letters.
fn parse_line(line: &[u8]) -> Option<(usize, usize, &[u8])> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let perms = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let hex = |s: &[u8]| usize::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok();
    Some((hex(&range[..dash])?, hex(&range[dash + 1..])?, perms))
}
