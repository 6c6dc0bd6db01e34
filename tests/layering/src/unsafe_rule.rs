//! The unsafe rule: every library and binary crate root denies (or forbids) `unsafe_code`, and
//! `unsafe_code` is allowed again only on whole modules (the mapping, DMA, MMIO and FFI ones a
//! reviewer can name), never on a function, an impl or a block.

use crate::tree::{Crate, Loc};

/// What breaks the rule in one crate.
#[derive(Debug, PartialEq, Eq)]
pub enum Breach {
    /// The crate root neither denies nor forbids `unsafe_code`.
    RootAllows,
    /// `unsafe_code` allowed (or lowered to warn) elsewhere than on a module.
    StrayAllow(Loc),
}

/// The breaches of `krate`; `root_must_deny` is false for crates the rule does not cover at the
/// root (integration tests, benchmarks).
pub fn breaches(krate: &Crate, root_must_deny: bool) -> Vec<Breach> {
    let mut out = Vec::new();
    if root_must_deny && !krate.root_denies_unsafe {
        out.push(Breach::RootAllows);
    }
    out.extend(krate.stray_allows.iter().cloned().map(Breach::StrayAllow));
    out
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::tree::Memory;

    fn read(lib: &str) -> Crate {
        let mut mem = Memory::default();
        mem.0.insert(PathBuf::from("src/lib.rs"), lib.to_string());
        mem.0.insert(PathBuf::from("src/ffi.rs"), String::new());
        Crate::read("t", Path::new("src/lib.rs"), &mem)
    }

    #[test]
    fn a_root_without_deny_breaks_the_rule() {
        assert_eq!(breaches(&read("mod ffi;"), true), [Breach::RootAllows]);
        assert!(breaches(&read("mod ffi;"), false).is_empty());
        assert!(breaches(&read("#![forbid(unsafe_code)]"), true).is_empty());
        assert!(breaches(&read("#![deny(missing_docs, unsafe_code)]"), true).is_empty());
    }

    #[test]
    fn an_allow_on_a_function_or_the_root_breaks_it_and_one_on_a_module_does_not() {
        let k = read(
            "#![deny(unsafe_code)]\n#[allow(unsafe_code)]\nmod ffi;\nimpl X {\n#[allow(unsafe_code)]\nfn f() {}\n}",
        );
        let at: Vec<String> = breaches(&k, true)
            .iter()
            .map(|b| match b {
                Breach::StrayAllow(l) => l.to_string(),
                Breach::RootAllows => "root".into(),
            })
            .collect();
        assert_eq!(at, ["src/lib.rs:5"]);
        let k = read("#![deny(unsafe_code)]\n#![allow(unsafe_code)]");
        assert_eq!(breaches(&k, true).len(), 1);
    }
}
