//! The Rust device ABI (`pvrdma-abi`) against the real uapi header
//! `/usr/include/rdma/vmw_pvrdma-abi.h` (`docs/decisions.md`, decision 11).
//!
//! A C program compiled at test time prints, for `pvrdma_cqe`, `pvrdma_sq_wqe_hdr` (with the
//! `rdma`, `atomic` and `ud` members of its `wr` union), `pvrdma_rq_wqe_hdr`, `pvrdma_sge` and
//! `pvrdma_av`: the size, and the offset and size of every field; plus the value of every constant
//! of the WR opcode, WC status, WC opcode, WC flags and network type enums and of the UAR macros.
//! Each is compared with `size_of`/`offset_of!` and the constants on the Rust side; all mismatches
//! are collected by name and reported together.
//!
//! Two guards keep the comparison from passing while incomplete:
//! - the C side checks that the listed fields tile each struct (each field ends where the next
//!   begins, the last where the struct ends), so a field left out of the list, or implicit C
//!   padding the Rust side would have to spell out, shows up as a named gap;
//! - every constant the header's enums and `PVRDMA_UAR_*` macros define (read from the header
//!   text) must have a check.
//!
//! A missing compiler or header fails the test with what to install; it never skips.

use core::mem::{offset_of, size_of};
use pvrdma_abi::uar;
use pvrdma_abi::wqe::{
    network_type, wc_flags, wc_opcode, wc_status, wr_opcode, Av, Cqe, RqWqeHdr, Sge, SqWqeHdr, WrAtomic, WrRdma, WrUd,
};
use std::collections::{BTreeMap, BTreeSet};
use tests::abi_sizes::HEADERLESS;
use tests::cprobe::{require_header, CProbe};

const HEADER: &str = "/usr/include/rdma/vmw_pvrdma-abi.h";
const HEADER_INCLUDE: &str = "rdma/vmw_pvrdma-abi.h";
const HEADER_PACKAGE: &str = "linux-libc-dev";

/// The Rust types this file compares with the header (the rest are in [`HEADERLESS`]).
const HEADER_CHECKED: &[&str] = &["Cqe", "SqWqeHdr", "RqWqeHdr", "Sge", "Av", "WrRdma", "WrAtomic", "WrUd"];

/// One comparison: a C integer constant expression and the Rust side's value for it.
#[derive(Clone, Debug)]
struct Check {
    name: String,
    c_expr: String,
    rust: i64,
}

