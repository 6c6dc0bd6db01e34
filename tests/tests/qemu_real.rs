//! The real device: QEMU 7.2's pvrdma, driven by the unchanged driver over qtest
//! (`hca::platform::qtest`), one fresh QEMU per test. The bodies are the ones
//! `tests/tests/device/qemu_model.rs` runs against the model (`tests::differential`); each checks what
//! QEMU 7.2 does and names where it differs from the model on purpose.
//!
//! These need QEMU 7.2 with pvrdma and a host RDMA device (`rxe0`): `tests/qemu/run.sh` boots a
//! VM that has both and runs them there with `--ignored`.

use hca::Platform;
use pvrdma_abi::regs::REG_VERSION;
use std::time::Instant;
use tests::differential::{self, report_line, Side, Target};

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_bring_up() {
    let t = Target::qemu("bring_up");
    assert_eq!(t.side, Side::Qemu72);
    differential::bring_up(&t);
    // The cost of one register read over qtest, for the stage's report.
    let q = t.qtest().unwrap();
    let n = 500;
    let t0 = Instant::now();
    for _ in 0..n {
        assert_eq!(q.reg_read(REG_VERSION), 17);
    }
    report_line(&format!(
        "TIMING qtest readl round trip: {:.0} us (mean of {n})\n",
        t0.elapsed().as_secs_f64() * 1e6 / f64::from(n)
    ));
    assert!(!q.is_dead() && q.dropped_writes() == 0);
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_data_path_with_dma_through_qtest_only() {
    // No mapping of guest RAM: every ring, WQE, CQE and payload access is a qtest read/write.
    let t = Target::qemu_with("qtest_memory", false);
    assert!(!t.qtest().unwrap().uses_shared_ram());
    differential::user_context_data_path(&t);
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_objects() {
    differential::objects(&Target::qemu("objects"));
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_rc_send_recv() {
    differential::rc_send_recv(&Target::qemu("rc_send_recv"));
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_srq() {
    differential::srq(&Target::qemu("srq"));
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_user_context_data_path() {
    differential::user_context_data_path(&Target::qemu("user_context"));
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_cq_arming() {
    let t = Target::qemu("cq_arming");
    let r = differential::cq_arming(&t);
    eprintln!("QEMU-ARMING {r:?}");
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_cq_overflow() {
    differential::cq_overflow(&Target::qemu("cq_overflow"));
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_bad_dma_address() {
    let statuses = differential::bad_dma_address(&Target::qemu("bad_dma"));
    report_line(&format!("QEMU-STATUS bad DMA address: CREATE_CQ {:?}, CREATE_MR {:?}\n", statuses.0, statuses.1));
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_cq_resize() {
    differential::cq_resize(&Target::qemu("cq_resize"));
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_qp_attributes() {
    differential::qp_attributes(&Target::qemu("qp_attributes"));
}

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_atomics() {
    differential::atomics(&Target::qemu("atomics"));
}

/// One test per case of `tests::command_errors`, each in a QEMU of its own: the stage prints
/// what QEMU answered (`QEMU-CASE` lines); a crash or a hang is an answer, not a failure.
macro_rules! command_cases {
    ($($name:ident),* $(,)?) => {
        mod cmd {
            $(#[test]
            #[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
            fn $name() {
                let steps = tests::command_errors::on_qemu(stringify!($name));
                assert!(!steps.is_empty(), "no step recorded");
            })*

            /// The names above are exactly the module's cases (runs without QEMU).
            #[test]
            fn all_cases_listed() {
                let listed = [$(stringify!($name)),*];
                let cases: Vec<&str> = tests::command_errors::CASES.iter().map(|c| c.name).collect();
                assert_eq!(listed.as_slice(), cases.as_slice());
            }
        }
    };
}

tests::with_command_cases!(command_cases);

#[test]
#[ignore = "needs QEMU 7.2's pvrdma: run tests/qemu/run.sh"]
fn qemu_ud_send_recv() {
    differential::ud_send_recv(&Target::qemu("ud_send_recv"));
}
