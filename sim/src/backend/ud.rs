//! The data path of UD queue pairs (IBTA 9.8.3 and 10.2.5): the send WQE's `wr.ud` (remote QPN,
//! remote Q_Key and the address vector, as Linux's `pvrdma_post_send` fills it) made into a
//! datagram, and the receive side's checks (state, Q_Key, a posted receive WQE). UD is
//! unreliable: a datagram the receiver refuses is dropped and counted, and its sender completes
//! `SUCCESS` once it was sent.

use crate::backend::mr;
use crate::packet::ud::{grh, network, Datagram, Route, GRH_LEN, IBA_BYTES, QKEY_OWN, UD_MTU};
use crate::packet::Packet;
use crate::qp::gsi::{GSI_QKEY, MAD_SIZE};
use crate::qp::ud::Dropped;
use parking_lot::MutexGuard;
use pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
use pvrdma_abi::verbs::{qp_state, Gid};
use pvrdma_abi::wqe::{wc_flags, wc_opcode, SqWqeHdr};
use zerocopy::little_endian::U32;
use zerocopy::FromBytes;

use crate::backend::Backend;
use crate::ctx::Effects;
use crate::qp::*;
use pvrdma_abi::wqe::WrUd;

/// Where a UD send WQE goes: its destination QPN and GID, and its datagram. `Err` is the
/// send's completion status: `LOC_QP_OP_ERR` for an address vector whose `gid_index` names no
/// bound GID or whose port is not 1.
pub(super) fn address(
    core: &Backend,
    own_qkey: u32,
    hdr: &SqWqeHdr,
    payload_len: usize,
    imm: bool,
) -> Result<(u32, Gid, Datagram), u32> {
    use pvrdma_abi::wqe::wc_status::LOC_QP_OP_ERR;
    let ud = WrUd::read_from_bytes(&hdr.wr[..]).map_err(|_| LOC_QP_OP_ERR)?;
    let av = &ud.av;
    let sgid = core.gid_entry(av.gid_index).ok_or(LOC_QP_OP_ERR)?;
    if av.port_pd.get() >> 24 != 1 || av.dgid == [0u8; 16] {
        return Err(LOC_QP_OP_ERR);
    }
    let qkey = ud.remote_qkey.get();
    let qkey = if qkey & QKEY_OWN != 0 { own_qkey } else { qkey };
    let tc_fl = av.sl_tclass_flowlabel.get();
    let route = Route {
        sgid: sgid.gid,
        dgid: av.dgid,
        traffic_class: (tc_fl >> 20) as u8,
        flow_label: tc_fl & 0xf_ffff,
        hop_limit: av.hop_limit,
    };
    let pad = (4 - payload_len % 4) % 4;
    let bth_len = payload_len + pad + IBA_BYTES + if imm { 4 } else { 0 };
    let v2 = sgid.gid_type == GID_TYPE_FLAG_ROCE_V2;
    let d = Datagram { qkey, grh: grh(&route, bth_len, v2), network: network(&route.sgid), sgid_index: av.gid_index };
    Ok((ud.remote_qpn.get() & 0x00ff_ffff, av.dgid, d))
}

impl Qp {
    /// The receive side of a UD datagram (`pkt` with `d`, from the port), on a UD QP or the GSI
    /// QP (its Q_Key and length checks in `qp/gsi.rs`): in RTR, RTS or SQD
    /// (draining stops only the send queue, IBTA 10.3.1), with
    /// the datagram's Q_Key, it takes the next receive WQE, scatters the GRH area then the
    /// payload, and publishes a receive CQE with `src_qp`, `GRH` (and `WITH_IMM`) in its flags
    /// and a `byte_len` that counts the 40 GRH bytes. A buffer too short for both completes
    /// with `LOC_LEN_ERR` and moves the QP to ERR (IBTA Class D; Linux rxe's
    /// `RESPST_ERR_LENGTH` for UD). `Err` says why the datagram was dropped.
    pub(crate) fn receive_ud(
        &self,
        core: &Backend,
        pkt: &Packet,
        d: &Datagram,
        fx: &mut Effects,
    ) -> Result<(), Dropped> {
        let mut st: MutexGuard<'_, QpState> = self.st.lock();
        let ready = matches!(st.state, qp_state::RTR | qp_state::RTS | qp_state::SQD);
        if st.dead || !ready || !self.is_datagram() {
            return Err(Dropped::Qp);
        }
        // QP1 takes the GSI Q_Key only, whatever its own (IBTA 13.4.4; Linux rxe's
        // `check_keys`), and one MAD at most: a longer datagram would fail its receive WQE and
        // move the port's GSI QP to ERR.
        let qkey = if self.is_gsi() { GSI_QKEY } else { st.attrs.qkey.get() };
        if qkey != d.qkey {
            return Err(Dropped::Qkey);
        }
        if self.is_gsi() && pkt.payload.len() > MAD_SIZE {
            return Err(Dropped::Oversize);
        }
        let (hdr, sges) = match self.take_rq_wqe(core, &mut st, fx) {
            Ok(Some(wqe)) => wqe,
            _ => return Err(Dropped::NoRecv),
        };
        let imm = match pkt.op {
            crate::packet::Op::Send { imm } => imm,
            _ => None,
        };
        let len = GRH_LEN + pkt.payload.len();
        let status = self.check_rq_wqe(&hdr, &sges).and_then(|()| {
            mr::scatter(core, self.pd, &sges, &d.grh)?;
            mr::scatter_at(core, self.pd, &sges, GRH_LEN as u32, &pkt.payload)
        });
        let mut cqe = recv_cqe(self.handle, &hdr, wc_opcode::RECV, pkt.src, len, imm);
        let flags = cqe.wc_flags.get() | wc_flags::GRH | wc_flags::WITH_NETWORK_HDR_TYPE;
        cqe.wc_flags = U32::new(flags);
        cqe.network_hdr_type = d.network;
        self.complete_recv(core, &mut st, cqe, pkt.solicited, status, fx);
        Ok(())
    }
}

