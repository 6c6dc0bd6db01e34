//! The `cm_mad` target: `rdma_cm::mad::decode` on arbitrary bytes with the round trip of what
//! it accepts, and a CM (`rdma_cm::Cm`, listening, with a connection of its own in flight) fed
//! the input as a stream of MADs with its timers run between them.
//!
//! The CM's IDs come from a fixed seed and a consumer answers every event ([`consume`]), so an
//! input replays the same way every run and reaches every state.
//!
//! Input: the whole input is decoded once as one MAD; then it is cut into records, each a
//! length byte `n` (a MAD of `n + 200` bytes, so 256 is reachable and shorter and longer ones
//! too) and that many bytes, handed to the CM 10 ms apart.
//!
//! Invariants: no panic; a decoded message re-encodes and decodes to itself; no record makes
//! more than one ID; every MAD is counted; after
//! the last record and a month of timers, no timer is left.

use rdma_cm::cm::{RepParam, ReqParam, SidrRepParam};
use rdma_cm::mad::{decode, encode};
use rdma_cm::transport::{MadAddr, GSI_QKEY, GSI_QPN};
use rdma_cm::{Cm, CmEvent, CmId, MadTransport, ReceivedMad};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The service the fuzzed CM listens on (TCP port 20000 of the RDMA IP CM Service).
pub const SERVICE: u64 = 0x0000_0000_0106_4E20;
/// The backlog of its listener.
pub const BACKLOG: u32 = 8;

/// A transport that drops everything (the CM's sends are counted, never delivered).
struct Sink;

impl MadTransport for Sink {
    fn send(&self, _: &MadAddr, mad: &[u8]) -> std::io::Result<()> {
        assert_eq!(mad.len(), 256, "the CM sends whole MADs");
        Ok(())
    }
}

/// The seed of the fuzzed CM's IDs (so an input names the same IDs every run).
pub const SEED: u64 = 0x5eed_c0de;

/// The peer the records come from.
pub fn peer() -> MadAddr {
    let mut gid = [0u8; 16];
    gid[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
    MadAddr { gid, qpn: GSI_QPN, qkey: GSI_QKEY, hop_limit: 64, ..Default::default() }
}

/// The fuzzed CM as every run starts it, sending through `transport`: listening on
/// [`SERVICE`], and a REQ of its own sent to [`peer`] at `t0`.
pub fn start(transport: Arc<dyn MadTransport>, t0: Instant) -> Cm {
    let cm = Cm::with_seed(transport, 0x0050_5600_0000_0001, SEED);
    let listen = cm.create_id();
    cm.listen(listen, SERVICE, BACKLOG).unwrap();
    let active = cm.create_id();
    let p = ReqParam { dest: peer(), service_id: SERVICE, qp_type: 2, max_cm_retries: 2, ..Default::default() };
    cm.send_req(active, &p, t0).unwrap();
    cm
}

/// A consumer that says yes to everything: REP for a REQ, RTU for a REP, DREP for a DREQ,
/// SIDR_REP for a SIDR_REQ (so inputs reach every state); it destroys an ID whose story ended
/// (rejected, timed out, out of time-wait, resolved). Its calls' errors are the CM's business.
pub fn consume(cm: &Cm, events: Vec<(CmId, CmEvent)>, now: Instant) {
    for (id, e) in events {
        let _ = match e {
            CmEvent::ReqReceived { .. } => cm.send_rep(id, &RepParam { qp_num: 0x42, ..Default::default() }, now),
            CmEvent::RepReceived(_) => cm.send_rtu(id, &[], now),
            CmEvent::DreqReceived { .. } => cm.send_drep(id, &[], now),
            CmEvent::SidrReqReceived { .. } => {
                let r = cm.send_sidr_rep(id, &SidrRepParam::default(), now);
                cm.destroy_id(id, now);
                r
            }
            CmEvent::RejReceived { .. }
            | CmEvent::ReqError
            | CmEvent::RepError
            | CmEvent::TimewaitExit
            | CmEvent::SidrRepReceived(_)
            | CmEvent::SidrReqError => {
                cm.destroy_id(id, now);
                Ok(())
            }
            _ => Ok(()),
        };
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    if let Ok(d) = decode(data) {
        let again = decode(&encode(d.header.tid.get(), &d.msg)).expect("a re-encoded MAD decodes");
        assert_eq!(again.msg, d.msg, "the round trip changed the message");
    }
    let t0 = Instant::now();
    let cm = start(Arc::new(Sink), t0);
    let mut rest = data;
    let mut n = 0u64;
    while let [len, tail @ ..] = rest {
        let take = (usize::from(*len) + 200).min(tail.len());
        let (mad, next) = tail.split_at(take);
        rest = next;
        n += 1;
        let now = t0 + Duration::from_millis(10 * n);
        let ev = cm.recv(&ReceivedMad { from: peer(), mad: mad.to_vec() }, now);
        consume(&cm, ev, now);
        let ev = cm.on_timer(now);
        consume(&cm, ev, now);
        // A record makes at most one ID (the backlog bounds the unanswered ones; this consumer
        // answers at once).
        assert!(cm.ids_alive() as u64 <= 2 + n, "an ID out of nowhere");
    }
    assert_eq!(cm.stats().mads_received, n);
    // Every retry runs out and every time-wait ends (the longest wait is 2^23 ms a try, at
    // most 16 tries): a month of timers leaves nothing scheduled.
    let end = t0 + Duration::from_secs(30 * 86_400);
    for _ in 0..10_000 {
        match cm.next_deadline() {
            Some(d) if d <= end => drop(cm.on_timer(d)),
            _ => break,
        }
    }
    assert_eq!(cm.next_deadline(), None, "a timer outlived every retry and time-wait");
    assert_eq!(cm.ids_in_timewait(), 0, "a destroyed ID outlived its time-wait");
}
