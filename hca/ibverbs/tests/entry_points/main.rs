//! The C entry points (`ibv_*`) called as a C program calls them, on the library's model devices:
//! queries, PDs and MRs over a program's memory, CQs and channels, QPs and their attributes, SRQs,
//! address handles, work-request chains, completions on both ports, async events, object
//! lifetimes, and the verbs that touch no device. One test binary; each module is a subject. (The
//! fork test, the context's file test and the table of `docs/argument-checks.md` are binaries of
//! their own: `fork.rs`, `context.rs`, `argument_checks/`.)

#[path = "../ports/mod.rs"]
mod ports;

mod address_handles;
mod async_events;
mod bad_arguments;
mod comp_channel;
mod completions;
mod cq;
mod fx;
mod gsi;
mod mr_pages;
mod object_lifetimes;
mod qp_query;
mod query;
mod srq;
mod strings_sysfs_stubs;
mod wr_api;
mod wr_chains;
