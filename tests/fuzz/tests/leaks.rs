//! Regression tests for what `driver_parsing` found: inputs after which the driver kept the
//! device alive once every handle on it was gone (its vector threads and the model's port thread
//! never ended). They are leaks, not crashes, so the fuzzer itself passes them. Run:
//! `cargo test --release --test leaks` in `tests/fuzz` (`tests/fuzz/run.sh` runs them).

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests count this process's threads: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Threads of this process named `name`.
fn threads(name: &str) -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("procfs");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == name)
        .count()
}

/// Runs `input` (a file of the committed corpus) `times` times; returns the model port threads
/// still running a bounded while after the last run.
fn leaked_ports(input: &str, times: usize) -> usize {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/driver_parsing").join(input);
    let data = std::fs::read(&path).expect("corpus input");
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = threads("pvrdma-port");
    for _ in 0..times {
        pvrdma_fuzz::parsing::run(&data);
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while threads("pvrdma-port") > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    threads("pvrdma-port").saturating_sub(before)
}

/// The device goes fatal (an async-event producer index out of range) while the consumer drops
/// its objects: async entries a destroy had queued for the async thread were never delivered nor
/// dropped, and each held its object's handler, so the provider's device was never dropped
/// (`hca/src/eq.rs` `drain_async` now drops them on a fatal device). Racy: most of 20 runs
/// leaked.
#[test]
fn a_device_going_fatal_during_teardown_is_still_released() {
    assert_eq!(leaked_ports("leak-fatal-teardown-1", 20), 0);
    assert_eq!(leaked_ports("leak-fatal-teardown-2", 20), 0);
}

/// The device answers CREATE_QP with the handle of a live QP: the rings it may still write are
/// kept from the allocator; `mem::forget` kept their `Arc<dyn Platform>` too, so the platform
/// (here the whole model) was never released (`hca::dma::Abandon` now keeps only the memory).
#[test]
fn a_duplicate_handle_does_not_keep_the_platform() {
    assert_eq!(leaked_ports("leak-duplicate-qp-handle", 5), 0);
    assert_eq!(leaked_ports("leak-duplicate-handle-2", 5), 0);
}
