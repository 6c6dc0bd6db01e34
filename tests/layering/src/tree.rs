//! The module tree of one crate, read from its source files as rustc finds them (The Rust
//! Reference, "Modules": `mod x;` is `x.rs` or `x/mod.rs` beside a `mod.rs`-like file, or in the
//! folder named after a non-`mod.rs` file; `#[path]` overrides it; `mod x { }` is inline), and what
//! each module's own items name: the `use` bindings it makes, every path its code names (in `use`
//! declarations, expressions, types, patterns and macro bodies), and where `unsafe_code` is
//! allowed.
//!
//! Modules under every `#[cfg]` are read: a dependency behind a feature is a dependency.

use std::collections::BTreeMap;
#[cfg(test)]
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;
use syn::{Attribute, Item, ItemMod, UseTree};

/// Where source files come from: the disk, or a map of them in the unit tests.
pub trait Source {
    /// The text of `path`, or `None` when there is no such file.
    fn read(&self, path: &Path) -> Option<String>;
}

/// Files on disk.
pub struct Disk;

impl Source for Disk {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
}

/// Files held in memory, by path.
#[cfg(test)]
#[derive(Default)]
pub struct Memory(pub HashMap<PathBuf, String>);

#[cfg(test)]
impl Source for Memory {
    fn read(&self, path: &Path) -> Option<String> {
        self.0.get(path).cloned()
    }
}

/// A place in a file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Loc {
    /// The file.
    pub file: PathBuf,
    /// Its 1-based line.
    pub line: usize,
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// A path as written: its segments (`crate`, `super`, `self` kept as they are) and whether it
/// starts with `::` (then it names an external crate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    /// The segments, without generic arguments.
    pub segments: Vec<String>,
    /// `::a::b`: an external crate.
    pub global: bool,
    /// Where it is written.
    pub loc: Loc,
}

/// A name a `use` declaration binds in its module: `use a::b as c;` binds `c` to `a::b`.
#[derive(Clone, Debug)]
pub struct Binding {
    /// The bound name.
    pub name: String,
    /// What it names, relative to the module of the `use`.
    pub target: Named,
}

/// One module of the tree.
#[derive(Debug)]
pub struct Module {
    /// Its path from the crate root (empty for the root).
    pub path: Vec<String>,
    /// Its parent (`None` for the root).
    pub parent: Option<usize>,
    /// Its child modules by name.
    pub children: BTreeMap<String, usize>,
    /// The file holding its items (for an inline module, the file around it).
    pub file: PathBuf,
    /// The names its `use` declarations bind (those inside function bodies too).
    pub bindings: Vec<Binding>,
    /// The modules its glob imports (`use a::*;`) bring in.
    pub globs: Vec<Named>,
    /// Every path its own items name (not those of its child modules).
    pub named: Vec<Named>,
    /// Where `unsafe_code` is allowed on this module (on its `mod` item or as an inner attribute).
    pub allow_unsafe: Option<Loc>,
}

impl Module {
    /// The module's path written as Rust does (`crate`, `crate::a::b`).
    pub fn display(&self) -> String {
        if self.path.is_empty() {
            "crate".to_string()
        } else {
            format!("crate::{}", self.path.join("::"))
        }
    }
}

/// One crate: a library, a binary, an integration test, a benchmark, an example, a fuzz target.
#[derive(Debug)]
pub struct Crate {
    /// What the report calls it (`sim (lib)`).
    pub label: String,
    /// Its modules; index 0 is the root.
    pub modules: Vec<Module>,
    /// The crate root's inner attributes deny (or forbid) `unsafe_code`.
    pub root_denies_unsafe: bool,
    /// `unsafe_code` allowed (or lowered to warn) anywhere but on a module.
    pub stray_allows: Vec<Loc>,
    /// What could not be read: a missing module file, a parse error.
    pub problems: Vec<String>,
}

impl Crate {
    /// Reads the crate whose root file is `root` (its `lib.rs`, `main.rs` or target file).
    pub fn read(label: &str, root: &Path, source: &dyn Source) -> Crate {
        let mut krate = Crate {
            label: label.to_string(),
            modules: Vec::new(),
            root_denies_unsafe: false,
            stray_allows: Vec::new(),
            problems: Vec::new(),
        };
        krate.modules.push(new_module(Vec::new(), None, root.to_path_buf()));
        let Some(file) = parse_file(root, source, &mut krate.problems) else {
            return krate;
        };
        krate.root_denies_unsafe = file.attrs.iter().any(|a| is_lint_attr(a, &["deny", "forbid"]));
        if let Some(a) = file.attrs.iter().find(|a| lowers_unsafe_lint(a)) {
            // The crate root allowing unsafe code undoes the rule for the whole crate.
            krate.stray_allows.push(loc(root, a));
        }
        let dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut reader = Reader { krate: &mut krate, source };
        reader.items(0, &file.items, root, &dir);
        krate
    }

