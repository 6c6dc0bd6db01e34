//! The responder of one RC QP (IBTA 9.7.5.1, C9-*): the expected PSN (`rq_psn` at RTR), the MSN
//! (messages completed), and the message in progress. In-order packets are executed; a
//! duplicate (a PSN before the expected one) is acknowledged again, and a duplicate READ request
//! executed again from its PSN if it lies within a READ executed; a PSN ahead of the expected one gets one PSN sequence error NAK
//! until the expected PSN arrives. A SEND with no receive WQE posted gets an RNR NAK carrying
//! `min_rnr_timer`. A READ's responses go out a burst at a time between received packets
//! ([`Responder::pump`]). An atomic is executed once and a duplicate answered from its saved
//! result (`responder/atomic.rs`). A multi-packet SEND is reassembled into at most its receive WQE's length
//! plus one byte (enough for the scatter to report the overrun), never more, and never more
//! than `max_msg_sz` (a longer one is an invalid request); the SENDs in progress of all QPs
//! together hold at most the device's `device_bytes_in_flight` (a first packet past it is RNR
//! NAKed).
//!
//! Responder state lives on the receive thread alone (no lock): it is the only one that
//! receives.

use super::path::Path;
use super::{message::PKEY, RocePort};
use crate::backend::Backend;
use crate::ctx::Effects;
use crate::limits;
use crate::packet::{Op, Packet};
use crate::qp::{Qp, Rx};
use pvrdma_abi::verbs::QpAttr;
use pvrdma_abi::wqe::wc_status;
use roce_wire::{opcode as op, psn, Aeth, Bth, Headers, NakCode};
use std::cell::Cell;
use std::collections::VecDeque;

mod atomic;
mod rdma;

/// Credits advertised in an ACK's AETH: 31, "invalid" (IBTA Table 44: end-to-end flow control
/// is not used), as Linux rxe sends.
pub(super) const NO_CREDITS: u8 = 0x1f;

/// Everything a packet is processed with: the port, the device, the destination QP with the
/// attributes and path it had when the packet arrived.
pub struct Ctx<'a> {
    pub port: &'a RocePort,
    pub core: &'a Backend,
    pub qp: &'a Qp,
    pub attrs: &'a QpAttr,
    pub path: Path,
    pub conn: u64,
    /// Bytes all responders of the receive thread hold for SENDs in progress (see
    /// [`Responder::held`]), bounded by the device's `device_bytes_in_flight`.
    pub reserved: &'a Cell<u64>,
}

impl Ctx<'_> {
    /// Sends the responder's packet `opcode` at PSN `p` to the requester (its BTH: our P_Key,
    /// the path's destination QP), with `hdr`'s other headers and `payload`.
    pub(super) fn send_response(&self, opcode: u8, p: u32, hdr: Headers, payload: &[u8]) {
        let bth = Bth { opcode, pkey: PKEY, dest_qp: self.path.dest_qp, psn: p, ..Default::default() };
        self.port.send(self.core, &self.path, &Headers { bth, ..hdr }, payload);
    }
}

/// The message the responder is in the middle of.
#[derive(Debug, Default)]
enum InMsg {
    #[default]
    None,
    /// A SEND: the data so far, and the receive WQE's length it is bounded by.
    Send { buf: Vec<u8>, cap: u64 },
    /// A WRITE: its RETH's key and address, bytes written so far, and its DMA length.
    Write { rkey: u32, va: u64, done: u64, len: u64 },
}

/// One QP's responder state.
#[derive(Debug)]
pub struct Responder {
    /// The QP's uid and connection this state belongs to.
    pub uid: u64,
    pub conn: u64,
    epsn: u32,
    msn: u32,
    /// A PSN sequence error NAK was sent for the current expected PSN.
    nak_sent: bool,
    msg: InMsg,
    /// The READs executed last (`max_dest_rd_atomic`, at least `max_qp_rd_atom`), oldest first: a
    /// duplicate READ request is answered only within one of them.
    reads: VecDeque<rdma::ReadDone>,
    /// The READ whose responses are being sent, if any.
    reading: Option<rdma::ReadReply>,
    /// The atomics executed last, oldest first, with their results: a duplicate is answered
    /// from here, never executed again.
    atomics: VecDeque<atomic::AtomicDone>,
    /// What the SEND in progress counts against [`Ctx::reserved`]: its receive WQE's length (at
    /// most `max_msg_sz`), from its first packet until it ends.
    held: u64,
}

