//! Addressing: the source a destination is reached from (the bound or given one, else a
//! device's address that reaches it), `ADDR_ERROR` when no device does, bind errors as the
//! kernel's (a loopback address no device holds binds as the wildcard), ports held per port
//! space, routes with the port's MTU and both GIDs.

use crate::fixture::*;
use rdmacm_compat::abi::*;
use rdmacm_compat::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

#[test]
fn an_unbound_id_reaches_a_loopback_destination_from_a_devices_address() {
    run(|a, b| {
        let ch = channel();
        let id = id(ch, RDMA_PS_TCP);
        let mut d = sin(Ipv4Addr::LOCALHOST, 7471);
        // SAFETY: an id of ours; a sockaddr on the stack.
        assert_eq!(unsafe { rdma_resolve_addr(id, std::ptr::null_mut(), sa(&mut d), 1000) }, 0);
        expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
        let (src, dst) = (read(rdma_local(id)), read(rdma_peer(id)));
        assert!(src.ip() == a || src.ip() == b, "source {src} is a device's");
        assert_ne!(src.port(), 0);
        assert_eq!(dst, SocketAddr::from((Ipv4Addr::LOCALHOST, 7471)));
        // SAFETY: as above.
        assert!(!unsafe { (*id).verbs }.is_null());
        // SAFETY: as above.
        assert_eq!(unsafe { rdma_resolve_route(id, 1000) }, 0);
        expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
        // SAFETY: the route written before the event.
        unsafe {
            assert_eq!((*id).route.num_paths, 1);
            let p = &*(*id).route.path_rec;
            assert_eq!(
                p.sgid.raw,
                src.ip().to_canonical().to_string().parse::<Ipv4Addr>().unwrap().to_ipv6_mapped().octets()
            );
            assert_eq!(p.dgid.raw, Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets());
            assert!((1..=5).contains(&p.mtu));
            assert_eq!(p.hop_limit, 64);
            assert_eq!(rdma_destroy_id(id), 0);
        }
        rdma_destroy_event_channel(ch);
    })
}

/// `&id->route.addr.src_addr` (the header's inline `rdma_get_local_addr`).
fn rdma_local(id: *mut rdma_cm_id) -> *const libc::sockaddr {
    // SAFETY: a live id of ours.
    unsafe { (&(*id).route.addr.src as *const libc::sockaddr_storage).cast() }
}

/// `&id->route.addr.dst_addr` (`rdma_get_peer_addr`).
fn rdma_peer(id: *mut rdma_cm_id) -> *const libc::sockaddr {
    // SAFETY: a live id of ours.
    unsafe { (&(*id).route.addr.dst as *const libc::sockaddr_storage).cast() }
}

#[test]
fn a_given_source_is_kept() {
    run(|a, b| {
        let ch = channel();
        let id = routed(ch, RDMA_PS_TCP, b, SocketAddr::from((a, 7471)));
        assert_eq!(read(rdma_local(id)).ip(), b);
        // SAFETY: an id of ours.
        assert_eq!(unsafe { rdma_destroy_id(id) }, 0);
        rdma_destroy_event_channel(ch);
    })
}

#[test]
fn a_destination_no_device_reaches_gives_addr_error() {
    run(|a, _| {
        let ch = channel();
        let id = id(ch, RDMA_PS_TCP);
        // An address of another family's space that loopback does not route: TEST-NET-1
        // (192.0.2.1) is unreachable inside `unshare -n`; where the host routes it, no
        // device's address (127/8) reaches it either.
        let (mut s, mut d) = (sin(a, 0), sin(Ipv4Addr::new(192, 0, 2, 1), 7471));
        // SAFETY: an id of ours; sockaddrs on the stack.
        assert_eq!(unsafe { rdma_resolve_addr(id, sa(&mut s), sa(&mut d), 1000) }, 0);
        let (ev, status) = next(ch);
        assert_eq!(name(ev), name(RDMA_CM_EVENT_ADDR_ERROR));
        assert!(status < 0, "status {status}");
        // SAFETY: as above.
        assert_eq!(unsafe { rdma_resolve_route(id, 1000) }, -1, "no route without an address");
        assert_eq!(errno(), libc::EINVAL);
        // SAFETY: as above.
        assert_eq!(unsafe { rdma_destroy_id(id) }, 0);
        rdma_destroy_event_channel(ch);
    })
}

