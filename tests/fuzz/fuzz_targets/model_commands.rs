//! The model's command handling: arbitrary command-slot bytes after a valid DSR
//! (`pvrdma_fuzz::commands`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pvrdma_fuzz::commands::run(data));
