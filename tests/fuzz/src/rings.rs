//! The `model_rings` target: the model's rings and doorbells after valid set-up.
//!
//! Set-up (valid commands): GID 0, a PD, two CQs, two connected RC QPs (one on each CQ), a send
//! MR and a receive MR; a user context with its own CQ on UAR page 1. Then each action, chosen by
//! a byte, writes arbitrary bytes into a QP's ring-state page or WQE slots, posts a structured
//! send or receive WQE (real keys and addresses, fuzzed fields), rings a QP or CQ doorbell with a
//! fuzzed value and page, writes anywhere in BAR2, consumes CQEs as a driver does, writes any word
//! of a CQ's or an event ring's state page, changes a QP's state by command, or lets the port
//! deliver. The set-up byte also picks the profile and a link latency (delivery on the port's
//! thread instead of the ringing one).
//!
//! At the end, set-up bits ask for every object to be destroyed by command (whatever is in
//! flight) and for a device RESET.
//!
//! Invariants: no panic or hang (the port goes idle within a bound), guest memory within its
//! limit, the indices the device writes in range (in ring-state pages the input did not write),
//! every command answered, RESET leaves the device Inactive.

use crate::model::{Model, GID0, PAGE};
use arbitrary::Unstructured;
use pvrdma_abi::cmd;
use pvrdma_abi::ring::{idx_inc, idx_slot, idx_valid, ring_count};
use pvrdma_abi::uar::{UAR_BAR_SIZE, UAR_CQ_OFFSET, UAR_PAGE_SIZE, UAR_QP_OFFSET};
use pvrdma_abi::verbs::{access, qp_attr_mask as m, qp_state, QpAttr};
use pvrdma_abi::wqe::{wr_opcode, RqWqeHdr, Sge, SqWqeHdr};
use pvrdma_sim::testutil::minidrv::{TestCq, TestMr, TestQp};
use pvrdma_sim::{Profile, SimConfig};
use std::time::Duration;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromZeros, IntoBytes};

/// Most actions per input.
const MAX_ACTIONS: usize = 64;

/// The objects set-up made.
struct World {
    model: Model,
    cqs: Vec<TestCq>,
    qps: Vec<TestQp>,
    mrs: Vec<TestMr>,
    /// UAR pages in use (0: the kernel's; 1: the user context's).
    pages: [u32; 2],
    /// Ring-state pages whose words the input wrote (the device's words there prove nothing).
    tainted: Vec<u64>,
}

/// A work queue as the driver fills it: its producer word, its entries, their count and stride.
#[derive(Clone, Copy)]
struct Wq {
    /// Device address of the producer index (the QP's ring-state page: SQ at 0, RQ at 8).
    prod: u64,
    /// Device address of entry 0.
    entries: u64,
    /// Entries.
    elems: u32,
    /// Bytes per entry.
    stride: u64,
}

/// `qp`'s send queue.
fn sq(qp: &TestQp) -> Wq {
    Wq { prod: qp.state, entries: qp.sq, elems: qp.swr, stride: qp.sstride }
}

/// `qp`'s receive queue.
fn rq(qp: &TestQp) -> Wq {
    Wq { prod: qp.state + 8, entries: qp.rq, elems: qp.rwr, stride: qp.rstride }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let setup: u8 = u.arbitrary().unwrap_or(0);
    let mut w = set_up(setup);
    for _ in 0..MAX_ACTIONS {
        if u.is_empty() || act(&mut u, &mut w).is_err() {
            break;
        }
        w.model.check_bounded();
    }
    w.model.settle();
    w.model.check_bounded();
    check_device_words(&w);
    if setup & 2 != 0 {
        destroy_all(&mut w);
    }
    if setup & 4 != 0 {
        w.model.reset();
    }
}

