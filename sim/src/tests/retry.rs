//! RC retries on both ports (issue 21 §3, "the two ports agree"): what a requester does when its
//! responder has no receive WQE (`rnr_retry`, the responder's `min_rnr_timer`: IBTA 9.7.5.2.8,
//! Table 45) and when nobody answers (`timeout`, `retry_cnt`: IBTA 9.7.6.1.3). Every case runs
//! on the loopback port (one device, both QPs) and on the RoCE v2 port (two devices, each on a
//! 127/8 address it holds), and must end with the same completions on both.

use super::roce::{self, connect, end, init, received, recv, rtr_rts, send, wait};
use super::roce::{End, Opts, LONG, SGID};
use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::verbs::{qp_attr_mask as m, qp_state, QpAttr};
use pvrdma_abi::wqe::wc_status::*;
use std::net::IpAddr;
use std::time::Duration;
use zerocopy::little_endian::U32;
use zerocopy::FromZeros;

/// Which port a case runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Port {
    Loopback,
    Roce,
}

/// How the responder B starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    /// In RTS, connected back to A, with no receive posted.
    Ready,
    /// In INIT with one receive posted: it answers nothing.
    Init,
    /// In RTS with one receive posted, connected to A's QPN at another address: it answers
    /// nothing.
    Elsewhere,
}

/// What happens once A's first message was refused (RNR NAKed, or unanswered) `wait_tries`
/// times (at least once) and nothing completed for the case's `quiet` time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    Nothing,
    /// B posts a receive.
    PostRecv,
    /// B goes INIT -> RTR -> RTS, connected back to A.
    BringUp,
    /// A is moved to ERR.
    AToErr,
}

/// How many times A's first message was refused (each RNR, each unanswered try).
#[derive(Clone, Copy, Debug)]
enum Tries {
    Any,
    /// Exactly that many (on the RoCE port one more may come: a stale PSN sequence error NAK of
    /// a second message costs a try, see `roce/errors.rs`).
    Exactly(u64),
    AtLeast(u64),
}

struct Case {
    opts: Opts,
    peer: Peer,
    /// Messages A sends (wr_id 1, 2, ...).
    sends: u64,
    wait_tries: u64,
    quiet: Duration,
    then: Then,
    /// A's and B's completions, `(wr_id, status)`, and A's state at the end.
    a: &'static [(u64, u32)],
    b: &'static [(u64, u32)],
    a_state: u32,
    tries: Tries,
}

/// Both QPs, on one device (loopback) or two (RoCE).
struct Net {
    a: Drv,
    b: Option<Drv>,
    ea: End,
    eb: End,
    /// Where A and B are (their GIDs' addresses).
    ia: IpAddr,
    ib: IpAddr,
    /// The address `Peer::Elsewhere` names, held for the case.
    _nobody: Option<std::net::UdpSocket>,
}

impl Net {
    fn b(&self) -> &Drv {
        self.b.as_ref().unwrap_or(&self.a)
    }

    fn b_mut(&mut self) -> &mut Drv {
        self.b.as_mut().unwrap_or(&mut self.a)
    }
}

/// The address the loopback port's cases bind as A's RoCE v2 GID: it only names the port's own
/// GID (that port opens no socket), so a documentation address serves (RFC 5737).
const LOOPBACK_GID: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));

/// A connected to B with `o`; B as `peer` says. On the RoCE port each device holds a 127/8
/// address of its own ([`roce::device`]), and `Peer::Elsewhere` points B at one more that a
/// socket of the test holds and never reads, so nothing answers from it.
fn net(port: Port, o: &Opts, peer: Peer) -> Net {
    let mut net = match port {
        Port::Loopback => {
            let mut a = Drv::new(SimConfig::default());
            a.bind_gid(0, GID0);
            roce::bind_v2(&mut a, SGID, LOOPBACK_GID);
            let (ea, eb) = (end(&mut a, 16), end(&mut a, 16));
            Net { a, b: None, ea, eb, ia: LOOPBACK_GID, ib: LOOPBACK_GID, _nobody: None }
        }
        Port::Roce => {
            let mut a = roce::device(Default::default());
            let mut b = roce::device(Default::default());
            let (ia, ib) = (roce::ip(&a), roce::ip(&b));
            let (ea, eb) = (end(&mut a, 16), end(&mut b, 16));
            Net { a, b: Some(b), ea, eb, ia, ib, _nobody: None }
        }
    };
    let (qa, qb, ia, ib) = (net.ea.qp.qpn, net.eb.qp.qpn, net.ia, net.ib);
    connect(&mut net.a, qa, qb, ib, o);
    init(net.b_mut(), qb);
    if peer != Peer::Ready {
        recv(net.b(), &net.eb, 9, 0, 4096);
    }
    match peer {
        Peer::Init => {}
        Peer::Ready => bring_up(&mut net, o, ia),
        Peer::Elsewhere => {
            let nobody = roce::peer_socket();
            let at = nobody.local_addr().expect("the socket's address").ip();
            net._nobody = Some(nobody);
            bring_up(&mut net, o, at);
        }
    }
    net
}