impl Responder {
    /// The state of a QP that reached RTR with attributes `a`.
    pub fn new(uid: u64, conn: u64, a: &QpAttr) -> Self {
        Self {
            uid,
            conn,
            epsn: a.rq_psn.get() & 0xff_ffff,
            msn: 0,
            nak_sent: false,
            msg: InMsg::None,
            reads: VecDeque::new(),
            reading: None,
            atomics: VecDeque::new(),
            held: 0,
        }
    }

    /// Processes one request packet (a SEND, WRITE or READ request).
    pub fn on_request(&mut self, cx: &Ctx<'_>, hdr: &Headers, payload: &[u8], fx: &mut Effects) {
        self.request(cx, hdr, payload, fx);
        if !matches!(self.msg, InMsg::Send { .. }) {
            self.release(cx.reserved);
        }
    }

    /// Gives back what the SEND in progress held of `reserved` (it ended, or the responder
    /// state is dropped).
    pub fn release(&mut self, reserved: &Cell<u64>) {
        let held = std::mem::take(&mut self.held);
        reserved.set(reserved.get().saturating_sub(held));
    }

    fn request(&mut self, cx: &Ctx<'_>, hdr: &Headers, payload: &[u8], fx: &mut Effects) {
        let p = hdr.bth.psn;
        let d = psn::diff(p, self.epsn);
        // Whatever this packet makes the responder send (an ACK or NAK past the READ being
        // answered) goes after the READ's last response; only a duplicate READ replaces it.
        if !(d < 0 && hdr.bth.opcode == op::RC_RDMA_READ_REQUEST) {
            self.read_responses(cx, u32::MAX, fx);
        }
        if d > 0 {
            cx.core.count(|c| &c.roce_rx_dropped_psn);
            if !self.nak_sent {
                self.nak_sent = true;
                self.reply(cx, self.epsn, Aeth::nak(self.msn, NakCode::PsnSequenceError));
            }
            return;
        }
        if d < 0 {
            cx.core.count(|c| &c.roce_rx_duplicates);
            if hdr.bth.opcode == op::RC_RDMA_READ_REQUEST {
                self.read(cx, hdr, false, fx);
            } else if is_atomic(hdr.bth.opcode) {
                self.atomic(cx, hdr, false, fx);
            } else if hdr.bth.ack_req {
                self.ack(cx, psn::add(self.epsn, 0xff_ffff));
            }
            return;
        }
        self.nak_sent = false;
        if !self.fits_mtu(cx, hdr.bth.opcode, payload.len()) {
            return self.invalid(cx, p, fx);
        }
        match hdr.bth.opcode {
            op::RC_SEND_FIRST => self.send_first(cx, hdr, payload, fx),
            op::RC_SEND_MIDDLE => self.send_middle(cx, hdr, payload, fx),
            op::RC_SEND_LAST | op::RC_SEND_LAST_WITH_IMMEDIATE | op::RC_SEND_ONLY | op::RC_SEND_ONLY_WITH_IMMEDIATE => {
                self.send_last(cx, hdr, payload, fx)
            }
            op::RC_RDMA_READ_REQUEST if matches!(self.msg, InMsg::None) => self.read(cx, hdr, true, fx),
            opcode if is_atomic(opcode) => self.atomic(cx, hdr, true, fx),
            opcode => self.on_write(cx, hdr, opcode, payload, fx),
        }
    }

    /// Sends the next [`rdma::READ_BURST`] responses of the READ being answered (the receive
    /// thread calls it between the packets it receives); whether responses remain.
    pub fn pump(&mut self, cx: &Ctx<'_>, fx: &mut Effects) -> bool {
        self.read_responses(cx, rdma::READ_BURST, fx);
        self.reading.is_some()
    }

    /// Whether a READ's responses remain to be sent.
    pub fn is_reading(&self) -> bool {
        self.reading.is_some()
    }

    /// Forgets the READ being answered (its QP left RTR/RTS).
    pub fn stop_reading(&mut self) {
        self.reading = None;
    }

