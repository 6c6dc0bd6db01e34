//! The driver mode of `driver_parsing`: the whole driver (`hca::probe`) over the model behind
//! hooks (`tests::intercept`) that overwrite what the device wrote with input bytes before the
//! driver reads it.
//!
//! Input: a plan (the DSR capabilities' bytes to overwrite, and which command responses to
//! overwrite with what: by the command's sequence number, so probe's, object creation's and
//! teardown's commands are all reached), then actions on the objects the driver managed to make:
//! CQEs through the model's publish path (arbitrary contents, valid ring), raw CQ ring bytes and
//! producer indices, async-event and CQ-notification entries and indices (each followed by the
//! interrupt), polls and arms, queries and a user context (more responses to overwrite).
//!
//! Invariants: no panic or hang; errors are `Err` values; a successful completion names a QP of
//! its CQ.

use arbitrary::Unstructured;
use doorbell::ArmEncoding;
use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use hca::ProbeOptions;
use ib_core::{access, Cq, Device, Mr, NotifyFlags, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, Wc};
use ib_core::{QpAttrMask, WcStatus, WrOpcode};
use pvrdma_abi::dsr::{DeviceCaps, Dsr};
use pvrdma_abi::regs::{DeviceCtl, IntrVector, REG_CTL, REG_DSRHIGH, REG_DSRLOW, REG_REQUEST};
use pvrdma_abi::ring::{idx_inc, idx_slot, RX_CONS_HEAD, RX_PROD_TAIL};
use pvrdma_abi::wqe::Cqe;
use pvrdma_sim::SimDevice;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tests::intercept::{Hooks, Intercept};
use tests::rewrite::dsr;
use zerocopy::FromBytes;

/// Most actions per input.
const MAX_ACTIONS: usize = 32;
/// Bound on one command (the hooks never swallow one, so only a Broken device makes it wait).
const CMD_TIMEOUT: Duration = Duration::from_millis(200);
/// Bound on the driver taking the async entries it was handed (at most [`MAX_ACTIONS`] waits an
/// input: well under libFuzzer's per-input timeout of `run.sh`).
const DRAIN: Duration = Duration::from_millis(100);

/// One overwrite of device-written bytes: `bytes` at `offset`.
#[derive(Debug, Clone)]
pub struct Patch {
    /// Byte offset in the region (the response slot, the DSR's `caps`).
    pub offset: usize,
    /// What to write there.
    pub bytes: Vec<u8>,
}

/// The hooks: overwrite the DSR's capabilities once the device wrote them, and the responses of
/// the chosen commands once the device answered; wake the driver's vector threads at RESET so a
/// teardown does not wait out their service interval.
pub struct Hostile {
    caps: Option<Patch>,
    responses: Vec<(u32, Patch)>,
    commands: AtomicU32,
}

impl Hooks for Hostile {
    fn reg_write(&self, sim: &SimPlatform, offset: u32, value: u32) {
        sim.reg_write(offset, value);
        let d = sim.device();
        match offset {
            REG_DSRHIGH => {
                if let Some(p) = &self.caps {
                    let at = address(d) + core::mem::offset_of!(Dsr, caps) as u64;
                    write_within(d, at, core::mem::size_of::<DeviceCaps>(), p);
                }
            }
            REG_REQUEST => {
                let n = self.commands.fetch_add(1, Ordering::Relaxed);
                for (_, p) in self.responses.iter().filter(|(k, _)| *k == n) {
                    write_within(d, dsr(d).resp_slot_dma.get(), 256, p);
                }
            }
            REG_CTL if value == DeviceCtl::Reset as u32 => {
                d.vectors().raise(IntrVector::Async as u16);
                d.vectors().raise(IntrVector::Cq as u16);
            }
            _ => {}
        }
    }
}

/// The DSR's device address.
fn address(d: &SimDevice) -> u64 {
    u64::from(d.reg_read(REG_DSRHIGH)) << 32 | u64::from(d.reg_read(REG_DSRLOW))
}

/// Writes `p` into the `size` bytes at `at`, clipped to them.
fn write_within(d: &SimDevice, at: u64, size: usize, p: &Patch) {
    let off = p.offset % size;
    let n = p.bytes.len().min(size - off);
    let _ = d.mem().write(at + off as u64, &p.bytes[..n]);
}

