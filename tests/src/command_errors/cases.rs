//! The cases of [`super`]: one function per case, and the table of QEMU 7.2's recorded answers.

use super::{cq_chunks, Expect, Obs, Outcome, Run, NO_SUCH_HANDLE, UNKNOWN_OPCODE};
use crate::fixture::{cap, pair};
use crate::qemu::backend_gid;
use crate::sge_tamper::SgeTamper;
use hca::ProbeOptions;
use ib_core::{Cq, WcStatus, WrOpcode};
use pvrdma_abi::cmd::{opcode as op, CreateMr, CreateQp, DestroyCq, DestroyMr, DestroyPd, DestroyQp, QueryPort};
use pvrdma_abi::regs::REG_IMR;
use pvrdma_abi::verbs::qp_type;
use pvrdma_abi::wqe::{rq_wqe_stride, sq_wqe_stride};
use pvrdma_abi::PAGE_SIZE;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A case: its name (the test's, on both sides), its body, and what QEMU 7.2 answered at each
/// step when it was recorded (the QEMU 7.2 column of docs/qemu.md's command-error table, checked by `doc_tables`).
pub struct Case {
    /// The test name (`cmd::<name>` in `qemu_model` and `qemu_real`).
    pub name: &'static str,
    /// The body.
    pub run: fn(&mut Run) -> Outcome,
    /// QEMU 7.2's answers, one per step, as [`Obs`] displays them.
    pub qemu72: &'static [&'static str],
}

/// The command interrupt came, `err` 0, `REG_ERR` 0.
macro_rules! ok {
    ($ack:literal) => {
        concat!("ack ", $ack, " err 0 REG_ERR 0x0, irq")
    };
}
/// Refused with EINVAL, as the model refuses.
macro_rules! einval {
    ($ack:literal) => {
        concat!("ack ", $ack, " err 22 REG_ERR 0xffffffea (-22), irq")
    };
}
const PD_OK: &str = ok!("0x80000002");
/// QEMU's answer to a request while no DSR is loaded, or of an opcode past its table.
const NO_RESPONSE: &str = "no response, REG_ERR 0xffff, irq";

macro_rules! cases {
    ($($name:ident => [$($qemu:expr),* $(,)?]),* $(,)?) => {
        /// Every case, in the order of docs/qemu.md's command-error table.
        pub const CASES: &[Case] = &[$(
            Case { name: stringify!($name), run: $name, qemu72: &[$($qemu),*] }
        ),*];
    };
}

// QEMU 7.2 (Debian 1:7.2+dfsg-7+deb12u18+b2) as recorded by tests/qemu/run.sh.
cases!(
    dsr_ring_zero_pages => ["0xffff", "0x0", NO_RESPONSE],
    dsr_ring_513_pages => ["0xffff", "0x0", NO_RESPONSE],
    destroy_unknown_cq => [einval!("0x80000008"), PD_OK],
    destroy_unknown_qp => [einval!("0x8000000c"), PD_OK],
    destroy_unknown_mr => [ok!("0x80000005"), PD_OK],
    destroy_unknown_pd => [ok!("0x80000003"), PD_OK],
    unknown_opcode => [NO_RESPONSE, PD_OK],
    create_cq_zero_cqe => [ok!("0x80000006"), PD_OK],
    create_cq_cqe_over_max => [einval!("0x80000006"), PD_OK],
    create_cq_zero_chunks => [einval!("0x80000006"), PD_OK],
    create_cq_one_chunk => [ok!("0x80000006"), PD_OK],
    create_cq_600_chunks => [einval!("0x80000006"), PD_OK],
    create_qp_600_chunks => [einval!("0x80000009"), PD_OK],
    create_mr_two_chunks_for_one_page => [einval!("0x80000004"), PD_OK],
    create_qp_send_sge_over_caps => [ok!("0x80000009"), PD_OK],
    create_qp_recv_sge_over_caps => [ok!("0x80000009"), PD_OK],
    wqe_num_sge_over_qp => ["CQE GeneralErr", "CQE Success"],
    uar_bar_read => ["0xffffffff (-1)", PD_OK],
    imr_register => ["0x1", "ack 0x80000000 err 0 REG_ERR 0x0, no irq", "0x4",
        "ack 0x80000000 err 0 REG_ERR 0x0, no irq", ok!("0x80000000")],
);

