//! The RoCE v2 packet decoder on arbitrary bytes, and the round trip of what it accepts
//! (`pvrdma_fuzz::roce_packet`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pvrdma_fuzz::roce_packet::run(data));
