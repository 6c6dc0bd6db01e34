//! Both ends in this process, on the built-in model's loopback port.

use super::end::{gid_str, local_gid, pinned, print_result_lines, to_rts, End, EndReport, Failure};
use super::Opts;
use crate::sys::process_cpu_time;
use ib_core::{access, AhAttr, Device, GlobalRoute};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Runs the ping-pong on `dev` and prints the result; `Err` (non-zero exit) on any failure.
pub(super) fn run(dev: &Device, o: &Opts) -> Result<(), String> {
    let gid_idx = o.gid_idx.unwrap_or(0);
    let gid = local_gid(dev, o, gid_idx)?;
    let abort = Arc::new(AtomicBool::new(false));
    let server = Arc::new(End::new(dev, o, &abort, false).map_err(|e| format!("server setup: {e}"))?);
    let client = Arc::new(End::new(dev, o, &abort, false).map_err(|e| format!("client setup: {e}"))?);
    connect(&server, &client, gid, gid_idx, o).map_err(|e| format!("connect: {e}"))?;
    for (what, end) in [("local address: ", &client), ("remote address:", &server)] {
        let (qpn, psn, gid) = (end.qp.qpn(), end.psn, gid_str(&gid));
        println!("  {what} LID 0x0000, QPN {qpn:#08x}, PSN {psn:#08x}, GID {gid}");
    }

    for (side, end) in [("server", &server), ("client", &client)] {
        end.prepare(o).map_err(|f| format!("{side}: {}", f.msg))?;
    }
    let cpu0 = process_cpu_time();
    let start = Instant::now();
    let (s, c) = (server.clone(), client.clone());
    let (o1, o2) = (o.clone(), o.clone());
    let srv = thread::spawn(move || pinned(o1.pin, || s.run(&o1, false)));
    let cli = thread::spawn(move || pinned(o2.pin, || c.run(&o2, true)));
    let cr = cli.join().map_err(|_| "client thread panicked".to_string())?;
    let sr = srv.join().map_err(|_| "server thread panicked".to_string())?;
    let (sr, cr) = match (sr, cr) {
        (Ok(s), Ok(c)) => (s, c),
        (s, c) => return Err(first_failure(s.err(), c.err())),
    };
    let wall = start.elapsed();
    let cpu = process_cpu_time().saturating_sub(cpu0);
    print_report(o, wall, cpu, &sr, &cr);
    Ok(())
}

/// The errors, the one that stopped the run first: an end that only stopped because its peer
/// failed comes second.
fn first_failure(server: Option<Failure>, client: Option<Failure>) -> String {
    let mut errs: Vec<Failure> = [server, client].into_iter().flatten().collect();
    errs.sort_by_key(|f| f.peer_gone);
    errs.into_iter().map(|f| f.msg).collect::<Vec<_>>().join("; ")
}

/// Prints what this tool adds (payloads checked; with `-e`, events and CPU time), then
/// `ibv_rc_pingpong`'s two result lines, last, so scripts that read those find them as they do
/// with the C tool.
fn print_report(o: &Opts, wall: Duration, cpu: Duration, s: &EndReport, c: &EndReport) {
    let secs = wall.as_secs_f64();
    println!("payload verified: {} messages of {} bytes", s.verified + c.verified, o.size);
    if o.events {
        let (cpu, pct) = (cpu.as_secs_f64(), 100.0 * cpu.as_secs_f64() / secs);
        println!(
            "completion events waited for: {} (server {}, client {}); process CPU time {cpu:.3} s = {pct:.0}% of wall time {secs:.3} s",
            s.events + c.events,
            s.events,
            c.events
        );
    }
    print_result_lines(o, wall);
}

/// Each end to RTS towards the other, with the attributes `ibv_rc_pingpong` sets: port `-i`,
/// GID index `-g`, hop limit 1, min RNR timer 12, timeout 14, 7 retries, 7 RNR retries.
fn connect(a: &End, b: &End, gid: [u8; 16], gid_idx: u32, o: &Opts) -> ib_core::Result<()> {
    let access = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    for (me, peer) in [(a, b), (b, a)] {
        me.qp.modify_to_init(o.ib_port, access)?;
        let grh = GlobalRoute { dgid: gid, sgid_index: gid_idx as u8, hop_limit: 1, ..Default::default() };
        let ah = AhAttr { grh, is_global: true, port_num: o.ib_port, sl: o.sl, ..Default::default() };
        to_rts(&me.qp, me.psn, peer.qp.qpn(), peer.psn, ah, o)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_failure_is_reported_first() {
        let gone = Failure { msg: "server: stopped".into(), peer_gone: true };
        let root = Failure::from("client: LocLenErr".to_string());
        assert_eq!(first_failure(Some(gone), Some(root)), "client: LocLenErr; server: stopped");
    }
}