    /// First and middle packets carry exactly one MTU, last and only packets at most one (IBTA
    /// C9-88..C9-90 as Linux rxe checks them).
    fn fits_mtu(&self, cx: &Ctx<'_>, opcode: u8, len: usize) -> bool {
        let mtu = cx.path.mtu as usize;
        match opcode {
            op::RC_SEND_FIRST | op::RC_SEND_MIDDLE | op::RC_RDMA_WRITE_FIRST | op::RC_RDMA_WRITE_MIDDLE => len == mtu,
            _ => len <= mtu,
        }
    }

    fn send_first(&mut self, cx: &Ctx<'_>, hdr: &Headers, payload: &[u8], fx: &mut Effects) {
        let p = hdr.bth.psn;
        if !matches!(self.msg, InMsg::None) {
            return self.invalid(cx, p, fx);
        }
        let Some(cap) = cx.qp.recv_capacity(cx.core, fx) else {
            return self.rnr(cx, p);
        };
        // What the WQE's SGEs claim is checked only by the scatter: never buffer past what a
        // message may carry.
        let cap = cap.min(u64::from(limits::MAX_MSG_SZ));
        // What all SENDs in progress may grow to stays within the device's wire budget (one is
        // always let through); past it the receive resources are "not ready".
        let (now, most) = (cx.reserved.get(), cx.core.cfg.device_bytes_in_flight);
        if now > 0 && now.saturating_add(cap) > most {
            return self.rnr(cx, p);
        }
        cx.reserved.set(now + cap);
        self.held = cap;
        let mut buf = Vec::new();
        append_bounded(&mut buf, payload, cap);
        self.msg = InMsg::Send { buf, cap };
        self.advance(1);
        if hdr.bth.ack_req {
            self.ack(cx, p);
        }
    }

    fn send_middle(&mut self, cx: &Ctx<'_>, hdr: &Headers, payload: &[u8], fx: &mut Effects) {
        let InMsg::Send { buf, cap } = &mut self.msg else {
            return self.invalid(cx, hdr.bth.psn, fx);
        };
        append_bounded(buf, payload, *cap);
        if too_long(buf) {
            return self.invalid(cx, hdr.bth.psn, fx);
        }
        self.advance(1);
        if hdr.bth.ack_req {
            self.ack(cx, hdr.bth.psn);
        }
    }

    /// The last or only packet of a SEND: the message goes into the next receive WQE.
    fn send_last(&mut self, cx: &Ctx<'_>, hdr: &Headers, payload: &[u8], fx: &mut Effects) {
        let only = matches!(hdr.bth.opcode, op::RC_SEND_ONLY | op::RC_SEND_ONLY_WITH_IMMEDIATE);
        let (mut buf, cap) = match (std::mem::take(&mut self.msg), only) {
            (InMsg::None, true) => (Vec::new(), u64::MAX),
            (InMsg::Send { buf, cap }, false) => (buf, cap),
            (other, _) => {
                self.msg = other;
                return self.invalid(cx, hdr.bth.psn, fx);
            }
        };
        let kept = buf.len();
        append_bounded(&mut buf, payload, cap);
        if too_long(&buf) {
            return self.invalid(cx, hdr.bth.psn, fx);
        }
        let pkt = Packet {
            src: cx.path.dest_qp,
            src_uid: 0,
            seq: 0,
            psn: hdr.bth.psn,
            dest: cx.qp.handle,
            dgid: cx.attrs.ah_attr.grh.dgid,
            sgid_index: cx.attrs.ah_attr.grh.sgid_index,
            op: Op::Send { imm: hdr.imm.map(u32::to_be_bytes) },
            solicited: hdr.bth.solicited,
            payload: buf,
            ud: None,
        };
        match cx.qp.receive(cx.core, &pkt, cx.conn, fx) {
            Rx::Park => {
                let mut buf = pkt.payload;
                buf.truncate(kept);
                if !only {
                    self.msg = InMsg::Send { buf, cap };
                }
                self.rnr(cx, hdr.bth.psn);
            }
            outcome => self.finish(cx, hdr.bth.psn, outcome),
        }
    }

