//! The loopback port: its attributes (QUERY_PORT, QUERY_PKEY), its GID table (CREATE_BIND,
//! DESTROY_BIND), and the wire — a device thread named `pvrdma-port` that delivers each packet
//! `link_latency` after it was sent, in send order.
//!
//! With a link latency of 0 a packet is due when it is sent, and the thread that rang the
//! doorbell carries it to the receiver itself once the device's locks are released (as a NIC's
//! own engine would, with no extra hand-off): it claims the port ([`crate::wire::PortQueue::claim_due`]) when
//! nobody else is delivering, so deliveries stay one at a time and in send order, and gives the
//! port back after at most [`crate::wire::INLINE_JOBS`] jobs so a storm of other senders' packets goes to the
//! port thread rather than to one unlucky caller. The port thread is then not woken per packet:
//! it takes only what is handed off to it ([`crate::wire::PortQueue::hand_off`]) — what is left due when the
//! port is given back or when a command's effects sent a packet — so a consumer busy-polling on
//! every CPU never waits for it to be scheduled.
//!
//! A UD datagram (`Packet::ud`) goes to the QP its WQE named if the destination GID is bound
//! here, and is dropped and counted otherwise or when that QP refuses it (`qp/ud.rs`); it never
//! waits for a receive WQE, and its sender completes `SUCCESS` once it left the wire.
//!
//! Delivery (RC): the destination QP (by `dest_qp_num`) must be in RTR or RTS and point back at the
//! sender, expect the packet's PSN, and the destination GID must be bound on this port (the
//! loopback wire reaches only itself); otherwise nobody answers. The sender's retry attributes
//! then act as on the RoCE port (`wire/stall.rs`; issue 21 §3: every QP attribute that changes
//! behaviour on one port changes it on the other): an unanswered packet is tried again after
//! the sender's `timeout`, up to `retry_cnt` times, then completes `RETRY_EXC_ERR` (`timeout` 0:
//! it waits until its sender is flushed); a packet that finds no receive WQE (RNR) is tried again
//! after the responder's `min_rnr_timer` and on the responder's next RECV doorbell, up to
//! `rnr_retry` times (7: for ever), then completes `RNR_RETRY_EXC_ERR`. Either failure moves the
//! sender to ERR, flushing its other WQEs. A packet held back keeps its sender's later packets
//! behind it, keeping per-QP order. The timers run on the port thread, which sleeps until the
//! earliest. An RDMA WRITE or READ is checked by R_Key at the destination ([`crate::mr`]); a
//! READ's data is scattered at the sender before its completion; a WRITE with immediate waits
//! for a receive WQE as a SEND does. The thread stops when the [`crate::SimDevice`] is dropped;
//! its waits are condvar waits with a bound.
//!
//! # How much the wire holds
//! Every packet is a copy of its message, so what the wire holds is bounded, as RC flow control
//! bounds it on a real link (a send WQE stays on the sender's SQ until it is delivered):
//! - per QP, by the sender (`backend/send.rs`): at most its SQ depth of sends outstanding (consumed, not yet
//!   completed) and at most [`crate::SimConfig::qp_bytes_in_flight`] payload bytes; past either,
//!   the device stops consuming that SQ until one of its sends completes;
//! - per device, here: at most [`crate::SimConfig::device_packets_in_flight`] packets and
//!   [`crate::SimConfig::device_bytes_in_flight`] payload bytes on the wire (in flight, held
//!   back for a receive WQE or an answer, or being delivered), one packet always allowed on an
//!   empty wire. A QP refused by this budget stops draining its SQ and is resumed when a packet
//!   leaves the wire.

mod deliver;

pub(crate) use deliver::{run, settle_and_deliver};
