//! The model's rings and doorbells: arbitrary ring-state and WQE bytes and doorbell values after
//! valid set-up (`pvrdma_fuzz::rings`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pvrdma_fuzz::rings::run(data));