/// The indices the device wrote into ring-state pages the input left alone are in range: a CQ's
/// and an event ring's producer index, never more than the ring ahead of the driver's consumer
/// index; a QP's consumer indices.
fn check_device_words(w: &World) {
    let mem = w.model.mem();
    let word = |at: u64| mem.load_u32(at).expect("ring-state page");
    let d = &w.model.drv;
    let produced = w.cqs.iter().map(|c| c.ring).chain([d.async_ring, d.cq_ring]).map(|r| (r.state, r.elems));
    for (page, elems) in produced.filter(|(p, _)| !w.tainted.contains(p)) {
        let (prod, cons) = (word(page + 8), word(page + 12));
        assert!(ring_count(prod, cons, elems).is_some(), "device wrote prod {prod} (cons {cons}, {elems} entries)");
    }
    for qp in w.qps.iter().filter(|q| !w.tainted.contains(&q.state)) {
        for (at, elems) in [(4, qp.swr), (12, qp.rwr)] {
            let cons = word(qp.state + at);
            assert!(idx_valid(cons, elems), "device wrote QP {} cons {cons} at +{at}", qp.qpn);
        }
    }
}

/// Destroys the QPs, MRs and CQs by command, whatever is in flight (each must be answered).
fn destroy_all(w: &mut World) {
    for qp in w.qps.clone() {
        w.model.post(cmd::DestroyQp { qp_handle: U32::new(qp.qpn), ..Default::default() });
    }
    for mr in w.mrs.clone() {
        w.model.post(cmd::DestroyMr { mr_handle: U32::new(mr.handle), ..Default::default() });
    }
    for cq in w.cqs.clone() {
        w.model.post(cmd::DestroyCq { cq_handle: U32::new(cq.handle), ..Default::default() });
    }
    w.model.settle();
}

fn set_up(setup: u8) -> World {
    let profile = if setup & 1 != 0 { Profile::Qemu72 } else { Profile::Ibta };
    // A link latency moves delivery from the ringing thread to the port's own thread.
    let link_latency = Duration::from_micros(if setup & 8 != 0 { 20 } else { 0 });
    let mut model = Model::with_config(SimConfig { profile, link_latency, ..crate::model::config() });
    let d = &mut model.drv;
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let a = d.create_cq(0, 8);
    let b = d.create_cq(0, 8);
    let qa = d.create_qp(pd, a.handle, a.handle, 4);
    let qb = d.create_qp(pd, b.handle, b.handle, 4);
    model.connect(qa.qpn, qb.qpn);
    model.connect(qb.qpn, qa.qpn);
    let d = &mut model.drv;
    let src = d.create_mr(pd, 0x7000_0000_0123, 2 * PAGE, 0);
    let dst = d.create_mr(pd, 0x7100_0000_0456, 2 * PAGE, access::LOCAL_WRITE | access::REMOTE_WRITE);
    let uc = d.create_uc(1);
    let c = d.create_cq(uc, 4);
    World { model, cqs: vec![a, b, c], qps: vec![qa, qb], mrs: vec![src, dst], pages: [0, 1], tainted: Vec::new() }
}

fn act(u: &mut Unstructured, w: &mut World) -> arbitrary::Result<()> {
    match u.int_in_range(0..=10u8)? {
        0 => {
            let qp = *u.choose(&w.qps)?;
            let at = u64::from(u.int_in_range(0..=15u8)?);
            let v: u32 = u.arbitrary()?;
            let _ = w.model.mem().store_u32(qp.state + (at & !3), v);
            w.tainted.push(qp.state);
        }
        1 => {
            let qp = *u.choose(&w.qps)?;
            let ring = if u.arbitrary()? { sq(&qp) } else { rq(&qp) };
            let span = u64::from(ring.elems) * ring.stride;
            let at = u.int_in_range(0..=span - 1)?;
            let len = u.int_in_range(1..=64usize)?;
            let bytes = u.bytes(len.min(u.len()))?;
            let _ = w.model.mem().write(ring.entries + at, &bytes[..bytes.len().min((span - at) as usize)]);
        }
        2 => post_send(u, w)?,
        3 => post_recv(u, w)?,
        4 => {
            let qpn = pick_handle(u, w.qps.iter().map(|q| q.qpn))?;
            let bits = u32::from(u.int_in_range(0..=3u8)?) << 30;
            let page = pick_page(u, w)?;
            w.model.dev().uar_write(page + u64::from(UAR_QP_OFFSET), bits | qpn);
        }
        5 => {
            let cq = pick_handle(u, w.cqs.iter().map(|c| c.handle))?;
            let bits = u32::from(u.int_in_range(0..=7u8)?) << 29;
            let page = pick_page(u, w)?;
            w.model.dev().uar_write(page + u64::from(UAR_CQ_OFFSET), bits | cq);
        }
        6 => {
            let at = u.int_in_range(0..=UAR_BAR_SIZE + 64)?;
            w.model.dev().uar_write(at, u.arbitrary()?);
        }
        7 => consume(u, w)?,
        8 => {
            // Any word of a device-produced ring's state page: a CQ's or the DSR's event rings'.
            let mut pages: Vec<u64> = w.cqs.iter().map(|c| c.ring.state).collect();
            pages.extend([w.model.drv.async_ring.state, w.model.drv.cq_ring.state]);
            let page = *u.choose(&pages)?;
            let at = u64::from(u.int_in_range(0..=3u8)?) * 4;
            let _ = w.model.mem().store_u32(page + at, u.arbitrary()?);
            w.tainted.push(page);
        }
        9 => modify(u, w)?,
        _ => w.model.settle(),
    }
    Ok(())
}

