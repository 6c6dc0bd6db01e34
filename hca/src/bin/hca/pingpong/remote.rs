//! `hca pingpong --roce`: this process is one end, as `ibv_rc_pingpong` is (rdma-core
//! `rc_pingpong.c`): without a HOST the server, with one the client. Its steps in its order: the
//! QP to INIT, `-r` receives posted (and with `-e` the CQ armed), a random PSN, `local address`
//! printed, the connection data exchanged over TCP (`exchange.rs`; the server connects its QP
//! before it replies, the client after), `remote address` printed, then the ping-pong (the
//! client sends first) and the result lines. Payloads are checked on this side (`payload.rs`).

use super::end::{gid_str, local_gid, pinned, print_result_lines, to_rts, End, EndReport};
use super::Opts;
use crate::exchange::{self, Dest};
use crate::sys::{process_cpu_time, random_psn};
use ib_core::{AhAttr, Device, GidType, GlobalRoute};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs one end on `dev`; `Err` (exit status 1) on any failure, worded as `ibv_rc_pingpong`
/// words it where it has the case. `linger` runs after the ping-pong, before the QP goes: a
/// peer whose last acknowledgement was lost resends into a QP that still answers (rxe treats
/// retry_cnt 7 as "retry forever", so it would otherwise never finish).
pub(super) fn run(dev: &Device, o: &Opts, linger: &dyn Fn()) -> Result<(), String> {
    let gid_idx = match o.gid_idx {
        Some(i) => i,
        None => first_roce_v2(dev, o.ib_port)?,
    };
    if dev.query_gid_type(o.ib_port, gid_idx) == Ok(GidType::RoceV1) {
        // The model's RoCE port carries RoCE v2 (UDP) only: a v1 source GID could not send.
        return Err(format!(
            "GID index {gid_idx} is a RoCE v1 GID; the port speaks RoCE v2 only (`hca devinfo -v` lists its GIDs)"
        ));
    }
    let gid = local_gid(dev, o, gid_idx)?;
    let lid = dev.query_port(o.ib_port).map_err(|_| "Couldn't get port info".to_string())?.lid;
    let mut end = End::new(dev, o, &Arc::new(AtomicBool::new(false)), true).map_err(|e| format!("setup: {e}"))?;
    // As ibv_rc_pingpong's QP: no remote access.
    end.qp.modify_to_init(o.ib_port, 0).map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
    end.prepare(o).map_err(|f| format!("Couldn't post receive: {}", f.msg))?;
    end.psn = random_psn();
    let me = Dest { lid, qpn: end.qp.qpn(), psn: end.psn, gid };
    println!("  local address:  {}", me.line());
    let timeout = Duration::from_secs(o.timeout_s);
    let connect = |peer: &Dest| connect(&end, peer, gid_idx, o);
    let peer = match &o.host {
        Some(host) => exchange::client(host, o.port, &me, timeout)?,
        None => exchange::server(o.port, &me, timeout, connect)?,
    };
    println!("  remote address: {}", peer.line());
    if o.host.is_some() {
        connect(&peer)?;
    }
    let client = o.host.is_some();
    let cpu0 = process_cpu_time();
    let start = Instant::now();
    let rep = pinned(o.pin, || end.run(o, client));
    // The figures are the ping-pong's: taken before the linger, which only keeps the QP
    // answering the peer's last resends.
    let (wall, cpu) = (start.elapsed(), process_cpu_time().saturating_sub(cpu0));
    linger();
    let rep = rep.map_err(|f| f.msg)?;
    print_report(o, wall, cpu, &rep);
    Ok(())
}

/// The index of `port`'s first RoCE v2 GID (the first `--roce` address).
fn first_roce_v2(dev: &Device, port: u8) -> Result<u32, String> {
    let len = dev.query_port(port).map_err(|_| "Couldn't get port info".to_string())?.gid_tbl_len;
    (0..len)
        .find(|&i| dev.query_gid_type(port, i) == Ok(GidType::RoceV2))
        .ok_or_else(|| format!("port {port} has no RoCE v2 GID: give its index with -g"))
}

/// `pp_connect_ctx`: RTR towards the peer (through a global route when its GID's interface ID
/// is not zero, as `ibv_rc_pingpong` decides), then RTS.
fn connect(end: &End, peer: &Dest, gid_idx: u32, o: &Opts) -> Result<(), String> {
    let global = peer.gid[8..] != [0; 8];
    let grh = GlobalRoute { dgid: peer.gid, sgid_index: gid_idx as u8, hop_limit: 1, ..Default::default() };
    let ah = AhAttr { grh, is_global: global, dlid: peer.lid, sl: o.sl, port_num: o.ib_port, ..Default::default() };
    to_rts(&end.qp, end.psn, peer.qpn, peer.psn, ah, o).map_err(|e| {
        let gid = gid_str(&peer.gid);
        format!("Failed to modify QP to RTR/RTS towards QPN {:#08x} at {gid}: {e}", peer.qpn)
    })
}

/// What this tool adds (payloads checked; with `-e`, events and CPU time), then
/// `ibv_rc_pingpong`'s two result lines.
fn print_report(o: &Opts, wall: Duration, cpu: Duration, rep: &EndReport) {
    println!("payload verified: {} messages of {} bytes", rep.verified, o.size);
    if o.events {
        let (secs, cpu) = (wall.as_secs_f64(), cpu.as_secs_f64());
        let pct = 100.0 * cpu / secs;
        println!(
            "completion events waited for: {}; process CPU time {cpu:.3} s = {pct:.0}% of wall time {secs:.3} s",
            rep.events
        );
    }
    print_result_lines(o, wall);
}
