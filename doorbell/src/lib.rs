//! Doorbells of the pvrdma device, as mthca's `mthca_doorbell.h` and `mthca_uar.c`.
//!
//! - [`UarTable`] hands out UAR pages of BAR2: page 0 is the kernel's, every user context gets its
//!   own page (its pfn goes into CREATE_UC).
//! - [`Doorbells`] are the named doorbell writes (QP send/recv, CQ arm/arm-solicited/poll); each
//!   puts a release fence before its MMIO write so the ring contents it announces are visible first.
//! - [`CqArmDoorbell`] is created with every CQ, kernel and user alike, on the kernel's page: the
//!   kernel can re-arm a user CQ. mthca allocates arm doorbell records only for kernel CQs; closing
//!   that gap is what this crate is for.
#![forbid(unsafe_code)]

mod arm;
mod db;
mod uar;

pub use arm::{ArmEncoding, CqArmDoorbell};
pub use db::{Doorbells, UarMmio};
pub use uar::{UarError, UarPage, UarTable};
