//! CM MADs from outside, towards a listening librdmacm: a peer of the test's own making (a UDP
//! socket on port 4791 of a leased address, sending RoCE v2 UD datagrams to the device's QP1
//! with the GSI Q_Key, an IB CM of the `rdma-cm` crate above it) sends what a broken or hostile
//! peer would: MADs cut short, of another class version, of an unknown attribute, longer than a
//! MAD; REP, RTU, DREQ and DREP naming communication IDs the library never issued; a flood of
//! REQs; REQs, RTUs and DREQs twice. Each is dropped and counted ([`cm_counters`]), the
//! listener holds at most its backlog, every event reaches the program once, no ID is left
//! behind, and the listener still connects a real client afterwards. (Issue 23: "Hostile MADs
//! from outside".)

use crate::fixture::*;
use rdma_cm::cm::{Path, ReqParam};
use rdma_cm::mad::ip_cm::{ip_to_gid, service_id, IpCmHeader, IP_CM_HDR_LEN};
use rdma_cm::mad::{self, CmMad, Drep, Dreq, Rep, Rtu};
use rdma_cm::transport::{GSI_QKEY, GSI_QPN, MAD_SIZE};
use rdma_cm::{Cm, CmEvent, CmId, MadAddr, MadTransport, ReceivedMad};
use rdmacm_compat::abi::*;
use rdmacm_compat::diag::{cm_counters, CmCounters};
use rdmacm_compat::*;
use roce_wire::ud::{decode_ud, encode_ud, UdPacket, UD_SEND_ONLY};
use roce_wire::{Bth, IpContext};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The device index of the listener's device (`a`, the first of `HCA_DEVICES`).
pub(crate) const DEV_A: usize = 0;
/// `RDMA_PS_TCP`.
pub(crate) const PS_TCP: u16 = 0x0106;
/// The Starting PSN of the peer's REQs, and the QPN its first REQ names.
pub(crate) const REQ_PSN: u32 = 0x1234;
pub(crate) const FIRST_REQ_QPN: u32 = 0x4200;

/// Where the peer's CM sends: every MAD it sends is also kept, so a test can send it again.
struct Udp {
    sock: Arc<UdpSocket>,
    to: SocketAddr,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl MadTransport for Udp {
    fn send(&self, _to: &MadAddr, mad: &[u8]) -> std::io::Result<()> {
        self.sent.lock().unwrap().push(mad.to_vec());
        send_raw(&self.sock, self.to, mad);
        Ok(())
    }
}

/// Sends `payload` to QP1 at `to` as a UD SEND Only with the GSI Q_Key.
fn send_raw(sock: &UdpSocket, to: SocketAddr, payload: &[u8]) {
    let bth = Bth { opcode: UD_SEND_ONLY, pkey: 0xffff, dest_qp: GSI_QPN, ..Bth::default() };
    let p = UdPacket { bth, qkey: GSI_QKEY, src_qp: GSI_QPN, imm: None, payload };
    let mut out = Vec::new();
    encode_ud(&p, &IpContext::new(sock.local_addr().unwrap(), to), &mut out).expect("encode");
    sock.send_to(&out, to).expect("send");
}

/// The peer: its socket, the device's QP1 address, and its CM.
pub(crate) struct Peer {
    sock: Arc<UdpSocket>,
    dev: SocketAddr,
    pub(crate) cm: Cm,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    /// The QPN of the next REQ: each REQ names a QP of its own (a second REQ from the same QP
    /// of the same CA is a stale connection, answered REJ, IBTA 12.9.8.3.1).
    next_qpn: std::cell::Cell<u32>,
}

impl Peer {
    pub(crate) fn new(dev_ip: Ipv4Addr) -> Peer {
        let sock = Arc::new(netlease::udp_v4(4791));
        sock.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let dev = SocketAddr::new(IpAddr::V4(dev_ip), 4791);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let t = Arc::new(Udp { sock: sock.clone(), to: dev, sent: sent.clone() });
        Peer { sock, dev, cm: Cm::new(t, 0x0050_56ff_fe00_0bad), sent, next_qpn: std::cell::Cell::new(FIRST_REQ_QPN) }
    }

    pub(crate) fn ip(&self) -> IpAddr {
        self.sock.local_addr().unwrap().ip()
    }

