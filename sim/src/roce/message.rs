//! A message as the requester sends it: its PSN range and the packets it is cut into by the
//! path MTU (IBTA 9.2, 9.7.2: first/middle/last/only; RETH on a WRITE's first or only packet and
//! on a READ request; ImmDt on the last or only packet; AckReq on the last or only packet and
//! every [`ACK_EVERY`] packets). An atomic is one packet with its AtomicETH (IBTA 9.4.5).

use crate::mem::Atomic64;
use roce_wire::{opcode as op, psn, AtomicEth, Bth, Headers, Reth};
use std::ops::Range;

/// Every this many packets of a long message carry AckReq (besides its last), so the requester's
/// window moves before the message ends.
pub const ACK_EVERY: u32 = 32;

/// The P_Key the port sends: the default full-member P_Key, the one entry of its table.
pub const PKEY: u16 = 0xffff;

/// What a message does (IBTA 9.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// SEND, with immediate data when `imm` is set.
    Send { imm: Option<u32> },
    /// RDMA WRITE to `va` under `rkey`, with immediate data when `imm` is set.
    Write { va: u64, rkey: u32, imm: Option<u32> },
    /// RDMA READ of `len` bytes at `va` under `rkey`.
    Read { va: u64, rkey: u32, len: u32 },
    /// COMPARE SWAP or FETCH ADD on the 8 bytes at `va` under `rkey`; its ATOMIC Acknowledge
    /// brings the original value.
    Atomic { va: u64, rkey: u32, op: Atomic64 },
}

/// One outstanding message of a requester.
#[derive(Debug)]
pub struct Message {
    /// The WQE's sequence number on its QP (`Qp::complete_send`).
    pub seq: u64,
    /// The PSN of its first packet (of a READ: of its first response).
    pub psn: u32,
    /// Packets it takes (of a READ: responses; the request itself takes their PSNs).
    pub npkts: u32,
    pub kind: Kind,
    /// The gathered data of a SEND or WRITE (kept for retransmission); empty for a READ.
    pub payload: Vec<u8>,
    /// The solicited-event flag (sent on the last packet).
    pub solicited: bool,
    /// READ: the PSN of the next response expected.
    pub read_next: u32,
}

/// Packets a message of `len` bytes takes at `mtu` (a zero-length message takes one).
pub fn packets(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1) as u32
}

impl Message {
    /// A message starting at PSN `psn`.
    pub fn new(seq: u64, psn: u32, kind: Kind, payload: Vec<u8>, solicited: bool, mtu: u32) -> Self {
        let len = match kind {
            Kind::Read { len, .. } => u64::from(len),
            _ => payload.len() as u64,
        };
        let npkts = packets(len, mtu);
        Self { seq, psn, npkts, kind, payload, solicited, read_next: psn }
    }

    /// The PSN of its last packet.
    pub fn last_psn(&self) -> u32 {
        psn::add(self.psn, self.npkts - 1)
    }

    /// Whether `p` is one of its PSNs.
    pub fn holds(&self, p: u32) -> bool {
        let d = psn::diff(p, self.psn);
        d >= 0 && (d as u32) < self.npkts
    }

    /// Whether it is a READ (or an atomic) still waiting for responses.
    pub fn is_pending_read(&self) -> bool {
        self.is_read() && psn::diff(self.read_next, self.last_psn()) <= 0
    }

    /// Whether it is a READ or an atomic: it completes through its response data, and counts
    /// against `max_rd_atomic`.
    pub fn is_read(&self) -> bool {
        matches!(self.kind, Kind::Read { .. } | Kind::Atomic { .. })
    }

