//! librdmacm's C entry points called from Rust over two model devices with RoCE v2 ports in
//! one process (`HCA_DEVICES="model,roce=A;model,roce=B"`, A and B held through netlease), the
//! verbs and the GSI from ibverbs-compat's rlib.

// The test binary's ibv_* and hca_gsi_* come from here.
extern crate ibverbs_compat;

mod addressing;
mod channel;
mod device_removal;
mod fixture;
mod forged_mads;
mod getaddrinfo;
mod process_exit;
mod qp;
mod qp_attributes;
