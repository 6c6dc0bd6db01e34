//! The extended work-request API (`ibv_wr_start` ... `ibv_wr_complete` on an `ibv_qp_ex`)
//! misused: each misuse gets libibverbs's answer and posts nothing bad. (From the breaker rounds
//! on the library.)

use crate::fx::*;
use ibverbs_compat::abi::*;
use std::ptr::null_mut;

#[test]
fn the_wr_api_misused_answers_and_posts_nothing_bad() {
    let fx = fixture(64);
    let a = create_qp_ex(fx.ctx, fx.pd, fx.cq, 64);
    let b = create_qp(fx.pd, fx.cq, 16);
    connect(a, b);
    connect(b, a);
    let x = qpx(a);
    let p: *mut ibv_qp_ex = x;
    let lkey = {
        // SAFETY: a live MR.
        unsafe { (*fx.mr).lkey }
    };
    let addr = fx.buf.as_ptr() as u64;
    // SAFETY: the QP's own functions with its own pointer; buffers ours.
    unsafe {
        // Setters with no WR, then complete: the error, nothing posted.
        (x.wr_start.unwrap())(p);
        (x.wr_set_sge.unwrap())(p, lkey, addr, 8);
        (x.wr_set_inline_data.unwrap())(p, fx.buf.as_ptr() as *mut _, 8);
        assert_eq!((x.wr_complete.unwrap())(p), libc::EINVAL);
        // Complete with no WR, nested start, abort with nothing open.
        (x.wr_start.unwrap())(p);
        assert_eq!((x.wr_complete.unwrap())(p), 0);
        (x.wr_abort.unwrap())(p);
        assert_eq!((x.wr_complete.unwrap())(p), 0);
        (x.wr_start.unwrap())(p);
        (x.wr_start.unwrap())(p);
        assert_eq!((x.wr_complete.unwrap())(p), 0);
        // Inline lengths that wrap when added: ENOMEM (beyond max_inline_data), no panic.
        let bufs = [
            ibv_data_buf { addr: fx.buf.as_ptr() as *mut _, length: usize::MAX },
            ibv_data_buf { addr: fx.buf.as_ptr() as *mut _, length: 2 },
        ];
        (x.wr_start.unwrap())(p);
        x.wr_id = 5;
        x.wr_flags = IBV_SEND_SIGNALED;
        (x.wr_send.unwrap())(p);
        set_errno(0);
        (x.wr_set_inline_data_list.unwrap())(p, 2, bufs.as_ptr());
        assert_ne!(errno(), libc::EIO, "no panic");
        assert_eq!((x.wr_complete.unwrap())(p), libc::ENOMEM);
        // A huge SGE list count: EINVAL, no panic.
        (x.wr_start.unwrap())(p);
        (x.wr_send.unwrap())(p);
        (x.wr_set_sge_list.unwrap())(p, usize::MAX, null_mut());
        assert_eq!((x.wr_complete.unwrap())(p), libc::EINVAL);
        // And then it still works.
        let mut rs = fx.sge(4096, 64);
        assert_eq!(post_recv(b, 77, &mut rs), 0);
        (x.wr_start.unwrap())(p);
        x.wr_id = 6;
        (x.wr_send.unwrap())(p);
        (x.wr_set_sge.unwrap())(p, lkey, addr, 8);
        assert_eq!((x.wr_complete.unwrap())(p), 0);
    }
    let got = poll_n(fx.cq, 2);
    let mut ids: Vec<_> = got.iter().map(|c| c.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [6, 77]);
    destroy_qp(a);
    destroy_qp(b);
    fx.close();
}
