//! The CM's MAD decoder and state machine on arbitrary bytes (`pvrdma_fuzz::cm_mad`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pvrdma_fuzz::cm_mad::run(data));