    /// The request packet of an atomic (sent again whole on a retry: the responder answers a
    /// duplicate from the result it saved).
    pub fn atomic_request(&self, dest_qp: u32) -> Option<Headers> {
        let Kind::Atomic { va, rkey, op } = self.kind else {
            return None;
        };
        let (opcode, swap_add, compare) = match op {
            Atomic64::CmpSwap { compare, swap } => (op::RC_COMPARE_SWAP, swap, compare),
            Atomic64::FetchAdd(add) => (op::RC_FETCH_ADD, add, 0),
        };
        let mut bth = self.bth(dest_qp, self.psn, true);
        bth.opcode = opcode;
        let atomic_eth = Some(AtomicEth { va, rkey, swap_add, compare });
        Some(Headers { bth, atomic_eth, ..Default::default() })
    }

    /// The headers of packet `k` (`0 .. npkts`) of a SEND or WRITE, and its payload's range.
    pub fn packet(&self, k: u32, dest_qp: u32, mtu: u32) -> (Headers, Range<usize>) {
        let (first, last) = (k == 0, k + 1 == self.npkts);
        let start = (k as usize) * mtu as usize;
        let end = (start + mtu as usize).min(self.payload.len());
        let mut hdr = Headers { bth: self.bth(dest_qp, psn::add(self.psn, k), last), ..Default::default() };
        let (imm, opcode) = match self.kind {
            Kind::Send { imm } => (imm, send_opcode(first, last, imm.is_some())),
            Kind::Write { va, rkey, imm } => {
                if first {
                    hdr.reth = Some(Reth { va, rkey, dma_len: self.payload.len() as u32 });
                }
                (imm, write_opcode(first, last, imm.is_some()))
            }
            Kind::Read { .. } => (None, op::RC_RDMA_READ_REQUEST),
            // Sent whole by `atomic_request`, never cut into packets here.
            Kind::Atomic { .. } => (None, op::RC_FETCH_ADD),
        };
        hdr.bth.opcode = opcode;
        hdr.bth.ack_req = last || k % ACK_EVERY == ACK_EVERY - 1;
        hdr.imm = if last { imm } else { None };
        (hdr, start.min(end)..end)
    }

    /// The READ request asking for the responses from PSN `from` on (the whole READ when `from`
    /// is its first PSN; IBTA 9.7.5.1.x: a re-sent READ request names the rest of the data).
    pub fn read_request(&self, from: u32, dest_qp: u32, mtu: u32) -> Option<Headers> {
        let Kind::Read { va, rkey, len } = self.kind else {
            return None;
        };
        let skip = psn::diff(from, self.psn).clamp(0, self.npkts as i32 - 1) as u32;
        let done = u64::from(skip) * u64::from(mtu);
        let reth = Reth { va: va.wrapping_add(done), rkey, dma_len: (u64::from(len).saturating_sub(done)) as u32 };
        let mut bth = self.bth(dest_qp, psn::add(self.psn, skip), true);
        bth.opcode = op::RC_RDMA_READ_REQUEST;
        Some(Headers { bth, reth: Some(reth), ..Default::default() })
    }

    fn bth(&self, dest_qp: u32, p: u32, last: bool) -> Bth {
        Bth { solicited: last && self.solicited, pkey: PKEY, dest_qp, ack_req: last, psn: p, ..Default::default() }
    }
}

fn send_opcode(first: bool, last: bool, imm: bool) -> u8 {
    match (first, last, imm) {
        (true, true, false) => op::RC_SEND_ONLY,
        (true, true, true) => op::RC_SEND_ONLY_WITH_IMMEDIATE,
        (true, false, _) => op::RC_SEND_FIRST,
        (false, false, _) => op::RC_SEND_MIDDLE,
        (false, true, false) => op::RC_SEND_LAST,
        (false, true, true) => op::RC_SEND_LAST_WITH_IMMEDIATE,
    }
}

fn write_opcode(first: bool, last: bool, imm: bool) -> u8 {
    match (first, last, imm) {
        (true, true, false) => op::RC_RDMA_WRITE_ONLY,
        (true, true, true) => op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (true, false, _) => op::RC_RDMA_WRITE_FIRST,
        (false, false, _) => op::RC_RDMA_WRITE_MIDDLE,
        (false, true, false) => op::RC_RDMA_WRITE_LAST,
        (false, true, true) => op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    }
}
