//! Ask a C compiler what a header says: build a small program that includes the header and prints
//! one integer per expression (`sizeof`, `offsetof`, an enum constant, a macro), run it, and read
//! the values back. Used to hold the Rust ABI crate against the real `vmw_pvrdma-abi.h`, and meant
//! to be reused against other headers (QEMU's `pvrdma_dev_api.h`) later.
//!
//! Nothing here skips: a missing compiler or header is an error with a message saying what to
//! install, so a test built on it fails instead of passing vacuously.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Why a probe produced no values.
#[derive(Debug)]
pub enum ProbeError {
    /// The header file is not installed.
    HeaderMissing { path: PathBuf, package: &'static str },
    /// No C compiler could be started.
    CompilerMissing { tried: Vec<String>, error: String },
    /// The temporary directory or the source file could not be written.
    Io(String),
    /// The compiler rejected the program.
    CompileFailed { cc: String, source: PathBuf, stderr: String },
    /// The program did not run to a successful exit.
    RunFailed { program: PathBuf, detail: String },
    /// The program's output was not one `key value` line per expression.
    BadOutput(String),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HeaderMissing { path, package } => write!(
                f,
                "C header {} is missing: install it (Debian/Ubuntu package `{package}`); \
                 this check does not skip",
                path.display()
            ),
            Self::CompilerMissing { tried, error } => write!(
                f,
                "no C compiler found (tried {}; set CC to choose one): {error}; install gcc \
                 (Debian/Ubuntu: `apt-get install gcc libc6-dev`); this check does not skip",
                tried.join(", ")
            ),
            Self::Io(e) => write!(f, "probe I/O error: {e}"),
            Self::CompileFailed { cc, source, stderr } => {
                write!(f, "`{cc}` failed to compile {}:\n{stderr}", source.display())
            }
            Self::RunFailed { program, detail } => {
                write!(f, "probe program {} failed: {detail}", program.display())
            }
            Self::BadOutput(line) => write!(f, "unexpected probe output line {line:?}"),
        }
    }
}

impl std::error::Error for ProbeError {}

/// A C program under construction: headers to include and integer expressions to print.
#[derive(Debug, Default)]
pub struct CProbe {
    includes: Vec<String>,
    exprs: Vec<String>,
}

static PROBE_SEQ: AtomicU32 = AtomicU32::new(0);

impl CProbe {
    /// An empty probe.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `#include <header>`.
    pub fn include(&mut self, header: &str) -> &mut Self {
        self.includes.push(header.to_owned());
        self
    }

    /// Adds an integer constant expression; returns its index into [`CProbe::run`]'s result.
    /// The value is converted to `long long`: wrap the expression in a cast (`(__u32)(X)`) where
    /// the unsigned value is meant.
    pub fn expr(&mut self, c_expr: &str) -> usize {
        self.exprs.push(c_expr.to_owned());
        self.exprs.len() - 1
    }

    /// The C source of the program.
    pub fn source(&self) -> String {
        let mut s = String::from("#include <stddef.h>\n#include <stdio.h>\n");
        for h in &self.includes {
            s += &format!("#include <{h}>\n");
        }
        s += "\n#define MEMBER(T, m) (((T *)0)->m)\n\nint main(void)\n{\n";
        for (i, e) in self.exprs.iter().enumerate() {
            s += &format!("\tprintf(\"{i} %lld\\n\", (long long)({e}));\n");
        }
        s += "\treturn 0;\n}\n";
        s
    }

    /// Compiles and runs the program; returns one value per expression, in order.
    pub fn run(&self) -> Result<Vec<i64>, ProbeError> {
        let n = PROBE_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pvrdma-cprobe-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| ProbeError::Io(format!("{}: {e}", dir.display())))?;
        let result = self.run_in(&dir);
        // Keep the directory when something failed, for a look at the source and the compiler.
        if result.is_ok() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    fn run_in(&self, dir: &Path) -> Result<Vec<i64>, ProbeError> {
        let src = dir.join("probe.c");
        let exe = dir.join("probe");
        std::fs::write(&src, self.source()).map_err(|e| ProbeError::Io(format!("{}: {e}", src.display())))?;
        let cc = compile(&src, &exe)?;
        let out = Command::new(&exe)
            .output()
            .map_err(|e| ProbeError::RunFailed { program: exe.clone(), detail: e.to_string() })?;
        if !out.status.success() {
            return Err(ProbeError::RunFailed { program: exe, detail: format!("{} (compiled by {cc})", out.status) });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut values = BTreeMap::new();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(k), Some(v), None) = (it.next(), it.next(), it.next()) else {
                return Err(ProbeError::BadOutput(line.to_owned()));
            };
            let k: usize = k.parse().map_err(|_| ProbeError::BadOutput(line.to_owned()))?;
            let v: i64 = v.parse().map_err(|_| ProbeError::BadOutput(line.to_owned()))?;
            values.insert(k, v);
        }
        (0..self.exprs.len())
            .map(|i| {
                values.get(&i).copied().ok_or_else(|| ProbeError::BadOutput(format!("<no line for expression {i}>")))
            })
            .collect()
    }
}

/// Compilers to try: `$CC` if set, else `cc`, then `gcc`.
fn compilers() -> Vec<String> {
    match std::env::var("CC") {
        Ok(cc) if !cc.trim().is_empty() => vec![cc],
        _ => vec!["cc".into(), "gcc".into()],
    }
}

fn compile(src: &Path, exe: &Path) -> Result<String, ProbeError> {
    let tried = compilers();
    let mut last_error = String::new();
    for cc in &tried {
        let out = Command::new(cc).args(["-std=gnu11", "-Wall", "-O0", "-o"]).arg(exe).arg(src).output();
        match out {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                last_error = format!("{cc}: {e}");
                continue;
            }
            Err(e) => {
                let error = format!("{cc}: {e}");
                return Err(ProbeError::CompilerMissing { tried: tried.clone(), error });
            }
            Ok(o) if o.status.success() => return Ok(cc.clone()),
            Ok(o) => {
                return Err(ProbeError::CompileFailed {
                    cc: cc.clone(),
                    source: src.to_owned(),
                    stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
                })
            }
        }
    }
    Err(ProbeError::CompilerMissing { tried, error: last_error })
}

/// Fails unless `path` exists; `package` names what provides it.
pub fn require_header(path: &str, package: &'static str) -> Result<(), ProbeError> {
    if Path::new(path).is_file() {
        Ok(())
    } else {
        Err(ProbeError::HeaderMissing { path: path.into(), package })
    }
}