/// A DSR whose CQ-notification ring has `num_pages` 0.
pub fn dsr_ring_zero_pages(r: &mut Run) -> Outcome {
    spoiled_dsr(r, 0)
}

/// A DSR whose CQ-notification ring has `num_pages` 513, listed over two page tables (one
/// table holds 512 entries; QEMU reads only the first).
pub fn dsr_ring_513_pages(r: &mut Run) -> Outcome {
    spoiled_dsr(r, 513)
}

fn spoiled_dsr(r: &mut Run, num_pages: u32) -> Outcome {
    let ignored = r.ignored_requests();
    r.dev.load_dsr(|d, dsr| dsr.cq_ring_pages = d.ring_info(num_pages, u64::from(num_pages).max(2)));
    let err = r.dev.reg_err();
    r.record("REG_ERR after the DSR write", Obs::Reg(err), Expect::Reg(0xffff))?;
    let err = r.dev.activate();
    r.record("REG_ERR after ACTIVATE", Obs::Reg(err), Expect::Reg(0xffff))?;
    r.post("QUERY_PORT", QueryPort { port_num: 1, ..Default::default() }, Expect::NoReply)?;
    if r.is_model() {
        let n = r.ignored_requests() - ignored;
        r.record("model ignored_requests", Obs::Count(n), Expect::Count(1))?;
    }
    Ok(())
}

/// DESTROY_CQ of a handle no CQ has.
pub fn destroy_unknown_cq(r: &mut Run) -> Outcome {
    r.up();
    let req = DestroyCq { cq_handle: NO_SUCH_HANDLE.into(), ..Default::default() };
    r.post("DESTROY_CQ 0x1234", req, Expect::Refused(op::DESTROY_CQ))?;
    r.still_usable()
}

/// DESTROY_QP of a handle no QP has.
pub fn destroy_unknown_qp(r: &mut Run) -> Outcome {
    r.up();
    let req = DestroyQp { qp_handle: NO_SUCH_HANDLE.into(), ..Default::default() };
    r.post("DESTROY_QP 0x1234", req, Expect::Refused(op::DESTROY_QP))?;
    r.still_usable()
}

/// DESTROY_MR of a handle no MR has.
pub fn destroy_unknown_mr(r: &mut Run) -> Outcome {
    r.up();
    let req = DestroyMr { mr_handle: NO_SUCH_HANDLE.into(), ..Default::default() };
    r.post("DESTROY_MR 0x1234", req, Expect::Refused(op::DESTROY_MR))?;
    r.still_usable()
}

/// DESTROY_PD of a handle no PD has.
pub fn destroy_unknown_pd(r: &mut Run) -> Outcome {
    r.up();
    let req = DestroyPd { pd_handle: NO_SUCH_HANDLE.into(), ..Default::default() };
    r.post("DESTROY_PD 0x1234", req, Expect::Refused(op::DESTROY_PD))?;
    r.still_usable()
}

/// A request with opcode [`UNKNOWN_OPCODE`].
pub fn unknown_opcode(r: &mut Run) -> Outcome {
    r.up();
    let reply = r.dev.post_opcode(UNKNOWN_OPCODE);
    r.record("opcode 0x40", Obs::Reply(reply), Expect::Refused(UNKNOWN_OPCODE))?;
    r.still_usable()
}

/// CREATE_CQ of 0 entries (two pages).
pub fn create_cq_zero_cqe(r: &mut Run) -> Outcome {
    r.up();
    let req = r.create_cq(0, 2, 2);
    r.post("CREATE_CQ cqe 0", req, Expect::Refused(op::CREATE_CQ))?;
    r.still_usable()
}

/// CREATE_CQ of the next power of two above the device's `max_cqe`, in exactly its pages.
pub fn create_cq_cqe_over_max(r: &mut Run) -> Outcome {
    r.up();
    let cqe = (r.dev.caps().max_cqe.get() + 1).next_power_of_two();
    let req = r.create_cq(cqe, cq_chunks(cqe), u64::from(cq_chunks(cqe)));
    r.post("CREATE_CQ cqe > max_cqe", req, Expect::Refused(op::CREATE_CQ))?;
    r.still_usable()
}

