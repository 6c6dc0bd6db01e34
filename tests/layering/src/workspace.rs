//! The crates to check: every target of every package of the workspace at a root, and of the
//! workspaces of their own below it (a fuzz workspace, a `no_std` proof), as `cargo metadata`
//! lists them. Each target is a crate of its own: a library, each binary, each integration test,
//! each benchmark, each example, a build script.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// One target to read.
#[derive(Debug)]
pub struct Target {
    /// `package (kind name)`.
    pub label: String,
    /// Its root file.
    pub root: PathBuf,
    /// A library or binary of the workspace at the root: the unsafe rule applies to its root.
    pub covered: bool,
}

fn metadata(manifest: Option<&Path>, dir: &Path) -> Result<Value, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir).args(["metadata", "--no-deps", "--format-version", "1", "--offline"]);
    if let Some(m) = manifest {
        cmd.arg("--manifest-path").arg(m);
    }
    let out = cmd.output().map_err(|e| format!("cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo metadata: {}", String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: {e}"))
}

/// Every `Cargo.toml` below `dir` (not in `target` folders or dot folders).
fn manifests(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let path = e.path();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                manifests(&path, out);
            }
        } else if name == "Cargo.toml" {
            out.push(path);
        }
    }
}

/// The workspace root `cargo metadata` finds from `dir`, and every target to check.
pub fn targets(dir: &Path) -> Result<(PathBuf, Vec<Target>), String> {
    let main = metadata(None, dir)?;
    let root = PathBuf::from(main["workspace_root"].as_str().ok_or("cargo metadata: no workspace_root")?);
    let mut out = Vec::new();
    let mut seen: Vec<PathBuf> = vec![root.join("Cargo.toml")];
    add(&main, true, &mut out, &mut seen);
    let mut all = Vec::new();
    manifests(&root, &mut all);
    for m in all {
        if seen.contains(&m)
            || !std::fs::read_to_string(&m).unwrap_or_default().lines().any(|l| l.trim() == "[workspace]")
        {
            continue;
        }
        let other = metadata(Some(&m), &root)?;
        add(&other, false, &mut out, &mut seen);
    }
    Ok((root, out))
}

fn add(meta: &Value, main: bool, out: &mut Vec<Target>, seen: &mut Vec<PathBuf>) {
    for p in meta["packages"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or("?");
        if let Some(m) = p["manifest_path"].as_str() {
            seen.push(PathBuf::from(m));
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            let kinds: Vec<&str> = t["kind"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let (Some(tname), Some(src)) = (t["name"].as_str(), t["src_path"].as_str()) else { continue };
            let kind = kinds.first().copied().unwrap_or("?");
            let library_or_binary = kinds
                .iter()
                .any(|k| matches!(*k, "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro" | "bin"));
            out.push(Target {
                label: format!("{name} ({kind} {tname})"),
                root: PathBuf::from(src),
                covered: main && library_or_binary,
            });
        }
    }
}