#[derive(Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn add(&mut self, name: impl Into<String>, c_expr: impl Into<String>, rust: usize) {
        self.add_i64(name, c_expr, rust as i64);
    }

    fn add_i64(&mut self, name: impl Into<String>, c_expr: impl Into<String>, rust: i64) {
        self.0.push(Check { name: name.into(), c_expr: c_expr.into(), rust });
    }

    /// Size, offsets and field sizes of one struct, and the C-side tiling check.
    ///
    /// `path` is empty for a struct itself, or a member path (`wr.rdma`) for a struct nested in
    /// `c_type`; offsets are then relative to that member. `padded_to` is a C size expression the
    /// Rust type is padded to (a union member is as large as the whole union in Rust): the Rust
    /// size is compared with it, and the last Rust field must absorb the difference.
    fn layout(
        &mut self,
        rust_name: &str,
        c_type: &str,
        path: &str,
        rust_size: usize,
        fields: &[(&str, usize, usize)],
        padded_to: Option<&str>,
    ) {
        let c_name = if path.is_empty() { c_type.to_owned() } else { format!("{c_type}.{path}") };
        let member = |f: &str| if path.is_empty() { f.to_owned() } else { format!("{path}.{f}") };
        let c_size = if path.is_empty() {
            format!("(long long)sizeof({c_type})")
        } else {
            format!("(long long)sizeof(MEMBER({c_type}, {path}))")
        };
        let base = if path.is_empty() { "0LL".to_owned() } else { format!("(long long)offsetof({c_type}, {path})") };
        let off = |f: &str| format!("((long long)offsetof({c_type}, {}) - {base})", member(f));
        let size = |f: &str| format!("(long long)sizeof(MEMBER({c_type}, {}))", member(f));

        match padded_to {
            None => self.add(format!("size of {rust_name} vs {c_name}"), c_size.clone(), rust_size),
            Some(p) => self.add(
                format!("size of {rust_name} vs {p} (the union {c_name} is a member of)"),
                format!("(long long)({p})"),
                rust_size,
            ),
        }
        for (i, &(f, rust_off, rust_fsize)) in fields.iter().enumerate() {
            self.add(format!("offset of {rust_name}.{f} vs {c_name}.{f}"), off(f), rust_off);
            let last = i + 1 == fields.len();
            match padded_to {
                Some(p) if last => self.add(
                    format!("size of {rust_name}.{f} vs {c_name}.{f} plus the union's tail"),
                    format!("({} + (long long)({p}) - {c_size})", size(f)),
                    rust_fsize,
                ),
                _ => self.add(format!("size of {rust_name}.{f} vs {c_name}.{f}"), size(f), rust_fsize),
            }
        }
        // Tiling, C side: a gap means a field missing from the list or implicit padding.
        if let Some(&(first, ..)) = fields.first() {
            self.add(format!("C {c_name}: bytes before {first} not covered by a listed field"), off(first), 0);
        }
        for w in fields.windows(2) {
            let (a, b) = (w[0].0, w[1].0);
            self.add(
                format!("C {c_name}: bytes between {a} and {b} not covered by a listed field"),
                format!("({} - {} - {})", off(b), off(a), size(a)),
                0,
            );
        }
        if let Some(&(last, ..)) = fields.last() {
            self.add(
                format!("C {c_name}: bytes after {last} not covered by a listed field"),
                format!("({c_size} - {} - {})", off(last), size(last)),
                0,
            );
        }
    }
}

/// `[(field, offset, size)]` of a Rust struct, in the order given: each field's byte range from
/// `memoffset::span_of!` (core's `offset_of!` gives the start only).
macro_rules! fields {
    ($t:ty, [$($f:ident),+ $(,)?]) => {
        &[$({
            let span = memoffset::span_of!($t, $f);
            (stringify!($f), span.start, span.len())
        }),+]
    };
}

/// Constant checks: `C_NAME => rust_module::NAME`; `$cast` prefixes the C expression.
macro_rules! consts {
    ($c:ident, $cast:literal, $m:ident, [$($cn:ident => $rn:ident),+ $(,)?]) => {
        $($c.add_i64(
            format!("{} vs {}::{}", stringify!($cn), stringify!($m), stringify!($rn)),
            format!("{}({})", $cast, stringify!($cn)),
            i64::from($m::$rn),
        );)+
    };
}

/// `layout! { checks, RustType = "C type" [at "member.path" padded to "C size"], [fields] }`
macro_rules! layout {
    { $c:ident, $t:ident = $cty:literal, [$($f:ident),+ $(,)?] } => {
        $c.layout(stringify!($t), $cty, "", size_of::<$t>(), fields!($t, [$($f),+]), None)
    };
    { $c:ident, $t:ident = $cty:literal at $path:literal padded to $pad:expr,
      [$($f:ident),+ $(,)?] } => {
        $c.layout(stringify!($t), $cty, $path, size_of::<$t>(), fields!($t, [$($f),+]), Some($pad))
    };
}

