//! The harnesses of the fuzz targets in `fuzz_targets/` (`cargo fuzz`, see `run.sh`): each target
//! is one call into a module here.
//!
//! - [`commands`]: the model's command handling, arbitrary command-slot bytes after a valid DSR.
//! - [`rings`]: the model's rings and doorbells, arbitrary ring-state and WQE bytes and doorbell
//!   values after valid set-up.
//! - [`parsing`]: the driver's parsing of what the device writes: command responses, CQEs,
//!   async-event and CQ-notification entries, the DSR's capabilities.
//! - [`roce_packet`]: the RoCE v2 packet decoder (`roce-wire`) on arbitrary bytes, and the round
//!   trip of what it accepts.
//! - [`cm_mad`]: the CM's MAD decoder (`rdma-cm`) and its state machine on arbitrary MADs.

pub mod cm_mad;
pub mod commands;
pub mod hostile;
pub mod model;
pub mod parsing;
pub mod rings;
pub mod roce_packet;
