//! UD queue pairs (IBTA 9.8.3 and 10.2.5): the transitions a UD QP takes, the send WQE's `wr.ud`
//! (remote QPN, remote Q_Key and the address vector, as Linux's `pvrdma_post_send` fills it),
//! the GRH a receiver finds in the first 40 bytes of its buffer, and the receive side's checks
//! (state, Q_Key, a posted receive WQE). UD is unreliable: a datagram the receiver refuses is
//! dropped and counted, and its sender completes `SUCCESS` once it was sent.

use super::{recv_cqe, Qp, QpState};
use crate::device::{Core, Effects};
use crate::mr;
use crate::port::Packet;
use parking_lot::MutexGuard;
use pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
use pvrdma_abi::verbs::{qp_attr_mask as m, qp_state, Gid};
use pvrdma_abi::wqe::{network_type, wc_flags, wc_opcode, SqWqeHdr, WrUd};
use std::net::Ipv6Addr;
use zerocopy::little_endian::U32;
use zerocopy::FromBytes;

/// Bytes of the GRH area at the start of a UD receive buffer (IBTA 11.4.1.2).
pub const GRH_LEN: usize = 40;
/// A `remote_qkey` with this bit set means "send with the QP's own Q_Key" (IBTA 10.2.5).
pub const QKEY_OWN: u32 = 1 << 31;
/// The port's active MTU in bytes: the largest UD message (IBTA C10-93.1.1).
pub const UD_MTU: u64 = 1024;
/// BTH (12), DETH (8) and ICRC (4) bytes of a UD packet on RoCE v2, ImmDt not included.
pub const IBA_BYTES: usize = 12 + 8 + 4;
/// UDP header bytes.
const UDP_BYTES: usize = 8;

/// What a UD datagram carries beyond an RC SEND: the DETH's Q_Key (already resolved from the
/// sender's QP when the WQE asked for it) and the GRH as the receiver will see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The DETH's Q_Key.
    pub qkey: u32,
    /// The GRH area the receiver scatters first (see [`grh`]).
    pub grh: [u8; GRH_LEN],
    /// `network_hdr_type` of the receive CQE: IPv4 or IPv6 (RoCE v2).
    pub network: u8,
    /// The sender's GID index (the RoCE port sends from that GID's address).
    pub sgid_index: u8,
}

/// Why a UD datagram was not delivered (each counted in [`crate::SimStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// No QP of that number, not UD, or not in RTR, RTS or SQD.
    Qp,
    /// The DETH's Q_Key is not the receiver's (IBTA 10.2.5: silently dropped).
    Qkey,
    /// No receive WQE posted.
    NoRecv,
}

/// The attributes a UD transition `cur -> new` requires and allows (IBTA 11.2.5, Table 93's UD
/// column, as Linux's `ib_modify_qp_is_ok`), SQD's included; `None` if illegal. No path,
/// destination QPN, MTU, timers or RDMA attributes: a UD QP is not connected.
pub(super) fn transition(cur: u32, new: u32) -> Option<(u32, u32)> {
    use qp_state::*;
    const INIT_ATTRS: u32 = m::PKEY_INDEX | m::PORT | m::QKEY;
    Some(match (cur, new) {
        (_, RESET) | (_, ERR) => (0, 0),
        (RESET, INIT) => (INIT_ATTRS, 0),
        (INIT, INIT) => (0, INIT_ATTRS),
        (INIT, RTR) => (0, m::PKEY_INDEX | m::QKEY),
        (RTR, RTS) => (m::SQ_PSN, m::CUR_STATE | m::QKEY),
        (RTS, RTS) | (SQD, RTS) => (0, m::CUR_STATE | m::QKEY),
        (RTS, SQD) => (0, m::EN_SQD_ASYNC_NOTIFY),
        (SQD, SQD) => (0, m::PKEY_INDEX | m::QKEY),
        _ => return None,
    })
}

/// Where a UD send WQE goes: its destination QPN and GID, and its datagram. `Err` is the
/// send's completion status: `LOC_QP_OP_ERR` for an address vector whose `gid_index` names no
/// bound GID or whose port is not 1.
pub(super) fn address(
    core: &Core,
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

/// A datagram's route: what its IP (or IB GRH) header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Source GID (the sender's).
    pub sgid: Gid,
    /// Destination GID.
    pub dgid: Gid,
    /// Traffic class (IPv4 TOS).
    pub traffic_class: u8,
    /// Flow label (20 bits; not carried by IPv4).
    pub flow_label: u32,
    /// Hop limit (IPv4 TTL).
    pub hop_limit: u8,
}