/// B: INIT -> RTR -> RTS towards A's QP at `to` (A's address, or another), with `o`'s PSNs
/// mirrored.
fn bring_up(net: &mut Net, o: &Opts, to: IpAddr) {
    let (qa, qb) = (net.ea.qp.qpn, net.eb.qp.qpn);
    let ob = Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..*o };
    rtr_rts(net.b_mut(), qb, qa, to, &ob);
}

/// Whether A's first message was refused yet: RNR NAKed, or found no responder.
fn refused(port: Port, net: &Net) -> bool {
    let (a, b) = (net.a.dev.stats(), net.b().dev.stats());
    match port {
        Port::Loopback => a.packets_parked + a.packets_unanswered > 0,
        Port::Roce => a.roce_rnr_naks_received + b.roce_rx_dropped_qp > 0,
    }
}

/// How many times A's first message was tried and refused: each RNR, and each try that went
/// unanswered until its local ACK timer ran out.
fn tries(port: Port, net: &Net) -> u64 {
    let s = net.a.dev.stats();
    match port {
        Port::Loopback => s.packets_parked + s.packets_rnr_retries + s.packets_timeouts,
        Port::Roce => s.roce_rnr_naks_received + s.roce_timeouts,
    }
}

fn statuses(d: &Drv, e: &End, n: usize) -> Vec<(u64, u32)> {
    wait(d, e, n, LONG).iter().map(|c| (c.wr_id.get(), c.status.get())).collect()
}

/// Runs `case` on `port` and checks what it promises.
fn run(port: Port, case: &Case) {
    let mut net = net(port, &case.opts, case.peer);
    for i in 1..=case.sends {
        send(&net.a, &net.ea, i, &roce::pattern(i, 100), 128 * i, None);
    }
    let enough = || refused(port, &net) && tries(port, &net) >= case.wait_tries;
    let got = osdep::poll_until(&osdep::StdClock, LONG, enough);
    let (sa, sb) = (net.a.dev.stats(), net.b().dev.stats());
    let want = case.wait_tries;
    assert!(got, "{port:?}: A's first message not refused ({want} tries): {sa:?} {sb:?}");
    let any = || net.a.queued(&net.ea.cq.ring) > 0;
    let completed = osdep::poll_until(&osdep::StdClock, case.quiet, any);
    if case.quiet > Duration::ZERO {
        assert!(!completed, "{port:?}: A completed within {:?}", case.quiet);
        assert_eq!(net.a.dev.qp_state(net.ea.qp.qpn), Some(qp_state::RTS), "{port:?}");
    }
    act(&mut net, case.then, &case.opts);
    assert_eq!(statuses(&net.a, &net.ea, case.a.len()), case.a, "{port:?}: A's completions");
    assert_eq!(statuses(net.b(), &net.eb, case.b.len()), case.b, "{port:?}: B's completions");
    assert!(net.b().poll(&net.eb.cq).is_none(), "{port:?}: B completed more");
    if case.b.contains(&(9, SUCCESS)) {
        assert_eq!(received(net.b(), &net.eb, 0, 100), roce::pattern(1, 100), "{port:?}");
    }
    assert_eq!(net.a.dev.qp_state(net.ea.qp.qpn), Some(case.a_state), "{port:?}: A's state");
    let n = tries(port, &net);
    let slack = u64::from(port == Port::Roce);
    match case.tries {
        Tries::Any => {}
        Tries::Exactly(t) => {
            assert!((t..=t + slack).contains(&n), "{port:?}: {n} tries, {t} wanted")
        }
        Tries::AtLeast(t) => assert!(n >= t, "{port:?}: {n} tries, at least {t} wanted"),
    }
}

