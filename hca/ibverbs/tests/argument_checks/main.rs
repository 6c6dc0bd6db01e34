//! Issue 21 §3: the table of `docs/argument-checks.md` is this test's input. Every row that names
//! a case is driven here through the C entry points, as a C program calls them, on the default
//! model device; the outcome observed must be the one the row's "ours" column starts with. A
//! row naming a case this file lacks, or a case no row names, fails the test too.
//!
//! A test binary of its own: a case binds and removes a GID of the default device, and the
//! `IBV_EVENT_GID_CHANGE` every context of that device then gets would reach the other tests'
//! contexts in a shared process.

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::collections::BTreeMap;
use std::ptr::null_mut;

/// The errno every case sets before its call, to see whether the call left errno alone.
const SENTINEL: i32 = 7777;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e }
}

fn name(e: i32) -> String {
    let known = [
        (libc::EINVAL, "EINVAL"),
        (libc::EOPNOTSUPP, "EOPNOTSUPP"),
        (libc::ENODATA, "ENODATA"),
        (libc::ENOENT, "ENOENT"),
        (libc::ENOMEM, "ENOMEM"),
        (libc::ENODEV, "ENODEV"),
        (libc::EPERM, "EPERM"),
        (libc::EFAULT, "EFAULT"),
        (libc::EBUSY, "EBUSY"),
        (libc::EIO, "EIO"),
        (libc::EPROTONOSUPPORT, "EPROTONOSUPPORT"),
    ];
    known.iter().find(|(v, _)| *v == e).map_or_else(|| format!("errno {e}"), |(_, n)| n.to_string())
}

/// The outcome of a pointer verb.
fn ptr<T>(p: *mut T) -> String {
    match (p.is_null(), errno()) {
        (false, _) => "ok".into(),
        (true, SENTINEL) => "NULL/kept".into(),
        (true, e) => format!("NULL/{}", name(e)),
    }
}

/// The outcome of an `int` verb: 0, a positive errno, or -N with errno.
fn int(r: i32) -> String {
    match r {
        0 => "0".into(),
        r if r > 0 => name(r),
        r => format!("{r}/{}", name(errno())),
    }
}

/// The outcome of a verb answering a count or a negative errno.
fn count(r: isize) -> String {
    if r >= 0 {
        r.to_string()
    } else {
        format!("-{}", name(-r as i32))
    }
}

/// A context on the default model with a PD, a CQ and an MR over a buffer of its own.
struct Fx {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    mr: *mut ibv_mr,
    buf: Vec<u8>,
    gid: [u8; 16],
}

const STATE: i32 = 1;
const INIT_MASK: i32 = STATE | 1 << 3 | 1 << 4 | 1 << 5;
const RTR_MASK: i32 = STATE | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20;
const RTS_MASK: i32 = STATE | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 16;

