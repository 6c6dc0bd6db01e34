//! Import circles among the children of every module.
//!
//! Every path a module names is resolved to the module it points into, as rustc resolves it in
//! the 2018 edition and later (The Rust Reference, "Paths" and "Use declarations"): `crate::`,
//! `super::` and `self::` from where it is written; a first segment that is a child module or a
//! name a `use` of that module binds (or one its glob imports bring in) through that; anything else
//! is an external crate or a local item. A name a module re-exports is followed to where it comes
//! from, so a facade does not hide a dependency. A path from module X into module T is an arrow
//! at the module where their paths part (their lowest common ancestor L), from L's child holding X
//! to L's child holding T; a path into an ancestor or into oneself is no arrow. A circle is a
//! strongly connected set of two or more children of one module.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::tree::{Crate, Loc, Named};

/// One arrow between two children of a module, with the first place that makes it.
#[derive(Debug, Clone)]
pub struct Edge {
    /// The child that names the other.
    pub from: String,
    /// The child named.
    pub to: String,
    /// Where the first such path is written.
    pub at: Loc,
    /// That path, as written.
    pub path: String,
    /// How many paths make this arrow.
    pub count: usize,
}

/// A circle among the children of one module.
#[derive(Debug)]
pub struct Circle {
    /// The module whose children they are (`crate`, `crate::roce`).
    pub parent: String,
    /// The children in the circle, sorted.
    pub members: Vec<String>,
    /// The arrows among them.
    pub edges: Vec<Edge>,
}

const MAX_DEPTH: usize = 24;

/// Where a path leads: the module it reaches, and whether every segment was a module (so more
/// segments may continue from it).
#[derive(Clone, Copy)]
struct Reached {
    module: usize,
    whole: bool,
}

struct Resolver<'a> {
    krate: &'a Crate,
    /// Names already looked up, by module: each is resolved once.
    known: RefCell<HashMap<(usize, String), Option<Reached>>>,
    /// Names being looked up: a name reached again through globs or re-exports leads nowhere new.
    open: RefCell<HashSet<(usize, String)>>,
}

impl Resolver<'_> {
    /// The module `named`, written in module `from`, points into; `None` outside the crate.
    fn resolve(&self, from: usize, named: &Named, depth: usize) -> Option<Reached> {
        if named.global || depth > MAX_DEPTH {
            return None;
        }
        let segs = &named.segments;
        let first = segs.first()?;
        let (mut cur, rest) = match first.as_str() {
            "crate" => (0, &segs[1..]),
            "self" => (from, &segs[1..]),
            "super" => {
                let mut cur = from;
                let mut i = 0;
                while segs.get(i).map(String::as_str) == Some("super") {
                    cur = self.krate.modules[cur].parent?;
                    i += 1;
                }
                (cur, &segs[i..])
            }
            "Self" => return None,
            _ => {
                let r = self.lookup(from, first, depth)?;
                if !r.whole {
                    return Some(r);
                }
                (r.module, &segs[1..])
            }
        };
        for s in rest {
            if let Some(&c) = self.krate.modules[cur].children.get(s) {
                cur = c;
                continue;
            }
            match self.lookup(cur, s, depth) {
                Some(r) if r.whole => cur = r.module,
                Some(r) => return Some(r),
                None => return Some(Reached { module: cur, whole: false }),
            }
        }
        Some(Reached { module: cur, whole: true })
    }

    /// A name seen from inside module `m`: a child, a `use` binding, or a glob import's name.
    fn lookup(&self, m: usize, name: &str, depth: usize) -> Option<Reached> {
        let key = (m, name.to_string());
        if let Some(r) = self.known.borrow().get(&key) {
            return *r;
        }
        if !self.open.borrow_mut().insert(key.clone()) {
            return None;
        }
        let r = self.lookup_once(m, name, depth);
        self.open.borrow_mut().remove(&key);
        self.known.borrow_mut().insert(key, r);
        r
    }

    fn lookup_once(&self, m: usize, name: &str, depth: usize) -> Option<Reached> {
        if let Some(&c) = self.krate.modules[m].children.get(name) {
            return Some(Reached { module: c, whole: true });
        }
        if let Some(r) = self.binding(m, name, depth) {
            return Some(r);
        }
        for g in &self.krate.modules[m].globs {
            let Some(r) = self.resolve(m, g, depth + 1) else { continue };
            if !r.whole || r.module == m {
                continue;
            }
            if let Some(&c) = self.krate.modules[r.module].children.get(name) {
                return Some(Reached { module: c, whole: true });
            }
            if let Some(found) = self.lookup(r.module, name, depth + 1) {
                return Some(found);
            }
        }
        None
    }

    /// What the name a `use` in module `m` binds leads to.
    fn binding(&self, m: usize, name: &str, depth: usize) -> Option<Reached> {
        let b = self.krate.modules[m].bindings.iter().find(|b| b.name == name)?;
        // `use foo;` of an external crate binds `foo` to itself.
        if b.target.segments.len() == 1 && b.target.segments[0] == name {
            return None;
        }
        self.resolve(m, &b.target, depth + 1)
    }
}