    /// The crate's modules with `unsafe_code` allowed.
    pub fn unsafe_modules(&self) -> impl Iterator<Item = (&Module, &Loc)> {
        self.modules.iter().filter_map(|m| m.allow_unsafe.as_ref().map(|l| (m, l)))
    }
}

fn new_module(path: Vec<String>, parent: Option<usize>, file: PathBuf) -> Module {
    Module {
        path,
        parent,
        children: BTreeMap::new(),
        file,
        bindings: Vec::new(),
        globs: Vec::new(),
        named: Vec::new(),
        allow_unsafe: None,
    }
}

fn parse_file(path: &Path, source: &dyn Source, problems: &mut Vec<String>) -> Option<syn::File> {
    let Some(text) = source.read(path) else {
        problems.push(format!("{}: cannot read", path.display()));
        return None;
    };
    match syn::parse_file(&text) {
        Ok(f) => Some(f),
        Err(e) => {
            let at = e.span().start();
            problems.push(format!("{}:{}: cannot parse: {e}", path.display(), at.line));
            None
        }
    }
}

fn loc(file: &Path, attr: &Attribute) -> Loc {
    Loc { file: file.to_path_buf(), line: span_line(attr.pound_token.span) }
}

fn span_line(span: proc_macro2::Span) -> usize {
    span.start().line
}

/// Every identifier in an attribute (its path and its arguments, through `cfg_attr`).
fn attr_idents(attr: &Attribute) -> Vec<String> {
    let mut out: Vec<String> = attr.path().segments.iter().map(|s| s.ident.to_string()).collect();
    if let syn::Meta::List(list) = &attr.meta {
        idents(list.tokens.clone(), &mut out);
    }
    out
}

fn idents(tokens: TokenStream, out: &mut Vec<String>) {
    for t in tokens {
        match t {
            TokenTree::Ident(i) => out.push(i.to_string()),
            TokenTree::Group(g) => idents(g.stream(), out),
            _ => {}
        }
    }
}

/// `#[deny(unsafe_code)]`-like: one of `levels` applied to `unsafe_code`.
fn is_lint_attr(attr: &Attribute, levels: &[&str]) -> bool {
    let ids = attr_idents(attr);
    ids.iter().any(|i| i == "unsafe_code") && ids.iter().any(|i| levels.contains(&i.as_str()))
}

/// An attribute that lets unsafe code through a deny: `allow`, `expect` or `warn` of `unsafe_code`.
pub fn lowers_unsafe_lint(attr: &Attribute) -> bool {
    is_lint_attr(attr, &["allow", "expect", "warn"])
}

struct Reader<'a> {
    krate: &'a mut Crate,
    source: &'a dyn Source,
}

impl Reader<'_> {
    /// Reads the items of module `m`, written in `file`; `dir` is where its `mod x;` files are.
    fn items(&mut self, m: usize, items: &[Item], file: &Path, dir: &Path) {
        for item in items {
            match item {
                Item::Mod(im) => self.module(m, im, file, dir),
                Item::Use(u) => {
                    let mut c = Collector { krate: self.krate, m, file };
                    c.use_item(u);
                }
                other => {
                    let mut c = Collector { krate: self.krate, m, file };
                    c.visit_item(other);
                }
            }
        }
    }

    fn module(&mut self, parent: usize, im: &ItemMod, file: &Path, dir: &Path) {
        let name = im.ident.to_string();
        let mut path = self.krate.modules[parent].path.clone();
        path.push(name.clone());
        let path_attr = im.attrs.iter().find_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        });
        match &im.content {
            Some((_, items)) => {
                let idx = self.add(parent, name.clone(), path, file.to_path_buf());
                self.mark_allow(idx, im.attrs.iter().filter(|a| lowers_unsafe_lint(a)), file);
                let child_dir = match &path_attr {
                    Some(p) => dir.join(p),
                    None => dir.join(&name),
                };
                self.items(idx, items, file, &child_dir);
            }
            None => {
                let (child_file, child_dir) = match &path_attr {
                    // A file named by `#[path]` owns its folder, as a `mod.rs` does.
                    Some(p) => {
                        let f = dir.join(p);
                        let d = f.parent().unwrap_or(Path::new("")).to_path_buf();
                        (f, d)
                    }
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        if self.source.read(&flat).is_some() {
                            (flat, dir.join(&name))
                        } else {
                            (dir.join(&name).join("mod.rs"), dir.join(&name))
                        }
                    }
                };
                let idx = self.add(parent, name, path, child_file.clone());
                self.mark_allow(idx, im.attrs.iter().filter(|a| lowers_unsafe_lint(a)), file);
                let Some(parsed) = parse_file(&child_file, self.source, &mut self.krate.problems) else {
                    return;
                };
                self.mark_allow(idx, parsed.attrs.iter().filter(|a| lowers_unsafe_lint(a)), &child_file);
                self.items(idx, &parsed.items, &child_file, &child_dir);
            }
        }
    }

    fn add(&mut self, parent: usize, name: String, path: Vec<String>, file: PathBuf) -> usize {
        let idx = self.krate.modules.len();
        self.krate.modules.push(new_module(path, Some(parent), file));
        self.krate.modules[parent].children.insert(name, idx);
        idx
    }

    fn mark_allow<'b>(&mut self, m: usize, attrs: impl Iterator<Item = &'b Attribute>, file: &Path) {
        for a in attrs {
            self.krate.modules[m].allow_unsafe.get_or_insert_with(|| loc(file, a));
        }
    }
}

