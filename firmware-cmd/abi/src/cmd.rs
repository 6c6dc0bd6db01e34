//! Command and response structs of the DSR's command channel (`pvrdma_dev_api.h`).
//!
//! The driver writes one request into the command slot and writes `REG_REQUEST`; the device runs it
//! and writes the response into the response slot, with `ack` set to the opcode with bit 31 set and
//! `response` copied from the request (the driver's cookie), then raises vector 0.
//! One struct per command (no unions); [`CmdRequest`] pairs each request with its response.

use crate::assert_layout;
use crate::verbs::{Gid, PortAttr, QpAttr, SrqAttr};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Command opcodes (`PVRDMA_CMD_*`); QEMU 7.2 also knows the SRQ commands 17..=20.
pub mod opcode {
    pub const QUERY_PORT: u32 = 0;
    pub const QUERY_PKEY: u32 = 1;
    pub const CREATE_PD: u32 = 2;
    pub const DESTROY_PD: u32 = 3;
    pub const CREATE_MR: u32 = 4;
    pub const DESTROY_MR: u32 = 5;
    pub const CREATE_CQ: u32 = 6;
    pub const RESIZE_CQ: u32 = 7;
    pub const DESTROY_CQ: u32 = 8;
    pub const CREATE_QP: u32 = 9;
    pub const MODIFY_QP: u32 = 10;
    pub const QUERY_QP: u32 = 11;
    pub const DESTROY_QP: u32 = 12;
    pub const CREATE_UC: u32 = 13;
    pub const DESTROY_UC: u32 = 14;
    pub const CREATE_BIND: u32 = 15;
    pub const DESTROY_BIND: u32 = 16;
    pub const CREATE_SRQ: u32 = 17;
    pub const MODIFY_SRQ: u32 = 18;
    pub const QUERY_SRQ: u32 = 19;
    pub const DESTROY_SRQ: u32 = 20;
    /// One past the last opcode.
    pub const MAX: u32 = 21;

    /// The name of an opcode as `pvrdma_dev_api.h` spells it (without `PVRDMA_CMD_`).
    pub const fn name(op: u32) -> &'static str {
        const NAMES: [&str; MAX as usize] = [
            "QUERY_PORT",
            "QUERY_PKEY",
            "CREATE_PD",
            "DESTROY_PD",
            "CREATE_MR",
            "DESTROY_MR",
            "CREATE_CQ",
            "RESIZE_CQ",
            "DESTROY_CQ",
            "CREATE_QP",
            "MODIFY_QP",
            "QUERY_QP",
            "DESTROY_QP",
            "CREATE_UC",
            "DESTROY_UC",
            "CREATE_BIND",
            "DESTROY_BIND",
            "CREATE_SRQ",
            "MODIFY_SRQ",
            "QUERY_SRQ",
            "DESTROY_SRQ",
        ];
        if op < MAX {
            NAMES[op as usize]
        } else {
            "UNKNOWN"
        }
    }
}

/// Bit 31 of `ack`: set on every response (`PVRDMA_CMD_FIRST_RESP`).
pub const RESP_FLAG: u32 = 1 << 31;

/// The `ack` a response to `opcode` must carry.
pub const fn ack_for(opcode: u32) -> u32 {
    opcode | RESP_FLAG
}

/// Bytes of the command and of the response slot (one page each, as the Linux driver allocates).
pub const SLOT_SIZE: usize = 4096;

/// A request type: its opcode and the response it expects.
pub trait CmdRequest: IntoBytes + FromBytes + Immutable + KnownLayout + Copy {
    /// `PVRDMA_CMD_*`.
    const OPCODE: u32;
    /// The response struct; its header's `ack` must equal [`ack_for`]`(OPCODE)`.
    type Response: IntoBytes + FromBytes + Immutable + KnownLayout + Copy;
    /// The request's header.
    fn hdr_mut(&mut self) -> &mut CmdHdr;
}

/// Request header (`struct pvrdma_cmd_hdr`). Driver-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct CmdHdr {
    /// Cookie, echoed in the response.
    pub response: U64,
    /// Opcode.
    pub cmd: U32,
    pub reserved: U32,
}
assert_layout!(CmdHdr, 16, response = 0, cmd = 8, reserved = 12);

/// Response header (`struct pvrdma_cmd_resp_hdr`). Device-written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct RespHdr {
    /// The request's cookie.
    pub response: U64,
    /// The request's opcode with [`RESP_FLAG`] set.
    pub ack: U32,
    /// 0 on success, else a positive errno (QEMU) truncated to 8 bits.
    pub err: u8,
    pub reserved: [u8; 3],
}
assert_layout!(RespHdr, 16, response = 0, ack = 8, err = 12, reserved = 13);

