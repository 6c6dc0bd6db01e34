//! The docs' tables against the code they mirror, and the docs' links against the files they name
//! (`docs/decisions.md`, decision 30: one source for each table).
//!
//! - [`every_difference_has_a_row_and_every_row_names_one`]: the table under "Where they differ"
//!   in `docs/qemu.md` against `enum Difference` of [`crate::differential`].
//! - [`command_error_table_is_the_case_table`]: the table under "Command errors and hostile counts"
//!   in `docs/qemu.md` against [`crate::command_errors::CASES`]: the same cases in the same order,
//!   QEMU 7.2's recorded answers word for word, and the model's answers as the model gives them.
//! - [`relative_links_resolve`]: every relative link of `README.md` and `docs/*.md` names a file
//!   that exists, and an anchor names a heading of that file.
//!
//! Each was seen to fail before it was kept: deleting the `NoResizeCq` row, renaming a row's
//! variant to one that does not exist, deleting the `uar_bar_read` row, changing one recorded
//! QEMU answer in the table (`0xffff` to `0xfffe`), and pointing a link at `docs/nothing.md` and
//! at `qemu.md#no-such-heading` each made its test fail with the row or link named.

use crate::command_errors::{Run, CASES};
use pvrdma_sim::Profile;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's root (this crate lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The text of `rel`, a path from the repository's root.
fn read(rel: &str) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The cells of one table row (`| a | b |`), trimmed; `\|` inside a cell is a `|`.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                out.last_mut().unwrap().push('|');
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|s| s.trim().to_string()).collect()
}

/// The body rows of the first table after the heading whose text is `heading` (any level).
fn table_after(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let mut lines = doc.lines().skip_while(|l| !(l.starts_with('#') && l.trim_start_matches('#').trim() == heading));
    assert!(lines.next().is_some(), "no heading {heading:?}");
    let rows: Vec<&str> = lines
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'))
        .collect();
    assert!(rows.len() > 2, "no table after {heading:?}");
    // Header and separator first.
    rows[2..].iter().map(|l| cells(l)).collect()
}

/// A cell holding one inline-code span, without its backticks.
fn code(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?.strip_suffix('`').filter(|s| !s.contains('`'))
}

/// The variant names of `enum Difference`, read from whichever file under `tests/src` declares
/// it (the enum may move between files; its name and module path stay).
fn difference_variants() -> Vec<String> {
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut all = Vec::new();
    files(&root().join("tests/src"), &mut all);
    let decl = "pub enum Difference {";
    let src = all
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .find(|s| s.contains(decl))
        .expect("a file under tests/src declares `pub enum Difference`");
    let body = &src[src.find(decl).unwrap() + decl.len()..];
    let body = &body[..body.find("\n}").expect("the enum's closing brace")];
    let variants: Vec<String> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#') && !l.is_empty())
        .map(|l| l.trim_end_matches(',').to_string())
        .collect();
    for v in &variants {
        assert!(
            !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric()),
            "enum Difference: {v:?} is not a unit variant the parser knows"
        );
    }
    variants
}

/// Every variant of `Difference` names at least one row of `docs/qemu.md`'s "Where they differ"
/// table, and every row's first cell names a variant.
#[test]
fn every_difference_has_a_row_and_every_row_names_one() {
    let variants: BTreeSet<String> = difference_variants().into_iter().collect();
    assert!(variants.len() >= 10, "parsed only {variants:?} from enum Difference");
    let rows = table_after(&read("docs/qemu.md"), "Where they differ");
    let mut named = BTreeSet::new();
    for r in &rows {
        let v = code(&r[0]).unwrap_or_else(|| panic!("docs/qemu.md: a difference row names no variant: {r:?}"));
        assert!(variants.contains(v), "docs/qemu.md names `{v}`, which enum Difference does not have");
        named.insert(v.to_string());
    }
    let missing: Vec<_> = variants.difference(&named).collect();
    assert!(missing.is_empty(), "enum Difference variants without a row in docs/qemu.md: {missing:?}");
}

/// A row's answers cell as the steps it lists: inline-code spans separated by `; `.
fn answers(cell: &str) -> String {
    cell.replace('`', "")
}

/// The table of command-error cases in `docs/qemu.md` is [`CASES`]: the same names in the same
/// order, QEMU 7.2's column exactly the recorded answers, and the model's column the answers the
/// model (IBTA profile) gives now, each step's answer as `Obs` displays it.
#[test]
fn command_error_table_is_the_case_table() {
    let rows = table_after(&read("docs/qemu.md"), "Command errors and hostile counts");
    let names: Vec<&str> = rows.iter().map(|r| code(&r[0]).unwrap_or(&r[0])).collect();
    let want: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    assert_eq!(names, want, "docs/qemu.md's command-error rows against CASES");
    for (r, c) in rows.iter().zip(CASES) {
        assert!(r.len() >= 4, "{}: too few cells: {r:?}", c.name);
        assert_eq!(answers(&r[2]), c.qemu72.join("; "), "{}: QEMU 7.2's recorded answers", c.name);
        let mut run = Run::model(Profile::Ibta);
        let _ = (c.run)(&mut run);
        let model: Vec<String> = run.steps().iter().map(|s| s.obs.to_string()).collect();
        assert_eq!(answers(&r[3]), model.join("; "), "{}: the model's answers", c.name);
    }
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation other than `-` and `_`
/// dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of `doc`'s headings (outside fenced code).
fn anchors(doc: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for l in doc.lines() {
        if l.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && l.starts_with('#') {
            out.insert(slug(l.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of `doc`'s inline links `[text](target)`, outside fenced code and inline code.
fn links(doc: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for l in doc.lines() {
        if l.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code spans.
        let text: String = l.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

/// Every relative link of `README.md` and `docs/*.md` names an existing file, and every anchor
/// one of that file's headings.
#[test]
fn relative_links_resolve() {
    let mut docs = vec![PathBuf::from("README.md")];
    for e in std::fs::read_dir(root().join("docs")).expect("docs/").flatten() {
        if e.path().extension().is_some_and(|x| x == "md") {
            docs.push(PathBuf::from("docs").join(e.file_name()));
        }
    }
    let mut bad = Vec::new();
    let mut checked = 0;
    for d in &docs {
        let text = read(d.to_str().unwrap());
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = target.split_once('#').map_or((target.as_str(), None), |(f, a)| (f, Some(a)));
            let path = if file.is_empty() { root().join(d) } else { root().join(d.parent().unwrap()).join(file) };
            if !path.exists() {
                bad.push(format!("{}: {target}: no such file", d.display()));
                continue;
            }
            if let Some(a) = anchor {
                let ok = path.extension().is_some_and(|x| x == "md")
                    && anchors(&std::fs::read_to_string(&path).unwrap_or_default()).contains(a);
                if !ok {
                    bad.push(format!("{}: {target}: no heading with that anchor", d.display()));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} links found: the link parser is broken");
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

/// Prints the model's answers per case in the form the table takes (`cargo test -p tests --lib
/// doc_tables::print -- --ignored --nocapture`), to write a new row from.
#[test]
#[ignore]
fn print_command_error_rows() {
    for c in CASES {
        let mut run = Run::model(Profile::Ibta);
        let _ = (c.run)(&mut run);
        let q: Vec<String> = c.qemu72.iter().map(|s| format!("`{s}`")).collect();
        let m: Vec<String> = run.steps().iter().map(|s| format!("`{}`", s.obs)).collect();
        println!("| `{}` | | {} | {} | |", c.name, q.join("; "), m.join("; "));
    }
}
