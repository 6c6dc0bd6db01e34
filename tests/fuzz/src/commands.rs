//! The `model_commands` target: arbitrary command-slot bytes after a valid DSR.
//!
//! Input: one set-up byte (which objects exist before the first fuzzed command, and the profile),
//! then commands, each a selector byte (the opcode: one of the 21 pvrdma opcodes most of the time,
//! a raw 32-bit one otherwise), a patch byte and up to 255 body bytes laid after the 16-byte
//! header. The patch byte may put real handles (of objects made at set-up or by earlier fuzzed
//! commands), a real page directory and consistent sizes into the request's fields, so the
//! commands get past the handle and geometry checks into the object code.
//!
//! Invariants: no panic or hang; each request is answered with the opcode's ack, its cookie and
//! one command interrupt, unless the device is Broken; guest memory stays within its limit; a
//! RESET at the end (set-up bit 6) leaves the device Inactive whatever the commands made.

use crate::model::{check_answer, Model, GID0, PAGE};
use arbitrary::Unstructured;
use pvrdma_abi::cmd::opcode as op;
use pvrdma_abi::cmd::{CmdHdr, RespHdr};
use pvrdma_abi::wqe::{rq_wqe_stride, sq_wqe_stride};
use pvrdma_sim::testutil::minidrv::paged;
use pvrdma_sim::Profile;
use zerocopy::FromBytes;

/// Most fuzzed commands per input.
const MAX_COMMANDS: usize = 64;

/// Handles of the objects that exist (or existed: stale handles are worth trying too).
#[derive(Default)]
struct Handles {
    ctxs: Vec<u32>,
    pds: Vec<u32>,
    cqs: Vec<u32>,
    qps: Vec<u32>,
    mrs: Vec<u32>,
}

/// What a request field holds, for patching.
#[derive(Clone, Copy)]
enum Field {
    Ctx,
    Pd,
    Cq,
    Qp,
    Mr,
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let setup: u8 = u.arbitrary().unwrap_or(0xff);
    let profile = if setup & 0x80 != 0 { Profile::Qemu72 } else { Profile::Ibta };
    let mut model = Model::with_profile(profile);
    let mut h = set_up(&mut model, setup);
    for _ in 0..MAX_COMMANDS {
        if u.is_empty() {
            break;
        }
        let Ok(req) = request(&mut u, &mut model, &h) else { break };
        let before = model.dev().state();
        let opcode = u32::from_le_bytes([req[8], req[9], req[10], req[11]]);
        let cookie = u64::from_le_bytes(req[..8].try_into().expect("8 bytes"));
        let a = model.post_raw(&req);
        check_answer(model.dev(), opcode, cookie, &a, before);
        if a.hdr.ack.get() != 0 && a.hdr.err == 0 {
            remember(&mut h, opcode, &a.bytes);
        }
        model.check_bounded();
    }
    model.settle();
    model.check_bounded();
    if setup & 0x40 != 0 {
        model.reset();
    }
}

/// Makes the objects the set-up byte asks for, with valid commands.
fn set_up(model: &mut Model, setup: u8) -> Handles {
    let mut h = Handles { ctxs: vec![0], ..Default::default() };
    if setup & 0x01 != 0 {
        model.drv.bind_gid(0, GID0);
    }
    if setup & 0x02 != 0 {
        h.ctxs.push(model.drv.create_uc(1));
    }
    if setup & 0x04 == 0 {
        return h;
    }
    let pd = model.drv.create_pd(0);
    h.pds.push(pd);
    if setup & 0x08 != 0 {
        h.mrs.push(model.drv.create_mr(pd, 0x7000_0000_0123, 2 * PAGE, 1).handle);
    }
    if setup & 0x10 == 0 {
        return h;
    }
    let a = model.drv.create_cq(0, 16).handle;
    let b = model.drv.create_cq(0, 16).handle;
    h.cqs.extend([a, b]);
    if setup & 0x20 != 0 {
        let qa = model.drv.create_qp(pd, a, a, 4);
        let qb = model.drv.create_qp(pd, b, b, 4);
        if setup & 0x41 == 0x41 {
            model.connect(qa.qpn, qb.qpn);
            model.connect(qb.qpn, qa.qpn);
        }
        h.qps.extend([qa.qpn, qb.qpn]);
    }
    h
}

/// Builds one request from the input: header, body, patches.
fn request(u: &mut Unstructured, model: &mut Model, h: &Handles) -> arbitrary::Result<Vec<u8>> {
    let sel: u8 = u.arbitrary()?;
    let opcode = if sel < 0xf0 { u32::from(sel) % op::MAX } else { u.arbitrary()? };
    let patch: u8 = u.arbitrary()?;
    let len: u8 = u.arbitrary()?;
    let body = u.bytes(usize::from(len).min(u.len()))?;
    let hdr = core::mem::size_of::<CmdHdr>();
    let mut req = vec![0u8; hdr + 256];
    req[hdr..hdr + body.len()].copy_from_slice(body);
    req[..8].copy_from_slice(&model.drv.next_cookie().to_le_bytes());
    req[8..12].copy_from_slice(&opcode.to_le_bytes());
    if patch & 1 != 0 {
        patch_handles(u, &mut req, opcode, h)?;
    }
    if patch & 2 != 0 {
        patch_geometry(u, &mut req, opcode, model)?;
    }
    Ok(req)
}