    fn raw(&self, payload: &[u8]) {
        send_raw(&self.sock, self.dev, payload);
    }

    /// The last MAD the peer's CM sent, sent once more.
    fn resend_last(&self) {
        let last = self.sent.lock().unwrap().last().cloned().expect("a MAD sent");
        self.raw(&last);
    }

    /// A REQ for `port` from a new ID of the peer's CM, with a valid RDMA IP CM header.
    pub(crate) fn req(&self, port: u16) -> CmId {
        let (me, dev) = (self.ip(), self.dev.ip());
        let mut private_data = vec![0u8; IP_CM_HDR_LEN + 8];
        IpCmHeader { src: SocketAddr::new(me, 40000), dst: SocketAddr::new(dev, port) }.encode(&mut private_data);
        let dest = MadAddr { gid: ip_to_gid(dev), qpn: GSI_QPN, qkey: GSI_QKEY, hop_limit: 64, ..Default::default() };
        let path = Path {
            sgid: ip_to_gid(me),
            dgid: ip_to_gid(dev),
            hop_limit: 64,
            mtu: 3,
            pkey: 0xffff,
            packet_life_time: 14,
            ..Default::default()
        };
        let p = ReqParam {
            path,
            dest,
            service_id: service_id(PS_TCP, port),
            qp_num: self.next_qpn.replace(self.next_qpn.get() + 1),
            qp_type: 2,
            starting_psn: REQ_PSN,
            private_data,
            responder_resources: 1,
            initiator_depth: 1,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            retry_count: 7,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            ..Default::default()
        };
        let id = self.cm.create_id();
        self.cm.send_req(id, &p, Instant::now()).expect("send_req");
        id
    }

