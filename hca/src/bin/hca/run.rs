//! `hca run [MODEL OPTIONS] -- PROGRAM ARGS...`: runs an unmodified rdma-core program over this
//! project's `libibverbs.so.1` (crate `ibverbs-compat`, built by `bash hca/ibverbs/build.sh`
//! into `lib/` next to this executable) and the model the tool's options describe.
//!
//! The program gets `LD_LIBRARY_PATH` with that folder first (before any value already set) and
//! `HCA_DEVICES` with one `model` spec built from the model options (the library's grammar:
//! hca/ibverbs/src/config.rs), unless `HCA_DEVICES` is already set, which wins. Then this
//! process becomes the program (`exec`), so the exit status is the program's own.

use crate::args::Failure;
use crate::ModelOpts;
use pvrdma_sim::Profile;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The library file the program must load (its soname).
const LIBRARY: &str = "libibverbs.so.1";

/// `run`'s own arguments: the program and its arguments, after `--`.
#[derive(clap::Args)]
pub struct Opts {
    /// The program to run and its arguments (put `--` before them, so their options are not
    /// read as this tool's).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM ARGS")]
    program: Vec<OsString>,
}

/// Replaces this process with the program. Returns only on failure: the library is not built
/// (exit status 1), an unknown option where the program should be (1), a model option does not
/// fit the spec grammar (1), or the program cannot be executed (127 when it is not found, 126 otherwise, as a shell does).
pub fn run(opts: &Opts, model: &ModelOpts) -> Failure {
    let lib = match library_dir() {
        Ok(dir) => dir,
        Err(f) => return f,
    };
    let (program, args) = opts.program.split_first().expect("clap requires PROGRAM");
    if program.to_string_lossy().starts_with('-') {
        // An option clap did not know, taken as the program because hyphens are allowed there.
        let msg = format!(
            "hca run: unknown option {}: put the model options before `--` and the program after it",
            program.to_string_lossy()
        );
        return Failure { msg, code: 1 };
    }
    let mut cmd = Command::new(program);
    cmd.args(args).env("LD_LIBRARY_PATH", search_path(&lib, std::env::var_os("LD_LIBRARY_PATH")));
    match std::env::var_os(ENV_DEVICES) {
        None => match devices_spec(model) {
            Ok(spec) => cmd.env(ENV_DEVICES, spec),
            Err(f) => return f,
        },
        Some(set) if link_options_given(model) => {
            eprintln!(
                "hca run: {ENV_DEVICES}={} is set and wins over --roce and the link options",
                set.to_string_lossy()
            );
            &mut cmd
        }
        Some(_) => &mut cmd,
    };
    let err = cmd.exec();
    let code = if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
    Failure { msg: format!("hca run: cannot run {}: {err}", Path::new(program).display()), code }
}

/// The library's device-spec variable.
const ENV_DEVICES: &str = "HCA_DEVICES";

/// `lib/` next to this executable, when it holds [`LIBRARY`].
fn library_dir() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe().map_err(|e| format!("hca run: cannot find this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/")).join("lib");
    if dir.join(LIBRARY).is_file() {
        Ok(dir)
    } else {
        Err(format!(
            "hca run: {} not found: build it first with `bash hca/ibverbs/build.sh` (it writes it there, in lib/ beside this hca executable, where hca run looks)",
            dir.join(LIBRARY).display()
        )
        .into())
    }
}

/// `dir`, then the entries of `old` (an empty `old` adds nothing: an empty entry would mean the
/// current folder to the dynamic loader).
fn search_path(dir: &Path, old: Option<OsString>) -> OsString {
    let mut path = OsString::from(dir);
    if let Some(old) = old.filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    path
}

/// One `model` spec with every model option: the profile and loopback latency always (so the
/// model is the one the tool's other subcommands open), the RoCE addresses, link faults and
/// capture file when given. Errors: a capture path the grammar cannot carry (`,` or `;`).
fn devices_spec(m: &ModelOpts) -> Result<String, Failure> {
    let profile = match m.profile {
        Profile::Ibta => "ibta",
        Profile::Qemu72 => "qemu72",
    };
    let mut spec = format!("model,profile={profile},link-latency-us={}", m.link_latency_us);
    for addr in &m.roce {
        spec += &format!(",roce={addr}");
    }
    let faults = [("link-loss", m.link_loss), ("link-reorder", m.link_reorder), ("link-duplicate", m.link_duplicate)];
    for (key, p) in faults {
        if let Some(p) = p {
            spec += &format!(",{key}={p}");
        }
    }
    if let Some(seed) = m.link_seed {
        spec += &format!(",link-seed={seed}");
    }
    if let Some(pcap) = &m.pcap {
        spec += &format!(",pcap={}", pcap_value(pcap)?);
    }
    Ok(spec)
}

/// Whether a RoCE address, a link fault or a capture was asked for (what a stale `HCA_DEVICES`
/// would silently override).
fn link_options_given(m: &ModelOpts) -> bool {
    let faults = [m.link_loss, m.link_reorder, m.link_duplicate];
    !m.roce.is_empty() || faults.iter().any(Option::is_some) || m.link_seed.is_some() || m.pcap.is_some()
}

/// A capture path as a spec value: UTF-8 without the grammar's separators.
fn pcap_value(path: &Path) -> Result<&str, Failure> {
    match path.to_str() {
        Some(s) if !s.contains([',', ';']) => Ok(s),
        _ => Err(format!(
            "hca run: --pcap {}: the path must be UTF-8 without ',' or ';' to fit {ENV_DEVICES}",
            path.display()
        )
        .into()),
    }
}
