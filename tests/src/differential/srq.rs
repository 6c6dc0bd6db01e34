//! The SRQ row of the real-device differential (`tests::differential`): a shared receive queue on
//! the model (both profiles) and on QEMU 7.2's pvrdma, which has the four SRQ commands.
//!
//! What every side does alike: caps that allow SRQs (compared by rule: QEMU's come from rxe),
//! CREATE_SRQ, QPs created on it (no RQ of their own), receives posted to the SRQ and taken by
//! whichever QP a message reaches, with its payload in the buffer the completion's `wr_id`
//! names, DESTROY_SRQ of an unknown handle refused with `EINVAL`, destroy refused by the core
//! while a QP uses the SRQ. Every receive completes on one CQ: QEMU 7.2 completes SRQ receives
//! on the receive CQ of the last QP created on the SRQ, which is then every QP's.
//!
//! Where the sides differ on purpose: QEMU 7.2 runs QUERY_SRQ for MODIFY_SRQ and the other way
//! round (its command table lists them swapped), so the driver answers modify and query with
//! `EOPNOTSUPP` there (the model's QEMU profile swaps them too); the IBTA model arms and answers.

use crate::differential::Target;
use crate::fixture::{connect, gid, pv, rc_qp};
use ib_core::{access, Error, Mr, Qp, QpCap, QpInitAttr, QpType, RecvWr, Sge, SrqAttr, SrqAttrMask, SrqInitAttr};
use ib_core::{SendWr, WcOpcode, WcStatus, WrOpcode};
use pvrdma_abi::cmd::DestroySrq;

const MSG: u32 = 256;
const EINVAL: i32 = pvrdma_abi::errno::EINVAL as i32;

fn payload(sender: usize, k: u64) -> Vec<u8> {
    (0..MSG).map(|i| (sender as u32 * 37 + k as u32 * 11 + i) as u8).collect()
}

fn send(q: &Qp, mr: &Mr, data: &[u8], wr_id: u64) {
    mr.write(0, data).unwrap();
    let sge = [Sge { addr: mr.addr(), length: data.len() as u32, lkey: mr.lkey() }];
    q.post_send(&SendWr { wr_id, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false }).unwrap();
}

/// The SRQ body: see the module docs.
pub fn srq(t: &Target) {
    let dev = &t.dev;
    let caps = dev.query_device();
    assert!(caps.max_srq > 0 && caps.max_srq_wr >= 64 && caps.max_srq_sge >= 1, "{:?}: SRQ caps {caps:?}", t.side);
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(64, None).unwrap(), dev.create_cq(64, None).unwrap());
    let srq =
        pd.create_srq(&SrqInitAttr { attr: SrqAttr { max_wr: 64, max_sge: 1, srq_limit: 0 }, srq_context: 0 }).unwrap();
    let cap = QpCap { max_send_wr: 8, max_recv_wr: 0, max_send_sge: 1, max_recv_sge: 0, max_inline_data: 0 };
    let on_srq = || {
        let attr = QpInitAttr {
            send_cq: &scq,
            recv_cq: &rcq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: Some(&srq),
        };
        pd.create_qp(&attr).unwrap()
    };
    let (b1, b2) = (on_srq(), on_srq());
    let (a1, a2) = (rc_qp(&pd, &scq, &scq), rc_qp(&pd, &scq, &scq));
    let g = gid(dev);
    for (a, b) in [(&a1, &b1), (&a2, &b2)] {
        connect(a, b.qpn(), g);
        connect(b, a.qpn(), g);
    }
    let mr_a = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let mr_b = pd.alloc_mr(8 * MSG as usize, access::LOCAL_WRITE).unwrap();
    for w in 0..8u64 {
        let sge = [Sge { addr: mr_b.addr() + w * u64::from(MSG), length: MSG, lkey: mr_b.lkey() }];
        srq.post_recv(&RecvWr { wr_id: w, sg_list: &sge }).unwrap();
    }
    let mut taken = std::collections::BTreeSet::new();
    for k in 0..6u64 {
        let (i, a, b) = if k % 2 == 0 { (0, &a1, &b1) } else { (1, &a2, &b2) };
        send(a, &mr_a, &payload(i, k), 100 + k);
        assert_eq!(t.poll_n(&scq, 1)[0].status, WcStatus::Success, "{:?}", t.side);
        let r = t.poll_n(&rcq, 1)[0];
        assert_eq!(
            (r.status, r.opcode, r.byte_len, r.qp_num),
            (WcStatus::Success, WcOpcode::Recv, MSG, b.qpn()),
            "{:?}",
            t.side
        );
        assert!(r.wr_id < 8 && taken.insert(r.wr_id), "{:?}: wr_id {} of no posted receive", t.side, r.wr_id);
        let mut got = vec![0u8; MSG as usize];
        mr_b.read(r.wr_id as usize * MSG as usize, &mut got).unwrap();
        assert_eq!(got, payload(i, k), "{:?}: message {k}", t.side);
    }

    let limit = srq.modify(&SrqAttr { srq_limit: 1, ..Default::default() }, SrqAttrMask::LIMIT);
    let query = srq.query();
    if t.side.qemu_like() {
        assert!(matches!(limit, Err(Error::Unsupported(_))), "{:?}: {limit:?}", t.side);
        assert!(matches!(query, Err(Error::Unsupported(_))), "{:?}: {query:?}", t.side);
    } else {
        limit.unwrap();
        assert_eq!(query.unwrap(), SrqAttr { max_wr: 64, max_sge: 1, srq_limit: 1 });
    }
    let unknown = DestroySrq { srq_handle: 0x00ab_cdef.into(), ..Default::default() };
    let refused = pv(dev).post_command(unknown).map(|_| ()).map_err(|e| e.errno());
    assert_eq!(refused, Err(EINVAL), "{:?}: DESTROY_SRQ of an unknown handle", t.side);
    let srq = match srq.destroy(None) {
        Err((s, Error::Busy(_))) => s,
        other => panic!("{:?}: destroy with QPs attached: {other:?}", t.side),
    };
    drop((a1, a2, b1, b2));
    srq.destroy(None).unwrap();
    assert!(!dev.is_fatal(), "{:?}", t.side);
}