/// CREATE_CQ of 16 entries claiming 0 pages.
pub fn create_cq_zero_chunks(r: &mut Run) -> Outcome {
    bad_cq_chunks(r, 0, "CREATE_CQ cqe 16 nchunks 0")
}

/// CREATE_CQ of 16 entries claiming 1 page (the ring state alone: no room for a CQE).
pub fn create_cq_one_chunk(r: &mut Run) -> Outcome {
    bad_cq_chunks(r, 1, "CREATE_CQ cqe 16 nchunks 1")
}

/// CREATE_CQ of 16 entries claiming (and listing) 600 pages.
pub fn create_cq_600_chunks(r: &mut Run) -> Outcome {
    bad_cq_chunks(r, 600, "CREATE_CQ cqe 16 nchunks 600")
}

fn bad_cq_chunks(r: &mut Run, nchunks: u32, what: &'static str) -> Outcome {
    r.up();
    let req = r.create_cq(16, nchunks, u64::from(nchunks.max(2)));
    r.post(what, req, Expect::Refused(op::CREATE_CQ))?;
    r.still_usable()
}

/// CREATE_QP claiming (and listing) 600 pages, 1 of them for the SQ.
pub fn create_qp_600_chunks(r: &mut Run) -> Outcome {
    r.up();
    let (pd, cq) = (r.pd(), r.cq());
    let req = create_qp(r, pd, cq, (1, 1), Some(600));
    r.post("CREATE_QP total_chunks 600 send_chunks 1", req, Expect::Refused(op::CREATE_QP))?;
    r.still_usable()
}

/// CREATE_MR of 4096 bytes claiming (and listing) 2 pages.
pub fn create_mr_two_chunks_for_one_page(r: &mut Run) -> Outcome {
    r.up();
    let pd = r.pd();
    let req = CreateMr {
        start: 0x10_0000u64.into(),
        length: 4096u64.into(),
        pdir_dma: r.listed(2).into(),
        pd_handle: pd.into(),
        access_flags: 1.into(),
        nchunks: 2.into(),
        ..Default::default()
    };
    r.post("CREATE_MR length 4096 nchunks 2", req, Expect::Refused(op::CREATE_MR))?;
    r.still_usable()
}

/// CREATE_QP with `max_send_sge` one above the device's `max_sge` (chunks agreeing).
pub fn create_qp_send_sge_over_caps(r: &mut Run) -> Outcome {
    sge_over_caps(r, true)
}

/// CREATE_QP with `max_recv_sge` one above the device's `max_sge` (chunks agreeing).
pub fn create_qp_recv_sge_over_caps(r: &mut Run) -> Outcome {
    sge_over_caps(r, false)
}

fn sge_over_caps(r: &mut Run, send: bool) -> Outcome {
    r.up();
    let over = r.dev.caps().max_sge.get() + 1;
    let (pd, cq) = (r.pd(), r.cq());
    let sge = if send { (over, 1) } else { (1, over) };
    let req = create_qp(r, pd, cq, sge, None);
    let what = if send { "CREATE_QP max_send_sge = max_sge + 1" } else { "CREATE_QP max_recv_sge = max_sge + 1" };
    r.post(what, req, Expect::Refused(op::CREATE_QP))?;
    r.still_usable()
}

/// The `wr_id` of the send whose WQE is given too many SGEs.
const TAMPERED: u64 = 0x5ee_0bad;

/// A send WQE whose `num_sge` (3) is above its QP's `max_send_sge` (2), written by a hostile user
/// (the driver never writes one; [`SgeTamper`] rewrites it on its way to DMA memory). The QPs are
/// the driver's, brought to RTS through the same platform.
pub fn wqe_num_sge_over_qp(r: &mut Run) -> Outcome {
    let tamper = SgeTamper { inner: r.dev.platform().clone(), wr_id: TAMPERED, num_sge: cap().max_send_sge + 1 };
    let opts = ProbeOptions { gid: Some(backend_gid()), ..Default::default() };
    let dev = hca::probe(Arc::new(tamper), opts).unwrap_or_else(|e| panic!("{:?}: probe: {e}", r.side));
    let pd = dev.alloc_pd().expect("alloc_pd");
    let cq = dev.create_cq(32, None).expect("create_cq");
    let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    p.recv_b(1, 0, 64);
    p.send_a(TAMPERED, 0, b"three SGEs", WrOpcode::Send, false);
    let got = completions(&cq, 2);
    let status = |id: u64| got.iter().find(|w| w.0 == id).map(|w| w.1);
    r.record("send CQE", Obs::Completion(status(TAMPERED)), Expect::CqeError)?;
    let after = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
    after.recv_b(2, 0, 64);
    after.send_a(3, 0, b"after", WrOpcode::Send, false);
    let got = completions(&cq, 2);
    let worst = got.iter().map(|w| w.1).find(|s| *s != WcStatus::Success).or(got.first().map(|w| w.1));
    r.record("then a good send on a new QP pair", Obs::Completion(worst), Expect::CqeSuccess)
}

