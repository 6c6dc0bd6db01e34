//! An untrusted device: garbage it writes into a command's response (handles, keys, queue
//! sizes, port attributes) and into a CQE. Nothing the device writes is believed. (From the
//! third breaker round of issue 10; the duplicate QP handle from the first.)

use hca::ProbeOptions;
use ib_core::{Error, QpInitAttr, QpType, RecvWr, Sge, WcStatus};
use pvrdma_abi::cmd::opcode;
use pvrdma_abi::wqe::{wc_opcode, Cqe};
use std::sync::Arc;
use tests::fixture::*;
use tests::rewrite::Rewrite;
use zerocopy::little_endian::{U32, U64};

/// The probe's self-test creates QPs, which a rewriting device would break: declare the encoding.
fn opts() -> ProbeOptions {
    ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() }
}

fn qp_attr<'a>(cq: &'a ib_core::Cq) -> QpInitAttr<'a> {
    QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap: cap(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    }
}

#[test]
fn a_create_cq_response_with_another_cqe_is_refused() {
    for (what, f) in [
        ("twice", (|c| c * 2) as fn(u32) -> u32),
        ("half", |c: u32| c / 2),
        ("zero", |_| 0),
        ("u32::MAX", |_| u32::MAX),
    ] {
        let plat = Arc::new(Rewrite::new(opcode::CREATE_CQ, 20, f));
        let dev = hca::probe(plat, opts()).unwrap();
        let got = dev.create_cq(16, None).map(|c| c.handle());
        assert!(matches!(got, Err(Error::BadResponse(_))), "cqe {what}: {got:?}");
    }
}

#[test]
fn a_create_qp_response_with_other_queue_sizes_is_refused() {
    // Offsets in CreateQpResp: max_send_wr 20, max_recv_wr 24, max_send_sge 28, max_recv_sge 32.
    let mut accepted = Vec::new();
    for (what, off, f) in [
        ("max_send_wr 1", 20u64, (|_| 1) as fn(u32) -> u32),
        ("max_recv_wr 1", 24, |_| 1),
        ("max_send_sge 0", 28, |_| 0),
        ("max_recv_sge 0", 32, |_| 0),
        ("max_send_wr u32::MAX", 20, |_| u32::MAX),
    ] {
        let plat = Arc::new(Rewrite::new(opcode::CREATE_QP, off, f));
        let dev = hca::probe(plat, opts()).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(16, None).unwrap();
        if pd.create_qp(&qp_attr(&cq)).is_ok() {
            accepted.push(what);
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}

#[test]
fn a_create_qp_response_naming_qp0_or_qp1_is_refused() {
    for qpn in [0u32, 1] {
        let plat = Arc::new(Rewrite::new(opcode::CREATE_QP, 16, move |_| qpn));
        let dev = hca::probe(plat, opts()).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(16, None).unwrap();
        match pd.create_qp(&qp_attr(&cq)) {
            Err(_) => {}
            Ok(q) => panic!("the driver took QPN {} for an RC QP", q.qpn()),
        }
    }
}

#[test]
fn a_receive_cqe_longer_than_the_posted_buffer_is_not_success() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let q = rc_qp(&pd, &cq, &cq);
    let mr = pd.alloc_mr(4096, ib_core::access::LOCAL_WRITE).unwrap();
    connect(&q, q.qpn(), gid(&dev));
    let sge = Sge { addr: mr.addr(), length: 64, lkey: mr.lkey() };
    q.post_recv(&RecvWr { wr_id: 7, sg_list: &[sge] }).unwrap();
    let mut lies = Vec::new();
    for byte_len in [65u32, 4097, 1 << 20, u32::MAX] {
        let cqe = Cqe {
            wr_id: U64::new(7),
            qp: U64::new(u64::from(q.qpn())),
            opcode: U32::new(wc_opcode::RECV),
            byte_len: U32::new(byte_len),
            src_qp: U32::new(q.qpn()),
            port_num: 1,
            ..Default::default()
        };
        assert!(sim.device().post_cqe(cq.handle(), &cqe, false));
        let wc = poll_n(&cq, 1)[0];
        if wc.status == WcStatus::Success && wc.byte_len > 64 {
            lies.push(byte_len);
        }
    }
    assert_eq!(lies, Vec::<u32>::new(), "byte_len past the 64-byte buffer reported as success");
}

/// A CQE naming `q` with `opcode` from `src_qp`, success, one byte.
fn cqe_for(q: &ib_core::Qp, opcode: u32, src_qp: u32) -> Cqe {
    Cqe {
        wr_id: U64::new(5),
        qp: U64::new(u64::from(q.qpn())),
        opcode: U32::new(opcode),
        byte_len: U32::new(1),
        src_qp: U32::new(src_qp),
        port_num: 1,
        ..Default::default()
    }
}

#[test]
fn a_cqe_on_the_cq_the_qp_does_not_complete_that_direction_into_is_not_success() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(16, None).unwrap();
    let rcq = dev.create_cq(16, None).unwrap();
    let q = rc_qp(&pd, &scq, &rcq);
    assert!(sim.device().post_cqe(scq.handle(), &cqe_for(&q, wc_opcode::RECV, q.qpn()), false));
    assert!(sim.device().post_cqe(rcq.handle(), &cqe_for(&q, wc_opcode::SEND, 0), false));
    let (on_send_cq, on_recv_cq) = (poll_n(&scq, 1)[0], poll_n(&rcq, 1)[0]);
    assert_ne!(on_send_cq.status, WcStatus::Success, "RECV on the send CQ: {on_send_cq:?}");
    assert_ne!(on_recv_cq.status, WcStatus::Success, "SEND on the recv CQ: {on_recv_cq:?}");
}

