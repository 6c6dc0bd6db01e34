//! The loopback port: its attributes (QUERY_PORT, QUERY_PKEY), its GID table (CREATE_BIND,
//! DESTROY_BIND), and the wire — a device thread named `pvrdma-port` that delivers each packet
//! `link_latency` after it was sent, in send order.
//!
//! With a link latency of 0 a packet is due when it is sent, and the thread that rang the
//! doorbell carries it to the receiver itself once the device's locks are released (as a NIC's
//! own engine would, with no extra hand-off): it claims the port ([`PortQueue::claim_due`]) when
//! nobody else is delivering, so deliveries stay one at a time and in send order, and gives the
//! port back after at most [`INLINE_JOBS`] jobs so a storm of other senders' packets goes to the
//! port thread rather than to one unlucky caller. The port thread is then not woken per packet:
//! it takes only what is handed off to it ([`PortQueue::hand_off`]) — what is left due when the
//! port is given back or when a command's effects sent a packet — so a consumer busy-polling on
//! every CPU never waits for it to be scheduled.
//!
//! A UD datagram (`Packet::ud`) goes to the QP its WQE named if the destination GID is bound
//! here, and is dropped and counted otherwise or when that QP refuses it (`qp/ud.rs`); it never
//! waits for a receive WQE, and its sender completes `SUCCESS` once it left the wire.
//!
//! Delivery (RC): the destination QP (by `dest_qp_num`) must be in RTR or RTS and point back at the
//! sender, expect the packet's PSN, and the destination GID must be bound on this port (the
//! loopback wire reaches only itself); otherwise nobody answers. The sender's retry attributes
//! then act as on the RoCE port (`port/stall.rs`; issue 21 §3: every QP attribute that changes
//! behaviour on one port changes it on the other): an unanswered packet is tried again after
//! the sender's `timeout`, up to `retry_cnt` times, then completes `RETRY_EXC_ERR` (`timeout` 0:
//! it waits until its sender is flushed); a packet that finds no receive WQE (RNR) is tried again
//! after the responder's `min_rnr_timer` and on the responder's next RECV doorbell, up to
//! `rnr_retry` times (7: for ever), then completes `RNR_RETRY_EXC_ERR`. Either failure moves the
//! sender to ERR, flushing its other WQEs. A packet held back keeps its sender's later packets
//! behind it, keeping per-QP order. The timers run on the port thread, which sleeps until the
//! earliest. An RDMA WRITE or READ is checked by R_Key at the destination ([`crate::mr`]); a
//! READ's data is scattered at the sender before its completion; a WRITE with immediate waits
//! for a receive WQE as a SEND does. The thread stops when the [`crate::SimDevice`] is dropped;
//! its waits are condvar waits with a bound.
//!
//! # How much the wire holds
//! Every packet is a copy of its message, so what the wire holds is bounded, as RC flow control
//! bounds it on a real link (a send WQE stays on the sender's SQ until it is delivered):
//! - per QP, by the sender (`qp.rs`): at most its SQ depth of sends outstanding (consumed, not yet
//!   completed) and at most [`crate::SimConfig::qp_bytes_in_flight`] payload bytes; past either,
//!   the device stops consuming that SQ until one of its sends completes;
//! - per device, here: at most [`crate::SimConfig::device_packets_in_flight`] packets and
//!   [`crate::SimConfig::device_bytes_in_flight`] payload bytes on the wire (in flight, held
//!   back for a receive WQE or an answer, or being delivered), one packet always allowed on an
//!   empty wire. A QP refused by this budget stops draining its SQ and is resumed when a packet
//!   leaves the wire.

mod deliver;
mod stall;
mod wire;

use crate::device::Core;
use crate::dsr::limits;
use crate::errno::{CmdResult, Errno};
use pvrdma_abi::cmd::{CreateBind, DestroyBind, NoopResp, QueryPkey, QueryPkeyResp, QueryPort, QueryPortResp};
use pvrdma_abi::verbs::{mtu, port_state, Gid, PortAttr};
use pvrdma_abi::PVRDMA_PKEY;
use zerocopy::little_endian::{U16, U32};

pub(crate) use deliver::{run, run_job};
pub use wire::PortQueue;
pub(crate) use wire::{Job, INLINE_JOBS};

/// Physical port state "LinkUp".
const PHYS_STATE_LINK_UP: u8 = 5;

/// What a request packet asks of the responder (IBTA 9.4: the RC operations the model carries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// SEND, with immediate data as on the wire for SEND with immediate (IBTA 9.4.1).
    Send {
        /// Immediate data (big-endian bytes).
        imm: Option<[u8; 4]>,
    },
    /// RDMA WRITE of the payload at `remote_addr` of the MR `rkey` names (IBTA 9.4.3); with
    /// immediate data it also consumes a receive WQE at the responder.
    Write {
        /// Virtual address in the responder's MR (the RETH's VA).
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// Immediate data (big-endian bytes) of RDMA WRITE with immediate.
        imm: Option<[u8; 4]>,
    },
    /// RDMA READ of `len` bytes at `remote_addr` of the MR `rkey` names (IBTA 9.4.4); the
    /// response data is scattered into the requester WQE's SGEs.
    Read {
        /// Virtual address in the responder's MR.
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// Bytes to read (the RETH's DMA length).
        len: u32,
    },
    /// COMPARE SWAP or FETCH ADD on the 8 bytes at `remote_addr` of the MR `rkey` names (IBTA
    /// 9.4.5): the responder returns the original value, written into the requester WQE's SGE.
    Atomic {
        /// Virtual address in the responder's MR (8-byte aligned).
        remote_addr: u64,
        /// The responder MR's R_Key.
        rkey: u32,
        /// The operation and its operands.
        op: crate::mem::Atomic64,
    },
}

