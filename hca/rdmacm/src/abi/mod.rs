//! The C structures programs share with the library: librdmacm's ([`cma`]) and the libibverbs
//! ones it reads or fills ([`verbs`]), `#[repr(C)]` with their C names, sizes and offsets
//! asserted at compile time. Enums are `u32` with their values as constants.
#![allow(non_camel_case_types, missing_docs)]

pub mod cma;
pub mod verbs;

pub use cma::*;
pub use verbs::*;
