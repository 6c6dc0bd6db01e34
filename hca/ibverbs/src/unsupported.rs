//! The verbs pvrdma does not carry here, answering as libibverbs 44 does for a provider without
//! them (its `dummy_ops.c`: `EOPNOTSUPP`), and the symbols other rdma-core libraries import from
//! libibverbs (provider libraries loaded by pyverbs, librdmacm), which must exist for them to load.

mod marshall;
mod private;
mod verbs;

pub use marshall::*;
pub use private::*;
pub use verbs::*;

use crate::abi::ibv_recv_wr;

/// `ops.post_srq_recv`: no SRQ can exist, so there is nothing to post to (`EOPNOTSUPP`, as
/// libibverbs's dummy op).
pub(crate) unsafe extern "C" fn post_srq_recv(_srq: *mut libc::c_void, _wr: *mut ibv_recv_wr, _bad: *mut *mut ibv_recv_wr) -> i32 {
    libc::EOPNOTSUPP
}