#[test]
fn a_receive_cqe_for_nothing_posted_from_a_stranger_is_not_success() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let q = rc_qp(&pd, &cq, &cq);
    connect(&q, q.qpn(), gid(&dev));
    assert!(sim.device().post_cqe(cq.handle(), &cqe_for(&q, wc_opcode::RECV, 0x777), false));
    let wc = poll_n(&cq, 1)[0];
    assert_ne!(wc.status, WcStatus::Success, "{wc:?}");
}

#[test]
fn handles_and_keys_the_device_answers_twice_are_refused() {
    let mut accepted = Vec::new();
    for (what, op, off) in [
        ("MR handle", opcode::CREATE_MR, 16u64),
        ("lkey", opcode::CREATE_MR, 20),
        ("rkey", opcode::CREATE_MR, 24),
        ("PD handle", opcode::CREATE_PD, 16),
        ("user context handle", opcode::CREATE_UC, 16),
    ] {
        let mut first = None;
        let plat = Arc::new(Rewrite::new(op, off, move |h| *first.get_or_insert(h)));
        let dev = hca::probe(plat, opts()).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let twice = if op == opcode::CREATE_MR {
            let _first = pd.alloc_mr(4096, 0).unwrap();
            pd.alloc_mr(4096, 0).is_ok()
        } else if op == opcode::CREATE_UC {
            let _first = dev.alloc_ucontext().unwrap();
            dev.alloc_ucontext().is_ok()
        } else {
            dev.alloc_pd().is_ok()
        };
        if twice {
            accepted.push(what);
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}

#[test]
fn query_port_answers_outside_their_fields_are_refused() {
    // Offsets in QueryPortResp: attrs at 16; state +0, max_mtu +4, active_mtu +8,
    // gid_tbl_len +12, max_msg_sz +20.
    let mut accepted = Vec::new();
    for (what, off, v) in [
        ("state 77", 16u64, 77u32),
        ("max_mtu 99", 20, 99),
        ("active_mtu 0", 24, 0),
        ("gid_tbl_len u32::MAX", 28, u32::MAX),
        ("gid_tbl_len 0", 28, 0),
        ("max_msg_sz 0", 36, 0),
    ] {
        let plat = Arc::new(Rewrite::new(opcode::QUERY_PORT, off, move |_| v));
        if let Ok(dev) = hca::probe(plat, opts()) {
            if dev.query_port(1).is_ok() {
                accepted.push(what);
            }
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}

#[test]
fn an_async_ring_producer_index_past_the_ring_is_fatal_fast() {
    let (dev, sim) = hca::open_sim(Default::default()).unwrap();
    let d = sim.device();
    let dir = tests::rewrite::dsr(d).async_ring_pages.pdir_dma.get();
    let table = d.mem().read_u64(dir).unwrap();
    let state = d.mem().read_u64(table).unwrap();
    d.mem().store_u32(state + pvrdma_abi::ring::RX_PROD_TAIL, 0xdead_beef).unwrap();
    d.vectors().raise(1);
    let t = std::time::Instant::now();
    let got = dev.get_async_event(std::time::Duration::from_secs(4)).map(|e| e.event_type);
    assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(matches!(got, Ok(ib_core::AsyncEventType::DeviceFatal) | Err(Error::DeviceFatal)), "{got:?}");
    assert!(dev.is_fatal());
}

#[test]
fn handles_and_keys_are_taken_again_once_destroyed() {
    // A device reusing a handle or key after its object's DESTROY is correct (QEMU 7.2 reuses
    // table slots at once): the refusal is for live ones only.
    let (dev, _sim) = hca::open_sim(Default::default()).unwrap();
    for _ in 0..3 {
        let ctx = dev.alloc_ucontext().unwrap();
        let pd = dev.alloc_pd().unwrap();
        let mr = pd.alloc_mr(4096, 0).unwrap();
        drop((mr, pd, ctx));
    }
    assert!(!dev.is_fatal());
}

#[test]
fn a_sender_with_only_unsignaled_sends_is_never_refused_by_the_driver() {
    // The driver keeps the WQEs owed a completion; unsignaled sends owe none, so a consumer that
    // never asks for one (hand_offs' ping-pongs) can post for ever.
    let (dev, _sim) = hca::open_sim(Default::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(16, None).unwrap(), dev.create_cq(16, None).unwrap());
    let q = rc_qp(&pd, &scq, &rcq);
    connect(&q, q.qpn(), gid(&dev));
    let wait = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for i in 0..200u64 {
        let wr = ib_core::SendWr {
            wr_id: i,
            sg_list: &[],
            opcode: ib_core::WrOpcode::Send,
            signaled: false,
            solicited: false,
        };
        q.post_recv(&RecvWr { wr_id: i, sg_list: &[] }).unwrap();
        q.post_send(&wr).unwrap();
        let wc = poll_n(&rcq, 1)[0];
        assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, i));
        assert!(std::time::Instant::now() < wait);
    }
}
/// BUG: the driver trusts the QP handle the device returns. `Cq::create` refuses a CQ handle
/// that is already live (`EventRings::register_cq` -> DeviceFatal), but `Qp::create` only checks
/// that the QPN fits 24 bits: a device answering two CREATE_QPs with the same QPN yields two
/// driver QPs sharing one handle. Dropping one then sends DESTROY_QP for the other's device QP
/// and detaches the shared handle from the CQs, so the survivor's completions are reported as
/// `GeneralErr` "QP not on this CQ" and its doorbells ring nothing. Violates the crate doc
/// ("Nothing the device writes is trusted: ring indices, handles and CQEs are validated").
#[test]
fn a_duplicate_qp_handle_from_the_device_is_refused() {
    // A device that answers every CREATE_QP with the QPN of the first QP it created.
    let mut first = None;
    let plat = Arc::new(Rewrite::new(pvrdma_abi::cmd::opcode::CREATE_QP, 16, move |qpn| *first.get_or_insert(qpn)));
    // The encoding is declared: the probe's self-test creates QPs, which this device would break.
    let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
    let dev = hca::probe(plat, opts).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let q1 = rc_qp(&pd, &cq, &cq);
    let attr = ib_core::QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        cap: cap(),
        qp_type: ib_core::QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    match pd.create_qp(&attr) {
        Err(_) => {}
        Ok(q2) => panic!("the driver accepted QPN {} twice ({:?} and {:?})", q2.qpn(), q1, q2),
    }
}