/// The loopback port's delivery of a UD datagram: to the QP `pkt.dest` names, if the
/// destination GID is bound on this port; dropped and counted otherwise. The sender completes
/// `SUCCESS` either way (UD is unreliable; IBTA 9.8.3), unless it flushed or reset meanwhile.
/// The caller (`port::run_job`) returns the packet's wire budget.
pub(crate) fn deliver(core: &Backend, pkt: Packet, fx: &mut Effects) {
    let src = core.qp(pkt.src).filter(|q| q.uid == pkt.src_uid && q.send_pending(pkt.seq));
    if let Some(d) = pkt.ud.as_deref() {
        let bound = core.gids.lock().iter().flatten().any(|g| g.gid == pkt.dgid);
        let dest = core.qp(pkt.dest).filter(|_| bound);
        let outcome = dest.map_or(Err(Dropped::Qp), |q| q.receive_ud(core, &pkt, d, fx));
        count(core, outcome);
    }
    if let Some(src) = src {
        src.complete_send(core, pkt.seq, pvrdma_abi::wqe::wc_status::SUCCESS, fx);
    }
}

/// Counts a datagram's fate.
pub(crate) fn count(core: &Backend, outcome: Result<(), Dropped>) {
    match outcome {
        Ok(()) => core.count(|c| &c.ud_delivered),
        Err(Dropped::Qp) => core.count(|c| &c.ud_dropped_qp),
        Err(Dropped::Qkey) => core.count(|c| &c.ud_dropped_qkey),
        Err(Dropped::NoRecv) => core.count(|c| &c.ud_dropped_no_recv),
        Err(Dropped::Oversize) => core.count(|c| &c.ud_dropped_oversize),
    }
}

impl Qp {
    /// Sends a checked UD send WQE (`entry`, its gathered `payload`) to `addr` from
    /// [`address`]; an opcode other than SEND (with immediate) fails with `LOC_QP_OP_ERR`. On the RoCE port the datagram leaves now and the send completes at once;
    /// on the loopback it completes when the port has delivered or dropped it. A message longer
    /// than the port's MTU sends nothing and completes `SUCCESS` (IBTA C10-93.1.1: no packet,
    /// no error; Linux rxe does the same). `Err(true)`: the WQE failed (its status recorded),
    /// move to ERR; `Err(false)`: nothing went on the wire. Either way the caller returns the
    /// wire reservation.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_ud(
        &self,
        core: &Backend,
        st: &mut MutexGuard<'_, QpState>,
        mut entry: InFlight,
        op: crate::packet::Op,
        payload: Vec<u8>,
        addr: Result<(u32, Gid, Datagram), u32>,
        flags: u32,
        fx: &mut Effects,
    ) -> Result<(), bool> {
        use pvrdma_abi::wqe::wc_status::{LOC_QP_OP_ERR, SUCCESS};
        // UD carries SEND and SEND with immediate only (IBTA 9.8.3).
        let addr = addr.and_then(|a| matches!(op, crate::packet::Op::Send { .. }).then_some(a).ok_or(LOC_QP_OP_ERR));
        let (dest, dgid, d) = match addr {
            Ok(a) => a,
            Err(status) => {
                entry.status = Some(status);
                st.inflight.push_back(entry);
                return Err(true);
            }
        };
        let seq = entry.seq;
        if payload.len() as u64 > UD_MTU {
            core.count(|c| &c.ud_oversize_dropped);
            entry.status = Some(SUCCESS);
            st.inflight.push_back(entry);
            self.retire(core, st, fx);
            return Err(false);
        }
        let on_roce = core.roce.is_some();
        if !on_roce {
            st.bytes_on_wire += u64::from(entry.byte_len);
        }
        st.inflight.push_back(entry);
        let psn = st.send_psn;
        st.send_psn = (psn + 1) & PSN_MASK;
        let packet = Packet {
            src: self.handle,
            src_uid: self.uid,
            seq,
            psn,
            dest,
            dgid,
            sgid_index: 0,
            op,
            solicited: flags & pvrdma_abi::verbs::send_flags::SOLICITED != 0,
            payload,
            ud: Some(Box::new(d)),
        };
        core.count(|c| &c.packets_sent);
        let sent = core.transmit(self, &st.attrs, packet, fx);
        let status = match sent {
            Ok(()) if !on_roce => return Ok(()),
            Ok(()) => SUCCESS,
            Err(status) => status,
        };
        if let Some(e) = st.inflight.back_mut() {
            e.status = Some(status);
        }
        if status != SUCCESS {
            return Err(true);
        }
        self.retire(core, st, fx);
        Err(false)
    }
}
