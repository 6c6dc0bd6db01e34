//! DEVICE_REMOVAL: a device that goes fatal raises `RDMA_CM_EVENT_DEVICE_REMOVAL` on every id
//! attached to it and on its listeners, once each, and on no id of another device; the ids are
//! then destroyed as usual, and the device holds no address for a new bind.

use crate::fixture::*;
use rdmacm_compat::abi::*;
use rdmacm_compat::*;
use std::collections::HashSet;
use std::time::Duration;

/// Puts the first device (the library's device 0, on address `a`) in its catastrophic state
/// through the model's fault injection.
fn make_first_device_fatal() {
    let mut n = 0;
    // SAFETY: an out-pointer; the list is freed below.
    let list = unsafe { ibverbs_compat::ibv_get_device_list(&mut n) };
    assert!(!list.is_null() && n >= 1);
    // SAFETY: the list's first entry, alive until the list is freed.
    let model = ibverbs_compat::test_model(unsafe { *list }.cast()).expect("a model device");
    model.device().inject_fatal();
    // SAFETY: the list ibv_get_device_list gave.
    unsafe { ibverbs_compat::ibv_free_device_list(list) };
}

fn bind(id: *mut rdma_cm_id, ip: std::net::Ipv4Addr) -> i32 {
    let mut s = sin(ip, 0);
    // SAFETY: an id of ours; a sockaddr on the stack.
    unsafe { rdma_bind_addr(id, sa(&mut s)) }
}

#[test]
fn a_fatal_device_removes_each_of_its_ids_once() {
    run(|a, b| {
        let (ch, other) = (channel(), channel());
        let listener = id(ch, RDMA_PS_TCP);
        let bound = id(ch, RDMA_PS_TCP);
        let elsewhere = id(other, RDMA_PS_TCP);
        assert_eq!(bind(listener, a), 0, "bind: errno {}", errno());
        // SAFETY: a bound id of ours.
        assert_eq!(unsafe { rdma_listen(listener, 4) }, 0, "listen: errno {}", errno());
        assert_eq!(bind(bound, a), 0);
        assert_eq!(bind(elsewhere, b), 0);
        assert!(!readable(ch, Duration::from_millis(300)), "an event before the fault");

        make_first_device_fatal();
        let mut seen = HashSet::new();
        for _ in 0..2 {
            let (ty, status, who) = next_with(ch, |e| (e.event, e.status, e.id as usize));
            assert_eq!((ty, status), (RDMA_CM_EVENT_DEVICE_REMOVAL, 0));
            assert!(seen.insert(who), "DEVICE_REMOVAL twice on one id");
        }
        assert_eq!(seen, HashSet::from([listener as usize, bound as usize]));
        assert!(!readable(ch, Duration::from_millis(600)), "more than one DEVICE_REMOVAL per id");
        assert!(!readable(other, Duration::from_millis(100)), "an id of another device was removed");

        let late = id(ch, RDMA_PS_TCP);
        assert_eq!(bind(late, a), -1, "a bind to the removed device's address");
        assert_eq!(errno(), libc::ENODEV);
        for i in [listener, bound, elsewhere, late] {
            // SAFETY: ids of ours, their events acknowledged.
            assert_eq!(unsafe { rdma_destroy_id(i) }, 0, "rdma_destroy_id: errno {}", errno());
        }
        rdma_destroy_event_channel(ch);
        rdma_destroy_event_channel(other);
    })
}

#[test]
fn a_connection_with_a_qp_on_a_fatal_device_is_removed_and_destroyed() {
    run(|a, b| {
        let ch = channel();
        let (l, to) = listener(ch, RDMA_PS_TCP, a);
        let cch = channel();
        let c = routed(cch, RDMA_PS_TCP, b, to);
        let mut cp = conn_param(0x61);
        // SAFETY: ids of ours; parameters on the stack; the QP's CQs are the library's own.
        let s = unsafe {
            assert_eq!(rdma_connect(c, &mut cp), 0, "rdma_connect: errno {}", errno());
            let s = next_with(ch, |e| {
                assert_eq!(name(e.event), name(RDMA_CM_EVENT_CONNECT_REQUEST));
                e.id
            });
            let mut qa: ibv_qp_init_attr = std::mem::zeroed();
            qa.qp_type = IBV_QPT_RC;
            qa.cap =
                ibv_qp_cap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
            assert_eq!(rdma_create_qp(s, std::ptr::null_mut(), &mut qa), 0, "rdma_create_qp: errno {}", errno());
            let mut sp = conn_param(0);
            assert_eq!(rdma_accept(s, &mut sp), 0, "rdma_accept: errno {}", errno());
            expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
            assert_eq!(rdma_establish(c), 0, "rdma_establish: errno {}", errno());
            expect(ch, RDMA_CM_EVENT_ESTABLISHED);
            s
        };

        make_first_device_fatal();
        let mut seen = HashSet::new();
        for _ in 0..2 {
            let (ty, who) = next_with(ch, |e| (e.event, e.id as usize));
            assert_eq!(name(ty), name(RDMA_CM_EVENT_DEVICE_REMOVAL));
            seen.insert(who);
        }
        assert_eq!(seen, HashSet::from([l as usize, s as usize]));
        assert!(!readable(cch, Duration::from_millis(300)), "the other device's id was removed");
        // SAFETY: ids of ours, their events acknowledged; the QP is the id's.
        unsafe {
            rdma_destroy_qp(s);
            assert_eq!(rdma_destroy_id(s), 0, "rdma_destroy_id: errno {}", errno());
            assert_eq!(rdma_destroy_id(l), 0);
            assert_eq!(rdma_destroy_id(c), 0);
        }
        rdma_destroy_event_channel(ch);
        rdma_destroy_event_channel(cch);
    })
}
