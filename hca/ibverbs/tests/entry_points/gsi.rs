//! The GSI entry points (`hca_gsi_*`, version node `HCA_PRIVATE_1`) as this stack's librdmacm
//! calls them: two devices' QP1s over their RoCE v2 ports exchanging MADs, the readiness fd
//! readable exactly while a MAD waits, one agent per port shared by its openers; the loopback-only
//! device has no RoCE port (`ENODEV`); NULL, foreign and closed handles fail with `EINVAL`.

use crate::ports::*;
use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::{null, null_mut};

const GSI_QKEY: u32 = 0x8001_0000;

/// Whether `fd` polls readable within `ms` milliseconds.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the call.
    unsafe { libc::poll(&mut p, 1, ms) == 1 && p.revents & libc::POLLIN != 0 }
}

/// The RoCE v2 GID (index 1) of `ctx`'s port 1.
fn gid(ctx: *mut ibv_context) -> [u8; 16] {
    let mut g = ibv_gid::default();
    // SAFETY: an open context.
    assert_eq!(unsafe { ibv_query_gid(ctx, 1, 1, &mut g) }, 0);
    g.raw
}

fn mad(tag: u8) -> [u8; 256] {
    std::array::from_fn(|i| tag.wrapping_add(i as u8))
}

/// Sends `m` through `gsi` to QP1 at `dgid` from local GID 1.
fn send(gsi: *mut hca_gsi, dgid: [u8; 16], m: &[u8]) -> i32 {
    let to = hca_gsi_addr { gid: dgid, qpn: 1, qkey: GSI_QKEY, sgid_index: 1, hop_limit: 64, ..Default::default() };
    // SAFETY: `to` and `m` are readable for the call; `gsi` is checked by the library.
    unsafe { hca_gsi_send(gsi, &to, m.as_ptr().cast(), m.len()) }
}

#[test]
fn gsi_mads_cross_two_devices_through_the_c_entry_points() {
    run(|| {
        let ((c0, _), (c1, _), (c2, _)) = (open(0), open(1), open(2));
        // SAFETY: open contexts of this library; every handle used is checked by the library.
        unsafe {
            assert!(hca_gsi_open(c0, 1).is_null() && errno() == libc::ENODEV, "device 0 has no RoCE port");
            assert!(hca_gsi_open(null_mut(), 1).is_null() && errno() == libc::EINVAL);
            assert!(hca_gsi_open(c1, 2).is_null() && errno() == libc::EINVAL, "no port 2");
            let (g1, g2, g1b) = (hca_gsi_open(c1, 1), hca_gsi_open(c2, 1), hca_gsi_open(c1, 1));
            assert!(!g1.is_null() && !g2.is_null() && !g1b.is_null(), "errno {}", errno());
            let (fd1, fd2) = (hca_gsi_get_fd(g1), hca_gsi_get_fd(g2));
            assert!(fd1 >= 0 && fd2 >= 0 && hca_gsi_get_fd(g1b) == fd1, "the second opener shares the agent");
            assert!(!readable(fd2, 0), "nothing received yet");
            assert_eq!(send(g1, gid(c2), &mad(1)), 0, "errno {}", errno());
            assert!(readable(fd2, WAIT.as_millis() as i32), "the MAD arrives");
            let (mut from, mut buf) = (hca_gsi_addr::default(), [0u8; 256]);
            assert_eq!(hca_gsi_recv(g2, &mut from, buf.as_mut_ptr().cast(), buf.len()), 256);
            assert_eq!(buf, mad(1));
            // The index of the receiver's GID the MAD was sent to: its first entry holding it,
            // index 0 (the port's first address, as RoCE v2, at 0 and 1).
            assert_eq!((from.gid, from.qpn, from.qkey, from.sgid_index), (gid(c1), 1, GSI_QKEY, 0));
            assert_eq!((from.pkey_index, from.reserved), (0, [0; 3]));
            assert_eq!(hca_gsi_recv(g2, &mut from, buf.as_mut_ptr().cast(), buf.len()), -1);
            assert_eq!(errno(), libc::EAGAIN);
            assert!(!readable(fd2, 0), "taken: the fd is quiet again");
            // One opener closes; the other's agent keeps working. The answer goes back.
            hca_gsi_close(g1b);
            let to = hca_gsi_addr { hop_limit: 64, ..from };
            assert_eq!(hca_gsi_send(g2, &to, mad(2).as_ptr().cast(), 256), 0, "errno {}", errno());
            assert!(readable(fd1, WAIT.as_millis() as i32));
            let mut small = [0u8; 16];
            assert_eq!(hca_gsi_recv(g1, null_mut(), small.as_mut_ptr().cast(), small.len()), 256, "its length");
            assert_eq!(small[..], mad(2)[..16], "as much as fits");
            // Arguments the library refuses.
            for (len, what) in [(0, "empty"), (257, "longer than a MAD")] {
                assert_eq!(hca_gsi_send(g1, &to, buf.as_ptr().cast(), len), -1, "{what}");
                assert_eq!(errno(), libc::EINVAL, "{what}");
            }
            assert_eq!(hca_gsi_send(g1, null(), buf.as_ptr().cast(), 256), -1);
            assert_eq!(hca_gsi_send(g1, &to, null(), 256), -1);
            assert_eq!(hca_gsi_recv(g1, null_mut(), null_mut(), 16), -1);
            assert_eq!(errno(), libc::EINVAL);
            hca_gsi_close(g1);
            hca_gsi_close(g2);
            let mut not_ours = 0u64;
            let foreign = (&mut not_ours as *mut u64).cast::<hca_gsi>();
            for (h, what) in [(null_mut(), "NULL"), (foreign, "foreign"), (g1, "closed")] {
                assert_eq!(hca_gsi_get_fd(h), -1, "{what}");
                assert_eq!(errno(), libc::EINVAL, "{what}");
                assert_eq!(send(h, gid(c2), &mad(3)), -1, "{what}");
                assert_eq!(hca_gsi_recv(h, null_mut(), buf.as_mut_ptr().cast(), 16), -1, "{what}");
                hca_gsi_close(h);
            }
            assert_eq!(not_ours, 0, "a foreign handle is never touched");
            for c in [c0, c1, c2] {
                assert_eq!(ibv_close_device(c), 0);
            }
        }
    });
}

#[test]
fn a_context_of_another_library_is_not_a_device_of_ours() {
    // SAFETY: an all-zero `ibv_context` is a valid value of the struct (pointers NULL, no
    // callbacks); the library reads only its `device`, which names no device of this library.
    unsafe {
        let mut other: ibv_context = std::mem::zeroed();
        assert!(hca_gsi_open(&mut other, 1).is_null());
        assert_eq!(errno(), libc::ENOSYS);
    }
}