/// Collects what one module's items name.
struct Collector<'a> {
    krate: &'a mut Crate,
    m: usize,
    file: &'a Path,
}

impl Collector<'_> {
    fn here(&self, line: usize) -> Loc {
        Loc { file: self.file.to_path_buf(), line }
    }

    fn use_item(&mut self, u: &syn::ItemUse) {
        for a in &u.attrs {
            self.visit_attribute(a);
        }
        let global = u.leading_colon.is_some();
        let mut prefix = Vec::new();
        self.use_tree(&u.tree, &mut prefix, global);
    }

    fn use_tree(&mut self, tree: &UseTree, prefix: &mut Vec<String>, global: bool) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix, global);
                prefix.pop();
            }
            UseTree::Name(n) => {
                let line = span_line(n.ident.span());
                self.bind(prefix, n.ident.to_string(), None, global, line);
            }
            UseTree::Rename(r) => {
                let line = span_line(r.ident.span());
                self.bind(prefix, r.ident.to_string(), Some(r.rename.to_string()), global, line);
            }
            UseTree::Glob(g) => {
                let named = Named { segments: prefix.clone(), global, loc: self.here(span_line(g.star_token.span)) };
                self.krate.modules[self.m].named.push(named.clone());
                self.krate.modules[self.m].globs.push(named);
            }
            UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix, global);
                }
            }
        }
    }

    fn bind(&mut self, prefix: &[String], ident: String, rename: Option<String>, global: bool, line: usize) {
        let mut segments = prefix.to_vec();
        // `use a::b::{self}` binds `b`.
        let name = if ident == "self" {
            rename.unwrap_or_else(|| prefix.last().cloned().unwrap_or_default())
        } else {
            segments.push(ident.clone());
            rename.unwrap_or(ident)
        };
        let target = Named { segments, global, loc: self.here(line) };
        let module = &mut self.krate.modules[self.m];
        module.named.push(target.clone());
        if name != "_" {
            module.bindings.push(Binding { name, target });
        }
    }

    fn path_named(&mut self, segments: Vec<String>, global: bool, line: usize) {
        if segments.len() >= 2 || global {
            let loc = self.here(line);
            self.krate.modules[self.m].named.push(Named { segments, global, loc });
        }
    }

    /// Paths inside a macro's tokens (`format!("{}", crate::a::f())`): every `a::b` run of
    /// identifiers.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let mut flat = Vec::new();
        flatten(tokens, &mut flat);
        let mut i = 0;
        while i < flat.len() {
            let global = i >= 2 && flat[i - 1].is_colon() && flat[i - 2].is_colon();
            if let Tok::Ident(first, line) = &flat[i] {
                let mut segs = vec![first.clone()];
                let mut j = i + 1;
                while j + 2 < flat.len() && flat[j].is_colon() && flat[j + 1].is_colon() {
                    match &flat[j + 2] {
                        Tok::Ident(s, _) => {
                            segs.push(s.clone());
                            j += 3;
                        }
                        _ => break,
                    }
                }
                if segs.len() >= 2 {
                    let line = *line;
                    self.path_named(segs, global, line);
                }
                i = j;
            } else {
                i += 1;
            }
        }
    }
}

enum Tok {
    Ident(String, usize),
    Colon,
    Other,
}

impl Tok {
    fn is_colon(&self) -> bool {
        matches!(self, Tok::Colon)
    }
}