/// `network_hdr_type` for a datagram from `sgid`: IPv4 for an IPv4-mapped GID, else IPv6.
pub fn network(sgid: &Gid) -> u8 {
    if Ipv6Addr::from(*sgid).to_ipv4_mapped().is_some() {
        network_type::IPV4
    } else {
        network_type::IPV6
    }
}

/// The 40-byte GRH area of a datagram of `iba_len` bytes from BTH to ICRC, as Linux rxe and mlx5
/// fill it and `ibv_init_ah_from_wc` reads it: for an IPv4-mapped source GID (RoCE v2 over
/// IPv4), 20 zero bytes then the IPv4 header (IHL 5, DF, protocol UDP, its checksum valid); else
/// the IPv6 header as the GRH (next header UDP for RoCE v2, 0x1B for RoCE v1 / IB), payload
/// length from the UDP header on (RoCE v2) or the BTH on (RoCE v1).
pub fn grh(r: &Route, iba_len: usize, roce_v2: bool) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let src4 = Ipv6Addr::from(r.sgid).to_ipv4_mapped();
    let dst4 = Ipv6Addr::from(r.dgid).to_ipv4_mapped();
    if let (Some(s), Some(d), true) = (src4, dst4, roce_v2) {
        let h = &mut g[20..];
        let total = (20 + UDP_BYTES + iba_len).min(0xffff) as u16;
        h[0] = 0x45;
        h[1] = r.traffic_class;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[6] = 0x40; // Don't Fragment
        h[8] = r.hop_limit;
        h[9] = 17; // UDP
        h[12..16].copy_from_slice(&s.octets());
        h[16..20].copy_from_slice(&d.octets());
        let sum = ipv4_checksum(h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        return g;
    }
    let vtf = (6u32 << 28) | (u32::from(r.traffic_class) << 20) | (r.flow_label & 0xf_ffff);
    g[0..4].copy_from_slice(&vtf.to_be_bytes());
    let (plen, next) = if roce_v2 { (UDP_BYTES + iba_len, 17) } else { (iba_len, 0x1b) };
    g[4..6].copy_from_slice(&(plen.min(0xffff) as u16).to_be_bytes());
    g[6] = next;
    g[7] = r.hop_limit;
    g[8..24].copy_from_slice(&r.sgid);
    g[24..40].copy_from_slice(&r.dgid);
    g
}

