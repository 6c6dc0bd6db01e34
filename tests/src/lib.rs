//! Cross-crate integration tests live in `tests/`, a few binaries filed by area, each a folder
//! with a module per subject: `verbs/`, `notify/`, `device/`, `wire/`; beside them the binaries
//! that must run alone (`soak.rs`, `notify_stress.rs`) and the real-device tests CI runs in a VM
//! (`qemu_real.rs`). The helpers they share live here.
#![deny(unsafe_code)]

pub mod abi_sizes;
pub mod command_errors;
pub mod cprobe;
pub mod differential;
#[cfg(test)]
mod doc_tables;
pub mod events;
pub mod faults;
pub mod fixture;
// Implements the platform interface's `unsafe fn map_user` by forwarding it.
#[allow(unsafe_code)]
pub mod intercept;
pub mod lowest_free;
pub mod notify_relay;
pub mod qemu;
pub mod raw_device;
pub mod rewrite;
// As `intercept`.
#[allow(unsafe_code)]
pub mod sge_tamper;
pub mod soak;
pub mod tshark;