impl Fx {
    fn new() -> Fx {
        // SAFETY: the library's entry points with valid arguments; the buffer outlives the MR
        // (the context, which releases it, is closed first).
        unsafe {
            let list = ibv_get_device_list(null_mut());
            assert!(!list.is_null() && !(*list).is_null(), "the default model device");
            let ctx = ibv_open_device(*list);
            ibv_free_device_list(list);
            assert!(!ctx.is_null());
            let pd = ibv_alloc_pd(ctx);
            let cq = ibv_create_cq(ctx, 64, null_mut(), null_mut(), 0);
            let mut buf = vec![0u8; 1 << 16];
            let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 7);
            assert!(!pd.is_null() && !cq.is_null() && !mr.is_null());
            let mut gid = ibv_gid::default();
            assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
            Fx { ctx, pd, cq, mr, buf, gid: gid.raw }
        }
    }

    fn sge(&self, off: usize, len: u32) -> ibv_sge {
        // SAFETY: the fixture's live MR.
        ibv_sge { addr: self.buf.as_ptr() as u64 + off as u64, length: len, lkey: unsafe { (*self.mr).lkey } }
    }

    fn qp_attr(&self, qp_type: u32) -> ibv_qp_init_attr {
        ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: null_mut(),
            cap: ibv_qp_cap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 },
            qp_type,
            sq_sig_all: 0,
        }
    }

    fn qp(&self, qp_type: u32) -> *mut ibv_qp {
        let mut a = self.qp_attr(qp_type);
        // SAFETY: the fixture's PD and CQ.
        let qp = unsafe { ibv_create_qp(self.pd, &mut a) };
        assert!(!qp.is_null(), "create_qp: errno {}", errno());
        qp
    }

    /// An RC QP in INIT.
    fn init(&self) -> *mut ibv_qp {
        let qp = self.qp(IBV_QPT_RC);
        let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qp_access_flags: 7, ..Default::default() };
        assert_eq!(modify(qp, &mut a, INIT_MASK), 0, "INIT");
        qp
    }

    /// Good INIT -> RTR attributes of `qp`, towards itself.
    fn rtr(&self, qp: *mut ibv_qp) -> ibv_qp_attr {
        let grh = ibv_global_route { dgid: ibv_gid { raw: self.gid }, hop_limit: 64, ..Default::default() };
        // SAFETY: a live QP.
        let qpn = unsafe { (*qp).qp_num };
        ibv_qp_attr {
            qp_state: 2,
            path_mtu: 3,
            dest_qp_num: qpn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ibv_ah_attr { grh, is_global: 1, port_num: 1, ..Default::default() },
            ..Default::default()
        }
    }

    /// An RC QP in RTS, connected to itself.
    fn rts(&self) -> *mut ibv_qp {
        let qp = self.init();
        let mut a = self.rtr(qp);
        assert_eq!(modify(qp, &mut a, RTR_MASK), 0, "RTR");
        let mut a = ibv_qp_attr {
            qp_state: 3,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        assert_eq!(modify(qp, &mut a, RTS_MASK), 0, "RTS");
        qp
    }

    /// A UD QP in RTS.
    fn ud_rts(&self) -> *mut ibv_qp {
        let qp = self.qp(IBV_QPT_UD);
        let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qkey: 0x11, ..Default::default() };
        assert_eq!(modify(qp, &mut a, STATE | 1 << 4 | 1 << 5 | 1 << 6), 0, "UD INIT");
        a.qp_state = 2;
        assert_eq!(modify(qp, &mut a, STATE), 0, "UD RTR");
        a.qp_state = 3;
        assert_eq!(modify(qp, &mut a, STATE | 1 << 16), 0, "UD RTS");
        qp
    }

    fn ah_attr(&self) -> ibv_ah_attr {
        let grh = ibv_global_route { dgid: ibv_gid { raw: self.gid }, hop_limit: 64, ..Default::default() };
        ibv_ah_attr { grh, is_global: 1, port_num: 1, ..Default::default() }
    }

    fn device_attr(&self) -> ibv_device_attr {
        // SAFETY: an open context; all-zero is a valid `ibv_device_attr`.
        unsafe {
            let mut a: ibv_device_attr = std::mem::zeroed();
            assert_eq!(ibv_query_device(self.ctx, &mut a), 0);
            a
        }
    }
}

impl Drop for Fx {
    fn drop(&mut self) {
        // SAFETY: the fixture's context; closing it releases every object made on it.
        assert_eq!(unsafe { ibv_close_device(self.ctx) }, 0);
    }
}

fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: i32) -> i32 {
    // SAFETY: a live QP of this library.
    unsafe { ibv_modify_qp(qp, a, mask) }
}

fn query(qp: *mut ibv_qp) -> ibv_qp_attr {
    let mut a = ibv_qp_attr::default();
    // SAFETY: a live QP; all-zero is a valid `ibv_qp_init_attr`.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_query_qp(qp, &mut a, 0x1f_ffff, &mut init) }, 0);
    a
}

/// The outcome of an RTR modify of a fresh QP with `edit` applied, `check`ing what
/// `ibv_query_qp` reads back after a success (a mismatch is reported in the outcome).
fn rtr_case(edit: impl Fn(&mut ibv_qp_attr), extra: i32, check: impl Fn(&ibv_qp_attr) -> bool) -> String {
    let fx = Fx::new();
    let qp = fx.init();
    let mut a = fx.rtr(qp);
    edit(&mut a);
    let r = modify(qp, &mut a, RTR_MASK | extra);
    read_back(qp, r, check)
}

