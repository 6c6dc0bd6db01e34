//! `layering`: the workspace's mechanical layering gates, run by `.ci/run`.
//!
//! ```text
//! cargo run --release -p layering [-- [--only circles|unsafe] [--arrows] [DIR]]
//! ```
//!
//! - **Import circles**: for every crate of the workspace (each library, binary, integration test,
//!   benchmark and fuzz target, and the workspaces of their own below it) and for every module of
//!   it at every level, the circles among the module's children: child A → child B when something
//!   in A's subtree names a path into B's subtree (`crate::`, `super::`, `self::`, or a name a `use`
//!   binds; a re-export is followed to where the name comes from). Each circle is printed with
//!   its arrows and the file:line of the first path that makes each.
//! - **The unsafe rule**: every library and binary crate root of the workspace has
//!   `#![deny(unsafe_code)]` or `#![forbid(unsafe_code)]`, and `unsafe_code` is allowed again only
//!   on `mod` items (or as a module file's inner attribute), never on a function, an impl or a
//!   block. The modules that allow it are listed per crate, for a reviewer to check that each is
//!   a mapping, DMA, MMIO or FFI module.
//!
//! `--arrows` also prints every arrow between the children of every module (what the circles
//! are made of, and what depends on what).
//!
//! Exit status 1 when either check finds something (or a file cannot be read), 0 otherwise.
#![forbid(unsafe_code)]

mod circles;
mod tree;
mod unsafe_rule;
mod workspace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tree::{Crate, Disk};
use unsafe_rule::Breach;

struct Options {
    circles: bool,
    unsafe_rule: bool,
    arrows: bool,
    dir: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut o = Options { circles: true, unsafe_rule: true, arrows: false, dir: PathBuf::from(".") };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--only" => match args.next().as_deref() {
                Some("circles") => o.unsafe_rule = false,
                Some("unsafe") => o.circles = false,
                _ => return Err("--only takes `circles` or `unsafe`".into()),
            },
            "--arrows" => o.arrows = true,
            "-h" | "--help" => return Err(String::new()),
            d if !d.starts_with('-') => o.dir = PathBuf::from(d),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

fn main() -> ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("layering: {e}");
            }
            eprintln!("usage: layering [--only circles|unsafe] [--arrows] [DIR]");
            return ExitCode::from(2);
        }
    };
    let (root, targets) = match workspace::targets(&o.dir) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("layering: {e}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    let crates: Vec<(bool, Crate)> =
        targets.iter().map(|t| (t.covered, Crate::read(&t.label, &t.root, &Disk))).collect();
    for (_, k) in &crates {
        for p in &k.problems {
            println!("{}: {}", k.label, p.replace(&format!("{}/", root.display()), ""));
            failed = true;
        }
    }
    if o.arrows {
        for (_, k) in &crates {
            for (parent, e) in circles::arrows(k) {
                println!(
                    "{}: in {}: {} -> {}   {}:{}   {}",
                    k.label,
                    parent,
                    e.from,
                    e.to,
                    rel(&root, &e.at.file),
                    e.at.line,
                    e.path
                );
            }
        }
    }
    if o.circles {
        let mut n = 0;
        for (_, k) in &crates {
            for c in circles::circles(k) {
                n += 1;
                println!(
                    "{}: in {}: circle of {} modules: {}",
                    k.label,
                    c.parent,
                    c.members.len(),
                    c.members.join(", ")
                );
                for e in &c.edges {
                    let more = if e.count > 1 { format!(" (+{} more)", e.count - 1) } else { String::new() };
                    println!(
                        "    {} -> {}   {}:{}   {}{}",
                        e.from,
                        e.to,
                        rel(&root, &e.at.file),
                        e.at.line,
                        e.path,
                        more
                    );
                }
            }
        }
        println!("import circles: {n} in {} crates", crates.len());
        failed |= n > 0;
    }
    if o.unsafe_rule {
        let mut n = 0;
        for (covered, k) in &crates {
            for b in unsafe_rule::breaches(k, *covered) {
                n += 1;
                match b {
                    Breach::RootAllows => println!(
                        "{}: {} neither denies nor forbids unsafe_code",
                        k.label,
                        rel(&root, &k.modules[0].file)
                    ),
                    Breach::StrayAllow(l) => println!(
                        "{}: {}:{}: unsafe_code allowed elsewhere than on a module",
                        k.label,
                        rel(&root, &l.file),
                        l.line
                    ),
                }
            }
        }
        println!("unsafe rule: {n} breaches");
        println!("modules that allow unsafe_code:");
        for (covered, k) in &crates {
            let allowed: Vec<String> = k
                .unsafe_modules()
                .map(|(m, l)| format!("{} ({}:{})", m.display(), rel(&root, &l.file), l.line))
                .collect();
            if *covered && !allowed.is_empty() {
                println!("  {}: {}", k.label, allowed.join(", "));
            }
        }
        failed |= n > 0;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
