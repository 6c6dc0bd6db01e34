//! Two CMs over an in-memory wire with a fake clock: every MAD one sends is queued for the
//! other (or dropped by a rule), [`Net::pump`] delivers until the wire is quiet, and time moves
//! only when a test says so (`Net::at`, `Net::run_until`): no sleeping, every wait a bound.

use rdma_cm::cm::{Path, RepParam, ReqParam};
use rdma_cm::transport::{MadAddr, GSI_QKEY, GSI_QPN};
use rdma_cm::{Cm, CmEvent, CmId, MadTransport, ReceivedMad};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

pub const GUID_A: u64 = 0x0050_5600_00aa_0001;
pub const GUID_B: u64 = 0x0050_5600_00bb_0002;
pub const SERVICE: u64 = 0x0000_0000_0106_4E20;

pub fn gid(last: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[10, 0, 0, last]);
    g
}

/// The address of a side's QP1 as the other side sees it.
pub fn addr(side: Side) -> MadAddr {
    let last = if side == Side::A { 1 } else { 2 };
    MadAddr { gid: gid(last), qpn: GSI_QPN, qkey: GSI_QKEY, sgid_index: 1, hop_limit: 64, ..Default::default() }
}

/// A drop rule: drop the next `count` MADs of `attr_id` sent by `side`.
struct Drop {
    side: Side,
    attr_id: u16,
    count: usize,
}

#[derive(Default)]
struct WireState {
    to_a: VecDeque<ReceivedMad>,
    to_b: VecDeque<ReceivedMad>,
    drops: Vec<Drop>,
    /// Every MAD sent, in order, by whom, and whether the wire dropped it.
    log: Vec<(Side, Vec<u8>, bool)>,
}

struct Wire {
    side: Side,
    state: Arc<Mutex<WireState>>,
}

impl MadTransport for Wire {
    fn send(&self, to: &MadAddr, mad: &[u8]) -> std::io::Result<()> {
        assert_eq!(mad.len(), 256, "a CM MAD is 256 bytes");
        assert_eq!((to.qpn, to.qkey), (GSI_QPN, GSI_QKEY), "CM MADs go to QP1 with the GSI Q_Key");
        let mut s = self.state.lock().unwrap();
        let attr_id = u16::from_be_bytes([mad[16], mad[17]]);
        let side = self.side;
        let dropped = match s.drops.iter_mut().find(|d| d.side == side && d.attr_id == attr_id && d.count > 0) {
            Some(d) => {
                d.count -= 1;
                true
            }
            None => false,
        };
        s.log.push((side, mad.to_vec(), dropped));
        if !dropped {
            let (peer, q) = match side {
                Side::A => (Side::B, &mut s.to_b),
                Side::B => (Side::A, &mut s.to_a),
            };
            let _ = peer;
            q.push_back(ReceivedMad { from: addr(side), mad: mad.to_vec() });
        }
        Ok(())
    }
}

pub struct Net {
    pub a: Cm,
    pub b: Cm,
    pub t0: Instant,
    state: Arc<Mutex<WireState>>,
}

pub type Events = Vec<(Side, CmId, CmEvent)>;

impl Net {
    pub fn new() -> Net {
        let state = Arc::new(Mutex::new(WireState::default()));
        let a = Cm::new(Arc::new(Wire { side: Side::A, state: state.clone() }), GUID_A);
        let b = Cm::new(Arc::new(Wire { side: Side::B, state: state.clone() }), GUID_B);
        Net { a, b, t0: Instant::now(), state }
    }

    pub fn cm(&self, side: Side) -> &Cm {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }

    pub fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Drops the next `count` MADs of `attr_id` that `side` sends.
    pub fn drop_next(&self, side: Side, attr_id: u16, count: usize) {
        self.state.lock().unwrap().drops.push(Drop { side, attr_id, count });
    }

    /// Puts raw bytes on the wire to `to` as if `from` sent them.
    pub fn inject(&self, to: Side, from: MadAddr, mad: Vec<u8>) {
        let mut s = self.state.lock().unwrap();
        let q = if to == Side::A { &mut s.to_a } else { &mut s.to_b };
        q.push_back(ReceivedMad { from, mad });
    }

    /// Takes the MADs queued for `to` without delivering them (to reorder or replay them).
    pub fn hold(&self, to: Side) -> Vec<ReceivedMad> {
        let mut s = self.state.lock().unwrap();
        let q = if to == Side::A { &mut s.to_a } else { &mut s.to_b };
        q.drain(..).collect()
    }

    /// Every MAD sent so far: who sent it, its bytes, whether the wire dropped it.
    pub fn log(&self) -> Vec<(Side, Vec<u8>, bool)> {
        self.state.lock().unwrap().log.clone()
    }

    /// The attribute IDs sent so far by `side` (dropped ones included).
    pub fn sent(&self, side: Side) -> Vec<u16> {
        self.log().iter().filter(|(s, _, _)| *s == side).map(|(_, m, _)| u16::from_be_bytes([m[16], m[17]])).collect()
    }