/// Does what `then` says.
fn act(net: &mut Net, then: Then, o: &Opts) {
    match then {
        Then::Nothing => {}
        Then::PostRecv => recv(net.b(), &net.eb, 9, 0, 4096),
        Then::BringUp => {
            let ia = net.ia;
            bring_up(net, o, ia)
        }
        Then::AToErr => {
            let mut a = QpAttr::new_zeroed();
            a.qp_state = U32::new(qp_state::ERR);
            assert_eq!(net.a.modify(net.ea.qp.qpn, m::STATE, a), 0);
        }
    }
}

/// Runs `case` on both ports.
fn agree(case: Case) {
    run(Port::Loopback, &case);
    run(Port::Roce, &case);
}

fn opts(timeout: u8, retry_cnt: u8, rnr_retry: u8, min_rnr_timer: u8) -> Opts {
    Opts { timeout, retry_cnt, rnr_retry, min_rnr_timer, ..Opts::default() }
}

/// Issue 21 §3: `rnr_retry` 0 fails the first RNR; A goes to ERR and its later WQE flushes.
#[test]
fn rnr_retry_0_fails_on_the_first_rnr_and_flushes_the_rest() {
    agree(Case {
        opts: opts(1, 7, 0, 1),
        peer: Peer::Ready,
        sends: 2,
        wait_tries: 0,
        quiet: Duration::ZERO,
        then: Then::Nothing,
        a: &[(1, RNR_RETRY_EXC_ERR), (2, WR_FLUSH_ERR)],
        b: &[],
        a_state: qp_state::ERR,
        tries: Tries::Exactly(1),
    });
}

/// Issue 21 §3: `rnr_retry` 3 with a 0.01 ms RNR timer: the first RNR and three retries, then
/// `RNR_RETRY_EXC_ERR`.
#[test]
fn rnr_retry_3_fails_after_three_retries() {
    agree(Case {
        opts: opts(1, 7, 3, 1),
        peer: Peer::Ready,
        sends: 2,
        wait_tries: 0,
        quiet: Duration::ZERO,
        then: Then::Nothing,
        a: &[(1, RNR_RETRY_EXC_ERR), (2, WR_FLUSH_ERR)],
        b: &[],
        a_state: qp_state::ERR,
        tries: Tries::Exactly(4),
    });
}

/// Issue 21 §3: a receive posted during the retries (`rnr_retry` 6, the RNR timer 40.96 ms),
/// once one retry was RNR NAKed too, takes the message.
#[test]
fn a_receive_posted_during_the_rnr_retries_is_delivered() {
    agree(Case {
        opts: opts(1, 7, 6, 24),
        peer: Peer::Ready,
        sends: 1,
        wait_tries: 2,
        quiet: Duration::ZERO,
        then: Then::PostRecv,
        a: &[(1, SUCCESS)],
        b: &[(9, SUCCESS)],
        a_state: qp_state::RTS,
        tries: Tries::Any,
    });
}

/// Issue 21 §3: `rnr_retry` 7 retries for ever (here every 1.28 ms): still outstanding after
/// three tries and 100 ms more, and delivered once a receive is posted.
#[test]
fn rnr_retry_7_waits_until_a_receive_is_posted() {
    agree(Case {
        opts: opts(1, 7, 7, 14),
        peer: Peer::Ready,
        sends: 1,
        wait_tries: 3,
        quiet: Duration::from_millis(100),
        then: Then::PostRecv,
        a: &[(1, SUCCESS)],
        b: &[(9, SUCCESS)],
        a_state: qp_state::RTS,
        tries: Tries::AtLeast(3),
    });
}

/// Issue 21 §3: `timeout` 0 never times out: a request nobody answers stays outstanding (200 ms
/// here) until A is moved to ERR, which flushes it.
#[test]
fn timeout_0_waits_for_an_answer_until_the_qp_is_flushed() {
    agree(Case {
        opts: opts(0, 7, 7, 1),
        peer: Peer::Init,
        sends: 1,
        wait_tries: 0,
        quiet: Duration::from_millis(200),
        then: Then::AToErr,
        a: &[(1, WR_FLUSH_ERR)],
        b: &[],
        a_state: qp_state::ERR,
        tries: Tries::Exactly(0),
    });
}

