//! The verbs pvrdma does not carry here, answering as libibverbs does for a provider without
//! them, and the private symbols provider libraries import.

use crate::abi::ibv_recv_wr;

/// `ops.post_srq_recv`: no SRQ can exist, so there is nothing to post to.
pub(crate) unsafe extern "C" fn post_srq_recv(_srq: *mut libc::c_void, _wr: *mut ibv_recv_wr, _bad: *mut *mut ibv_recv_wr) -> i32 {
    libc::EOPNOTSUPP
}