/// Up to `n` completions of `cq` as (wr_id, status), within 2 s.
fn completions(cq: &Cq, n: usize) -> Vec<(u64, WcStatus)> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut out = Vec::new();
    let mut wc = [ib_core::Wc::default(); 8];
    while out.len() < n && Instant::now() < deadline {
        match cq.poll(&mut wc) {
            Ok(0) => std::thread::sleep(Duration::from_millis(2)),
            Ok(k) => out.extend(wc[..k].iter().map(|w| (w.wr_id, w.status))),
            Err(_) => break,
        }
    }
    out
}

/// A 32-bit read of the first UAR page (QEMU 7.2 gives BAR2 no read callback).
pub fn uar_bar_read(r: &mut Run) -> Outcome {
    r.up();
    let obs = r.uar_read(0);
    r.record("readl BAR2 + 0", obs, Expect::NotApplicable)?;
    r.still_usable()
}

/// `REG_IMR`: read back, and which masks silence the command interrupt (the model: bit n masks
/// vector n only).
pub fn imr_register(r: &mut Run) -> Outcome {
    r.up();
    let port = QueryPort { port_num: 1, ..Default::default() };
    let p = r.dev.platform().clone();
    p.reg_write(REG_IMR, 0x1);
    r.record("IMR after writing 0x1", Obs::Reg(p.reg_read(REG_IMR)), Expect::Reg(0x1))?;
    r.post("QUERY_PORT with IMR 0x1", port, Expect::OkIrq(op::QUERY_PORT, false))?;
    p.reg_write(REG_IMR, 0x4);
    r.record("IMR after writing 0x4", Obs::Reg(p.reg_read(REG_IMR)), Expect::Reg(0x4))?;
    r.post("QUERY_PORT with IMR 0x4", port, Expect::OkIrq(op::QUERY_PORT, true))?;
    p.reg_write(REG_IMR, 0);
    r.post("QUERY_PORT with IMR 0", port, Expect::Ok(op::QUERY_PORT))
}

/// Pages for `wr` work requests of `stride` bytes.
fn queue_pages(wr: u32, stride: Option<u32>) -> u16 {
    let bytes = u64::from(wr) * u64::from(stride.unwrap_or(u32::MAX));
    bytes.div_ceil(PAGE_SIZE as u64).min(u64::from(u16::MAX)) as u16
}

/// CREATE_QP (RC, 16 WRs each way) on `pd` and `cq` with these SGE counts; the chunk counts
/// agree exactly with the rings unless `total` overrides them (then `send_chunks` is 1).
fn create_qp(r: &Run, pd: u32, cq: u32, sge: (u32, u32), total: Option<u16>) -> CreateQp {
    let sq = queue_pages(16, sq_wqe_stride(sge.0));
    let rq = queue_pages(16, rq_wqe_stride(sge.1));
    let (total, send) = match total {
        Some(t) => (t, 1),
        None => (1 + sq + rq, sq),
    };
    CreateQp {
        pdir_dma: r.listed(u64::from(total)).into(),
        pd_handle: pd.into(),
        send_cq_handle: cq.into(),
        recv_cq_handle: cq.into(),
        max_send_wr: 16.into(),
        max_recv_wr: 16.into(),
        max_send_sge: sge.0.into(),
        max_recv_sge: sge.1.into(),
        total_chunks: total.into(),
        send_chunks: send.into(),
        qp_type: qp_type::RC,
        ..Default::default()
    }
}