fn struct_checks(c: &mut Checks) {
    layout! { c, Cqe = "struct pvrdma_cqe", [
        wr_id, qp, opcode, status, byte_len, imm_data, src_qp, wc_flags, vendor_err, pkey_index,
        slid, sl, dlid_path_bits, port_num, smac, network_hdr_type, reserved2,
    ] }
    layout! { c, SqWqeHdr = "struct pvrdma_sq_wqe_hdr", [
        wr_id, num_sge, total_len, opcode, send_flags, ex, reserved, wr,
    ] }
    // The members of the `wr` union Rust has a struct for (masked_atomics and fast_reg have none;
    // they fit in the union, whose size is compared with the Rust `wr` field above).
    let wr_union = "sizeof(MEMBER(struct pvrdma_sq_wqe_hdr, wr))";
    layout! { c, WrRdma = "struct pvrdma_sq_wqe_hdr" at "wr.rdma" padded to wr_union, [
        remote_addr, rkey, reserved,
    ] }
    layout! { c, WrAtomic = "struct pvrdma_sq_wqe_hdr" at "wr.atomic" padded to wr_union, [
        remote_addr, compare_add, swap, rkey, reserved,
    ] }
    layout! { c, WrUd = "struct pvrdma_sq_wqe_hdr" at "wr.ud" padded to wr_union, [
        remote_qpn, remote_qkey, av,
    ] }
    layout! { c, RqWqeHdr = "struct pvrdma_rq_wqe_hdr", [wr_id, num_sge, total_len] }
    layout! { c, Sge = "struct pvrdma_sge", [addr, length, lkey] }
    layout! { c, Av = "struct pvrdma_av", [
        port_pd, sl_tclass_flowlabel, dgid, src_path_bits, gid_index, stat_rate, hop_limit, dmac,
        reserved,
    ] }
}

