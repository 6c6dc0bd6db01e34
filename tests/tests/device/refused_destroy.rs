//! A destroy the device refuses (DESTROY_SRQ, DESTROY_QP, DESTROY_CQ, and the destroy of an
//! object whose create was answered with a handle beyond 24 bits): the driver abandons the
//! object's ring instead of freeing pages the device may still write. (Each test is a bug found
//! under attack in issue 13 and kept so it stays fixed.)

use ib_core::{Cq, Error, Pd, Qp, QpCap, QpInitAttr, QpType, Srq, SrqAttr, SrqInitAttr};
use pvrdma_sim::SimConfig;

fn srq_qp(pd: &Pd, cq: &Cq, srq: &Srq) -> Qp {
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 0, max_send_sge: 1, max_recv_sge: 0, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: Some(srq),
    };
    pd.create_qp(&attr).expect("create_qp on an SRQ")
}

/// A device that refuses every DESTROY_QP (the request's handle is rewritten to one it does not
/// know, so the QP stays on the device, attached to its SRQ).
struct RefuseDestroyQp;

use hca::platform::Platform as _;

impl tests::intercept::Hooks for RefuseDestroyQp {
    fn reg_write(&self, sim: &hca::platform::sim::SimPlatform, offset: u32, value: u32) {
        if offset == pvrdma_abi::regs::REG_REQUEST {
            let d = sim.device();
            let req = tests::rewrite::dsr(d).cmd_slot_dma.get();
            if d.mem().load_u32(req + 8).unwrap_or(0) == pvrdma_abi::cmd::opcode::DESTROY_QP {
                d.mem().store_u32(req + 16, 0x00ff_fff0).unwrap();
            }
        }
        sim.reg_write(offset, value);
    }
}

/// DESTROY_SRQ refused (EBUSY: a QP whose DESTROY_QP the device refused still uses the SRQ)
/// when the driver drops its SRQ: the device keeps the SRQ and may still take WQEs from its
/// ring and write its consumer index there, so the ring must stay allocated (abandoned), never
/// go back to the allocator for another object to meet those writes. Before the fix it was
/// freed.
#[test]
fn a_refused_destroy_srq_abandons_the_ring_instead_of_freeing_it() {
    let plat = std::sync::Arc::new(tests::intercept::Intercept {
        sim: hca::platform::sim::SimPlatform::new(SimConfig::default()),
        hooks: RefuseDestroyQp,
    });
    let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
    let dev = hca::probe(plat.clone(), opts).expect("probe");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let srq =
        pd.create_srq(&SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 }).unwrap();
    let qp = srq_qp(&pd, &cq, &srq);
    let page = srq.provider_srq::<hca::srq::Srq>().expect("a pvrdma SRQ").record_page();
    let mem = plat.sim.device().mem();
    drop(qp);
    drop(srq);
    assert_eq!(plat.sim.device().live_objects().srqs, 1, "the device kept the SRQ");
    assert!(mem.contains(page.addr(), 4096), "the ring the device may still write stays allocated");
}

/// Refuses DESTROY_QP and DESTROY_CQ (their handle, at offset 16 of both, is rewritten to one
/// that names nothing).
struct RefuseDestroyQpAndCq;

impl tests::intercept::Hooks for RefuseDestroyQpAndCq {
    fn reg_write(&self, sim: &hca::platform::sim::SimPlatform, offset: u32, value: u32) {
        use pvrdma_abi::cmd::opcode::{DESTROY_CQ, DESTROY_QP};
        if offset == pvrdma_abi::regs::REG_REQUEST {
            let d = sim.device();
            let req = tests::rewrite::dsr(d).cmd_slot_dma.get();
            if matches!(d.mem().load_u32(req + 8).unwrap_or(0), DESTROY_QP | DESTROY_CQ) {
                d.mem().store_u32(req + 16, 0x00ff_fff0).unwrap();
            }
        }
        sim.reg_write(offset, value);
    }
}

/// As for an SRQ: a QP or CQ whose DESTROY the device refused is still the device's, which may
/// read its WQEs and write its CQEs and ring state, so its rings stay allocated (abandoned).
/// Before the fix both were freed.
#[test]
fn refused_destroy_qp_and_cq_abandon_their_rings_instead_of_freeing_them() {
    let plat = std::sync::Arc::new(tests::intercept::Intercept {
        sim: hca::platform::sim::SimPlatform::new(SimConfig::default()),
        hooks: RefuseDestroyQpAndCq,
    });
    let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
    let dev = hca::probe(plat.clone(), opts).expect("probe");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let qp = pd.create_qp(&attr).expect("create_qp");
    let qp_page = qp.provider_qp::<hca::qp::Qp>().expect("a pvrdma QP").record_page();
    let cq_page = cq.provider_cq::<hca::cq::Cq>().expect("a pvrdma CQ").record_page();
    let mem = plat.sim.device().mem();
    drop(qp);
    drop(cq);
    let live = plat.sim.device().live_objects();
    assert_eq!((live.qps, live.cqs), (1, 1), "the device kept both");
    assert!(mem.contains(qp_page.addr(), 4096), "the QP's rings the device may still use stay allocated");
    assert!(mem.contains(cq_page.addr(), 4096), "the CQ's ring the device may still write stays allocated");
}

/// A CREATE_CQ / CREATE_QP / CREATE_SRQ answered with a handle beyond 24 bits is refused and the
/// driver sends DESTROY for that handle, which names nothing: the device keeps the object it
/// made, and with it the ring, which it may still write (a CQ's CQEs and ring state, an SRQ's or
/// a QP's consumer index). So the ring stays allocated (abandoned), as after a refused DESTROY at
/// drop. Before the fix each create freed its ring.
#[test]
fn a_create_answered_beyond_24_bits_whose_destroy_is_refused_abandons_the_ring() {
    use pvrdma_abi::cmd::opcode;
    use tests::rewrite::Rewrite;
    for op in [opcode::CREATE_CQ, opcode::CREATE_QP, opcode::CREATE_SRQ] {
        let plat = std::sync::Arc::new(Rewrite::new(op, 16, move |h| h | 1 << 24));
        let opts = hca::ProbeOptions { arm_encoding: Some(doorbell::ArmEncoding::Ibta), ..Default::default() };
        let dev = hca::probe(plat.clone(), opts).expect("probe");
        let pd = dev.alloc_pd().unwrap();
        let cq = (op != opcode::CREATE_CQ).then(|| dev.create_cq(16, None).unwrap());
        let mem = plat.sim.device().mem();
        let regions = mem.regions();
        let refused = match (op, &cq) {
            (opcode::CREATE_QP, Some(cq)) => {
                let cap =
                    QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
                let attr = QpInitAttr {
                    send_cq: cq,
                    recv_cq: cq,
                    cap,
                    qp_type: QpType::Rc,
                    sq_sig_all: false,
                    qp_context: 0,
                    srq: None,
                };
                pd.create_qp(&attr).err()
            }
            (opcode::CREATE_SRQ, _) => {
                let attr = SrqInitAttr { attr: SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }, srq_context: 0 };
                pd.create_srq(&attr).err()
            }
            _ => dev.create_cq(16, None).err(),
        };
        assert!(matches!(refused, Some(Error::BadResponse(_))), "opcode {op}: {refused:?}");
        let live = plat.sim.device().live_objects();
        assert_eq!(live.cqs + live.qps + live.srqs, 1 + usize::from(cq.is_some()), "opcode {op}: the device kept it");
        assert!(mem.regions() > regions, "opcode {op}: the ring the device may still write stays allocated");
    }
}
