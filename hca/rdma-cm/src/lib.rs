//! The IBTA Communication Manager (IBTA Vol. 1 chapter 12), as Linux's `ib_cm`
//! (`drivers/infiniband/core/cm.c`, `include/rdma/ib_cm.h`) gives it to the RDMA CM above it.
//!
//! - [`transport`]: where MADs go out and come in ([`MadTransport`], [`MadAddr`]): QP1 of a
//!   device, or an in-memory pair in tests.
//! - [`mad`]: the wire format: the MAD common header and every CM attribute (REQ, MRA, REJ, REP,
//!   RTU, DREQ, DREP, SIDR_REQ, SIDR_REP), and the RDMA IP CM Service private-data header
//!   (IBTA Annex A11) that carries IP addresses and ports.
//! - [`cm`]: the state machine ([`Cm`]): communication IDs, timeouts and retries, MRA, time-wait,
//!   duplicate detection; SIDR.
//!
//! A [`Cm`] is synchronous: every call takes `now`, sends what it must through its transport and
//! returns the events it raised; the caller owns the threads and the clock
//! ([`Cm::next_deadline`], [`Cm::on_timer`]).

#![forbid(unsafe_code)]

pub mod cm;
pub mod mad;
pub mod transport;

pub use cm::{Cm, CmEvent, CmId, CmStats, Error};
pub use transport::{MadAddr, MadTransport, ReceivedMad};
