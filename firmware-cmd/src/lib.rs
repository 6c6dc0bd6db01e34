//! The pvrdma device command channel, as mthca's `mthca_cmd.c` and vmw_pvrdma's `pvrdma_cmd.c`:
//! one generic [`CmdChannel::post`] runs the protocol for every typed command of
//! [`pvrdma_abi::cmd`].
//!
//! Protocol (`docs/decisions.md`, decision 10): zero the response slot, write the request with a
//! fresh cookie, write `REG_REQUEST`, wait for the response (one vector-0 interrupt, or by polling
//! the `ack` word), then accept only a response whose `ack` is the opcode with bit 31 set and whose
//! cookie matches. A device status becomes [`CmdError::Device`]; a transport fault (timeout, wrong
//! ack or cookie) has its own variant.
//!
//! `no_std`: time and pauses come from the [`Clock`] the channel is built with (a kernel passes
//! its own; the `std` feature re-exports [`osdep::StdClock`]), and the channel's lock is
//! [`osdep::Mutex`] (a spin lock without `std`, a parking one with it).
#![no_std]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod channel;
mod error;

pub use channel::{CmdChannel, CmdTransport, WaitMode, DEFAULT_TIMEOUT};
pub use error::{CmdError, DeviceStatus};
pub use osdep::Clock;
#[cfg(feature = "std")]
pub use osdep::StdClock;
pub use pvrdma_abi as abi;