/// The lowest common ancestor of modules `a` and `b`, and the children of it on the way to each.
fn parting(krate: &Crate, a: usize, b: usize) -> Option<(usize, usize, usize)> {
    let chain = |mut m: usize| {
        let mut v = vec![m];
        while let Some(p) = krate.modules[m].parent {
            v.push(p);
            m = p;
        }
        v.reverse();
        v
    };
    let (ca, cb) = (chain(a), chain(b));
    let common = ca.iter().zip(&cb).take_while(|(x, y)| x == y).count();
    // One inside the other: a path into oneself or an ancestor, or into one's own subtree.
    if common == ca.len() || common == cb.len() {
        return None;
    }
    Some((ca[common - 1], ca[common], cb[common]))
}

/// Every circle among the children of every module of `krate`, outermost first.
/// Every arrow between the children of every module: (the module, the arrow).
pub fn arrows(krate: &Crate) -> Vec<(String, Edge)> {
    arrow_map(krate)
        .into_iter()
        .flat_map(|(parent, edges)| edges.into_values().map(move |e| (krate.modules[parent].display(), e)))
        .collect()
}

/// Per module, the arrows among its children.
fn arrow_map(krate: &Crate) -> BTreeMap<usize, BTreeMap<(usize, usize), Edge>> {
    let resolver = Resolver { krate, known: RefCell::default(), open: RefCell::default() };
    // Per parent module: arrows child -> child.
    let mut arrows: BTreeMap<usize, BTreeMap<(usize, usize), Edge>> = BTreeMap::new();
    for (x, module) in krate.modules.iter().enumerate() {
        for named in &module.named {
            let Some(r) = resolver.resolve(x, named, 0) else { continue };
            let Some((l, ca, cb)) = parting(krate, x, r.module) else { continue };
            let name = |m: usize| krate.modules[m].path.last().cloned().unwrap_or_default();
            arrows.entry(l).or_default().entry((ca, cb)).and_modify(|e| e.count += 1).or_insert_with(|| Edge {
                from: name(ca),
                to: name(cb),
                at: named.loc.clone(),
                path: named.segments.join("::"),
                count: 1,
            });
        }
    }
    arrows
}

pub fn circles(krate: &Crate) -> Vec<Circle> {
    let arrows = arrow_map(krate);
    let mut out = Vec::new();
    for (parent, edges) in arrows {
        let nodes: Vec<usize> = krate.modules[parent].children.values().copied().collect();
        for comp in sccs(&nodes, &edges) {
            if comp.len() < 2 {
                continue;
            }
            let mut members: Vec<String> =
                comp.iter().map(|&m| krate.modules[m].path.last().cloned().unwrap_or_default()).collect();
            members.sort();
            let mut es: Vec<Edge> = edges
                .iter()
                .filter(|((a, b), _)| comp.contains(a) && comp.contains(b))
                .map(|(_, e)| e.clone())
                .collect();
            es.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
            out.push(Circle { parent: krate.modules[parent].display(), members, edges: es });
        }
    }
    out.sort_by(|a, b| (a.parent.matches("::").count(), &a.parent).cmp(&(b.parent.matches("::").count(), &b.parent)));
    out
}

