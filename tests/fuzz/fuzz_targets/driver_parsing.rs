//! The driver's parsing of what the device writes: command responses, CQEs, event-ring entries,
//! the DSR's capabilities (`pvrdma_fuzz::parsing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pvrdma_fuzz::parsing::run(data));