fn constant_checks(c: &mut Checks) {
    consts!(c, "", wr_opcode, [
        PVRDMA_WR_RDMA_WRITE => RDMA_WRITE,
        PVRDMA_WR_RDMA_WRITE_WITH_IMM => RDMA_WRITE_WITH_IMM,
        PVRDMA_WR_SEND => SEND,
        PVRDMA_WR_SEND_WITH_IMM => SEND_WITH_IMM,
        PVRDMA_WR_RDMA_READ => RDMA_READ,
        PVRDMA_WR_ATOMIC_CMP_AND_SWP => ATOMIC_CMP_AND_SWP,
        PVRDMA_WR_ATOMIC_FETCH_AND_ADD => ATOMIC_FETCH_AND_ADD,
        PVRDMA_WR_LSO => LSO,
        PVRDMA_WR_SEND_WITH_INV => SEND_WITH_INV,
        PVRDMA_WR_RDMA_READ_WITH_INV => RDMA_READ_WITH_INV,
        PVRDMA_WR_LOCAL_INV => LOCAL_INV,
        PVRDMA_WR_FAST_REG_MR => FAST_REG_MR,
        PVRDMA_WR_MASKED_ATOMIC_CMP_AND_SWP => MASKED_ATOMIC_CMP_AND_SWP,
        PVRDMA_WR_MASKED_ATOMIC_FETCH_AND_ADD => MASKED_ATOMIC_FETCH_AND_ADD,
        PVRDMA_WR_BIND_MW => BIND_MW,
        PVRDMA_WR_REG_SIG_MR => REG_SIG_MR,
        PVRDMA_WR_ERROR => ERROR,
    ]);
    consts!(c, "", wc_status, [
        PVRDMA_WC_SUCCESS => SUCCESS,
        PVRDMA_WC_LOC_LEN_ERR => LOC_LEN_ERR,
        PVRDMA_WC_LOC_QP_OP_ERR => LOC_QP_OP_ERR,
        PVRDMA_WC_LOC_EEC_OP_ERR => LOC_EEC_OP_ERR,
        PVRDMA_WC_LOC_PROT_ERR => LOC_PROT_ERR,
        PVRDMA_WC_WR_FLUSH_ERR => WR_FLUSH_ERR,
        PVRDMA_WC_MW_BIND_ERR => MW_BIND_ERR,
        PVRDMA_WC_BAD_RESP_ERR => BAD_RESP_ERR,
        PVRDMA_WC_LOC_ACCESS_ERR => LOC_ACCESS_ERR,
        PVRDMA_WC_REM_INV_REQ_ERR => REM_INV_REQ_ERR,
        PVRDMA_WC_REM_ACCESS_ERR => REM_ACCESS_ERR,
        PVRDMA_WC_REM_OP_ERR => REM_OP_ERR,
        PVRDMA_WC_RETRY_EXC_ERR => RETRY_EXC_ERR,
        PVRDMA_WC_RNR_RETRY_EXC_ERR => RNR_RETRY_EXC_ERR,
        PVRDMA_WC_LOC_RDD_VIOL_ERR => LOC_RDD_VIOL_ERR,
        PVRDMA_WC_REM_INV_RD_REQ_ERR => REM_INV_RD_REQ_ERR,
        PVRDMA_WC_REM_ABORT_ERR => REM_ABORT_ERR,
        PVRDMA_WC_INV_EECN_ERR => INV_EECN_ERR,
        PVRDMA_WC_INV_EEC_STATE_ERR => INV_EEC_STATE_ERR,
        PVRDMA_WC_FATAL_ERR => FATAL_ERR,
        PVRDMA_WC_RESP_TIMEOUT_ERR => RESP_TIMEOUT_ERR,
        PVRDMA_WC_GENERAL_ERR => GENERAL_ERR,
    ]);
    consts!(c, "", wc_opcode, [
        PVRDMA_WC_SEND => SEND,
        PVRDMA_WC_RDMA_WRITE => RDMA_WRITE,
        PVRDMA_WC_RDMA_READ => RDMA_READ,
        PVRDMA_WC_COMP_SWAP => COMP_SWAP,
        PVRDMA_WC_FETCH_ADD => FETCH_ADD,
        PVRDMA_WC_BIND_MW => BIND_MW,
        PVRDMA_WC_LSO => LSO,
        PVRDMA_WC_LOCAL_INV => LOCAL_INV,
        PVRDMA_WC_FAST_REG_MR => FAST_REG_MR,
        PVRDMA_WC_MASKED_COMP_SWAP => MASKED_COMP_SWAP,
        PVRDMA_WC_MASKED_FETCH_ADD => MASKED_FETCH_ADD,
        PVRDMA_WC_RECV => RECV,
        PVRDMA_WC_RECV_RDMA_WITH_IMM => RECV_RDMA_WITH_IMM,
    ]);
    consts!(c, "", wc_flags, [
        PVRDMA_WC_GRH => GRH,
        PVRDMA_WC_WITH_IMM => WITH_IMM,
        PVRDMA_WC_WITH_INVALIDATE => WITH_INVALIDATE,
        PVRDMA_WC_IP_CSUM_OK => IP_CSUM_OK,
        PVRDMA_WC_WITH_SMAC => WITH_SMAC,
        PVRDMA_WC_WITH_VLAN => WITH_VLAN,
        PVRDMA_WC_WITH_NETWORK_HDR_TYPE => WITH_NETWORK_HDR_TYPE,
        // The Rust side has no FLAGS_MAX; the header defines it as the highest flag.
        PVRDMA_WC_FLAGS_MAX => WITH_NETWORK_HDR_TYPE,
    ]);
    consts!(c, "", network_type, [
        PVRDMA_NETWORK_IB => IB,
        PVRDMA_NETWORK_ROCE_V1 => ROCE_V1,
        PVRDMA_NETWORK_IPV4 => IPV4,
        PVRDMA_NETWORK_IPV6 => IPV6,
    ]);
    // The macros are C `int` expressions and `1 << 31` is negative there; a doorbell is a __u32.
    consts!(c, "(__u32)", uar, [
        PVRDMA_UAR_HANDLE_MASK => UAR_HANDLE_MASK,
        PVRDMA_UAR_QP_OFFSET => UAR_QP_OFFSET,
        PVRDMA_UAR_QP_SEND => UAR_QP_SEND,
        PVRDMA_UAR_QP_RECV => UAR_QP_RECV,
        PVRDMA_UAR_CQ_OFFSET => UAR_CQ_OFFSET,
        PVRDMA_UAR_CQ_ARM_SOL => UAR_CQ_ARM_SOL,
        PVRDMA_UAR_CQ_ARM => UAR_CQ_ARM,
        PVRDMA_UAR_CQ_POLL => UAR_CQ_POLL,
        PVRDMA_UAR_SRQ_OFFSET => UAR_SRQ_OFFSET,
        PVRDMA_UAR_SRQ_RECV => UAR_SRQ_RECV,
    ]);
}

