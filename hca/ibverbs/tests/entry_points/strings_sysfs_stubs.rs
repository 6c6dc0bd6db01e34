//! The enum names, the sysfs answers for our devices, and the conventions of a few verbs this
//! library does not carry, called through the Rust library (no .so needed).

use ibverbs_compat::*;
use std::ffi::{CStr, CString};

fn text(p: *const libc::c_char) -> String {
    // SAFETY: the functions under test return static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

#[test]
fn names_are_libibverbs_44s() {
    assert_eq!(text(ibv_wc_status_str(0)), "success");
    assert_eq!(text(ibv_wc_status_str(5)), "Work Request Flushed Error");
    assert_eq!(text(ibv_wc_status_str(23)), "TM software rendezvous");
    assert_eq!(text(ibv_wc_status_str(24)), "unknown");
    assert_eq!(text(ibv_wc_status_str(-1)), "unknown");
    assert_eq!(text(ibv_node_type_str(0)), "unknown");
    assert_eq!(text(ibv_node_type_str(1)), "InfiniBand channel adapter");
    assert_eq!(text(ibv_node_type_str(7)), "unspecified");
    assert_eq!(text(ibv_node_type_str(8)), "unknown");
    assert_eq!(text(ibv_port_state_str(4)), "active");
    assert_eq!(text(ibv_port_state_str(6)), "unknown");
    assert_eq!(text(ibv_event_type_str(9)), "port active");
    assert_eq!(text(ibv_event_type_str(19)), "WQ fatal");
    assert_eq!(text(ibv_event_type_str(20)), "unknown");
}

/// `ibv_read_sysfs_file(dir, file)` into a buffer of `size`: (return value, text).
fn read(dir: &str, file: &str, size: usize) -> (i32, String) {
    let (dir, file) = (CString::new(dir).unwrap(), CString::new(file).unwrap());
    let mut buf = vec![0x55u8; size];
    // SAFETY: valid strings and a buffer of `size` bytes.
    let n = unsafe { ibv_read_sysfs_file(dir.as_ptr(), file.as_ptr(), buf.as_mut_ptr().cast(), size) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    (n, String::from_utf8_lossy(&buf[..end]).into_owned())
}

#[test]
fn sysfs_answers_for_our_device() {
    let dir = "/sys/class/infiniband/vmw_pvrdma0";
    assert_eq!(text(ibv_get_sysfs_path()), std::env::var("SYSFS_PATH").unwrap_or("/sys".into()));
    let (n, t) = read(dir, "node_type", 64);
    assert_eq!((n, t.as_str()), (5, "1: CA"));
    let (n, fw) = read(dir, "fw_ver", 64);
    assert!(n > 0 && fw.contains('.'), "{n} {fw}");
    let (n, guid) = read(dir, "node_guid", 64);
    assert_eq!((n, guid.len(), guid.matches(':').count()), (19, 19, 3));
    let (n, ll) = read(dir, "ports/1/link_layer", 64);
    assert!(n > 0 && (ll == "Ethernet" || ll == "InfiniBand"), "{ll}");
    let (n, gid) = read(dir, "ports/1/gids/0", 64);
    assert_eq!((n, gid.matches(':').count()), (39, 7));
    assert_eq!(read(dir, "ports/9/link_layer", 64).0, -1);
    assert_eq!(errno(), libc::ENOENT);
    assert_eq!(read(dir, "no_such_file", 64).0, -1);
    // Text that fills the buffer with no room for its NUL is refused, as libibverbs does.
    assert_eq!(read(dir, "node_type", 5).0, -1);
}

#[test]
fn sysfs_reads_real_files_as_libibverbs() {
    let (n, t) = read("/proc/sys/kernel", "ostype", 64);
    assert_eq!((n, t.as_str()), (5, "Linux"));
    assert_eq!(read("/nonexistent", "x", 64).0, -1);
    assert_eq!(errno(), libc::ENOENT);
}

#[test]
fn unsupported_verbs_answer_as_libibverbs() {
    // SAFETY: the stubs never dereference their arguments.
    unsafe {
        assert!(ibv_create_srq(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL, "SRQs exist: NULL arguments are refused as such");
        assert!(ibv_create_ah(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL, "address handles exist now: a NULL PD is refused");
        assert_eq!(ibv_destroy_srq(std::ptr::null_mut()), libc::EINVAL);
        assert_eq!(ibv_attach_mcast(std::ptr::null_mut(), std::ptr::null(), 0), libc::EOPNOTSUPP);
        assert_eq!(ibv_query_qp_data_in_order(std::ptr::null_mut(), 0, 0), 0);
        assert_eq!(ibv_cmd_poll_cq(std::ptr::null_mut(), 1, std::ptr::null_mut()), -1);
        assert_eq!(ibv_cmd_destroy_qp(std::ptr::null_mut()), libc::EOPNOTSUPP);
        assert_eq!(ibv_dontfork_range(std::ptr::null_mut(), 4096), 0);
    }
    assert_eq!(ibv_fork_init(), 0);
    assert_eq!(ibv_is_fork_initialized(), 2);
}
