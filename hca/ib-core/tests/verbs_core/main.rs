//! The verbs core on the scripted provider (`scripted`: no device, no threads, each race at the
//! moment the test picks): the device list and object lifetimes, QPs, async and completion
//! events, the completion channel's fd, teardown races, and a delivery spent before its CQ's
//! destroy. One test binary; each module is a subject. (The loom model check, built under
//! `--cfg loom`, is a binary of its own: `loom_arm.rs`.)

mod channel_fd;
mod events;
mod late_delivery;
mod objects;
mod qp;
mod scripted;
mod teardown;