/// One RC request message on the wire.
#[derive(Debug)]
pub struct Packet {
    /// Sender QPN.
    pub src: u32,
    /// Sender's unique id (a QPN may be reused).
    pub src_uid: u64,
    /// The send's sequence number on its QP.
    pub seq: u64,
    /// Its PSN on the loopback port (one per message, from the sender's `sq_psn`; the RoCE
    /// port numbers its packets itself).
    pub psn: u32,
    /// Destination QPN.
    pub dest: u32,
    /// Destination GID from the sender's address vector.
    pub dgid: Gid,
    /// The sender's source GID index (`sgid_index`): a responder takes an RC request only from
    /// the GID its own address vector names, as a wire's responder takes it only from its
    /// peer's address.
    pub sgid_index: u8,
    /// The operation.
    pub op: Op,
    /// The solicited-event flag.
    pub solicited: bool,
    /// The gathered message of a SEND or WRITE; empty for a READ.
    pub payload: Vec<u8>,
    /// A UD datagram's DETH Q_Key and GRH (`None` for RC).
    pub ud: Option<Box<crate::qp::ud::Datagram>>,
}

/// QUERY_PORT: port 1 is ACTIVE, LinkUp, MTU 1024 (max and active, as QEMU reports), width and
/// speed 1, one virtual lane (as rxe, QEMU's usual backend, reports). Errors: `EINVAL` for a port
/// other than 1.
pub fn query_port(_core: &Core, req: &QueryPort) -> CmdResult<QueryPortResp> {
    if req.port_num != 1 {
        return Err(Errno::EINVAL);
    }
    let attrs = PortAttr {
        state: U32::new(port_state::ACTIVE),
        max_mtu: U32::new(mtu::MTU_1024),
        active_mtu: U32::new(mtu::MTU_1024),
        gid_tbl_len: U32::new(limits::GID_TBL_LEN),
        max_msg_sz: U32::new(limits::MAX_MSG_SZ),
        pkey_tbl_len: U16::new(limits::PKEY_TBL_LEN),
        active_width: 1,
        active_speed: 1,
        max_vl_num: 1,
        phys_state: PHYS_STATE_LINK_UP,
        ..Default::default()
    };
    Ok(QueryPortResp { attrs, ..Default::default() })
}

/// QUERY_PKEY: 0xffff at index 0 of port 1, the one entry of the table. Errors: `EINVAL` for
/// another port or index (QEMU 7.2 refuses a port past 1 or an index past 1, and answers 0xffff
/// for the index 1 its one-entry table lacks; the model refuses it).
pub fn query_pkey(_core: &Core, req: &QueryPkey) -> CmdResult<QueryPkeyResp> {
    if req.port_num != 1 || u32::from(req.index) >= u32::from(limits::PKEY_TBL_LEN) {
        return Err(Errno::EINVAL);
    }
    Ok(QueryPkeyResp { pkey: U16::new(PVRDMA_PKEY), ..Default::default() })
}

/// CREATE_BIND: puts `new_gid` with its `gid_type` at `index` of the GID table (replacing what
/// was there).
/// Errors: `EINVAL` for an index at or past `GID_TBL_LEN`, an all-zero or multicast GID (no port
/// address), a `gid_type` that is not exactly one of the types `caps.gid_types` reports (Linux
/// sends one flag), an `mtu` that is no IB MTU in bytes (Linux sends 1024), or a `vlan` past 12
/// bits (0xfff: none, as Linux sends). QEMU 7.2 ignores `mtu` and `vlan`.
pub fn create_bind(core: &Core, req: &CreateBind) -> CmdResult<NoopResp> {
    let index = req.index.get() as usize;
    let one_type = req.gid_type.count_ones() == 1 && req.gid_type & limits::GID_TYPES != 0;
    let mtu_bytes = matches!(req.mtu.get(), 256 | 512 | 1024 | 2048 | 4096);
    let unicast = req.new_gid != [0u8; 16] && req.new_gid[0] != 0xff;
    if !unicast || !one_type || !mtu_bytes || req.vlan.get() > 0xfff {
        return Err(Errno::EINVAL);
    }
    let mut gids = core.gids.lock();
    let entry = GidEntry { gid: req.new_gid, gid_type: req.gid_type };
    *gids.get_mut(index).ok_or(Errno::EINVAL)? = Some(entry);
    Ok(NoopResp::default())
}

/// DESTROY_BIND: empties entry `index`. `dest_gid` names the GID the driver believes is there
/// (all-zero: unstated; no bound GID is all-zero). Errors: `EINVAL` for a bad index or a
/// `dest_gid` the entry does not hold (QEMU 7.2 ignores it), `ENOENT` if the entry is already
/// empty.
pub fn destroy_bind(core: &Core, req: &DestroyBind) -> CmdResult<NoopResp> {
    let mut gids = core.gids.lock();
    let slot = gids.get_mut(req.index.get() as usize).ok_or(Errno::EINVAL)?;
    let held = slot.ok_or(Errno::ENOENT)?;
    if req.dest_gid != [0u8; 16] && req.dest_gid != held.gid {
        return Err(Errno::EINVAL);
    }
    *slot = None;
    Ok(NoopResp::default())
}

/// One entry of the port's GID table, as CREATE_BIND set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its type: one `PVRDMA_GID_TYPE_FLAG_*` bit (RoCE v1 or v2).
    pub gid_type: u8,
}

impl Core {
    /// The GID table entry at `index`, if bound.
    pub(crate) fn gid_entry(&self, index: u8) -> Option<GidEntry> {
        self.gids.lock().get(index as usize).copied().flatten()
    }
}