fn patch(u: &mut Unstructured) -> arbitrary::Result<Patch> {
    let offset = usize::from(u.arbitrary::<u8>()?);
    let len = u.int_in_range(1..=16usize)?;
    Ok(Patch { offset, bytes: u.bytes(len.min(u.len()))?.to_vec() })
}

fn plan(u: &mut Unstructured) -> arbitrary::Result<Hostile> {
    let caps = if u.ratio(1u8, 8u8)? { Some(patch(u)?) } else { None };
    let n = u.int_in_range(0..=3u8)?;
    let mut responses = Vec::new();
    for _ in 0..n {
        responses.push((u32::from(u.int_in_range(0..=40u8)?), patch(u)?));
    }
    Ok(Hostile { caps, responses, commands: AtomicU32::new(0) })
}

/// What the driver managed to make.
#[derive(Default)]
struct Objects {
    pd: Option<Pd>,
    cqs: Vec<Cq>,
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
}

/// Runs one input in driver mode.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(hooks) = plan(&mut u) else { return };
    let platform = Arc::new(Intercept { sim: SimPlatform::new(crate::model::config()), hooks });
    let sim = platform.sim.clone();
    let opts = ProbeOptions { cmd_timeout: CMD_TIMEOUT, arm_encoding: Some(ArmEncoding::Ibta), ..Default::default() };
    let Ok(dev) = hca::probe(platform as Arc<dyn Platform>, opts) else { return };
    let objs = make(&dev);
    for _ in 0..MAX_ACTIONS {
        if u.is_empty() || act(&mut u, &dev, sim.device(), &objs).is_err() {
            break;
        }
    }
    let mut wc = [Wc::default(); 8];
    for cq in &objs.cqs {
        check_polled(cq, &objs, &mut wc);
    }
}

/// PD, two CQs, two connected RC QPs, two MRs, one message each way; stops at the first
/// failure (a corrupted response may refuse any of them).
fn make(dev: &Device) -> Objects {
    let mut o = Objects::default();
    let _ = make_into(dev, &mut o);
    o
}

