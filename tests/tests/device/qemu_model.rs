//! The real-device test bodies (`tests::differential`) against the model, with both conformance
//! profiles: the IBTA profile shows each deliberate difference from QEMU 7.2, the QEMU 7.2 profile
//! must behave like the real device (`tests/tests/qemu_real.rs`) wherever it is safe to.

use pvrdma_sim::Profile;
use tests::differential::{self, Target};

fn both(body: impl Fn(&Target)) {
    for profile in [Profile::Ibta, Profile::Qemu72] {
        body(&Target::model(profile));
    }
}

#[test]
fn model_bring_up() {
    both(differential::bring_up);
}

#[test]
fn model_objects() {
    both(differential::objects);
}

#[test]
fn model_rc_send_recv() {
    both(differential::rc_send_recv);
}

#[test]
fn model_user_context_data_path() {
    both(differential::user_context_data_path);
}

#[test]
fn model_cq_arming() {
    let ibta = differential::cq_arming(&Target::model(Profile::Ibta));
    let qemu = differential::cq_arming(&Target::model(Profile::Qemu72));
    assert_ne!(ibta, qemu, "the IBTA profile must differ from QEMU's on arming");
}

#[test]
fn model_cq_overflow() {
    both(differential::cq_overflow);
}

#[test]
fn model_bad_dma_address() {
    for profile in [Profile::Ibta, Profile::Qemu72] {
        let s = differential::bad_dma_address(&Target::model(profile));
        eprintln!("{profile:?}: {s:?}");
    }
}

#[test]
fn model_cq_resize() {
    both(differential::cq_resize);
}

#[test]
fn model_qp_attributes() {
    both(differential::qp_attributes);
}

#[test]
fn model_srq() {
    both(differential::srq);
}

#[test]
fn model_atomics() {
    both(differential::atomics);
}

/// One test per case of `tests::command_errors`, on the model (both profiles): each refused
/// cleanly, the device usable afterwards (a refused DSR: broken, requests unanswered).
macro_rules! command_cases {
    ($($name:ident),* $(,)?) => {
        mod cmd {
            $(#[test]
            fn $name() {
                tests::command_errors::on_model(stringify!($name));
            })*

            /// The names above are exactly the module's cases.
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
fn model_ud_send_recv() {
    both(differential::ud_send_recv);
}
