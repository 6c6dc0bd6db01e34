//! Test utilities, behind the `test-utils` feature (as rust-vmm's `virtio-queue` offers its
//! `mock` module): [`minidrv`], a mini-driver that drives a [`crate::SimDevice`] through its
//! registers, guest memory and doorbells only, as a driver would.

pub mod minidrv;
