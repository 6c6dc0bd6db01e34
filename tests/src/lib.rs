//! Cross-crate integration tests live in `tests/`; helpers they share live here.

pub mod abi_sizes;
pub mod command_errors;
pub mod cprobe;
pub mod differential;
pub mod differential_atomics;
pub mod differential_cq;
pub mod differential_srq;
pub mod differential_ud;
#[cfg(test)]
mod doc_tables;
pub mod events;
pub mod faults;
pub mod fixture;
pub mod intercept;
pub mod lowest_free;
pub mod notify_relay;
pub mod qemu;
pub mod raw_device;
pub mod rewrite;
pub mod sge_tamper;
pub mod soak;
pub mod tshark;
