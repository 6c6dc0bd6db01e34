//! What every entry point shares: catching panics at the C boundary, libibverbs's two ways of
//! failing (an `int` errno, or NULL/-1 with `errno` set), and reaching the box behind a C
//! pointer.

use ib_core::Error;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::time::Duration;

/// Runs `f` for an entry point that reaches a device or its objects; a panic inside it is
/// caught (it must not unwind into C), sets `errno` to `EIO` and returns `failed`. In a child
/// forked after this process opened its devices ([`watch_fork`]) it returns `failed` with `EIO`
/// at once: the devices are the parent's (a model's threads and a VFIO function stay with it),
/// so a verb there could wait for ever on a lock another thread held at the fork, or reach the
/// parent's hardware. libibverbs leaves a child's use of its parent's objects undefined.
pub(crate) fn guard<R>(failed: R, f: impl FnOnce() -> R) -> R {
    if FORKED.load(Ordering::Relaxed) {
        set_errno(libc::EIO);
        return failed;
    }
    guard_pure(failed, f)
}

/// [`guard`] for an entry point that reaches no device (strings, sysfs paths, the marshalling
/// helpers): it works in a forked child too.
pub(crate) fn guard_pure<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// Set in a child forked after [`watch_fork`].
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// From now on a child this process forks is marked as such (a `pthread_atfork` handler), so
/// that [`guard`] refuses the parent's devices there. Called when the devices are opened.
pub(crate) fn watch_fork() {
    static ONCE: Once = Once::new();
    // SAFETY: registers a child handler that only stores to an atomic (async-signal-safe).
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forked));
    });
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e }
}

/// An `int` verb's answer as libibverbs gives it: 0, or the positive errno of the failure
/// (`ibv_modify_qp`, `ibv_destroy_cq`, `ibv_dealloc_pd`, `ibv_req_notify_cq`, ...). `errno` is
/// set too, as several libibverbs verbs leave it set.
pub(crate) fn status(r: ib_core::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// The errno of `e` (the core's one table), also stored in `errno`.
pub(crate) fn errno_of(e: &Error) -> i32 {
    fail(why(e))
}

/// The errno of the core's error `e` (the one table, [`Error::errno`]); with `HCA_DEBUG` set
/// (to anything but empty or `0`) the reason the program cannot see goes to stderr first, one
/// line: `libibverbs: invalid argument: RoCE needs a global route (errno 22)`. "No event
/// pending" on a non-blocking channel (`EAGAIN`) and a wait a signal ended (`EINTR`) are no
/// refusals and get no line.
pub(crate) fn why(e: &Error) -> i32 {
    let errno = e.errno();
    if debug() && !matches!(e, Error::WouldBlock | Error::Interrupted) {
        eprintln!("libibverbs: {e} (errno {errno})");
    }
    errno
}

/// Whether `HCA_DEBUG` asks for reasons (read once per process).
fn debug() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("HCA_DEBUG").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// An `int` verb's failure of the library's own finding (a NULL argument, a value out of
/// range): the positive `errno`, also stored in `errno` (as [`status`] does for the core's).
pub(crate) fn fail(errno: i32) -> i32 {
    set_errno(errno);
    errno
}

/// A pointer verb's failure: NULL with `errno` set (`ibv_create_cq`, `ibv_reg_mr`, ...).
pub(crate) fn null<T>(errno: i32) -> *mut T {
    set_errno(errno);
    std::ptr::null_mut()
}

/// A `-1`-style failure (`ibv_get_cq_event`, `ibv_get_async_event`, `ibv_query_gid`): -1 with
/// `errno` set.
pub(crate) fn minus_one(errno: i32) -> i32 {
    set_errno(errno);
    -1
}

/// The box of type `B` whose first field the C pointer `p` points at (every object this
/// library hands out is `#[repr(C)]` with the libibverbs struct first); `None` for NULL.
///
/// # Safety
/// `p` is NULL or was handed out by this library as the first field of a live `B`.
pub(crate) unsafe fn boxed<'a, B, T>(p: *const T) -> Option<&'a B> {
    // SAFETY: the caller's promise: `p` is the address of a live `B` (its first field).
    unsafe { p.cast::<B>().as_ref() }
}

/// Destroys the core object inside the box at `p` with `destroy`, which hands it back on
/// failure (busy): on success the box is freed and 0 returned; on failure the object goes back
/// in place (the program's pointer stays valid) and the errno is returned.
///
/// # Safety
/// `p` is a live box of this library, leaked with `Box::leak`, that no other thread uses
/// meanwhile (as libibverbs requires of a destroy); `field` returns the address of the core
/// object inside it.
pub(crate) unsafe fn destroy_boxed<B, T>(
    p: *mut B,
    field: impl FnOnce(*mut B) -> *mut T,
    destroy: impl FnOnce(T) -> Result<(), (T, Error)>,
) -> i32 {
    let slot = field(p);
    // SAFETY: `slot` is the live core object inside the box; it is either written back below or
    // the box is freed without dropping it again.
    let core = unsafe { std::ptr::read(slot) };
    match destroy(core) {
        Ok(()) => {
            // SAFETY: the box came from `Box::leak`; `ManuallyDrop` has `B`'s layout and skips
            // dropping the core object, which `destroy` consumed.
            drop(unsafe { Box::from_raw(p.cast::<std::mem::ManuallyDrop<B>>()) });
            // The rest of the box (the libibverbs struct, plain data) needs no drop.
            0
        }
        Err((core, e)) => {
            // SAFETY: the slot read above, still allocated.
            unsafe { std::ptr::write(slot, core) };
            errno_of(&e)
        }
    }
}

/// One slice of a wait without bound: the wait of `ibv_destroy_cq` for acknowledgements has no
/// timeout, while the core's has one, so the library waits slice after slice.
/// (`ibv_get_cq_event` and `ibv_get_async_event` wait without bound in the core, in `read(2)`,
/// so a signal ends them as it ends the kernel's read: EINTR.)
/// (`ibv_destroy_qp` passes the core [`ib_core::time::FAR_FUTURE`] instead: a QP's destroy has
/// no later step bounded by the same deadline, while a CQ's teardown waits until it again.)
pub(crate) const WAIT_SLICE: Duration = Duration::from_secs(1);