    pub fn count_sent(&self, side: Side, attr_id: u16) -> usize {
        self.sent(side).iter().filter(|&&a| a == attr_id).count()
    }

    /// Delivers everything on the wire (and what the answers put there) at `now`; at most
    /// 10000 MADs, so a ping-pong bug fails instead of hanging.
    pub fn pump(&self, now: Instant) -> Events {
        let mut events = Vec::new();
        for _ in 0..10_000 {
            let next = {
                let mut s = self.state.lock().unwrap();
                match s.to_a.pop_front() {
                    Some(m) => Some((Side::A, m)),
                    None => s.to_b.pop_front().map(|m| (Side::B, m)),
                }
            };
            let Some((side, m)) = next else { return events };
            events.extend(self.cm(side).recv(&m, now).into_iter().map(|(id, e)| (side, id, e)));
        }
        panic!("the wire never went quiet");
    }

    /// Runs both CMs' timers and the wire up to `end`, deadline by deadline.
    pub fn run_until(&self, end: Instant) -> Events {
        let mut events = self.pump(end.min(self.t0));
        for _ in 0..10_000 {
            let next = [self.a.next_deadline(), self.b.next_deadline()].into_iter().flatten().min();
            let Some(t) = next.filter(|&t| t <= end) else { return events };
            events.extend(self.a.on_timer(t).into_iter().map(|(id, e)| (Side::A, id, e)));
            events.extend(self.b.on_timer(t).into_iter().map(|(id, e)| (Side::B, id, e)));
            events.extend(self.pump(t));
        }
        panic!("the timers never settled");
    }
}

/// The path A uses to reach B: RoCE v2, packet life time 14 (64 ms), MTU 1024.
pub fn path() -> Path {
    Path {
        sgid: gid(1),
        dgid: gid(2),
        sgid_index: 1,
        flow_label: 0x12345,
        traffic_class: 0,
        hop_limit: 64,
        mtu: 3,
        rate: 0,
        packet_life_time: 14,
        pkey: 0xFFFF,
        sl: 0,
    }
}

/// The REQ timeouts these tests use: response 18 (1024 ms) each way, 3 retries.
pub fn req_param(private_data: &[u8]) -> ReqParam {
    ReqParam {
        path: path(),
        dest: addr(Side::B),
        service_id: SERVICE,
        qp_num: 0x11,
        qp_type: 2,
        starting_psn: 0x1000,
        private_data: private_data.to_vec(),
        responder_resources: 4,
        initiator_depth: 2,
        remote_cm_response_timeout: 18,
        local_cm_response_timeout: 18,
        flow_control: true,
        retry_count: 7,
        rnr_retry_count: 7,
        max_cm_retries: 3,
        srq: false,
    }
}

/// The REQ's wait before a resend: 2 * 64 ms + 1024 ms.
pub const REQ_WAIT_MS: u64 = 2 * 64 + 1024;
/// The REP's and the passive DREQ's wait: the REQ's Local CM Response Timeout, 1024 ms.
pub const REP_WAIT_MS: u64 = 1024;

pub fn rep_param(private_data: &[u8]) -> RepParam {
    RepParam {
        qp_num: 0x22,
        starting_psn: 0x2000,
        private_data: private_data.to_vec(),
        responder_resources: 2,
        initiator_depth: 4,
        rnr_retry_count: 7,
        ..Default::default()
    }
}

/// The one event matching `f`, or a panic listing what there was.
pub fn only<T>(events: &Events, what: &str, f: impl Fn(&(Side, CmId, CmEvent)) -> Option<T>) -> T {
    let mut hits: Vec<T> = events.iter().filter_map(&f).collect();
    assert_eq!(hits.len(), 1, "expected one {what}, got {} in {events:#?}", hits.len());
    hits.remove(0)
}

/// A connection set up between a fresh A and B: (net, A's ID, B's listener, B's ID), both
/// established at t = 0.
pub fn connected() -> (Net, CmId, CmId, CmId) {
    let net = Net::new();
    let listen = net.b.create_id();
    net.b.listen(listen, SERVICE, 8).unwrap();
    let a = net.a.create_id();
    net.a.send_req(a, &req_param(b"hello"), net.t0).unwrap();
    let ev = net.pump(net.t0);
    let b =
        only(&ev, "REQ event", |(s, id, e)| matches!(e, CmEvent::ReqReceived { .. } if *s == Side::B).then_some(*id));
    net.b.send_rep(b, &rep_param(b"welcome"), net.t0).unwrap();
    let ev = net.pump(net.t0);
    only(&ev, "REP event", |(s, id, e)| {
        matches!(e, CmEvent::RepReceived(_) if *s == Side::A && *id == a).then_some(())
    });
    net.a.send_rtu(a, b"rtu", net.t0).unwrap();
    let ev = net.pump(net.t0);
    only(&ev, "RTU event", |(s, id, e)| {
        matches!(e, CmEvent::RtuReceived { .. } if *s == Side::B && *id == b).then_some(())
    });
    (net, a, listen, b)
}