#[test]
fn bind_errors_are_the_kernels() {
    run(|a, _| {
        let ch = channel();
        let (x, y) = (id(ch, RDMA_PS_TCP), id(ch, RDMA_PS_TCP));
        // SAFETY: ids of ours; sockaddrs on the stack.
        unsafe {
            let mut not_ours = sin(Ipv4Addr::new(192, 0, 2, 1), 0);
            assert_eq!(rdma_bind_addr(x, sa(&mut not_ours)), -1);
            assert_eq!(errno(), libc::EADDRNOTAVAIL);
            let mut s = sin(a, 0);
            assert_eq!(rdma_bind_addr(x, sa(&mut s)), 0);
            let port = read(rdma_local(x)).port();
            assert_ne!(port, 0);
            assert_eq!(rdma_bind_addr(x, sa(&mut s)), -1, "bound twice");
            assert_eq!(errno(), libc::EINVAL);
            let mut same = sin(a, port);
            assert_eq!(rdma_bind_addr(y, sa(&mut same)), -1);
            assert_eq!(errno(), libc::EADDRINUSE);
            let mut wild = sin(Ipv4Addr::UNSPECIFIED, port);
            assert_eq!(rdma_bind_addr(y, sa(&mut wild)), -1, "the wildcard covers the bound address");
            assert_eq!(errno(), libc::EADDRINUSE);
            assert_eq!(u16::from_be(rdma_get_src_port(x)), port);
            assert_eq!(rdma_get_dst_port(x), 0);
            // Another port space holds its own ports.
            let u = id(ch, RDMA_PS_UDP);
            assert_eq!(rdma_bind_addr(u, sa(&mut same)), 0);
            for id in [x, y, u] {
                assert_eq!(rdma_destroy_id(id), 0);
            }
            // The port is free again.
            let z = id(ch, RDMA_PS_TCP);
            assert_eq!(rdma_bind_addr(z, sa(&mut same)), 0);
            assert_eq!(rdma_destroy_id(z), 0);
        }
        rdma_destroy_event_channel(ch);
    })
}

/// A loopback address no device holds binds as the wildcard, as Linux's `cma_any_addr` has it:
/// no device (`verbs` NULL), a listener there hears a connection to any device's address, and
/// it holds its port against the wildcard. (libfabric's verbs provider binds `localhost` to find
/// its listen addresses: fi_pingpong's server got ENODATA when this bind answered ENODEV.)
#[test]
fn a_loopback_address_no_device_holds_binds_as_the_wildcard() {
    run(|a, b| {
        let lo = [Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 255, 255, 254)].into_iter().find(|l| ![a, b].contains(l));
        let lo = lo.expect("a loopback address neither device holds");
        let ch = channel();
        let (l, to) = listener(ch, RDMA_PS_TCP, lo);
        assert_eq!(to.ip(), IpAddr::V4(lo));
        // SAFETY: ids of ours; sockaddrs on the stack.
        unsafe {
            assert!((*l).verbs.is_null(), "a loopback bind took a device");
            let w = id(ch, RDMA_PS_TCP);
            let mut wild = sin(Ipv4Addr::UNSPECIFIED, to.port());
            assert_eq!(rdma_bind_addr(w, sa(&mut wild)), -1, "the wildcard and loopback share the port");
            assert_eq!(errno(), libc::EADDRINUSE);
            assert_eq!(rdma_destroy_id(w), 0);
        }
        for dev in [a, b] {
            let cch = channel();
            let c = routed(cch, RDMA_PS_TCP, b, SocketAddr::new(dev.into(), to.port()));
            let mut cp = conn_param(0x61);
            // SAFETY: ids of ours; parameters on the stack.
            unsafe {
                assert_eq!(rdma_connect(c, &mut cp), 0, "rdma_connect: errno {}", errno());
                let (r, local) = next_with(ch, |e| {
                    assert_eq!(name(e.event), name(RDMA_CM_EVENT_CONNECT_REQUEST));
                    (e.id, read(rdma_local(e.id)))
                });
                assert_eq!(local, SocketAddr::new(dev.into(), to.port()), "the request's local address");
                assert_eq!(rdma_reject(r, std::ptr::null(), 0), 0);
                assert_eq!(next(cch), (RDMA_CM_EVENT_REJECTED, 28), "REJ by the consumer (IBTA 12.6.7.2)");
                assert_eq!(rdma_destroy_id(r), 0);
                assert_eq!(rdma_destroy_id(c), 0);
            }
            rdma_destroy_event_channel(cch);
        }
        // SAFETY: as above.
        assert_eq!(unsafe { rdma_destroy_id(l) }, 0);
        rdma_destroy_event_channel(ch);
    })
}

#[test]
fn set_option_takes_what_the_programs_set_and_refuses_the_rest() {
    run(|_, _| {
        let ch = channel();
        let id = id(ch, RDMA_PS_TCP);
        let (mut tos, mut on, mut timeout) = (32u8, 1i32, 14u8);
        let p = |v: &mut u8| (v as *mut u8).cast::<libc::c_void>();
        // SAFETY: an id of ours; option values on the stack with their sizes.
        unsafe {
            assert_eq!(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, p(&mut tos), 1), 0);
            let on_p = (&mut on as *mut i32).cast();
            assert_eq!(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, on_p, 4), 0);
            assert_eq!(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, on_p, 4), 0);
            assert_eq!(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, p(&mut timeout), 1), 0);
            assert_eq!(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, on_p, 2), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(rdma_set_option(id, RDMA_OPTION_ID, 77, on_p, 4), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(rdma_destroy_id(id), 0);
        }
        rdma_destroy_event_channel(ch);
    })
}