/// The IPv4 header checksum (RFC 791) of a 20-byte header whose checksum field is zero.
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl Qp {
    /// Whether this is a UD QP.
    pub(crate) fn is_ud(&self) -> bool {
        self.qp_type == pvrdma_abi::verbs::qp_type::UD
    }

    /// The receive side of a UD datagram (`pkt` with `d`, from the port): in RTR, RTS or SQD
    /// (draining stops only the send queue, IBTA 10.3.1), with
    /// the datagram's Q_Key, it takes the next receive WQE, scatters the GRH area then the
    /// payload, and publishes a receive CQE with `src_qp`, `GRH` (and `WITH_IMM`) in its flags
    /// and a `byte_len` that counts the 40 GRH bytes. A buffer too short for both completes
    /// with `LOC_LEN_ERR` and moves the QP to ERR (IBTA Class D; Linux rxe's
    /// `RESPST_ERR_LENGTH` for UD). `Err` says why the datagram was dropped.
    pub(crate) fn receive_ud(&self, core: &Core, pkt: &Packet, d: &Datagram, fx: &mut Effects) -> Result<(), Dropped> {
        let mut st: MutexGuard<'_, QpState> = self.st.lock();
        let ready = matches!(st.state, qp_state::RTR | qp_state::RTS | qp_state::SQD);
        if st.dead || !ready || !self.is_ud() {
            return Err(Dropped::Qp);
        }
        if st.attrs.qkey.get() != d.qkey {
            return Err(Dropped::Qkey);
        }
        let (hdr, sges) = match self.take_rq_wqe(core, &mut st, fx) {
            Ok(Some(wqe)) => wqe,
            _ => return Err(Dropped::NoRecv),
        };
        let imm = match pkt.op {
            crate::port::Op::Send { imm } => imm,
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
pub(crate) fn deliver(core: &Core, pkt: Packet, fx: &mut Effects) {
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
pub(crate) fn count(core: &Core, outcome: Result<(), Dropped>) {
    match outcome {
        Ok(()) => core.count(|c| &c.ud_delivered),
        Err(Dropped::Qp) => core.count(|c| &c.ud_dropped_qp),
        Err(Dropped::Qkey) => core.count(|c| &c.ud_dropped_qkey),
        Err(Dropped::NoRecv) => core.count(|c| &c.ud_dropped_no_recv),
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
        core: &Core,
        st: &mut MutexGuard<'_, QpState>,
        mut entry: super::InFlight,
        op: crate::port::Op,
        payload: Vec<u8>,
        addr: Result<(u32, Gid, Datagram), u32>,
        flags: u32,
        fx: &mut Effects,
    ) -> Result<(), bool> {
        use pvrdma_abi::wqe::wc_status::{LOC_QP_OP_ERR, SUCCESS};
        // UD carries SEND and SEND with immediate only (IBTA 9.8.3).
        let addr = addr.and_then(|a| matches!(op, crate::port::Op::Send { .. }).then_some(a).ok_or(LOC_QP_OP_ERR));
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
        st.send_psn = (psn + 1) & super::PSN_MASK;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> Gid {
        std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }

    #[test]
    fn an_ipv4_grh_is_an_ipv4_header_in_bytes_20_to_39_with_a_valid_checksum() {
        let r = Route {
            sgid: v4([10, 0, 0, 1]),
            dgid: v4([10, 0, 0, 2]),
            traffic_class: 0x10,
            flow_label: 0,
            hop_limit: 64,
        };
        let g = grh(&r, 100 + IBA_BYTES, true);
        assert_eq!(&g[..20], &[0u8; 20]);
        assert_eq!(g[20], 0x45);
        assert_eq!((g[21], g[28], g[29]), (0x10, 64, 17));
        assert_eq!(u16::from_be_bytes([g[22], g[23]]), (20 + 8 + 100 + IBA_BYTES) as u16);
        assert_eq!(&g[32..36], &[10, 0, 0, 1]);
        assert_eq!(&g[36..40], &[10, 0, 0, 2]);
        assert_eq!(ipv4_checksum(&g[20..]), 0, "a valid header sums to zero");
        assert_eq!(network(&r.sgid), network_type::IPV4);
    }

    #[test]
    fn an_ipv6_grh_is_the_ipv6_header() {
        let s: Ipv6Addr = "fd00::1".parse().unwrap();
        let d: Ipv6Addr = "fd00::2".parse().unwrap();
        let r = Route { sgid: s.octets(), dgid: d.octets(), traffic_class: 3, flow_label: 0x12345, hop_limit: 7 };
        let g = grh(&r, 50, true);
        assert_eq!(u32::from_be_bytes([g[0], g[1], g[2], g[3]]), 0x6031_2345);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 58);
        assert_eq!((g[6], g[7]), (17, 7));
        assert_eq!(&g[8..24], &s.octets());
        assert_eq!(&g[24..40], &d.octets());
        assert_eq!(grh(&r, 50, false)[6], 0x1b, "RoCE v1: next header IB");
    }

    #[test]
    fn ud_transitions_take_a_qkey_and_no_path() {
        use qp_state::*;
        assert_eq!(transition(RESET, INIT), Some((m::PKEY_INDEX | m::PORT | m::QKEY, 0)));
        assert_eq!(transition(RTR, RTS).map(|t| t.0), Some(m::SQ_PSN));
        assert_eq!(transition(INIT, RTR).map(|t| t.0 & m::AV), Some(0));
        assert_eq!(transition(RESET, RTS), None);
        assert_eq!(transition(RTS, SQD), Some((0, m::EN_SQD_ASYNC_NOTIFY)));
        assert_eq!(transition(SQD, RTS).map(|t| t.0), Some(0));
        assert_eq!(transition(RTR, SQD), None);
    }
}
