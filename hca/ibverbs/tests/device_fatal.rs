//! `hca_device_fatal` (version node `HCA_PRIVATE_1`, for this stack's librdmacm): 0 while the
//! device works, 1 once the model is made fatal, and it takes nothing from the program: the
//! context's `IBV_EVENT_DEVICE_FATAL` is still there for `ibv_get_async_event`. NULL and a
//! context of no device of this library fail with `EINVAL` / `ENOSYS`.
//!
//! A test binary of its own: the device it makes fatal is the process's only one.

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The context's next async event within `within` (its fd set non-blocking), or `None`.
fn async_event(ctx: *mut ibv_context, within: Duration) -> Option<ibv_async_event> {
    // SAFETY: an open context; F_GETFL/F_SETFL on its async fd.
    unsafe {
        let fd = (*ctx).async_fd;
        libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
    }
    let end = Instant::now() + within;
    let mut ev = ibv_async_event { element: ibv_async_event_element { port_num: -1 }, event_type: 99 };
    while Instant::now() < end {
        // SAFETY: as above; `ev` is writable.
        if unsafe { ibv_get_async_event(ctx, &mut ev) } == 0 {
            return Some(ev);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
fn a_fatal_device_is_reported_without_taking_the_programs_event() {
    // SAFETY: the library's entry points with valid arguments (NULL where the test says so).
    unsafe {
        assert_eq!(hca_device_fatal(null_mut()), -1);
        assert_eq!(errno(), libc::EINVAL);
        let list = ibv_get_device_list(null_mut());
        assert!(!list.is_null() && !(*list).is_null(), "the default model device");
        let ctx = ibv_open_device(*list);
        assert!(!ctx.is_null());
        let model = test_model(*list).expect("a model device");
        ibv_free_device_list(list);
        assert_eq!(hca_device_fatal(ctx), 0);
        // A context whose device is none of this library's.
        let mut foreign: ibv_context = std::mem::zeroed();
        let mut other = [0u8; 1024];
        foreign.device = other.as_mut_ptr().cast();
        assert_eq!(hca_device_fatal(&mut foreign), -1);
        assert_eq!(errno(), libc::ENOSYS);

        model.device().inject_fatal();
        let end = Instant::now() + Duration::from_secs(10);
        while hca_device_fatal(ctx) != 1 {
            assert!(Instant::now() < end, "the device not fatal within 10 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut ev = async_event(ctx, Duration::from_secs(10)).expect("the program's DEVICE_FATAL");
        assert_eq!(ev.event_type, IBV_EVENT_DEVICE_FATAL);
        ibv_ack_async_event(&mut ev);
        assert_eq!(hca_device_fatal(ctx), 1, "still fatal, nothing changed by the call");
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
