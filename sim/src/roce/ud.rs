//! UD on the RoCE v2 port (IBTA 9.8.3, A17): a datagram is one packet, BTH + DETH (Q_Key,
//! source QP) [+ ImmDt] + payload + ICRC, opcode UD SEND Only (with Immediate); no ACKs, no
//! retransmission. A received datagram is checked (ICRC for IPv6, P_Key, destination QP,
//! Q_Key, a posted receive WQE) and dropped and counted when refused; its receiver finds the
//! GRH area built from the IP addresses the packet came between.

use super::message::PKEY;
use super::path::{gid_ip, ip_gid};
use super::{tx_context, Outgoing, RocePort};
use crate::backend::ud;
use crate::backend::Backend;
use crate::ctx::Effects;
use crate::packet::ud::{grh, network, Datagram, Route, IBA_BYTES};
use crate::packet::{Op, Packet};
use crate::qp::ud::Dropped;
use pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2;
use pvrdma_abi::wqe::wc_status;
use roce_wire::ud::{decode_ud, encode_ud, UdPacket, UD_SEND_ONLY, UD_SEND_ONLY_WITH_IMMEDIATE};
use roce_wire::{Bth, IpContext, WireError};
use std::net::SocketAddr;

/// The hop limit (IPv4 TTL) a received datagram's GRH area says: a UDP socket does not report
/// the one the packet carried, so the default of Linux's sockets, which the port sends with.
const RX_HOP_LIMIT: u8 = 64;

/// Sends the UD datagram `pkt` (`d`) now, from the socket of its source GID to its destination
/// GID's address. Errors: `LOC_QP_OP_ERR` when the source GID is no RoCE v2 GID the port has
/// bound, or the destination is of the other IP family or names no one host.
pub(super) fn send(port: &RocePort, core: &Backend, pkt: &Packet, d: &Datagram) -> Result<(), u32> {
    let entry = core.gid_entry(d.sgid_index).ok_or(wc_status::LOC_QP_OP_ERR)?;
    let src = gid_ip(&entry.gid);
    let sock = port.socks.iter().position(|s| s.local.ip() == src);
    let dst = gid_ip(&pkt.dgid);
    let (Some(sock), true) = (sock, entry.gid_type == GID_TYPE_FLAG_ROCE_V2) else {
        return Err(wc_status::LOC_QP_OP_ERR);
    };
    if dst.is_ipv4() != src.is_ipv4() || dst.is_unspecified() || dst.is_multicast() {
        return Err(wc_status::LOC_QP_OP_ERR);
    }
    let imm = match pkt.op {
        Op::Send { imm } => imm.map(u32::from_be_bytes),
        _ => return Err(wc_status::LOC_QP_OP_ERR),
    };
    let opcode = if imm.is_some() { UD_SEND_ONLY_WITH_IMMEDIATE } else { UD_SEND_ONLY };
    let bth = Bth { opcode, solicited: pkt.solicited, pkey: PKEY, dest_qp: pkt.dest, psn: pkt.psn, ..Bth::default() };
    let p = UdPacket { bth, qkey: d.qkey, src_qp: pkt.src, imm, payload: &pkt.payload };
    let dst = SocketAddr::new(dst, port.udp_port);
    let mut bytes = Vec::with_capacity(pkt.payload.len() + 64);
    if encode_ud(&p, &tx_context(port.socks[sock].local, dst), &mut bytes).is_err() {
        core.count(|c| &c.roce_tx_errors);
        return Ok(());
    }
    let mut out = Vec::new();
    port.link.pass(core, Outgoing { sock, dst, bytes }, &mut out);
    port.transmit(core, out);
    Ok(())
}

/// Handles a UD packet from `peer` to `local` (`checked`: the IP context to verify its ICRC
/// against, for IPv6). Malformed, bad-ICRC and wrong-P_Key packets are counted as the RC path
/// counts them; the rest under the UD drop reasons.
pub(super) fn receive(
    core: &Backend,
    local: SocketAddr,
    peer: SocketAddr,
    bytes: &[u8],
    checked: Option<&IpContext>,
    fx: &mut Effects,
) {
    let p = match decode_ud(bytes, checked) {
        Ok(p) => p,
        Err(WireError::BadIcrc) => return core.count(|c| &c.roce_rx_dropped_icrc),
        Err(_) => return core.count(|c| &c.roce_rx_dropped_malformed),
    };
    if p.bth.pkey != PKEY {
        return core.count(|c| &c.roce_rx_dropped_pkey);
    }
    let route = Route {
        sgid: ip_gid(peer.ip()),
        dgid: ip_gid(local.ip()),
        traffic_class: 0,
        flow_label: 0,
        hop_limit: RX_HOP_LIMIT,
    };
    let imm_len = if p.imm.is_some() { 4 } else { 0 };
    let d = Datagram {
        qkey: p.qkey,
        grh: grh(&route, p.payload.len() + p.bth.pad as usize + IBA_BYTES + imm_len, true),
        network: network(&route.sgid),
        sgid_index: 0,
    };
    let pkt = Packet {
        src: p.src_qp,
        src_uid: 0,
        seq: 0,
        psn: p.bth.psn,
        dest: p.bth.dest_qp,
        dgid: route.dgid,
        sgid_index: 0,
        op: Op::Send { imm: p.imm.map(u32::to_be_bytes) },
        solicited: p.bth.solicited,
        payload: p.payload.to_vec(),
        ud: None,
    };
    let outcome = match core.qp(p.bth.dest_qp) {
        Some(qp) => qp.receive_ud(core, &pkt, &d, fx),
        None => Err(Dropped::Qp),
    };
    ud::count(core, outcome);
}