/// Checks that must fail: `Sge` listed without `length`, and a wrong Rust offset. They run in the
/// same C program and show that a missing field and a wrong offset are both caught by name.
fn canary_checks(c: &mut Checks) {
    layout! { c, Sge = "struct pvrdma_sge", [addr, lkey] }
    c.add(
        "offset of Cqe.smac (deliberately wrong)",
        "(long long)offsetof(struct pvrdma_cqe, smac)",
        offset_of!(Cqe, smac) + 1,
    );
}

/// Every mismatch between the C values and the Rust ones, by name.
fn mismatches(checks: &[Check], values: &[i64]) -> Vec<String> {
    checks
        .iter()
        .zip(values)
        .filter(|(c, &v)| c.rust != v)
        .map(|(c, v)| format!("{}: C says {v}, Rust says {}    [C: {}]", c.name, c.rust, c.c_expr))
        .collect()
}

/// The constants `enum <name> { ... }` declares in the header text.
fn enum_constants(header: &str, name: &str) -> Vec<String> {
    let Some(start) = header.find(&format!("enum {name} {{")) else {
        return vec![format!("<enum {name} not found in the header>")];
    };
    let body = &header[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap_or(body.len())];
    let mut out = Vec::new();
    let mut rest = body;
    let mut text = String::new();
    while let Some(i) = rest.find("/*") {
        text += &rest[..i];
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    text += rest;
    for item in text.split(',') {
        let ident = item.split('=').next().unwrap_or("").trim();
        if !ident.is_empty() {
            out.push(ident.to_owned());
        }
    }
    out
}

/// Header constants (enum members of the compared enums, `PVRDMA_UAR_*` macros) with no check.
fn uncovered_constants(header: &str, checks: &[Check]) -> Vec<String> {
    let mut defined = Vec::new();
    for e in ["pvrdma_wr_opcode", "pvrdma_wc_status", "pvrdma_wc_opcode", "pvrdma_wc_flags", "pvrdma_network_type"] {
        defined.extend(enum_constants(header, e).into_iter().map(|c| (e.to_owned(), c)));
    }
    for line in header.lines() {
        let mut it = line.split_whitespace();
        if let (Some("#define"), Some(m)) = (it.next(), it.next()) {
            if m.starts_with("PVRDMA_UAR_") {
                defined.push(("UAR macros".to_owned(), m.to_owned()));
            }
        }
    }
    let checked: BTreeSet<&str> = checks.iter().filter_map(|c| c.name.split(" vs ").next()).collect();
    let mut out: Vec<String> = defined
        .iter()
        .filter(|(_, c)| !checked.contains(c.as_str()))
        .map(|(e, c)| format!("{c} ({e}) is defined by the header but not compared with Rust"))
        .collect();
    if defined.len() < 60 {
        out.push(format!("only {} constants found in the header text: parsing failed?", defined.len()));
    }
    out
}

#[test]
fn uapi_header_matches_rust_abi() {
    require_header(HEADER, HEADER_PACKAGE).unwrap_or_else(|e| panic!("{e}"));
    let header = std::fs::read_to_string(HEADER).unwrap_or_else(|e| panic!("{HEADER}: {e}"));

    let mut checks = Checks::default();
    struct_checks(&mut checks);
    constant_checks(&mut checks);
    let mut canaries = Checks::default();
    canary_checks(&mut canaries);

    let mut probe = CProbe::new();
    probe.include(HEADER_INCLUDE);
    for c in checks.0.iter().chain(&canaries.0) {
        probe.expr(&c.c_expr);
    }
    let values = probe.run().unwrap_or_else(|e| panic!("{e}"));
    let (real, canary) = values.split_at(checks.0.len());

    // The comparison can fail: the canaries, a field left out and a wrong offset, are caught.
    let caught = mismatches(&canaries.0, canary);
    let expect = [
        "C struct pvrdma_sge: bytes between addr and lkey not covered by a listed field",
        "offset of Cqe.smac (deliberately wrong)",
    ];
    for e in expect {
        assert!(caught.iter().any(|m| m.starts_with(e)), "canary {e:?} was not caught; caught: {caught:#?}");
    }
    assert_eq!(caught.len(), expect.len(), "unexpected canary results: {caught:#?}");
    // And a header constant left without a check is caught (the last check is PVRDMA_UAR_SRQ_RECV).
    let uncovered = uncovered_constants(&header, &checks.0[..checks.0.len() - 1]);
    assert!(
        uncovered.len() == 1 && uncovered[0].starts_with("PVRDMA_UAR_SRQ_RECV "),
        "dropping the last constant check was not noticed: {uncovered:#?}"
    );

    let mut failed = mismatches(&checks.0, real);
    failed.extend(uncovered_constants(&header, &checks.0));
    assert!(
        failed.is_empty(),
        "{} of {} checks of pvrdma-abi against {HEADER} failed:\n  {}",
        failed.len(),
        checks.0.len(),
        failed.join("\n  ")
    );
    eprintln!("{} checks of pvrdma-abi against {HEADER} passed", checks.0.len());
}

/// `(name, size)` of every `assert_layout!(Name, size, ...)` in the ABI crate's sources: the sizes
/// `pvrdma-abi` documents (and asserts at compile time).
fn documented_sizes() -> BTreeMap<String, usize> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../firmware-cmd/abi/src");
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, _) in text.match_indices("assert_layout!(") {
            let args = &text[i + "assert_layout!(".len()..];
            let mut parts = args.splitn(3, [',', ')']);
            let name = parts.next().unwrap_or("").trim();
            let size = parts.next().unwrap_or("").trim().replace('_', "");
            if name.starts_with('$') || name.is_empty() {
                continue; // the macro's own definition
            }
            let size: usize =
                size.parse().unwrap_or_else(|_| panic!("{}: assert_layout!({name}, {size:?})", path.display()));
            assert!(out.insert(name.to_owned(), size).is_none(), "{name} asserted twice");
        }
    }
    out
}

