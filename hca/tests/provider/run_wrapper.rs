//! `hca run -- PROGRAM`: the program sees our library's folder first in `LD_LIBRARY_PATH` and the
//! model options as `HCA_DEVICES`; without the library, the tool says how to build it.
//!
//! Each test runs the tool from a folder of its own (a hard link in the target's tmp folder), so whether `lib/libibverbs.so.1`
//! sits next to it is up to the test (the real library is not needed: `env` never loads it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A folder holding the tool (linked), removed on drop.
struct Install(PathBuf);

impl Install {
    fn new(name: &str, with_library: bool) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hca-run-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        // A hard link, not a copy: a copy's write descriptor, inherited by a program another
        // test thread forks meanwhile, would make exec fail with ETXTBSY.
        std::fs::hard_link(env!("CARGO_BIN_EXE_hca"), dir.join("hca")).unwrap();
        if with_library {
            std::fs::write(dir.join("lib/libibverbs.so.1"), b"").unwrap();
        }
        Self(dir)
    }

    /// Runs the tool from this folder with `args` and `env` (set, or removed when `None`): status, stdout, stderr.
    fn run(&self, args: &[&str], env: &[(&str, Option<&str>)]) -> (Option<i32>, String, String) {
        let mut cmd = Command::new(self.0.join("hca"));
        cmd.args(args);
        for (k, v) in env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let out = cmd.output().expect("run hca");
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        (out.status.code(), text(out.stdout), text(out.stderr))
    }

    fn lib(&self) -> String {
        self.0.join("lib").display().to_string()
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The value of `name` in `env`'s output.
fn var<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
}

const CLEAN: [(&str, Option<&str>); 2] = [("HCA_DEVICES", None), ("LD_LIBRARY_PATH", None)];

#[test]
fn run_env_sees_our_library_first_and_the_model_options() {
    let inst = Install::new("env", true);
    let (code, out, err) = inst.run(&["run", "--", "env"], &CLEAN);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(var(&out, "LD_LIBRARY_PATH"), Some(inst.lib().as_str()), "{out}");
    assert_eq!(var(&out, "HCA_DEVICES"), Some("model,profile=ibta,link-latency-us=50"), "{out}");

    let args: Vec<&str> =
        "--profile qemu72 run --roce 127.0.0.1 --roce ::1 --link-latency-us 0 --link-loss 0.25 --link-seed 9 -- env"
            .split(' ')
            .collect();
    let (code, out, err) = inst.run(&args, &[("HCA_DEVICES", None), ("LD_LIBRARY_PATH", Some("/x:/y"))]);
    assert_eq!(code, Some(0), "{err}");
    let want = "model,profile=qemu72,link-latency-us=0,roce=127.0.0.1,roce=::1,link-loss=0.25,link-seed=9";
    assert_eq!(var(&out, "HCA_DEVICES"), Some(want), "{out}");
    assert_eq!(var(&out, "LD_LIBRARY_PATH"), Some(format!("{}:/x:/y", inst.lib()).as_str()), "{out}");
}

#[test]
fn run_keeps_the_users_devices_and_passes_the_programs_arguments_and_status() {
    let inst = Install::new("user", true);
    let env = [("HCA_DEVICES", Some("model,roce=127.0.0.2")), ("LD_LIBRARY_PATH", None)];
    let (code, out, err) =
        inst.run(&["--roce", "127.0.0.1", "run", "--", "sh", "-c", "echo $HCA_DEVICES; exit 7"], &env);
    assert_eq!(code, Some(7), "the program's own status: {err}");
    assert_eq!(out.trim(), "model,roce=127.0.0.2");
    // Without `--`, the program's options after its name are still its own.
    let (code, out, _) = inst.run(&["run", "printf", "%s|", "-n", "--roce"], &CLEAN);
    assert_eq!((code, out.as_str()), (Some(0), "-n|--roce|"));
}

#[test]
fn run_without_the_library_says_how_to_build_it() {
    let inst = Install::new("nolib", false);
    let (code, out, err) = inst.run(&["run", "--", "env"], &CLEAN);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.is_empty(), "the program must not run: {out}");
    let missing = Path::new(&inst.lib()).join("libibverbs.so.1");
    assert!(err.contains(&format!("{} not found", missing.display())), "{err}");
    assert!(err.contains("bash hca/ibverbs/build.sh"), "{err}");
}

#[test]
fn run_fails_like_a_shell_when_the_program_is_missing() {
    let inst = Install::new("noprog", true);
    let (code, _, err) = inst.run(&["run", "--", "/nonexistent/program"], &CLEAN);
    assert_eq!(code, Some(127), "{err}");
    assert!(err.contains("cannot run /nonexistent/program"), "{err}");
    let (code, _, err) = inst.run(&["run"], &CLEAN);
    assert_eq!(code, Some(1), "PROGRAM is required: {err}");
    let (code, _, err) = inst.run(&["--roce", "::1", "--pcap", "/tmp/a,b", "run", "--", "env"], &CLEAN);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("without ',' or ';'"), "{err}");
    let (code, _, err) = inst.run(&["run", "--bogus", "--", "env"], &CLEAN);
    assert_eq!(code, Some(1), "an unknown option is not a program: {err}");
    assert!(err.contains("unknown option --bogus"), "{err}");
}