/// A real handle most of the time, an arbitrary 24-bit one otherwise.
fn pick_handle(u: &mut Unstructured, real: impl Iterator<Item = u32>) -> arbitrary::Result<u32> {
    let real: Vec<u32> = real.collect();
    if u.ratio(7u8, 8u8)? {
        Ok(*u.choose(&real)?)
    } else {
        Ok(u.arbitrary::<u32>()? & 0x00ff_ffff)
    }
}

/// The BAR2 offset of a UAR page: a used one most of the time, any other otherwise.
fn pick_page(u: &mut Unstructured, w: &World) -> arbitrary::Result<u64> {
    let page = if u.ratio(7u8, 8u8)? {
        u64::from(*u.choose(&w.pages)?)
    } else {
        u.int_in_range(0..=UAR_BAR_SIZE / UAR_PAGE_SIZE)?
    };
    Ok(page * UAR_PAGE_SIZE)
}

/// An SGE: inside a real MR most of the time, with fuzzed offset, length and key otherwise.
fn sge(u: &mut Unstructured, w: &World) -> arbitrary::Result<Sge> {
    let mr = *u.choose(&w.mrs)?;
    if u.ratio(3u8, 4u8)? {
        let off = u.int_in_range(0..=mr.len)?;
        let len = u.int_in_range(0..=mr.len - off)? as u32;
        return Ok(Sge { addr: U64::new(mr.va + off), length: U32::new(len), lkey: U32::new(mr.lkey) });
    }
    Ok(Sge { addr: U64::new(u.arbitrary()?), length: U32::new(u.arbitrary()?), lkey: U32::new(u.arbitrary()?) })
}

/// Writes a send WQE at the SQ's producer slot and publishes it (no doorbell).
fn post_send(u: &mut Unstructured, w: &mut World) -> arbitrary::Result<()> {
    let qp = *u.choose(&w.qps)?;
    let ops = [
        wr_opcode::SEND,
        wr_opcode::SEND_WITH_IMM,
        wr_opcode::RDMA_WRITE,
        wr_opcode::RDMA_WRITE_WITH_IMM,
        wr_opcode::RDMA_READ,
    ];
    let opcode = if u.ratio(7u8, 8u8)? { *u.choose(&ops)? } else { u.arbitrary()? };
    let nsge = u.int_in_range(0..=3u32)?;
    let sges = (0..nsge).map(|_| sge(u, w)).collect::<arbitrary::Result<Vec<_>>>()?;
    let mut hdr = SqWqeHdr::new_zeroed();
    hdr.wr_id = U64::new(u.arbitrary()?);
    hdr.num_sge = U32::new(if u.ratio(15u8, 16u8)? { nsge } else { u.arbitrary()? });
    hdr.opcode = U32::new(opcode);
    hdr.send_flags = U32::new(u32::from(u.arbitrary::<u8>()?));
    hdr.ex.set(u.arbitrary()?);
    let dst = w.mrs[1];
    let (addr, rkey) = if u.ratio(3u8, 4u8)? {
        (dst.va + u.int_in_range(0..=dst.len)?, dst.rkey)
    } else {
        (u.arbitrary()?, u.arbitrary()?)
    };
    hdr.wr[..8].copy_from_slice(&addr.to_le_bytes());
    hdr.wr[8..12].copy_from_slice(&rkey.to_le_bytes());
    publish(w, sq(&qp), hdr.as_bytes(), sges.as_bytes())
}

