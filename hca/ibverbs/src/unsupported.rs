//! The verbs pvrdma does not carry here, answering as libibverbs 44 does for a provider without
//! them (its `dummy_ops.c`: `EOPNOTSUPP`), and the symbols other rdma-core libraries import from
//! libibverbs (provider libraries loaded by pyverbs, librdmacm), which must exist for them to load.

mod marshall;
mod private;
mod verbs;

pub use marshall::*;
pub use private::*;
pub use verbs::*;
