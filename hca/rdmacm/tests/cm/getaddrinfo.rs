//! `rdma_getaddrinfo`: passive and active answers, numeric hosts, port spaces and QP types,
//! `EAI_*` codes for names that do not resolve.

use rdmacm_compat::abi::*;
use rdmacm_compat::*;
use std::ffi::CString;
use std::ptr::{null, null_mut};

fn lookup(node: Option<&str>, service: &str, hints: &rdma_addrinfo) -> (i32, *mut rdma_addrinfo) {
    let node = node.map(|n| CString::new(n).unwrap());
    let service = CString::new(service).unwrap();
    let mut res = null_mut();
    // SAFETY: strings and hints on the stack; the answer freed by the caller.
    let r =
        unsafe { rdma_getaddrinfo(node.as_ref().map_or(null(), |n| n.as_ptr()), service.as_ptr(), hints, &mut res) };
    (r, res)
}

fn hints(flags: i32, ps: u32, qp_type: u32) -> rdma_addrinfo {
    // SAFETY: plain C data; all-zero is empty hints.
    let mut h: rdma_addrinfo = unsafe { std::mem::zeroed() };
    h.ai_flags = flags;
    h.ai_port_space = ps as i32;
    h.ai_qp_type = qp_type as i32;
    h
}

#[test]
fn an_active_answer_has_the_destination_and_the_port_space() {
    let (r, res) = lookup(Some("127.0.0.1"), "7471", &hints(RAI_NUMERICHOST, RDMA_PS_TCP, 0));
    assert_eq!(r, 0);
    // SAFETY: the answer just made.
    unsafe {
        let a = &*res;
        assert_eq!(a.ai_family, libc::AF_INET);
        assert_eq!(a.ai_port_space, RDMA_PS_TCP as i32);
        assert_eq!(a.ai_qp_type, IBV_QPT_RC as i32);
        assert!(a.ai_src_addr.is_null());
        let d = &*a.ai_dst_addr.cast::<libc::sockaddr_in>();
        assert_eq!(u16::from_be(d.sin_port), 7471);
        assert_eq!(u32::from_be(d.sin_addr.s_addr), 0x7f00_0001);
        rdma_freeaddrinfo(res);
    }
}

#[test]
fn a_passive_answer_has_the_wildcard_source_and_udp_gives_ud() {
    let (r, res) = lookup(None, "7174", &hints(RAI_PASSIVE, RDMA_PS_UDP, 0));
    assert_eq!(r, 0);
    // SAFETY: the answer just made.
    unsafe {
        let a = &*res;
        assert_eq!(a.ai_qp_type, IBV_QPT_UD as i32);
        assert!(a.ai_dst_addr.is_null());
        assert!(!a.ai_src_addr.is_null());
        assert_eq!(a.ai_src_len as usize, std::mem::size_of::<libc::sockaddr_in>().max(a.ai_src_len as usize));
        rdma_freeaddrinfo(res);
    }
}

#[test]
fn a_name_under_numerichost_gives_an_eai_code() {
    let (r, res) = lookup(Some("not-an-address"), "7471", &hints(RAI_NUMERICHOST, RDMA_PS_TCP, 0));
    assert_ne!(r, 0);
    assert!(r != -1 || res.is_null());
    assert!(res.is_null());
}
