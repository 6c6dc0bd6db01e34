//! The C structures programs share with the library: librdmacm's ([`cma`]) and the libibverbs
//! ones it reads or fills (`ibverbs-abi`, the one definition our libibverbs.so.1 uses too: a
//! crate of types only, so nothing of the verbs stack is linked in twice), `#[repr(C)]` with
//! their C names, sizes and offsets asserted at compile time. Enums are `u32` with their values as constants.
#![allow(non_camel_case_types, missing_docs)]

pub mod cma;

pub use cma::*;
pub use ibverbs_abi::*;