    /// Feeds what arrives to the peer's CM until `want` holds for an event (or [`WAIT`] ends:
    /// `None`); returns that event's ID and the event.
    pub(crate) fn until(&self, want: impl Fn(&CmEvent) -> bool) -> Option<(CmId, CmEvent)> {
        let end = Instant::now() + WAIT;
        let mut buf = [0u8; 2048];
        while Instant::now() < end {
            let Ok((n, from)) = self.sock.recv_from(&mut buf) else { continue };
            let Ok(ud) = decode_ud(&buf[..n], Some(&IpContext::new(from, self.sock.local_addr().unwrap()))) else {
                continue;
            };
            let from = MadAddr { gid: ip_to_gid(from.ip()), qpn: ud.src_qp, qkey: ud.qkey, ..Default::default() };
            let got = self.cm.recv(&ReceivedMad { from, mad: ud.payload.to_vec() }, Instant::now());
            if let Some(e) = got.into_iter().find(|(_, e)| want(e)) {
                return Some(e);
            }
        }
        None
    }
}

/// The device's CM counters once `done` holds for them (bounded by [`WAIT`]).
fn counters_when(what: &str, done: impl Fn(&CmCounters) -> bool) -> CmCounters {
    let end = Instant::now() + WAIT;
    loop {
        let c = cm_counters(DEV_A).expect("the device's CM");
        if done(&c) {
            return c;
        }
        assert!(Instant::now() < end, "{what}: not within {WAIT:?}: {c:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The CONNECT_REQUEST events waiting on `ch` (those that come within `quiet` of each other).
fn drain_requests(ch: *mut rdma_event_channel, quiet: Duration) -> Vec<*mut rdma_cm_id> {
    let mut ids = Vec::new();
    while readable(ch, quiet) {
        let (t, id) = next_with(ch, |e| (e.event, e.id));
        assert_eq!(name(t), name(RDMA_CM_EVENT_CONNECT_REQUEST));
        ids.push(id);
    }
    ids
}

/// A CM message of the peer's, encoded.
fn encoded(msg: CmMad) -> [u8; MAD_SIZE] {
    mad::encode(0x77, &msg)
}

/// A client on device `b` connects to `to` (ids without QPs: CONNECT_RESPONSE, then
/// rdma_establish), the listener's side accepts, both see the connection and then its end.
fn connects(ch: *mut rdma_event_channel, b: Ipv4Addr, to: SocketAddr) {
    let cch = channel();
    let c = routed(cch, RDMA_PS_TCP, b, to);
    let mut cp = conn_param(0x51);
    // SAFETY: ids of ours; parameters on the stack.
    unsafe {
        assert_eq!(rdma_connect(c, &mut cp), 0, "rdma_connect: errno {}", errno());
        let s = next_with(ch, |e| {
            assert_eq!(name(e.event), name(RDMA_CM_EVENT_CONNECT_REQUEST));
            e.id
        });
        let mut sp = conn_param(0x52);
        assert_eq!(rdma_accept(s, &mut sp), 0, "rdma_accept: errno {}", errno());
        expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
        assert_eq!(rdma_establish(c), 0, "rdma_establish: errno {}", errno());
        expect(ch, RDMA_CM_EVENT_ESTABLISHED);
        assert_eq!(rdma_disconnect(c), 0);
        expect(ch, RDMA_CM_EVENT_DISCONNECTED);
        // The listener's side answers (its DREP), which ends the client's disconnect.
        assert_eq!(rdma_disconnect(s), 0);
        expect(cch, RDMA_CM_EVENT_DISCONNECTED);
        assert_eq!(rdma_destroy_id(s), 0);
        assert_eq!(rdma_destroy_id(c), 0);
        rdma_destroy_event_channel(cch);
    }
}

/// Destroys the listener and its channel; then the device's CM holds no ID but those in
/// time-wait.
fn close(l: *mut rdma_cm_id, ch: *mut rdma_event_channel) {
    // SAFETY: ids and a channel of ours, no event outstanding.
    unsafe {
        assert_eq!(rdma_destroy_id(l), 0);
        rdma_destroy_event_channel(ch);
    }
    counters_when("no ID left but time-wait ones", |c| c.ids_alive == c.ids_in_timewait);
}

#[test]
fn mads_the_cm_cannot_take_are_dropped_and_counted_and_the_listener_still_connects() {
    run(|a, b| {
        let ch = channel();
        let (l, laddr) = listener(ch, RDMA_PS_TCP, a);
        let peer = Peer::new(a);
        let before = cm_counters(DEV_A).expect("the listener made the device's CM").stats;

        // Three malformed: cut short, class version 1, attribute 0x0099; one longer than a MAD,
        // which the device's GSI QP drops before the CM sees it.
        let rtu = encoded(CmMad::Rtu(Box::new(Rtu { local_comm_id: 1, remote_comm_id: 2, private_data: [0; 224] })));
        peer.raw(&rtu[..100]);
        let mut v1 = rtu;
        v1[2] = 1;
        peer.raw(&v1);
        let mut unknown = rtu;
        unknown[16..18].copy_from_slice(&0x0099u16.to_be_bytes());
        peer.raw(&unknown);
        peer.raw(&[rtu.as_slice(), &[0u8; 64]].concat());
        // Four naming communication IDs the library never issued.
        let ghost = 0x5eed_0000;
        peer.raw(&rtu);
        let dreq = Dreq { local_comm_id: ghost, remote_comm_id: ghost + 1, remote_qpn: 0x4242, private_data: [0; 220] };
        peer.raw(&encoded(CmMad::Dreq(Box::new(dreq))));
        peer.raw(&encoded(CmMad::Drep(Box::new(Drep {
            local_comm_id: ghost,
            remote_comm_id: ghost + 2,
            private_data: [0; 224],
        }))));
        let rep =
            Rep { local_comm_id: ghost, remote_comm_id: ghost + 3, local_qpn: 0x4242, ..Rep::read(&[0; MAD_SIZE]) };
        peer.raw(&encoded(CmMad::Rep(Box::new(rep))));

        let c = counters_when("7 MADs taken", |c| c.stats.mads_received >= before.mads_received + 7);
        assert_eq!(
            c.stats.mads_received - before.mads_received,
            7,
            "the GSI passed a MAD longer than 256 bytes: {c:?}"
        );
        assert_eq!(c.stats.dropped_malformed - before.dropped_malformed, 3, "{c:?}");
        let unknown_ids =
            c.stats.dropped_unknown_id + c.stats.rejected_stale - before.dropped_unknown_id - before.rejected_stale;
        assert_eq!(unknown_ids, 4, "{c:?}");
        assert!(!readable(ch, Duration::from_millis(100)), "an event for a forged MAD");

        // A REQ for a port nobody listens on is rejected: Invalid Service ID (IBTA 12.6.7.2).
        let port = if laddr.port() == u16::MAX { 1 } else { laddr.port() + 1 };
        let _ = peer.req(port);
        let rej = peer.until(|e| matches!(e, CmEvent::RejReceived { .. }));
        assert!(matches!(rej, Some((_, CmEvent::RejReceived { reason: 8, .. }))), "{rej:?}");

        connects(ch, b, laddr);
        close(l, ch);
    })
}

#[test]
fn a_req_flood_holds_at_most_the_backlog_and_leaves_no_id() {
    run(|a, _| {
        let ch = channel();
        let (l, laddr) = listener(ch, RDMA_PS_TCP, a);
        let peer = Peer::new(a);
        let before = cm_counters(DEV_A).unwrap();
        const FLOOD: u64 = 64;
        for _ in 0..FLOOD {
            peer.req(laddr.port());
        }
        let c = counters_when("the flood taken", |c| c.stats.mads_received >= before.stats.mads_received + FLOOD);
        let held = drain_requests(ch, Duration::from_millis(300));
        // fixture::listener's backlog is 8.
        assert_eq!(held.len(), 8, "{c:?}");
        let c = cm_counters(DEV_A).unwrap();
        assert_eq!(c.stats.dropped_backlog - before.stats.dropped_backlog, FLOOD - 8, "{c:?}");
        assert!(c.ids_alive <= before.ids_alive + 8, "the flood left {} IDs: {c:?}", c.ids_alive);
        for id in held {
            // SAFETY: a request id of ours.
            unsafe {
                assert_eq!(rdma_reject(id, null_mut(), 0), 0, "rdma_reject: errno {}", errno());
                assert_eq!(rdma_destroy_id(id), 0);
            }
        }
        let mut rejected = 0;
        while peer.until(|e| matches!(e, CmEvent::RejReceived { .. })).is_some() {
            rejected += 1;
            if rejected == 8 {
                break;
            }
        }
        assert_eq!(rejected, 8, "REJs the peer received");
        close(l, ch);
    })
}

#[test]
fn duplicated_mads_raise_each_event_once() {
    run(|a, _| {
        let ch = channel();
        let (l, laddr) = listener(ch, RDMA_PS_TCP, a);
        let peer = Peer::new(a);
        let before = cm_counters(DEV_A).unwrap().stats;

        let pid = peer.req(laddr.port());
        peer.resend_last();
        peer.resend_last();
        let held = drain_requests(ch, Duration::from_millis(300));
        assert_eq!(held.len(), 1, "one CONNECT_REQUEST for a REQ sent three times");
        let s = held[0];
        let mut sp = conn_param(0x61);
        // SAFETY: a request id of ours; parameters on the stack.
        assert_eq!(unsafe { rdma_accept(s, &mut sp) }, 0, "rdma_accept: errno {}", errno());
        let rep = peer.until(|e| matches!(e, CmEvent::RepReceived(_)));
        assert!(matches!(rep, Some((id, _)) if id == pid), "{rep:?}");
        peer.cm.send_rtu(pid, &[], Instant::now()).expect("send_rtu");
        peer.resend_last();
        expect(ch, RDMA_CM_EVENT_ESTABLISHED);
        peer.cm.send_dreq(pid, &[], Instant::now()).expect("send_dreq");
        peer.resend_last();
        expect(ch, RDMA_CM_EVENT_DISCONNECTED);
        // The DREP goes when the program answers the disconnect (Linux `cma.c`: a DREQ raises
        // DISCONNECTED; rdma_disconnect then sends the DREP).
        // SAFETY: an id of ours.
        assert_eq!(unsafe { rdma_disconnect(s) }, 0, "rdma_disconnect: errno {}", errno());
        assert!(peer.until(|e| matches!(e, CmEvent::DrepReceived { .. })).is_some(), "no DREP");
        // The one event left: the end of time-wait (Linux `cma.c` raises it for every id).
        expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT);
        assert!(!readable(ch, Duration::from_millis(200)), "a second event for a duplicate");
        let c = counters_when("the duplicates counted", |c| c.stats.duplicates >= before.duplicates + 3);
        assert_eq!(c.stats.duplicates - before.duplicates, 4, "REQ twice, RTU once, DREQ once: {c:?}");
        // SAFETY: an id of ours, its events acknowledged.
        assert_eq!(unsafe { rdma_destroy_id(s) }, 0);
        close(l, ch);
    })
}
