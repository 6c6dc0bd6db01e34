//! An untrusted driver: garbage ring indices and random commands never panic or wedge the device.

use crate::testutil::minidrv::*;
use crate::{DeviceState, SimConfig};
use pvrdma_abi::cmd::{opcode, QueryPort};
use pvrdma_abi::event::EqeType;
use pvrdma_abi::uar::*;
use pvrdma_abi::verbs::qp_state;
use pvrdma_abi::wqe::{wc_status, Cqe};

#[test]
fn garbage_ring_indices_fail_the_object_not_the_device() {
    let p = Pair::new(SimConfig::default(), 16);
    let d = &p.d;
    let mem = d.dev.mem();
    // SQ prod_tail out of range: QP_FATAL, QP to ERR.
    mem.store_u32(p.a.state, 0xffff_fff0).unwrap();
    d.qp_doorbell(&p.a, UAR_QP_SEND);
    assert_eq!(d.dev.qp_state(p.a.qpn), Some(qp_state::ERR));
    assert_eq!(d.async_events(), vec![(EqeType::QpFatal as u32, p.a.qpn)]);
    // A CQ whose cons_head is garbage goes into error without CQ_ERR; a later CQE is dropped.
    mem.store_u32(p.cq_b.ring.state + 12, 0xdead_beef).unwrap();
    assert!(d.dev.post_cqe(p.cq_b.handle, &Cqe::default(), false));
    assert!(d.dev.cq_status(p.cq_b.handle).unwrap().error);
    let events = d.async_events();
    assert!(events.iter().all(|e| e.0 != EqeType::CqErr as u32), "{events:?}");
    // Garbage in the DSR rings' cons_head: entries dropped and counted.
    mem.store_u32(d.async_ring.state + 12, 0x8000_0000).unwrap();
    d.dev.inject_async_event(EqeType::PortActive, 1);
    mem.store_u32(d.cq_ring.state + 12, 0x8000_0000).unwrap();
    d.cq_doorbell(0, p.cq_a.handle, UAR_CQ_ARM);
    d.dev.post_cqe(p.cq_a.handle, &Cqe::default(), false);
    let s = d.dev.stats();
    assert!(s.async_events_dropped >= 1 && s.notifications_dropped >= 1);
    assert!(s.qp_ring_faults >= 2 && s.cq_ring_faults == 1);
    assert_eq!(d.dev.state(), DeviceState::Active);
}

#[test]
fn a_garbage_receive_index_fails_the_receiver_and_the_sender_retries_out() {
    let p = Pair::new(SimConfig::default(), 16);
    let d = &p.d;
    d.dev.mem().store_u32(p.b.state + 12, 77).unwrap();
    p.send_msg(5, 0, b"abcd", 0);
    let c = d.wait_cqes(&p.cq_a, 1);
    assert_eq!(c[0].status.get(), wc_status::RETRY_EXC_ERR);
    assert_eq!(d.dev.qp_state(p.b.qpn), Some(qp_state::ERR));
    assert_eq!(d.dev.qp_state(p.a.qpn), Some(qp_state::ERR));
    assert_eq!(d.async_events(), vec![(EqeType::QpFatal as u32, p.b.qpn)]);
}

#[test]
fn random_commands_and_doorbells_never_panic() {
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 8);
    let qp = d.create_qp(pd, cq.handle, cq.handle, 4);
    d.connect(qp.qpn, qp.qpn);
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mem_base = d.dev.mem().alloc(PAGE).unwrap();
    for i in 0..3000 {
        let mut req = [0u8; 192];
        for b in req.iter_mut() {
            *b = next() as u8;
        }
        // Mostly valid opcodes; sometimes plausible device addresses and small handles.
        req[8..12].copy_from_slice(&((next() % u64::from(opcode::MAX + 2)) as u32).to_le_bytes());
        for at in [16usize, 24, 32] {
            if next() % 2 == 0 {
                let v = if next() % 2 == 0 { mem_base + (next() % 8) * 8 } else { next() % 8 };
                req[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        let (_, hdr) = d.post_raw(&req, 64);
        assert_eq!(hdr.ack.get() & 0x8000_0000, 0x8000_0000, "iteration {i}");
        // And a random doorbell, and random ring indices now and then.
        d.dev.uar_write(next() % (UAR_BAR_SIZE + 64), next() as u32);
        if i % 50 == 0 {
            d.dev.mem().store_u32(qp.state + 4 * (next() % 4), next() as u32).unwrap();
            d.dev.mem().store_u32(cq.ring.state + 12, next() as u32).unwrap();
        }
    }
    d.settle();
    assert_ne!(d.dev.state(), DeviceState::Broken);
    let r = d.ok(QueryPort { port_num: 1, ..Default::default() });
    assert_eq!(r.attrs.phys_state, 5);
}
