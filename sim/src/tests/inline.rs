//! No hand-off hardware would not have: at link latency 0 the thread that rings a QP doorbell
//! carries the packet to the receiver and runs the CQ vector's handler; with a latency the port
//! thread does.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::uar::UAR_CQ_ARM;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn at_latency_0_the_send_doorbell_delivers_before_it_returns() {
    let p = Pair::new(SimConfig::default(), 16);
    let d = &p.d;
    p.post_recv(1, 0, 64);
    p.send_msg(2, 0, b"now", 0);
    assert_eq!(d.poll(&p.cq_b).map(|c| c.wr_id.get()), Some(1), "the receive completed inside the doorbell");
    assert_eq!(d.poll(&p.cq_a).map(|c| c.wr_id.get()), Some(2), "and so did the send");
    // No receive posted: the packet parks, and the RECV doorbell delivers it before it returns.
    p.send_msg(3, 0, b"later", 0);
    assert_eq!(d.dev.parked_packets(p.b.qpn), 1);
    p.post_recv(4, 0, 64);
    assert_eq!(d.poll(&p.cq_b).map(|c| c.wr_id.get()), Some(4));
    assert_eq!(d.poll(&p.cq_a).map(|c| c.wr_id.get()), Some(3));
    assert_eq!(d.dev.stats().packets_delivered, 2);
}

#[test]
fn with_a_link_latency_the_port_thread_delivers() {
    let p = Pair::new(SimConfig { link_latency: Duration::from_millis(20), ..Default::default() }, 16);
    let d = &p.d;
    p.post_recv(1, 0, 64);
    p.send_msg(2, 0, b"slow", 0);
    assert!(d.poll(&p.cq_b).is_none(), "not before the latency has passed");
    assert_eq!(d.wait_cqes(&p.cq_b, 1)[0].wr_id.get(), 1);
}

#[test]
fn the_cq_vector_handler_runs_on_the_doorbell_thread_once_per_arm() {
    let p = Pair::new(SimConfig::default(), 16);
    let d = &p.d;
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let r = ran_on.clone();
    d.dev.vectors().set_handler(2, Some(Arc::new(move || r.lock().unwrap().push(std::thread::current().id()))));
    d.cq_doorbell(0, p.cq_b.handle, UAR_CQ_ARM);
    p.post_recv(1, 0, 64);
    p.post_recv(2, 0, 64);
    p.send_msg(3, 0, b"one", 0);
    p.send_msg(4, 0, b"two", 0);
    assert_eq!(*ran_on.lock().unwrap(), vec![std::thread::current().id()], "one event per arm");
    assert_eq!(d.irqs(2), 0, "nothing left for a vector thread");
    assert_eq!(d.dev.vectors().raised(2), 1);
    assert_eq!(d.notifications(), vec![p.cq_b.handle]);
}