/// Writes a receive WQE at the RQ's producer slot and publishes it (no doorbell).
fn post_recv(u: &mut Unstructured, w: &mut World) -> arbitrary::Result<()> {
    let qp = *u.choose(&w.qps)?;
    let nsge = u.int_in_range(0..=3u32)?;
    let sges = (0..nsge).map(|_| sge(u, w)).collect::<arbitrary::Result<Vec<_>>>()?;
    let hdr = RqWqeHdr {
        wr_id: U64::new(u.arbitrary()?),
        num_sge: U32::new(if u.ratio(15u8, 16u8)? { nsge } else { u.arbitrary()? }),
        total_len: U32::new(u.arbitrary()?),
    };
    publish(w, rq(&qp), hdr.as_bytes(), sges.as_bytes())
}

/// Puts `hdr` and `sges` into the producer's slot of `ring` and advances its producer index
/// (the driver's word: `ring.prod`). A producer index the input made invalid stays as it is.
fn publish(w: &World, ring: Wq, hdr: &[u8], sges: &[u8]) -> arbitrary::Result<()> {
    let mem = w.model.mem();
    let Ok(prod) = mem.load_u32(ring.prod) else { return Ok(()) };
    let Some(slot) = idx_slot(prod, ring.elems) else { return Ok(()) };
    let at = ring.entries + u64::from(slot) * ring.stride;
    let room = (ring.stride as usize).saturating_sub(hdr.len());
    let _ = mem.write(at, hdr);
    let _ = mem.write(at + hdr.len() as u64, &sges[..sges.len().min(room)]);
    let _ = mem.store_u32(ring.prod, idx_inc(prod, ring.elems));
    Ok(())
}

/// Consumes up to a fuzzed number of CQEs of a CQ as a driver does (validated indices).
fn consume(u: &mut Unstructured, w: &mut World) -> arbitrary::Result<()> {
    let r = u.choose(&w.cqs)?.ring;
    let n = u.int_in_range(0..=8u32)?;
    let mem = w.model.mem();
    let (Ok(prod), Ok(cons)) = (mem.load_u32(r.state + 8), mem.load_u32(r.state + 12)) else { return Ok(()) };
    let Some(queued) = ring_count(prod, cons, r.elems) else { return Ok(()) };
    let mut cons = cons;
    for _ in 0..n.min(queued) {
        cons = idx_inc(cons, r.elems);
    }
    let _ = mem.store_u32(r.state + 12, cons);
    Ok(())
}

/// Moves a QP to a fuzzed state by MODIFY_QP (ERR and RESET flush; RESET -> RTS reconnects).
fn modify(u: &mut Unstructured, w: &mut World) -> arbitrary::Result<()> {
    let i = u.choose_index(w.qps.len())?;
    let (qpn, peer) = (w.qps[i].qpn, w.qps[1 - i].qpn);
    let state = u.int_in_range(0..=6u32)?;
    if state == qp_state::RTS {
        let mut a = QpAttr::new_zeroed();
        a.qp_state = U32::new(qp_state::RESET);
        w.model.post(cmd::ModifyQp {
            qp_handle: U32::new(qpn),
            attr_mask: U32::new(m::STATE),
            attrs: a,
            ..Default::default()
        });
        reset_rings(w, i);
        w.model.try_connect(qpn, peer);
        return Ok(());
    }
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(state);
    w.model.post(cmd::ModifyQp {
        qp_handle: U32::new(qpn),
        attr_mask: U32::new(m::STATE),
        attrs: a,
        ..Default::default()
    });
    Ok(())
}

/// After RESET a driver starts its rings at 0, as the device does.
fn reset_rings(w: &World, i: usize) {
    let _ = w.model.mem().zero(w.qps[i].state, 16);
}
