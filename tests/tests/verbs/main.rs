//! The verbs on the whole stack (verbs core, pvrdma provider, model): QP states and
//! transitions, RC, RDMA, atomics, UD, SRQs, CQ resize, MRs over a program's memory, the
//! completions owed, object lifetimes against events, and libibverbs's structures. One test
//! binary; each module is a subject.

mod atomics;
mod cq_resize;
mod hand_offs;
mod ibverbs_abi;
mod inline_storms;
mod lifetimes;
mod loopback_psn;
mod owed_completions;
mod qp_states;
mod qp_transitions;
mod rc;
mod rdma;
mod semantics;
mod srq;
mod srq_wqes;
mod ud;
mod ud_sqd;
mod user_memory;
mod user_memory_gone;
