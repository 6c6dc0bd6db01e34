//! Contexts through the C entry points (issue 21 §3): `ibv_context.cmd_fd` is an open file a
//! program can `dup`, `fstat` and `close`, as rdma-core programs handle the uverbs file (to hand
//! a context to `ibv_import_device`, or share a PD), owned by the context and closed by
//! `ibv_close_device` as libibverbs closes it; the import verbs answer `EOPNOTSUPP`, as
//! libibverbs 44 over rdma-core's pvrdma provider (no `import_context`) does.
//!
//! A test binary of its own with one test: it checks that a closed descriptor is gone, which
//! another test of the same process opening files at the same moment could blur.

use ibverbs_compat::*;
use std::ptr::null_mut;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn fstat(fd: i32) -> Option<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fstat` writes a whole `stat` on success.
    (unsafe { libc::fstat(fd, st.as_mut_ptr()) } == 0).then(|| unsafe { st.assume_init() })
}

#[test]
fn cmd_fd_is_a_file_of_the_context_and_imports_answer_eopnotsupp() {
    // SAFETY: the library's entry points with valid arguments; every descriptor used is the
    // context's or one made here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        assert!(!list.is_null() && !(*list).is_null(), "the default model device");
        let ctx = ibv_open_device(*list);
        let other = ibv_open_device(*list);
        ibv_free_device_list(list);
        assert!(!ctx.is_null() && !other.is_null());
        let fd = (*ctx).cmd_fd;
        assert!(fd >= 0, "cmd_fd {fd}");
        assert_ne!(fd, (*other).cmd_fd, "each context has its own");
        assert_ne!(fd, (*ctx).async_fd);
        let flags = libc::fcntl(fd, libc::F_GETFD);
        assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0, "close-on-exec: {flags}");
        let st = fstat(fd).expect("fstat(cmd_fd)");
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFCHR, "a character device, as the uverbs file is");

        // A program's copy: usable, importable as far as libibverbs goes, closed by the program.
        let copy = libc::dup(fd);
        assert!(copy >= 0, "dup: errno {}", errno());
        assert_eq!(fstat(copy).map(|s| s.st_rdev), Some(st.st_rdev));
        *libc::__errno_location() = 0;
        assert!(ibv_import_device(copy).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP, "the provider has no import_context");
        assert_eq!(libc::close(copy), 0);
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        for (what, null) in [
            ("import_pd", ibv_import_pd(ctx, (*pd).handle).is_null()),
            ("import_mr", ibv_import_mr(pd, 1).is_null()),
            ("import_dm", ibv_import_dm(ctx, 1).is_null()),
        ] {
            assert!(null, "{what}");
            assert_eq!(errno(), libc::EOPNOTSUPP, "{what}");
        }
        ibv_unimport_pd(null_mut());
        assert_eq!(fstat(fd).map(|s| s.st_rdev), Some(st.st_rdev), "the context's own stays open");

        // ibv_close_device closes it (and the async fd), as libibverbs's verbs_uninit_context.
        assert_eq!(ibv_dealloc_pd(pd), 0);
        let async_fd = (*ctx).async_fd;
        assert_eq!(ibv_close_device(ctx), 0);
        assert_eq!(libc::fcntl(fd, libc::F_GETFD), -1, "cmd_fd closed");
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(libc::fcntl(async_fd, libc::F_GETFD), -1, "async_fd closed");
        assert!(fstat((*other).cmd_fd).is_some(), "another context's stays open");
        assert_eq!(ibv_close_device(other), 0);
    }
}
