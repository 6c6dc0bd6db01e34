//! How events reach consumers, with no verbs object in it: the per-CQ arm state machine
//! ([`arm`]) and its clients' machinery — notify requests ([`notify`]), upcall dispatchers
//! ([`upcall`]) and completion channels ([`channel`]) — async events ([`async_event`]), the
//! pollable queue both kinds of event wait in ([`queue`]), what an event carries of its object
//! ([`refs`]), and keeping deliveries apart from destruction ([`delivery`]).
//!
//! The verbs objects (`cq.rs`, `qp.rs`, `srq.rs`, `context.rs`) use these; nothing here names a
//! verbs object, a context or the provider interface.
//!
//! Layers, lowest first: `queue`, `refs`, `upcall`, `notify`; then `arm` (notify, upcall),
//! `delivery` (arm, upcall), `async_event` (queue, refs, upcall), `channel` (delivery, queue,
//! refs).

pub mod arm;
pub(crate) mod async_event;
pub(crate) mod channel;
pub(crate) mod delivery;
pub(crate) mod notify;
pub(crate) mod queue;
pub(crate) mod refs;
pub(crate) mod upcall;