/// Issue 21 §3: `timeout` 1 (the 10 ms floor) and `retry_cnt` 2: the first try and two
/// retransmissions go unanswered, then `RETRY_EXC_ERR` and the rest flush.
#[test]
fn retry_cnt_2_fails_after_two_retransmissions() {
    agree(Case {
        opts: opts(1, 2, 7, 1),
        peer: Peer::Init,
        sends: 2,
        wait_tries: 0,
        quiet: Duration::ZERO,
        then: Then::Nothing,
        a: &[(1, RETRY_EXC_ERR), (2, WR_FLUSH_ERR)],
        b: &[],
        a_state: qp_state::ERR,
        tries: Tries::Exactly(3),
    });
}

/// Issue 21 §3: a responder whose address vector names another address (the loopback took its
/// requests from anyone who had its QPN) answers nothing: `RETRY_EXC_ERR` after the retries.
#[test]
fn a_responder_connected_to_another_address_answers_nothing() {
    agree(Case {
        opts: opts(1, 1, 7, 1),
        peer: Peer::Elsewhere,
        sends: 1,
        wait_tries: 0,
        quiet: Duration::ZERO,
        then: Then::Nothing,
        a: &[(1, RETRY_EXC_ERR)],
        b: &[],
        a_state: qp_state::ERR,
        tries: Tries::Exactly(2),
    });
}

/// Issue 21 §3: a responder that reaches RTR during the retries (`timeout` 16, 268 ms; 7
/// retries), once one timeout ran out, gets the next retransmission and takes the message.
#[test]
fn a_responder_reaching_rtr_during_the_retries_is_delivered() {
    agree(Case {
        opts: opts(16, 7, 7, 1),
        peer: Peer::Init,
        sends: 1,
        wait_tries: 1,
        quiet: Duration::ZERO,
        then: Then::BringUp,
        a: &[(1, SUCCESS)],
        b: &[(9, SUCCESS)],
        a_state: qp_state::RTS,
        tries: Tries::Any,
    });
}

/// Moves A through RTS -> SQD, SQD -> SQD with `mask` and `a`'s attributes, SQD -> RTS.
fn modify_in_sqd(net: &mut Net, mask: u32, mut a: QpAttr) {
    let qpn = net.ea.qp.qpn;
    let steps = [(qp_state::SQD, m::STATE), (qp_state::SQD, m::STATE | mask), (qp_state::RTS, m::STATE)];
    for (state, mask) in steps {
        a.qp_state = U32::new(state);
        assert_eq!(net.a.modify(qpn, mask, a), 0, "to state {state}");
    }
}

/// Issue 21 §3: retry attributes changed in SQD (IBTA 10.3.1) apply to the messages sent after
/// it on both ports (the RoCE requester kept the ones of its first message): a first message
/// with `rnr_retry` 7 is delivered, then SQD -> SQD sets `rnr_retry` 0 and the second, finding no
/// receive, fails on its first RNR.
#[test]
fn retry_attributes_changed_in_sqd_apply_to_later_messages() {
    for port in [Port::Loopback, Port::Roce] {
        let mut net = net(port, &opts(1, 7, 7, 1), Peer::Ready);
        recv(net.b(), &net.eb, 9, 0, 4096);
        send(&net.a, &net.ea, 1, &roce::pattern(1, 100), 128, None);
        assert_eq!(statuses(&net.a, &net.ea, 1), [(1, SUCCESS)], "{port:?}");
        let mut a = QpAttr::new_zeroed();
        a.rnr_retry = 0;
        modify_in_sqd(&mut net, m::RNR_RETRY, a);
        send(&net.a, &net.ea, 2, &roce::pattern(2, 100), 256, None);
        assert_eq!(statuses(&net.a, &net.ea, 1), [(2, RNR_RETRY_EXC_ERR)], "{port:?}");
        assert_eq!(statuses(net.b(), &net.eb, 1), [(9, SUCCESS)], "{port:?}");
    }
}