/// A response with no payload beyond the header (the `*_RESP_NOOP` acks).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
pub struct NoopResp {
    pub hdr: RespHdr,
}
assert_layout!(NoopResp, 16, hdr = 0);

macro_rules! request {
    ($t:ty, $op:expr, $resp:ty) => {
        impl CmdRequest for $t {
            const OPCODE: u32 = $op;
            type Response = $resp;
            fn hdr_mut(&mut self) -> &mut CmdHdr {
                &mut self.hdr
            }
        }
    };
}

macro_rules! abi_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
    };
}

abi_struct!(/// QUERY_PORT.
    QueryPort { hdr: CmdHdr, port_num: u8, reserved: [u8; 7] });
assert_layout!(QueryPort, 24, hdr = 0, port_num = 16, reserved = 17);
abi_struct!(/// QUERY_PORT response.
    QueryPortResp { hdr: RespHdr, attrs: PortAttr });
assert_layout!(QueryPortResp, 64, hdr = 0, attrs = 16);
request!(QueryPort, opcode::QUERY_PORT, QueryPortResp);

abi_struct!(/// QUERY_PKEY.
    QueryPkey { hdr: CmdHdr, port_num: u8, index: u8, reserved: [u8; 6] });
assert_layout!(QueryPkey, 24, hdr = 0, port_num = 16, index = 17, reserved = 18);
abi_struct!(/// QUERY_PKEY response.
    QueryPkeyResp { hdr: RespHdr, pkey: U16, reserved: [u8; 6] });
assert_layout!(QueryPkeyResp, 24, hdr = 0, pkey = 16, reserved = 18);
request!(QueryPkey, opcode::QUERY_PKEY, QueryPkeyResp);

abi_struct!(/// CREATE_UC: a user context for the UAR page `pfn` (BAR2 address >> 12).
    CreateUc { hdr: CmdHdr, pfn: U32, reserved: [u8; 4] });
assert_layout!(CreateUc, 24, hdr = 0, pfn = 16, reserved = 20);
abi_struct!(/// CREATE_UC response.
    CreateUcResp { hdr: RespHdr, ctx_handle: U32, reserved: [u8; 4] });
assert_layout!(CreateUcResp, 24, hdr = 0, ctx_handle = 16, reserved = 20);
request!(CreateUc, opcode::CREATE_UC, CreateUcResp);

abi_struct!(/// DESTROY_UC.
    DestroyUc { hdr: CmdHdr, ctx_handle: U32, reserved: [u8; 4] });
assert_layout!(DestroyUc, 24, hdr = 0, ctx_handle = 16, reserved = 20);
request!(DestroyUc, opcode::DESTROY_UC, NoopResp);

abi_struct!(/// CREATE_PD; `ctx_handle` 0 is the kernel.
    CreatePd { hdr: CmdHdr, ctx_handle: U32, reserved: [u8; 4] });
assert_layout!(CreatePd, 24, hdr = 0, ctx_handle = 16, reserved = 20);
abi_struct!(/// CREATE_PD response.
    CreatePdResp { hdr: RespHdr, pd_handle: U32, reserved: [u8; 4] });
assert_layout!(CreatePdResp, 24, hdr = 0, pd_handle = 16, reserved = 20);
request!(CreatePd, opcode::CREATE_PD, CreatePdResp);

abi_struct!(/// DESTROY_PD.
    DestroyPd { hdr: CmdHdr, pd_handle: U32, reserved: [u8; 4] });
assert_layout!(DestroyPd, 24, hdr = 0, pd_handle = 16, reserved = 20);
request!(DestroyPd, opcode::DESTROY_PD, NoopResp);

abi_struct!(/// CREATE_MR: `length` bytes at address `start`, over `nchunks` pages listed by `pdir_dma`.
    CreateMr { hdr: CmdHdr, start: U64, length: U64, pdir_dma: U64, pd_handle: U32,
        access_flags: U32, flags: U32, nchunks: U32 });
assert_layout!(
    CreateMr,
    56,
    hdr = 0,
    start = 16,
    length = 24,
    pdir_dma = 32,
    pd_handle = 40,
    access_flags = 44,
    flags = 48,
    nchunks = 52
);
abi_struct!(/// CREATE_MR response.
    CreateMrResp { hdr: RespHdr, mr_handle: U32, lkey: U32, rkey: U32, reserved: [u8; 4] });
assert_layout!(CreateMrResp, 32, hdr = 0, mr_handle = 16, lkey = 20, rkey = 24, reserved = 28);
request!(CreateMr, opcode::CREATE_MR, CreateMrResp);

abi_struct!(/// DESTROY_MR.
    DestroyMr { hdr: CmdHdr, mr_handle: U32, reserved: [u8; 4] });
assert_layout!(DestroyMr, 24, hdr = 0, mr_handle = 16, reserved = 20);
request!(DestroyMr, opcode::DESTROY_MR, NoopResp);