fn flatten(tokens: TokenStream, out: &mut Vec<Tok>) {
    for t in tokens {
        match t {
            TokenTree::Ident(i) => out.push(Tok::Ident(i.to_string(), span_line(i.span()))),
            TokenTree::Punct(p) if p.as_char() == ':' => out.push(Tok::Colon),
            TokenTree::Group(g) => {
                out.push(Tok::Other);
                flatten(g.stream(), out);
                out.push(Tok::Other);
            }
            _ => out.push(Tok::Other),
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item_mod(&mut self, _: &'ast ItemMod) {
        // A module inside a function body: rare, and not part of the file tree.
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_item(u);
    }

    fn visit_attribute(&mut self, a: &'ast Attribute) {
        if lowers_unsafe_lint(a) {
            let l = loc(self.file, a);
            self.krate.stray_allows.push(l);
        }
        // What an attribute names (`derive`, `cfg`) is no dependency between modules.
    }

    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {
        // `pub(in crate::a)` names an ancestor, never a dependency.
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p.segments.first().map(|s| span_line(s.ident.span())).unwrap_or(0);
        self.path_named(segments, p.leading_colon.is_some(), line);
        for s in &p.segments {
            self.visit_path_arguments(&s.arguments);
        }
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.macro_tokens(m.tokens.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(files: &[(&str, &str)]) -> Crate {
        let mut mem = Memory::default();
        for (p, t) in files {
            mem.0.insert(PathBuf::from(p), t.to_string());
        }
        Crate::read("t", Path::new("src/lib.rs"), &mem)
    }

    #[test]
    fn files_folders_path_attributes_and_inline_modules_make_the_tree() {
        let k = one(&[
            ("src/lib.rs", "mod a; mod b; #[path = \"other/c_file.rs\"] mod c; mod d { mod e; }"),
            ("src/a.rs", "mod inner;"),
            ("src/a/inner.rs", ""),
            ("src/b/mod.rs", "mod x;"),
            ("src/b/x.rs", ""),
            ("src/other/c_file.rs", "mod y;"),
            ("src/other/y.rs", ""),
            ("src/d/e.rs", ""),
        ]);
        assert!(k.problems.is_empty(), "{:?}", k.problems);
        let mut paths: Vec<String> = k.modules.iter().map(|m| m.display()).collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                "crate",
                "crate::a",
                "crate::a::inner",
                "crate::b",
                "crate::b::x",
                "crate::c",
                "crate::c::y",
                "crate::d",
                "crate::d::e"
            ]
        );
    }

    #[test]
    fn nested_use_groups_bind_each_name() {
        let k = one(&[("src/lib.rs", "use crate::{a::{b, c as d, self}, e::*};\nfn f() { x::y::z(); }")]);
        let names: Vec<(String, String)> =
            k.modules[0].bindings.iter().map(|b| (b.name.clone(), b.target.segments.join("::"))).collect();
        assert_eq!(
            names,
            [("b".into(), "crate::a::b".into()), ("d".into(), "crate::a::c".into()), ("a".into(), "crate::a".into())]
        );
        assert_eq!(k.modules[0].globs[0].segments, ["crate", "e"]);
        assert!(k.modules[0].named.iter().any(|n| n.segments == ["x", "y", "z"] && n.loc.line == 2));
    }

    #[test]
    fn paths_in_macro_bodies_are_named() {
        let k =
            one(&[("src/lib.rs", "fn f() { println!(\"{}\", crate::a::g()); assert!(matches!(x, super::B::C)); }")]);
        let named: Vec<String> = k.modules[0].named.iter().map(|n| n.segments.join("::")).collect();
        assert!(named.contains(&"crate::a::g".to_string()), "{named:?}");
        assert!(named.contains(&"super::B::C".to_string()), "{named:?}");
    }

    #[test]
    fn unsafe_allowed_on_modules_and_nowhere_else() {
        let k = one(&[
            (
                "src/lib.rs",
                "#![deny(unsafe_code)]\n#[allow(unsafe_code)]\nmod a;\nmod b;\n#[allow(unsafe_code)]\nfn f() {}",
            ),
            ("src/a.rs", ""),
            ("src/b.rs", "#![allow(unsafe_code)]\nfn g() { #[allow(unsafe_code)] unsafe {} }"),
        ]);
        assert!(k.root_denies_unsafe);
        let allowed: Vec<String> = k.unsafe_modules().map(|(m, _)| m.display()).collect();
        assert_eq!(allowed, ["crate::a", "crate::b"]);
        let stray: Vec<String> = k.stray_allows.iter().map(|l| l.to_string()).collect();
        assert_eq!(stray, ["src/b.rs:2", "src/lib.rs:5"]);
    }
}
