//! Command dispatch: decodes the request in the command slot by its opcode, runs the object
//! module's handler, and builds the response bytes (header included).
//!
//! Every response carries `ack = opcode | 0x8000_0000` and the request's cookie; `err` is 0 or a
//! positive errno (QEMU 7.2 profile: MODIFY_SRQ and QUERY_SRQ swapped, see `srq.rs`). An unknown
//! opcode (anything past DESTROY_SRQ) gets its ack with `EINVAL` (QEMU 7.2 answers nothing for
//! opcodes past its table). RESIZE_CQ is ours (`cq.rs`); on the QEMU 7.2 profile it gets no
//! response at all, as QEMU 7.2's table entry has no handler: the slot stays as the driver left
//! it, `ERR` reads 0xffff, vector 0 is raised.

mod cq;
mod mr;
mod pd;
mod port;
mod qp;
mod srq;
mod uctx;

use crate::backend::Backend;
use crate::ctx::Effects;
use crate::dsr::DsrInfo;
use crate::errno::{CmdResult, Errno};
use pvrdma_abi::cmd::{opcode as op, CmdRequest, NoopResp, RespHdr};
use zerocopy::IntoBytes;

/// Bytes of the largest request (MODIFY_QP).
pub const MAX_REQUEST: usize = core::mem::size_of::<pvrdma_abi::cmd::ModifyQp>();

/// The outcome of one command: the response bytes (with `ack` still zero: the caller stores it
/// last) and the errno (0 = success).
pub struct Outcome {
    /// The whole response, header included.
    pub resp: Vec<u8>,
    /// `ack` for the response header.
    pub ack: u32,
    /// 0 or a positive errno.
    pub err: u8,
}

/// Runs the request in `req` (the first [`MAX_REQUEST`] bytes of the command slot).
pub fn execute(core: &Backend, dsr: &DsrInfo, req: &[u8], fx: &mut Effects) -> Outcome {
    let opcode = u32::from_le_bytes([req[8], req[9], req[10], req[11]]);
    let opcode = srq::table_opcode(core.cfg.profile, opcode);
    let (mut resp, err) = match opcode {
        op::QUERY_PORT => run(req, |r| port::query_port(core, r)),
        op::QUERY_PKEY => run(req, |r| port::query_pkey(core, r)),
        op::CREATE_UC => run(req, |r| uctx::create(core, dsr.uar_pfn, r)),
        op::DESTROY_UC => run(req, |r| uctx::destroy(core, r)),
        op::CREATE_PD => run(req, |r| pd::create(core, r)),
        op::DESTROY_PD => run(req, |r| pd::destroy(core, r)),
        op::CREATE_MR => run(req, |r| mr::create(core, r)),
        op::DESTROY_MR => run(req, |r| mr::destroy(core, r)),
        op::CREATE_CQ => run(req, |r| cq::create(core, r)),
        op::RESIZE_CQ => run(req, |r| cq::resize(core, r)),
        op::DESTROY_CQ => run(req, |r| cq::destroy(core, r)),
        op::CREATE_QP => run(req, |r| qp::create(core, r)),
        op::MODIFY_QP => run(req, |r| qp::modify(core, r, fx)),
        op::QUERY_QP => run(req, |r| qp::query(core, r)),
        op::DESTROY_QP => run(req, |r| qp::destroy(core, r, fx)),
        op::CREATE_BIND => run(req, |r| port::create_bind(core, r)),
        op::DESTROY_BIND => run(req, |r| port::destroy_bind(core, r)),
        op::CREATE_SRQ => run(req, |r| srq::create(core, r)),
        op::MODIFY_SRQ => run(req, |r| srq::modify(core, r)),
        op::QUERY_SRQ => run(req, |r| srq::query(core, r)),
        op::DESTROY_SRQ => run(req, |r| srq::destroy(core, r)),
        _ => (NoopResp::default().as_bytes().to_vec(), Errno::EINVAL.0),
    };
    // Header: the cookie and err; ack is stored separately, last.
    resp[..8].copy_from_slice(&req[..8]);
    resp[core::mem::offset_of!(RespHdr, err)] = err;
    Outcome { resp, ack: pvrdma_abi::cmd::ack_for(opcode), err }
}

/// Whether the profile's device leaves the request in `req` without any response: on
/// [`crate::Profile::Qemu72`], RESIZE_CQ (QEMU 7.2's table names it without a handler, so it writes
/// no response, sets `ERR` to 0xffff and raises vector 0).
pub fn unanswered(core: &Backend, req: &[u8]) -> bool {
    let opcode = u32::from_le_bytes([req[8], req[9], req[10], req[11]]);
    core.cfg.profile == crate::Profile::Qemu72 && opcode == op::RESIZE_CQ
}

/// Decodes a `C` from `req`, runs `f`, and returns the response bytes (zeroed on failure) and
/// the errno.
fn run<C: CmdRequest>(req: &[u8], f: impl FnOnce(&C) -> CmdResult<C::Response>) -> (Vec<u8>, u8) {
    let size = core::mem::size_of::<C::Response>();
    let result = C::read_from_prefix(req).map_err(|_| Errno::EINVAL).and_then(|(r, _)| f(&r));
    match result {
        Ok(resp) => (resp.as_bytes().to_vec(), 0),
        Err(e) => (vec![0u8; size], e.0),
    }
}