abi_struct!(/// CREATE_CQ: `cqe` entries (a power of two) in `nchunks` pages; page 0 is the ring state.
    CreateCq { hdr: CmdHdr, pdir_dma: U64, ctx_handle: U32, cqe: U32, nchunks: U32,
        reserved: [u8; 4] });
assert_layout!(CreateCq, 40, hdr = 0, pdir_dma = 16, ctx_handle = 24, cqe = 28, nchunks = 32, reserved = 36);
abi_struct!(/// CREATE_CQ response.
    CreateCqResp { hdr: RespHdr, cq_handle: U32, cqe: U32 });
assert_layout!(CreateCqResp, 24, hdr = 0, cq_handle = 16, cqe = 20);
request!(CreateCq, opcode::CREATE_CQ, CreateCqResp);

abi_struct!(/// RESIZE_CQ: only the handle and the new size, no page directory. Linux's vmw_pvrdma never
    /// sends it and QEMU 7.2 answers nothing (no handler in its table). Ours (the model's
    /// `cq.rs`, the driver's `cq/resize.rs`): the device re-reads the page directory the CQ was
    /// created with, which the driver relisted (page 0, the ring state, stays; the new entry pages
    /// follow), moves the queued CQEs in order to slots `0 ..` of the new ring under the CQ's lock
    /// and rewrites the ring state (`cons_head` 0, `prod_tail` the count). `cqe`: a power of two,
    /// at most `max_cqe`, at least the CQEs queued, else EINVAL.
    ResizeCq { hdr: CmdHdr, cq_handle: U32, cqe: U32 });
assert_layout!(ResizeCq, 24, hdr = 0, cq_handle = 16, cqe = 20);
abi_struct!(/// RESIZE_CQ response.
    ResizeCqResp { hdr: RespHdr, cqe: U32, reserved: [u8; 4] });
assert_layout!(ResizeCqResp, 24, hdr = 0, cqe = 16, reserved = 20);
request!(ResizeCq, opcode::RESIZE_CQ, ResizeCqResp);

abi_struct!(/// DESTROY_CQ.
    DestroyCq { hdr: CmdHdr, cq_handle: U32, reserved: [u8; 4] });
assert_layout!(DestroyCq, 24, hdr = 0, cq_handle = 16, reserved = 20);
request!(DestroyCq, opcode::DESTROY_CQ, NoopResp);

abi_struct!(/// CREATE_QP: rings in `total_chunks` pages: page 0 ring state, then `send_chunks` SQ
    /// pages, then the RQ pages.
    CreateQp { hdr: CmdHdr, pdir_dma: U64, pd_handle: U32, send_cq_handle: U32,
        recv_cq_handle: U32, srq_handle: U32, max_send_wr: U32, max_recv_wr: U32,
        max_send_sge: U32, max_recv_sge: U32, max_inline_data: U32, lkey: U32,
        access_flags: U32, total_chunks: U16, send_chunks: U16, max_atomic_arg: U16,
        sq_sig_all: u8, qp_type: u8, is_srq: u8, reserved: [u8; 3] });
assert_layout!(
    CreateQp,
    80,
    hdr = 0,
    pdir_dma = 16,
    pd_handle = 24,
    send_cq_handle = 28,
    recv_cq_handle = 32,
    srq_handle = 36,
    max_send_wr = 40,
    max_recv_wr = 44,
    max_send_sge = 48,
    max_recv_sge = 52,
    max_inline_data = 56,
    lkey = 60,
    access_flags = 64,
    total_chunks = 68,
    send_chunks = 70,
    max_atomic_arg = 72,
    sq_sig_all = 74,
    qp_type = 75,
    is_srq = 76,
    reserved = 77
);
abi_struct!(/// CREATE_QP response. On QEMU 7.2 the QP handle is the QPN.
    CreateQpResp { hdr: RespHdr, qpn: U32, max_send_wr: U32, max_recv_wr: U32,
        max_send_sge: U32, max_recv_sge: U32, max_inline_data: U32 });
assert_layout!(
    CreateQpResp,
    40,
    hdr = 0,
    qpn = 16,
    max_send_wr = 20,
    max_recv_wr = 24,
    max_send_sge = 28,
    max_recv_sge = 32,
    max_inline_data = 36
);
request!(CreateQp, opcode::CREATE_QP, CreateQpResp);

abi_struct!(/// MODIFY_QP: apply the `attrs` fields selected by `attr_mask`.
    ModifyQp { hdr: CmdHdr, qp_handle: U32, attr_mask: U32, attrs: QpAttr });
assert_layout!(ModifyQp, 184, hdr = 0, qp_handle = 16, attr_mask = 20, attrs = 24);
request!(ModifyQp, opcode::MODIFY_QP, NoopResp);