#[test]
fn headerless_structs_have_documented_sizes() {
    let documented = documented_sizes();
    let mut failed = Vec::new();
    let mut seen = BTreeSet::new();
    for row in HEADERLESS {
        if !seen.insert(row.rust_name) {
            failed.push(format!("{} is listed twice", row.rust_name));
        }
        if row.rust_size != row.c_size {
            failed.push(format!(
                "{} ({}): size_of is {}, the C definition is {} bytes",
                row.rust_name, row.c_name, row.rust_size, row.c_size
            ));
        }
        match documented.get(row.rust_name) {
            Some(&d) if d == row.c_size => {}
            Some(&d) => failed.push(format!(
                "{} ({}): pvrdma-abi documents {d} bytes, the table says {}",
                row.rust_name, row.c_name, row.c_size
            )),
            None => failed.push(format!("{} ({}): no assert_layout! for it in pvrdma-abi", row.rust_name, row.c_name)),
        }
    }
    // Every structure the ABI crate defines is compared somewhere: here or against the header.
    for name in documented.keys() {
        if !seen.contains(name.as_str()) && !HEADER_CHECKED.contains(&name.as_str()) {
            failed.push(format!("pvrdma-abi's {name} is in neither the headerless table nor the header comparison"));
        }
    }
    for name in HEADER_CHECKED {
        if seen.contains(name) {
            failed.push(format!("{name} is compared with the header and also listed as headerless"));
        }
    }
    // The structures this table exists for.
    for name in ["Dsr", "DeviceCaps", "RingState", "Eqe", "Cqne", "PortAttr", "QpAttr", "AhAttr"] {
        if !seen.contains(name) {
            failed.push(format!("{name} is missing from the headerless table"));
        }
    }
    assert!(failed.is_empty(), "{} headerless-structure checks failed:\n  {}", failed.len(), failed.join("\n  "));
    eprintln!("{} headerless structures have their documented sizes", HEADERLESS.len());
}