    /// A message ended with `outcome` at PSN `p`: ACK it, or NAK why it failed.
    fn finish(&mut self, cx: &Ctx<'_>, p: u32, outcome: Rx) {
        match outcome {
            Rx::Park => self.rnr(cx, p),
            Rx::Delivered => {
                self.msn = psn::add(self.msn, 1);
                self.advance(1);
                self.ack(cx, p);
            }
            // The QP left RTR/RTS or was reset meanwhile: as if the packet never came.
            Rx::Fail(wc_status::RETRY_EXC_ERR) => cx.core.count(|c| &c.roce_rx_dropped_qp),
            Rx::Fail(wc_status::REM_INV_REQ_ERR) => self.refuse(cx, p, NakCode::InvalidRequest),
            Rx::Fail(wc_status::REM_ACCESS_ERR) => self.refuse(cx, p, NakCode::RemoteAccessError),
            Rx::Fail(_) => self.refuse(cx, p, NakCode::RemoteOperationalError),
        }
    }

    /// The expected PSN moves past `n` packets.
    fn advance(&mut self, n: u32) {
        self.epsn = psn::add(self.epsn, n);
        self.nak_sent = false;
    }

    /// NAKs the request at `p` (a fatal NAK: the requester's QP goes to ERR) and forgets the
    /// message in progress.
    fn refuse(&mut self, cx: &Ctx<'_>, p: u32, code: NakCode) {
        self.msg = InMsg::None;
        cx.core.count(|c| &c.roce_naks_sent);
        self.reply(cx, p, Aeth::nak(self.msn, code));
    }

    /// An invalid request at `p` (a length the path MTU or the message does not allow, an opcode
    /// out of sequence, a READ without its RETH): NAK Invalid Request and the QP goes to ERR,
    /// its posted receive WQEs flushed (IBTA 9.9.3.1.2 Class C, as Linux rxe's
    /// `RESPST_ERR_LENGTH` and `RESPST_ERR_MISSING_OPCODE_*` do; rxe completes the receive WQE
    /// of a refused SEND with `REM_INV_REQ_ERR`, the model flushes it with the rest). The
    /// consumer waiting on that QP sees a completion, not silence.
    fn invalid(&mut self, cx: &Ctx<'_>, p: u32, fx: &mut Effects) {
        cx.qp.force_error(cx.core, fx);
        self.refuse(cx, p, NakCode::InvalidRequest);
    }

    /// RNR NAK for the packet at `p`, with the QP's `min_rnr_timer`.
    fn rnr(&mut self, cx: &Ctx<'_>, p: u32) {
        cx.core.count(|c| &c.roce_rnr_naks_sent);
        self.reply(cx, p, Aeth::rnr_nak(self.msn, cx.attrs.min_rnr_timer & 0x1f));
    }

    fn ack(&self, cx: &Ctx<'_>, p: u32) {
        cx.core.count(|c| &c.roce_acks_sent);
        self.reply(cx, p, Aeth::ack(self.msn, NO_CREDITS));
    }

    /// Sends an ACKNOWLEDGE packet with PSN `p`.
    fn reply(&self, cx: &Ctx<'_>, p: u32, aeth: Aeth) {
        if matches!(aeth.syndrome(), roce_wire::Syndrome::Nak(NakCode::PsnSequenceError)) {
            cx.core.count(|c| &c.roce_naks_sent);
        }
        cx.send_response(op::RC_ACKNOWLEDGE, p, Headers { aeth: Some(aeth), ..Default::default() }, &[]);
    }
}

/// CmpSwap or FetchAdd.
fn is_atomic(opcode: u8) -> bool {
    matches!(opcode, op::RC_COMPARE_SWAP | op::RC_FETCH_ADD)
}

/// Whether a SEND reassembled into `buf` is longer than the device's `max_msg_sz`: an invalid
/// request (the model's requester never sends one; the receive WQE's SGEs, which could claim
/// gigabytes, are checked only when the message is scattered).
fn too_long(buf: &[u8]) -> bool {
    buf.len() as u64 > u64::from(limits::MAX_MSG_SZ)
}

/// Appends `data` to `buf`, keeping at most `cap + 1` bytes (one past the receive WQE's length
/// is enough for its scatter to fail with a length error).
fn append_bounded(buf: &mut Vec<u8>, data: &[u8], cap: u64) {
    let room = cap.saturating_add(1).saturating_sub(buf.len() as u64);
    let take = (data.len() as u64).min(room) as usize;
    buf.extend_from_slice(&data[..take]);
}