fn make_into(dev: &Device, o: &mut Objects) -> ib_core::Result<()> {
    let pd = dev.alloc_pd()?;
    o.cqs.push(dev.create_cq(8, None)?);
    o.cqs.push(dev.create_cq(8, None)?);
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    for i in 0..2 {
        let attr = QpInitAttr {
            send_cq: &o.cqs[i],
            recv_cq: &o.cqs[i],
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        };
        o.qps.push(pd.create_qp(&attr)?);
    }
    o.mrs.push(pd.alloc_mr(4096, access::LOCAL_WRITE)?);
    o.mrs.push(pd.alloc_mr(4096, access::LOCAL_WRITE)?);
    o.pd = Some(pd);
    let gid = dev.query_gid(1, 0)?;
    for (a, b) in [(0, 1), (1, 0)] {
        let q = &o.qps[a];
        q.modify_to_init(1, access::LOCAL_WRITE)?;
        q.modify_to_rtr(o.qps[b].qpn(), gid, 0, 1024)?;
        q.modify_to_rts(0)?;
    }
    for (a, b) in [(0, 1), (1, 0)] {
        let sge = [Sge { addr: o.mrs[b].addr(), length: 64, lkey: o.mrs[b].lkey() }];
        o.qps[b].post_recv(&RecvWr { wr_id: 7, sg_list: &sge })?;
        let sge = [Sge { addr: o.mrs[a].addr(), length: 64, lkey: o.mrs[a].lkey() }];
        let wr = SendWr { wr_id: 9, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
        o.qps[a].post_send(&wr)?;
    }
    Ok(())
}

fn act(u: &mut Unstructured, dev: &Device, d: &SimDevice, o: &Objects) -> arbitrary::Result<()> {
    let mut wc = [Wc::default(); 8];
    match u.int_in_range(0..=7u8)? {
        0 => {
            let cq = u.choose(&o.cqs)?;
            let bytes = u.bytes(64.min(u.len()))?;
            let mut raw = [0u8; 64];
            raw[..bytes.len()].copy_from_slice(bytes);
            let mut cqe = Cqe::read_from_bytes(&raw).expect("64 bytes");
            if u.ratio(3u8, 4u8)? {
                let qp = u.choose(&o.qps)?;
                cqe.qp.set(u64::from(qp.qpn()));
            }
            d.post_cqe(cq.handle(), &cqe, u.arbitrary()?);
        }
        1 => {
            let cq = u.choose(&o.cqs)?;
            let page = hca_cq(cq).record_page().addr();
            let _ = d.mem().store_u32(page + RX_PROD_TAIL, u.arbitrary()?);
        }
        2 => device_ring(u, d, |r| r.async_ring_pages.pdir_dma.get(), 8, IntrVector::Async)?,
        3 => device_ring(u, d, |r| r.cq_ring_pages.pdir_dma.get(), 4, IntrVector::Cq)?,
        4 => {
            let cq = u.choose(&o.cqs)?;
            let n = u.int_in_range(1..=8usize)?;
            check_polled(cq, o, &mut wc[..n]);
        }
        5 => {
            let cq = u.choose(&o.cqs)?;
            let flags = if u.arbitrary()? { NotifyFlags::NEXT_COMPLETION } else { NotifyFlags::SOLICITED };
            let _ = cq.req_notify(flags);
        }
        6 => wait_async_taken(dev, d),
        _ => {
            // More commands whose responses the plan may overwrite: queries, a user context.
            let _ = dev.query_port(1);
            for q in &o.qps {
                let _ = q.query_qp(QpAttrMask::ALL);
            }
            if let Ok(ctx) = dev.alloc_ucontext() {
                let _ = ctx.create_cq(4, None);
            }
        }
    }
    Ok(())
}

/// The provider's CQ behind a core CQ.
fn hca_cq(cq: &Cq) -> &hca::cq::Cq {
    cq.provider_cq::<hca::cq::Cq>().expect("a pvrdma CQ")
}

/// Polls `cq` once into `wc`: an error is a value; every successful completion names a QP that
/// completes into this CQ.
fn check_polled(cq: &Cq, o: &Objects, wc: &mut [Wc]) {
    let Ok(n) = cq.poll(wc) else { return };
    assert!(n <= wc.len(), "poll returned {n} completions for {} slots", wc.len());
    for w in &wc[..n] {
        if w.status == WcStatus::Success {
            let ours = o.qps.iter().any(|q| q.qpn() == w.qp_num);
            assert!(ours, "a successful completion names QP {} that is not on CQ {}", w.qp_num, cq.handle());
        }
    }
}

/// Writes an entry of `size` bytes (input bytes) at the producer slot of the DSR ring whose page
/// directory `dir` names, then sets its producer index (advanced, or an input value), and raises
/// `vector`.
fn device_ring(
    u: &mut Unstructured,
    d: &SimDevice,
    dir: impl Fn(&Dsr) -> u64,
    size: u64,
    vector: IntrVector,
) -> arbitrary::Result<()> {
    let dir = dir(&dsr(d));
    let (Ok(table), mem) = (d.mem().read_u64(dir), d.mem()) else { return Ok(()) };
    let (Ok(state), Ok(entries)) = (mem.read_u64(table), mem.read_u64(table + 8)) else { return Ok(()) };
    let elems = (4096 / size) as u32;
    let Ok(prod) = mem.load_u32(state + RX_PROD_TAIL) else { return Ok(()) };
    if let Some(slot) = idx_slot(prod, elems) {
        let bytes = u.bytes((size as usize).min(u.len()))?;
        let _ = mem.write(entries + u64::from(slot) * size, bytes);
    }
    let next = if u.ratio(7u8, 8u8)? { idx_inc(prod, elems) } else { u.arbitrary()? };
    let _ = mem.store_u32(state + RX_PROD_TAIL, next);
    d.vectors().raise(vector as u16);
    Ok(())
}

/// Waits (bounded) until the driver took every async entry, or the device is fatal.
fn wait_async_taken(dev: &Device, d: &SimDevice) {
    let dir = dsr(d).async_ring_pages.pdir_dma.get();
    let Ok(table) = d.mem().read_u64(dir) else { return };
    let Ok(state) = d.mem().read_u64(table) else { return };
    let deadline = Instant::now() + DRAIN;
    while Instant::now() < deadline && !dev.is_fatal() {
        let prod = d.mem().load_u32(state + RX_PROD_TAIL);
        if prod.is_ok() && prod == d.mem().load_u32(state + RX_CONS_HEAD) {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