/// Tarjan's strongly connected components of the graph on `nodes` with arrows `edges`.
fn sccs<T>(nodes: &[usize], edges: &BTreeMap<(usize, usize), T>) -> Vec<Vec<usize>> {
    struct State<'a, T> {
        edges: &'a BTreeMap<(usize, usize), T>,
        index: BTreeMap<usize, usize>,
        low: BTreeMap<usize, usize>,
        stack: Vec<usize>,
        on: Vec<usize>,
        out: Vec<Vec<usize>>,
    }
    fn visit<T>(s: &mut State<'_, T>, v: usize) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.push(v);
        let next: Vec<usize> = s.edges.range((v, 0)..=(v, usize::MAX)).map(|((_, w), _)| *w).collect();
        for w in next {
            if !s.index.contains_key(&w) {
                visit(s, w);
                let lw = s.low[&w];
                let lv = s.low.get_mut(&v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(&w) {
                let iw = s.index[&w];
                let lv = s.low.get_mut(&v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[&v] == s.index[&v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.retain(|&x| x != w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: Vec::new(),
        out: Vec::new(),
    };
    for &v in nodes {
        if !s.index.contains_key(&v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::tree::Memory;

    fn check(files: &[(&str, &str)]) -> Vec<String> {
        let mut mem = Memory::default();
        for (p, t) in files {
            mem.0.insert(PathBuf::from(p), t.to_string());
        }
        let k = Crate::read("t", Path::new("src/lib.rs"), &mem);
        assert!(k.problems.is_empty(), "{:?}", k.problems);
        circles(&k)
            .iter()
            .map(|c| {
                let edges: Vec<String> =
                    c.edges.iter().map(|e| format!("{}->{}@{}", e.from, e.to, e.at.line)).collect();
                format!("{}: {} [{}]", c.parent, c.members.join(","), edges.join(" "))
            })
            .collect()
    }

    #[test]
    fn a_circle_through_crate_paths() {
        let found = check(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", "use crate::b::B;\npub struct A;"),
            ("src/b.rs", "pub struct B;\nfn f() { let _ = crate::a::A; }"),
        ]);
        assert_eq!(found, ["crate: a,b [a->b@1 b->a@2]"]);
    }

    #[test]
    fn a_circle_through_super_paths() {
        let found = check(&[
            ("src/lib.rs", "mod a; mod b; mod c;"),
            ("src/a.rs", "fn f(_: super::b::B) {}"),
            ("src/b.rs", "pub struct B(super::c::C);"),
            ("src/c.rs", "pub struct C;\nimpl C { fn g() -> super::a::A { todo!() } }"),
        ]);
        assert_eq!(found, ["crate: a,b,c [a->b@1 b->c@1 c->a@2]"]);
    }

    #[test]
    fn a_circle_through_self_paths_inside_a_folder() {
        let found = check(&[
            ("src/lib.rs", "mod outer;"),
            ("src/outer/mod.rs", "mod x;\nmod y;\npub use self::x::X;"),
            ("src/outer/x.rs", "pub struct X;\nuse super::y;\nfn f() { y::g() }"),
            ("src/outer/y.rs", "pub fn g() {}\nfn h() { let _ = super::X; }"),
        ]);
        // `super::X` is re-exported from `x`: the arrow goes to where `X` comes from.
        assert_eq!(found, ["crate::outer: x,y [x->y@2 y->x@2]"]);
    }

    #[test]
    fn a_nested_use_group_makes_every_arrow() {
        let found = check(&[
            ("src/lib.rs", "mod a; mod b; mod c;"),
            ("src/a.rs", "use crate::{b::{self, B}, c::C};"),
            ("src/b.rs", "pub struct B;"),
            ("src/c.rs", "pub struct C;\nuse crate::{a as the_a};\nfn f() { the_a::g(); }"),
        ]);
        assert_eq!(found, ["crate: a,c [a->c@1 c->a@2]"]);
    }

    #[test]
    fn a_chain_is_no_circle() {
        let found = check(&[
            ("src/lib.rs", "mod a; mod b; mod c;\npub use a::A;"),
            ("src/a.rs", "pub struct A(crate::b::B);\nmod inner { fn f() -> super::super::c::C { todo!() } }"),
            ("src/b.rs", "pub struct B(crate::c::C);\nuse super::*;"),
            ("src/c.rs", "pub struct C;\nuse crate::c::C as Again;"),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_circle_inside_an_inline_module_and_through_plain_paths() {
        let found = check(&[
            ("src/lib.rs", "mod a;"),
            ("src/a.rs", "mod p {\n    use super::q;\n    fn f() { q::g() }\n}\nmod q {\n    pub fn g() { self::h() }\n    fn h() { super::p::f2() }\n}"),
        ]);
        assert_eq!(found, ["crate::a: p,q [p->q@2 q->p@7]"]);
    }

    #[test]
    fn a_deeper_circle_is_reported_with_the_outer_one() {
        let found = check(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a/mod.rs", "mod x; mod y;"),
            ("src/a/x.rs", "use super::y::Y;\npub struct X;\nfn f() -> crate::b::B { todo!() }"),
            ("src/a/y.rs", "pub struct Y(crate::a::x::X);"),
            ("src/b.rs", "pub struct B;\nuse crate::a;\nfn f() { let _ = a::Z; }"),
        ]);
        assert_eq!(found, ["crate: a,b [a->b@3 b->a@2]", "crate::a: x,y [x->y@1 y->x@1]"]);
    }

    #[test]
    fn external_crates_and_local_items_are_no_arrows() {
        let found = check(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", "use std::sync::Arc;\nfn f() { let _ = ::b::X; Arc::new(1); }"),
            ("src/b.rs", "struct S;\nimpl S { fn g() -> Self { Self::h(); a::X } }"),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }
}