/// `ibv_modify_qp`'s answer `r` as a string, and, when it took the attributes, whether
/// `ibv_query_qp` reads them back as `check` wants.
fn read_back(qp: *mut ibv_qp, r: i32, check: impl Fn(&ibv_qp_attr) -> bool) -> String {
    let out = int(r);
    if r == 0 && !check(&query(qp)) {
        let q = query(qp);
        let seen = (
            q.rq_psn,
            q.dest_qp_num,
            q.path_mtu,
            q.ah_attr.grh.flow_label,
            q.timeout,
            q.retry_cnt,
            q.rnr_retry,
            q.max_rd_atomic,
        );
        return format!("{out} (read back wrong: {seen:?})");
    }
    out
}

/// The outcome of an INIT -> INIT (RC) modify with `mask` and `edit`.
fn init_case(edit: impl Fn(&mut ibv_qp_attr), mask: i32) -> String {
    let fx = Fx::new();
    let qp = fx.init();
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, ..Default::default() };
    edit(&mut a);
    int(modify(qp, &mut a, mask))
}

fn send_wr(sg: *mut ibv_sge, num_sge: i32, opcode: u32, flags: u32) -> ibv_send_wr {
    // SAFETY: all-zero is a valid `ibv_send_wr` (NULL pointers).
    let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
    (w.wr_id, w.sg_list, w.num_sge, w.opcode, w.send_flags) = (1, sg, num_sge, opcode, flags);
    w
}

fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> String {
    let mut bad = null_mut();
    // SAFETY: a live QP; the chain is ours (its SGEs outlive the call).
    int(unsafe { ((*(*qp).context).ops.post_send.unwrap())(qp, wr, &mut bad) })
}

/// The outcome of posting the WR `make` builds on an RC QP in RTS.
fn rc_post(make: impl Fn(&Fx, *mut ibv_sge) -> ibv_send_wr) -> String {
    let fx = Fx::new();
    let qp = fx.rts();
    let mut sg = [fx.sge(0, 8), fx.sge(8, 8), fx.sge(16, 8)];
    let mut w = make(&fx, sg.as_mut_ptr());
    post_send(qp, &mut w)
}

fn post_recv(qp: *mut ibv_qp, sg: *mut ibv_sge, num_sge: i32) -> String {
    let mut w = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: sg, num_sge };
    let mut bad = null_mut();
    // SAFETY: a live QP; the WR is ours.
    int(unsafe { ((*(*qp).context).ops.post_recv.unwrap())(qp, &mut w, &mut bad) })
}

fn reg_mr(access: i32) -> String {
    let fx = Fx::new();
    set_errno(SENTINEL);
    // SAFETY: the fixture's PD over its own buffer.
    ptr(unsafe { ibv_reg_mr(fx.pd, fx.buf.as_ptr() as *mut _, 4096, access) })
}

fn create_cq(cqe: i32, vector: i32) -> String {
    let fx = Fx::new();
    set_errno(SENTINEL);
    // SAFETY: an open context.
    ptr(unsafe { ibv_create_cq(fx.ctx, cqe, null_mut(), null_mut(), vector) })
}

fn create_qp(edit: impl Fn(&mut ibv_qp_init_attr)) -> String {
    let fx = Fx::new();
    let mut a = fx.qp_attr(IBV_QPT_RC);
    edit(&mut a);
    set_errno(SENTINEL);
    // SAFETY: the fixture's PD and CQ.
    ptr(unsafe { ibv_create_qp(fx.pd, &mut a) })
}

fn create_ah(edit: impl Fn(&mut ibv_ah_attr)) -> String {
    let fx = Fx::new();
    let mut a = fx.ah_attr();
    edit(&mut a);
    set_errno(SENTINEL);
    // SAFETY: the fixture's PD.
    ptr(unsafe { ibv_create_ah(fx.pd, &mut a) })
}

fn create_srq(max_wr: u32, max_sge: u32) -> String {
    let fx = Fx::new();
    let mut a = ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr, max_sge, srq_limit: 0 } };
    set_errno(SENTINEL);
    // SAFETY: the fixture's PD.
    ptr(unsafe { ibv_create_srq(fx.pd, &mut a) })
}

