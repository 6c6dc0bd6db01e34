//! Address handles through the C entry points as rdma-core's pvrdma provider answers: a bad port
//! or an empty `sgid_index` refused, a UD send without an AH refused (one destroyed after its post
//! not needed), and user AHs not bounded by the kernel's `max_ah`. (Bugs found in issue 13, kept
//! so they stay fixed.)

use crate::fx::*;
use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// `ibv_create_ah` with a bad port or `sgid_index`: `EINVAL` for port 0 or 2, an index past the
/// GID table, and (before the fix, made) an index within it naming no GID — an AH the first UD
/// send through would have failed with, moving its QP to the error state. rdma-core's pvrdma
/// provider resolves the source address from that GID and refuses too; the device refuses such
/// an address vector for an RC QP at RTR.
#[test]
fn create_ah_refuses_a_bad_port_or_an_empty_sgid_index() {
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let mut gid = ibv_gid { raw: [0; 16] };
        let empty = (1..16).find(|&i| ibv_query_gid(ctx, 1, i, &mut gid) == 0 && gid.raw == [0; 16]);
        let empty = empty.expect("an empty GID slot") as u8;
        let dgid = ibv_gid { raw: std::net::Ipv4Addr::new(127, 0, 0, 9).to_ipv6_mapped().octets() };
        let attr = |port_num: u8, sgid_index: u8| ibv_ah_attr {
            grh: ibv_global_route { dgid, flow_label: 0, sgid_index, hop_limit: 64, traffic_class: 0 },
            is_global: 1,
            port_num,
            ..Default::default()
        };
        let good = ibv_create_ah(pd, &mut attr(1, 0));
        assert!(!good.is_null(), "GID 0 is bound: {}", std::io::Error::last_os_error());
        for (port, index) in [(0, 0), (2, 0), (1, 255), (1, empty)] {
            assert!(ibv_create_ah(pd, &mut attr(port, index)).is_null(), "port {port} sgid_index {index}");
            assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EINVAL));
        }
        assert_eq!(ibv_destroy_ah(good), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// `ibv_post_send` on a UD QP whose WR names no AH (`wr.ud.ah` NULL): `EINVAL` with `bad_wr` at
/// that WR, the WRs before it posted (rdma-core's pvrdma provider would dereference the NULL
/// AH); and an AH destroyed right after the post does not disturb the send (the WQE carries a
/// copy of its address vector, as `pvrdma_post_send` copies it).
#[test]
fn a_ud_send_without_an_ah_is_refused_and_a_destroyed_ah_is_not_needed() {
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        let (a, b) = (ud_qp(pd, cq, 0x77), ud_qp(pd, cq, 0x77));
        let mut gid = ibv_gid { raw: [0; 16] };
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        let mut attr = ibv_ah_attr {
            grh: ibv_global_route { dgid: gid, flow_label: 0, sgid_index: 0, hop_limit: 64, traffic_class: 0 },
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        let ah = ibv_create_ah(pd, &mut attr);
        assert!(!ah.is_null());
        let mut rsge = ibv_sge { addr: buf.as_ptr() as u64 + 1024, length: 1024, lkey: (*mr).lkey };
        let mut rwr = ibv_recv_wr { wr_id: 3, next: null_mut(), sg_list: &mut rsge, num_sge: 1 };
        let mut rbad = null_mut();
        assert_eq!(((*ctx).ops.post_recv.unwrap())(b, &mut rwr, &mut rbad), 0);
        let mut sge = ibv_sge { addr: buf.as_ptr() as u64, length: 16, lkey: (*mr).lkey };
        let mut wrs: [ibv_send_wr; 2] = [std::mem::zeroed(), std::mem::zeroed()];
        for (i, w) in wrs.iter_mut().enumerate() {
            (w.wr_id, w.sg_list, w.num_sge, w.opcode, w.send_flags) = (10 + i as u64, &mut sge, 1, IBV_WR_SEND, 2);
            w.wr.ud = ibv_send_wr_ud { ah, remote_qpn: (*b).qp_num, remote_qkey: 0x77 };
        }
        wrs[1].wr.ud.ah = null_mut();
        wrs[0].next = &mut wrs[1];
        let mut bad = null_mut();
        assert_eq!(((*ctx).ops.post_send.unwrap())(a, &mut wrs[0], &mut bad), libc::EINVAL);
        assert_eq!(bad, &mut wrs[1] as *mut _, "the WR without an AH");
        assert_eq!(ibv_destroy_ah(ah), 0, "the posted send keeps its own address vector");
        let mut wc: [ibv_wc; 4] = std::mem::zeroed();
        let (mut got, end) = (Vec::new(), Instant::now() + Duration::from_secs(5));
        while got.len() < 2 && Instant::now() < end {
            let n = ((*ctx).ops.poll_cq.unwrap())(cq, 4, wc.as_mut_ptr());
            got.extend(wc[..n.max(0) as usize].iter().map(|w| (w.wr_id, w.status, w.qp_num)));
        }
        got.sort_unstable();
        assert_eq!(got, vec![(3, 0, (*b).qp_num), (10, 0, (*a).qp_num)], "the first WR went out; only it");
        for qp in [a, b] {
            assert_eq!(ibv_destroy_qp(qp), 0);
        }
    }
}

/// A program makes more AHs than the device's `max_ah`: rdma-core's pvrdma provider builds a
/// user AH in user space and counts it against nothing (the device's `max_ah` bounds the
/// kernel's AHs, which Linux's `pvrdma_create_ah` counts), so every one is made. Before the fix
/// the library answered ENOMEM past `max_ah` (64 on the model), failing e.g. a UD program with
/// one AH per peer.
#[test]
fn user_ahs_are_not_bounded_by_the_kernels_max_ah() {
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let mut attr: ibv_device_attr = std::mem::zeroed();
        assert_eq!(ibv_query_device(ctx, &mut attr), 0);
        let max = attr.max_ah as usize;
        assert!(max > 0);
        let pd = ibv_alloc_pd(ctx);
        let mut gid = ibv_gid { raw: [0; 16] };
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        let mut a = ibv_ah_attr {
            grh: ibv_global_route { dgid: gid, flow_label: 0, sgid_index: 0, hop_limit: 64, traffic_class: 0 },
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        let ahs: Vec<*mut ibv_ah> = (0..2 * max).map(|_| ibv_create_ah(pd, &mut a)).collect();
        let made = ahs.iter().filter(|p| !p.is_null()).count();
        assert_eq!(made, 2 * max, "errno {}", std::io::Error::last_os_error());
        for ah in ahs {
            assert_eq!(ibv_destroy_ah(ah), 0);
        }
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