abi_struct!(/// QUERY_QP.
    QueryQp { hdr: CmdHdr, qp_handle: U32, attr_mask: U32 });
assert_layout!(QueryQp, 24, hdr = 0, qp_handle = 16, attr_mask = 20);
abi_struct!(/// QUERY_QP response.
    QueryQpResp { hdr: RespHdr, attrs: QpAttr });
assert_layout!(QueryQpResp, 176, hdr = 0, attrs = 16);
request!(QueryQp, opcode::QUERY_QP, QueryQpResp);

abi_struct!(/// DESTROY_QP.
    DestroyQp { hdr: CmdHdr, qp_handle: U32, reserved: [u8; 4] });
assert_layout!(DestroyQp, 24, hdr = 0, qp_handle = 16, reserved = 20);
abi_struct!(/// DESTROY_QP response.
    DestroyQpResp { hdr: RespHdr, events_reported: U32, reserved: [u8; 4] });
assert_layout!(DestroyQpResp, 24, hdr = 0, events_reported = 16, reserved = 20);
request!(DestroyQp, opcode::DESTROY_QP, DestroyQpResp);

abi_struct!(/// CREATE_BIND: put `new_gid` at `index` of the port's GID table.
    CreateBind { hdr: CmdHdr, mtu: U32, vlan: U32, index: U32, new_gid: Gid, gid_type: u8,
        reserved: [u8; 3] });
assert_layout!(CreateBind, 48, hdr = 0, mtu = 16, vlan = 20, index = 24, new_gid = 28, gid_type = 44, reserved = 45);
request!(CreateBind, opcode::CREATE_BIND, NoopResp);

abi_struct!(/// DESTROY_BIND.
    DestroyBind { hdr: CmdHdr, index: U32, dest_gid: Gid, reserved: [u8; 4] });
assert_layout!(DestroyBind, 40, hdr = 0, index = 16, dest_gid = 20, reserved = 36);
request!(DestroyBind, opcode::DESTROY_BIND, NoopResp);

abi_struct!(/// CREATE_SRQ: a receive ring of `attrs.max_wr` WQEs in `nchunks` pages; page 0 is the
    /// ring state (the SRQ uses its `rx` half), the WQEs start at page 1.
    CreateSrq { hdr: CmdHdr, pdir_dma: U64, pd_handle: U32, nchunks: U32, attrs: SrqAttr,
        srq_type: u8, reserved: [u8; 7] });
assert_layout!(
    CreateSrq,
    56,
    hdr = 0,
    pdir_dma = 16,
    pd_handle = 24,
    nchunks = 28,
    attrs = 32,
    srq_type = 48,
    reserved = 49
);
abi_struct!(/// CREATE_SRQ response: the SRQ's handle.
    CreateSrqResp { hdr: RespHdr, srqn: U32, reserved: [u8; 4] });
assert_layout!(CreateSrqResp, 24, hdr = 0, srqn = 16, reserved = 20);
request!(CreateSrq, opcode::CREATE_SRQ, CreateSrqResp);

abi_struct!(/// MODIFY_SRQ: apply the `attrs` fields `attr_mask` ([`crate::verbs::srq_attr_mask`])
    /// selects.
    ModifySrq { hdr: CmdHdr, srq_handle: U32, attr_mask: U32, attrs: SrqAttr });
assert_layout!(ModifySrq, 40, hdr = 0, srq_handle = 16, attr_mask = 20, attrs = 24);
request!(ModifySrq, opcode::MODIFY_SRQ, NoopResp);

abi_struct!(/// QUERY_SRQ.
    QuerySrq { hdr: CmdHdr, srq_handle: U32, reserved: [u8; 4] });
assert_layout!(QuerySrq, 24, hdr = 0, srq_handle = 16, reserved = 20);
abi_struct!(/// QUERY_SRQ response.
    QuerySrqResp { hdr: RespHdr, attrs: SrqAttr });
assert_layout!(QuerySrqResp, 32, hdr = 0, attrs = 16);
request!(QuerySrq, opcode::QUERY_SRQ, QuerySrqResp);

abi_struct!(/// DESTROY_SRQ.
    DestroySrq { hdr: CmdHdr, srq_handle: U32, reserved: [u8; 4] });
assert_layout!(DestroySrq, 24, hdr = 0, srq_handle = 16, reserved = 20);
request!(DestroySrq, opcode::DESTROY_SRQ, NoopResp);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_set_bit_31() {
        assert_eq!(ack_for(opcode::CREATE_QP), 0x8000_0009);
        assert_eq!(<CreateCq as CmdRequest>::OPCODE, 6);
        assert_eq!(opcode::name(opcode::MODIFY_QP), "MODIFY_QP");
        assert_eq!(opcode::name(99), "UNKNOWN");
    }
}
