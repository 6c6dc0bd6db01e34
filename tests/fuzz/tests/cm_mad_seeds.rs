//! The `cm_mad` target's seed corpus, built here rather than fetched: the MADs a real peer CM
//! sends the fuzzed CM in whole exchanges (a connection it accepts and the peer ends, a
//! connection it starts, a SIDR query), one seed each, plus each MAD alone. Run:
//! `cargo test --release --test cm_mad_seeds` in `tests/fuzz`; with `CM_MAD_WRITE_SEEDS=1` it
//! (re)writes `corpus/cm_mad/`, otherwise it checks the committed seeds are these and that the
//! harness passes them.

use pvrdma_fuzz::cm_mad::{consume, peer, start, SERVICE};
use rdma_cm::cm::{RepParam, ReqParam, SidrReqParam};
use rdma_cm::transport::MadAddr;
use rdma_cm::{Cm, CmEvent, MadTransport, ReceivedMad};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Queue(Mutex<Vec<Vec<u8>>>);

impl MadTransport for Queue {
    fn send(&self, _: &MadAddr, mad: &[u8]) -> std::io::Result<()> {
        self.0.lock().unwrap().push(mad.to_vec());
        Ok(())
    }
}

fn take(q: &Queue) -> Vec<Vec<u8>> {
    std::mem::take(&mut *q.0.lock().unwrap())
}

/// Runs the two CMs until quiet; returns what the peer sent the fuzzed CM, in order. When
/// quiet the first time, the peer's clock moves past the hold of a REQ for a service nobody
/// listens on (docs/cm.md), so its REJ for the fuzzed CM's own REQ is sent and recorded too.
fn exchange(setup: impl FnOnce(&Cm, Instant)) -> Vec<Vec<u8>> {
    let mut now = Instant::now();
    let (to_peer, to_fuzzed) = (Arc::new(Queue::default()), Arc::new(Queue::default()));
    let fuzzed = start(to_peer.clone(), now);
    let other = Cm::with_seed(to_fuzzed.clone(), 0x0050_5600_0000_0002, 7);
    setup(&other, now);
    let mut record = Vec::new();
    let mut timers_run = false;
    for _ in 0..100 {
        let (a, b) = (take(&to_fuzzed), take(&to_peer));
        if a.is_empty() && b.is_empty() {
            if timers_run {
                break;
            }
            timers_run = true;
            now += Duration::from_millis(150);
            let _ = other.on_timer(now);
            continue;
        }
        for m in a {
            let ev = fuzzed.recv(&ReceivedMad { from: peer(), mad: m.clone() }, now);
            consume(&fuzzed, ev, now);
            record.push(m);
        }
        for m in b {
            for (id, e) in other.recv(&ReceivedMad { from: peer(), mad: m }, now) {
                // The peer ends what it established.
                if let CmEvent::RtuReceived { .. } = e {
                    other.send_dreq(id, b"bye", now).unwrap();
                }
                if let CmEvent::ReqReceived { .. } = e {
                    other.send_rep(id, &RepParam { qp_num: 10, ..Default::default() }, now).unwrap();
                }
                if let CmEvent::RepReceived(_) = e {
                    other.send_rtu(id, &[], now).unwrap();
                    other.send_dreq(id, &[], now).unwrap();
                }
            }
        }
    }
    record
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let dest = peer();
    let connect = exchange(|other, t0| {
        let id = other.create_id();
        let p = ReqParam { dest, service_id: SERVICE, qp_type: 2, qp_num: 9, max_cm_retries: 2, ..Default::default() };
        other.send_req(id, &p, t0).unwrap();
    });
    let accept = exchange(|other, t0| {
        let l = other.create_id();
        other.listen(l, SERVICE, 4).unwrap();
        let _ = t0;
    });
    let sidr = exchange(|other, t0| {
        let id = other.create_id();
        let p = SidrReqParam { dest, service_id: SERVICE, timeout_ms: 100, max_cm_retries: 1, ..Default::default() };
        other.send_sidr_req(id, &p, t0).unwrap();
    });
    let record =
        |mads: &[Vec<u8>]| mads.iter().flat_map(|m| [vec![(m.len() - 200) as u8], m.clone()].concat()).collect();
    let mut out = vec![
        ("connect".to_string(), record(&connect)),
        ("accept".to_string(), record(&accept)),
        ("sidr".to_string(), record(&sidr)),
    ];
    for (i, m) in connect.iter().chain(&accept).chain(&sidr).enumerate() {
        out.push((format!("single-{i}-attr-{:02x}", m[17]), record(std::slice::from_ref(m))));
    }
    out
}

#[test]
fn seed_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/cm_mad");
    let seeds = seeds();
    assert!(seeds.len() >= 5, "the exchanges sent too little: {}", seeds.len());
    if std::env::var("CM_MAD_WRITE_SEEDS").as_deref() == Ok("1") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, data) in &seeds {
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
    for (name, data) in &seeds {
        let committed = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        assert_eq!(&committed, data, "seed {name} differs from what the exchange sends");
        pvrdma_fuzz::cm_mad::run(data);
    }
}
