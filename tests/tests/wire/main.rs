//! The RoCE v2 wire: the wire crate against the C headers and tshark, the model's port captured,
//! UD across two devices' ports, and packets a fake peer forges. One test binary; each module is
//! a subject.

mod forged_packets;
mod gsi_agent;
mod roce_capture;
mod roce_wire;
mod ud_roce;