/// The handle fields of `opcode`'s request: (byte offset, kind).
fn handle_fields(opcode: u32) -> &'static [(usize, Field)] {
    match opcode {
        op::CREATE_PD => &[(16, Field::Ctx)],
        op::DESTROY_PD => &[(16, Field::Pd)],
        op::CREATE_MR => &[(40, Field::Pd)],
        op::DESTROY_MR => &[(16, Field::Mr)],
        op::CREATE_CQ => &[(24, Field::Ctx)],
        op::RESIZE_CQ | op::DESTROY_CQ => &[(16, Field::Cq)],
        op::CREATE_QP => &[(24, Field::Pd), (28, Field::Cq), (32, Field::Cq)],
        op::MODIFY_QP | op::QUERY_QP | op::DESTROY_QP => &[(16, Field::Qp)],
        op::DESTROY_UC => &[(16, Field::Ctx)],
        _ => &[],
    }
}

fn patch_handles(u: &mut Unstructured, req: &mut [u8], opcode: u32, h: &Handles) -> arbitrary::Result<()> {
    for &(at, kind) in handle_fields(opcode) {
        let list = match kind {
            Field::Ctx => &h.ctxs,
            Field::Pd => &h.pds,
            Field::Cq => &h.cqs,
            Field::Qp => &h.qps,
            Field::Mr => &h.mrs,
        };
        if let Ok(&v) = u.choose(list) {
            req[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    Ok(())
}

/// Consistent sizes and a real page directory for the creating commands (and small indices for
/// the port's).
fn patch_geometry(u: &mut Unstructured, req: &mut [u8], opcode: u32, model: &Model) -> arbitrary::Result<()> {
    let put32 = |req: &mut [u8], at: usize, v: u32| req[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let put16 = |req: &mut [u8], at: usize, v: u16| req[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put64 = |req: &mut [u8], at: usize, v: u64| req[at..at + 8].copy_from_slice(&v.to_le_bytes());
    match opcode {
        op::CREATE_CQ => {
            let cqe = 1u32 << u.int_in_range(0..=8)?;
            let pages = 1 + (u64::from(cqe) * 64).div_ceil(PAGE);
            put64(req, 16, paged(model.dev(), pages).0);
            put32(req, 28, cqe);
            put32(req, 32, pages as u32);
        }
        op::CREATE_QP => {
            let wr = 1u32 << u.int_in_range(0..=5)?;
            let sge: u32 = u.int_in_range(1..=4)?;
            let sp = (u64::from(wr) * u64::from(sq_wqe_stride(sge).unwrap_or(128))).div_ceil(PAGE);
            let rp = (u64::from(wr) * u64::from(rq_wqe_stride(sge).unwrap_or(64))).div_ceil(PAGE);
            put64(req, 16, paged(model.dev(), 1 + sp + rp).0);
            for at in [40, 44] {
                put32(req, at, wr);
            }
            for at in [48, 52] {
                put32(req, at, sge);
            }
            put16(req, 68, (1 + sp + rp) as u16);
            put16(req, 70, sp as u16);
            req[75] = u.int_in_range(0..=4)?;
        }
        op::CREATE_MR => {
            let pages: u64 = u.int_in_range(1..=4)?;
            let len: u64 = u.int_in_range(0..=pages * PAGE)?;
            put64(req, 16, 0x7000_0000_0000 + u64::from(u.arbitrary::<u16>()?));
            put64(req, 24, len);
            put64(req, 32, paged(model.dev(), pages + 1).0);
            put32(req, 52, pages as u32 + 1);
        }
        op::CREATE_UC => put32(req, 16, (pvrdma_sim::UAR_BASE_PFN + u64::from(u.arbitrary::<u8>()?)) as u32),
        op::QUERY_PORT | op::QUERY_PKEY => req[16] = u.int_in_range(0..=2)?,
        op::CREATE_BIND => put32(req, 24, u.int_in_range(0..=3)?),
        op::DESTROY_BIND => put32(req, 16, u.int_in_range(0..=3)?),
        _ => {}
    }
    Ok(())
}

/// Records the handle a successful create answered with.
fn remember(h: &mut Handles, opcode: u32, resp: &[u8]) {
    let at = core::mem::size_of::<RespHdr>();
    let Ok((v, _)) = zerocopy::little_endian::U32::read_from_prefix(&resp[at..]) else { return };
    let list = match opcode {
        op::CREATE_UC => &mut h.ctxs,
        op::CREATE_PD => &mut h.pds,
        op::CREATE_MR => &mut h.mrs,
        op::CREATE_CQ => &mut h.cqs,
        op::CREATE_QP => &mut h.qps,
        _ => return,
    };
    list.push(v.get());
}
