//! pvrdma HCA driver and verbs provider.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod platform;
