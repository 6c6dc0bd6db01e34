//! `ops.post_send` and `ops.post_recv`: the header's inline `ibv_post_send`/`ibv_post_recv`.

use crate::abi::{ibv_qp, ibv_recv_wr, ibv_send_wr};

/// `ops.post_send`.
pub(crate) unsafe extern "C" fn post_send(_qp: *mut ibv_qp, _wr: *mut ibv_send_wr, _bad: *mut *mut ibv_send_wr) -> i32 {
    libc::ENOSYS
}

/// `ops.post_recv`.
pub(crate) unsafe extern "C" fn post_recv(_qp: *mut ibv_qp, _wr: *mut ibv_recv_wr, _bad: *mut *mut ibv_recv_wr) -> i32 {
    libc::ENOSYS
}