fn modify_srq(limit: u32, mask: i32) -> String {
    let fx = Fx::new();
    let mut a =
        ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 16, max_sge: 1, srq_limit: 0 } };
    // SAFETY: the fixture's PD; then its SRQ.
    unsafe {
        let srq = ibv_create_srq(fx.pd, &mut a);
        assert!(!srq.is_null());
        let mut attr = ibv_srq_attr { max_wr: 32, max_sge: 1, srq_limit: limit };
        int(ibv_modify_srq(srq, &mut attr, mask))
    }
}

fn gid_ex(port: u32, index: u32, flags: u32, size: usize) -> String {
    let fx = Fx::new();
    let mut buf = [0xa5u8; 64];
    // SAFETY: an open context; `buf` holds `size` bytes.
    let r = unsafe { _ibv_query_gid_ex(fx.ctx, port, index, buf.as_mut_ptr().cast(), flags, size) };
    if r == 0 && size > 32 && buf[32..size].iter().any(|&b| b != 0) {
        return "0 (not zero-filled)".into();
    }
    int(r)
}

fn gid_table(max: usize, flags: u32, size: usize) -> String {
    let fx = Fx::new();
    let mut buf = vec![0u8; 64 * 8];
    let entries = if max <= 8 { buf.as_mut_ptr().cast() } else { null_mut() };
    // SAFETY: an open context; `buf` holds up to 8 entries of 64 bytes (more: NULL, never written).
    count(unsafe { _ibv_query_gid_table(fx.ctx, entries, max, flags, size) })
}

fn query_pkey(port: u8, index: i32) -> String {
    let fx = Fx::new();
    let mut pkey = 0u16;
    // SAFETY: an open context.
    int(unsafe { ibv_query_pkey(fx.ctx, port, index, &mut pkey) })
}

fn query_device_ex(comp_mask: u32, size: usize) -> String {
    let fx = Fx::new();
    let at = std::mem::offset_of!(verbs_context, context);
    // SAFETY: every context of this library is the last field of a `verbs_context`; all-zero
    // is a valid `ibv_device_attr_ex`.
    unsafe {
        let vctx = &*(fx.ctx.cast::<u8>().sub(at).cast::<verbs_context>());
        let mut ex: ibv_device_attr_ex = std::mem::zeroed();
        let input = ibv_query_device_ex_input { comp_mask };
        int((vctx.query_device_ex.unwrap())(fx.ctx, &input, &mut ex, size))
    }
}

fn import_device(fd: i32) -> String {
    set_errno(SENTINEL);
    // SAFETY: any descriptor number.
    ptr(unsafe { ibv_import_device(fd) })
}

mod cases;
use cases::cases;

/// The rows of the doc's tables: (case, the outcome its "ours" column starts with).
fn doc_rows() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/argument-checks.md"))
        .expect("docs/argument-checks.md");
    let tick = |cell: &str| cell.trim().strip_prefix('`').and_then(|c| c.split('`').next()).map(str::to_owned);
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            (cells.len() == 6).then(|| (tick(cells[1]), tick(cells[4])))
        })
        .filter_map(|(case, ours)| Some((case?, ours?)))
        .collect()
}

#[test]
fn the_argument_check_table_is_what_the_library_answers() {
    let rows = doc_rows();
    assert!(rows.len() > 100, "only {} rows read", rows.len());
    let cases = cases();
    let mut wrong = Vec::new();
    for (case, expected) in &rows {
        let Some(run) = cases.get(case.as_str()) else {
            wrong.push(format!("{case}: no such case in this test"));
            continue;
        };
        let got = run();
        if &got != expected {
            wrong.push(format!("{case}: the table says `{expected}`, the library answers `{got}`"));
        }
    }
    for case in cases.keys() {
        if !rows.iter().any(|(c, _)| c == case) {
            wrong.push(format!("{case}: no row of the table names it"));
        }
    }
    assert!(wrong.is_empty(), "{} of {} rows disagree:\n{}", wrong.len(), rows.len(), wrong.join("\n"));
}
