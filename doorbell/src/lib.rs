//! Doorbell management for the pvrdma HCA, `no_std` with `alloc`, as mthca's
//! `mthca_doorbell.h` and `mthca_uar.c`: who may ring which doorbell, through which page, what
//! memory the device reads instead of a register, and in what order.
//!
//! - **Typed doorbells** ([`Doorbells`]): QP send, QP recv, CQ arm next, CQ arm solicited, CQ
//!   poll, SRQ recv, each on a typed handle ([`QpHandle`], [`CqHandle`], [`SrqHandle`]) that
//!   carries its [`Owner`]. Values are built and taken apart only in [`encoding`], per device
//!   ([`ArmEncoding`]: IBTA, or QEMU 7.2's); the device model decodes with the same module.
//! - **Ring-state records** ([`record`]): pvrdma's doorbell records are the ring-state words at
//!   the start of page 0 of each object's page list; typed by who writes which index.
//! - **UAR pages** ([`UarTable`]): page 0 the kernel's; an O(1) allocator of one page per user
//!   context; a context reaches its page only by mapping offset 0, one page
//!   ([`ContextUar::map`]); releasing the context revokes every mapping, and the page is reused
//!   only once no write through one is in flight.
//! - **The per-CQ arm doorbell** ([`CqArmDoorbell`]) for every CQ, kernel or user, on the
//!   kernel's page: the kernel can arm a user CQ; a user page arms only its own CQs.
//! - **Barriers** ([`barrier`]): the only device-visible fences of the stack.
//!
//! Without the `std` feature (default on) the crate needs `alloc` and 64-bit atomics (owner ids
//! are drawn from one `AtomicU64`; x86-64 and arm64, where pvrdma runs, have them); `std`
//! changes one thing, the lock of the UAR free queue ([`osdep::Mutex`]).
//!
//! ```
//! use doorbell::{ArmEncoding, CqArmDoorbell, CqHandle, DoorbellError, Owner, QpHandle, UarMmio, UarTable};
//! use std::sync::Arc;
//!
//! struct Bar2; // the platform's BAR2: a kernel's `writel`, VFIO, the model
//! impl UarMmio for Bar2 {
//!     fn uar_write32(&self, _offset: u64, _value: u32) {}
//! }
//!
//! // Page 0 and 15 user pages of BAR2 at page frame 0xfe000 (from the DSR and `max_uar`).
//! let table = UarTable::new(Arc::new(Bar2), 0xfe000, 16);
//! let ctx = table.alloc()?;                        // a user context's page (pfn to CREATE_UC)
//! let db = ctx.map(0, 4096)?;                      // as mmap(fd, 0, 4096) on the device file
//! let qp = QpHandle::new(7, ctx.owner()).unwrap(); // handles the device gave, with their owner
//! let cq = CqHandle::new(3, ctx.owner()).unwrap();
//! db.qp_send(&qp).unwrap();                        // WQEs and prod_tail written before this
//! let arm = CqArmDoorbell::new(&table, cq, ArmEncoding::Ibta); // on the kernel's page
//! arm.arm_next();
//! drop(ctx);                                       // after DESTROY_UC: every mapping revoked
//! assert_eq!(db.qp_send(&qp), Err(DoorbellError::Revoked));
//! # Ok::<(), doorbell::UarError>(())
//! ```
//!
//! # Ordering, written once
//!
//! | doorbell | what its [`barrier::io_wmb`] orders before the write |
//! |---|---|
//! | QP send | the WQEs and SGEs written into the SQ, then the SQ's `prod_tail` (release store) |
//! | QP recv | the WQEs written into the RQ, then the RQ's `prod_tail` (release store) |
//! | SRQ recv | the WQEs written into the SRQ, then its `prod_tail` (release store) |
//! | CQ poll | the CQ's `cons_head` (release store) after the CQEs were read |
//! | CQ arm next / solicited | the CQ's `cons_head`, so the device sees what was polled before the arm |
//!
//! After an arm, IBTA needs the consumer to poll once more: CQEs the device wrote before it took
//! the arm raise no event. On pvrdma a UAR write traps into the device model and takes effect
//! before the vCPU goes on (QEMU handles MMIO synchronously), so that re-poll sees them. A device
//! that posts MMIO writes (real hardware) needs the arm to carry the consumer index (mlx4, mlx5)
//! or a read from the device after it, to flush the write, before the re-poll.
//!
//! Every pvrdma doorbell is one 32-bit write, which the bus performs whole: no lock is needed,
//! however many threads ring one page. A 64-bit doorbell on a 32-bit platform is two writes
//! that another CPU's pair could interleave; it would need a per-page spin lock around the pair
//! (mthca's `MTHCA_DECLARE_DOORBELL_LOCK`), which this crate would then own.
//!
//! # The card's packages
//!
//! - `spin`: [`osdep::Mutex`] is `spin::Mutex` without `std` (the UAR free stack); with `std` it
//!   is `parking_lot`'s, which parks instead of spinning (two cores and preemption punish
//!   spinning).
//! - `volatile-register`: [`MappedUar`], for a BAR2 mapped into the address space (the VFIO
//!   backend writes a mapped BAR2 through it); why it fits there and nowhere else is in
//!   [`mapped`]'s docs.
//! - `zerocopy` and `memoffset`: the ABI's structures (`pvrdma-abi`) and their checks against the
//!   C header (`tests/tests/device/abi_header.rs`, with `memoffset::span_of!`).
//! - `pci-driver`: the VFIO backend (`hca::platform::vfio`), which fences through [`barrier`].
#![no_std]
#![warn(missing_docs)]
#![deny(unsafe_code)]

extern crate alloc;

mod arm;
pub mod barrier;
mod doorbells;
pub mod encoding;
mod handle;
pub mod mapped;
mod mmio;
mod page;
pub mod record;
mod uar;

pub use arm::CqArmDoorbell;
pub use doorbells::Doorbells;
pub use encoding::{ArmEncoding, DoorbellOp};
pub use handle::{ContextId, CqHandle, Owner, QpHandle, SrqHandle};
pub use mapped::MappedUar;
pub use mmio::UarMmio;
pub use page::UarPage;
pub use uar::{ContextUar, UarError, UarTable, MAX_UAR_PAGES};

use thiserror::Error;

/// Why a doorbell was not rung. Nothing was written in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DoorbellError {
    /// A user context's page was asked to ring an object it does not own.
    #[error("this UAR page does not own the object")]
    NotOwner,
    /// The mapping was revoked (its context was released).
    #[error("the UAR mapping was revoked")]
    Revoked,
    /// The device's arm encoding cannot express the operation (solicited on QEMU 7.2).
    #[error("the device cannot express this doorbell")]
    Unsupported,
    /// A handle beyond the doorbell's 24 bits.
    #[error("handle {0:#x} does not fit a doorbell's 24 bits")]
    HandleTooWide(u32),
}
