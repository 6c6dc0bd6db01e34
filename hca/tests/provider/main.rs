//! The provider crate from outside: the `hca` tool as a user runs it (`pingpong`, `devinfo`,
//! `run --`), `hca pingpong --roce` against a peer that behaves as `ibv_rc_pingpong`, and GIDs
//! beyond index 0 through the verbs core. One test binary; each module is a subject (`tool`
//! runs the `hca` tool as a child process on addresses of its own).

mod cli;
mod gid_table;
mod rc_pingpong_peer;
mod run_wrapper;
mod tool;
