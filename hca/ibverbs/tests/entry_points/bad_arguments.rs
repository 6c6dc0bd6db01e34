//! NULLs and bad values through the C entry points: each gets libibverbs's errno, never a panic
//! (EIO), crash or hang; a modify with out-of-range enums leaves the QP as it was. (From the
//! breaker rounds on the library.)

use crate::fx::*;
use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;

#[test]
fn nulls_and_bad_values_get_errnos() {
    let fx = fixture(64);
    let mut wc = [ibv_wc::default(); 4];
    // SAFETY: every pointer passed is NULL or ours.
    unsafe {
        assert!(ibv_alloc_pd(null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(null_mut()), libc::EINVAL);
        assert!(ibv_reg_mr(null_mut(), fx.buf.as_ptr() as *mut _, 8, 1).is_null());
        assert!(ibv_reg_mr(fx.pd, fx.buf.as_ptr() as *mut _, 0, 1).is_null(), "zero length");
        assert!(ibv_reg_mr(fx.pd, 0x1000 as *mut _, usize::MAX, 1).is_null(), "wrapping range");
        assert!(ibv_reg_mr(fx.pd, fx.buf.as_ptr() as *mut _, 8, 2).is_null(), "remote write without local");
        assert_eq!(ibv_dereg_mr(null_mut()), libc::EINVAL);
        assert!(ibv_create_cq(fx.ctx, i32::MAX, null_mut(), null_mut(), 0).is_null());
        assert!(ibv_create_cq(fx.ctx, i32::MIN, null_mut(), null_mut(), 0).is_null());
        assert!(ibv_create_cq(fx.ctx, 4, null_mut(), null_mut(), i32::MAX).is_null());
        assert_eq!(errno(), libc::EINVAL);
        let poll_cq = (*fx.ctx).ops.poll_cq.unwrap();
        assert_eq!(poll_cq(null_mut(), 1, wc.as_mut_ptr()), -libc::EINVAL);
        assert_eq!(poll_cq(fx.cq, -1, wc.as_mut_ptr()), 0);
        assert_eq!(poll_cq(fx.cq, i32::MIN, wc.as_mut_ptr()), 0);
        assert_eq!(poll_cq(fx.cq, 4, null_mut()), -libc::EINVAL);
        assert_eq!(((*fx.ctx).ops.req_notify_cq.unwrap())(null_mut(), 0), libc::EINVAL);
        ibv_ack_cq_events(null_mut(), 5);
        ibv_ack_cq_events(fx.cq, u32::MAX);
        assert_eq!(ibv_get_cq_event(null_mut(), null_mut(), null_mut()), -1);
        assert_eq!(ibv_get_async_event(null_mut(), null_mut()), -1);
        assert_eq!(ibv_get_async_event(fx.ctx, null_mut()), -1);
        ibv_ack_async_event(null_mut());
        assert!(ibv_create_comp_channel(null_mut()).is_null());
        assert_eq!(ibv_destroy_comp_channel(null_mut()), libc::EINVAL);
        assert_eq!(ibv_close_device(null_mut()), libc::EINVAL);
        // QPs: NULL PD, attr, CQs; bad type; huge sizes. (Any max_inline_data is taken: issue 21.)
        let mut a = init_attr(fx.cq, fx.cq, 16, 0);
        assert!(ibv_create_qp(null_mut(), &mut a).is_null());
        assert!(ibv_create_qp(fx.pd, null_mut()).is_null());
        for bad in [
            init_attr(null_mut(), fx.cq, 16, 0),
            init_attr(fx.cq, null_mut(), 16, 0),
            ibv_qp_init_attr { qp_type: 77, ..init_attr(fx.cq, fx.cq, 16, 0) },
            ibv_qp_init_attr { qp_type: IBV_QPT_UC, ..init_attr(fx.cq, fx.cq, 16, 0) },
            init_attr(fx.cq, fx.cq, u32::MAX, 0),
            ibv_qp_init_attr { cap: ibv_qp_cap { max_send_sge: u32::MAX, ..a.cap }, ..a },
            ibv_qp_init_attr { cap: ibv_qp_cap { max_recv_wr: 1 << 31, ..a.cap }, ..a },
        ] {
            let mut b = bad;
            set_errno(0);
            assert!(ibv_create_qp(fx.pd, &mut b).is_null());
            assert!(matches!(errno(), libc::EINVAL | libc::EOPNOTSUPP | libc::ENOMEM), "errno {}", errno());
        }
        let create_ex = (*ctx_ex(fx.ctx)).create_qp_ex.unwrap();
        assert!(create_ex(fx.ctx, null_mut()).is_null());
        assert_eq!(ibv_destroy_qp(null_mut()), libc::EINVAL);
        assert!(ibv_qp_to_qp_ex(null_mut()).is_null());
        let qp = create_qp(fx.pd, fx.cq, 16);
        let mut at = ibv_qp_attr::default();
        let mut init = init_attr(null_mut(), null_mut(), 0, 0);
        assert_eq!(ibv_modify_qp(null_mut(), &mut at, 1), libc::EINVAL);
        assert_eq!(ibv_modify_qp(qp, null_mut(), 1), libc::EINVAL);
        assert_eq!(ibv_query_qp(null_mut(), &mut at, 1, &mut init), libc::EINVAL);
        assert_eq!(ibv_query_qp(qp, null_mut(), 1, &mut init), libc::EINVAL);
        assert_eq!(ibv_query_qp(qp, &mut at, 1, null_mut()), libc::EINVAL);
        assert_eq!(ibv_query_qp(qp, &mut at, -1, &mut init), 0, "any mask is answered");
        // Posting with NULLs.
        let mut bad = null_mut();
        assert_eq!(post_send(qp, null_mut(), &mut bad), 0, "an empty chain");
        let ps = (*fx.ctx).ops.post_send.unwrap();
        let mut w = send_wr(1, null_mut(), 0);
        assert_eq!(ps(null_mut(), &mut w, &mut bad), libc::EINVAL);
        assert_eq!(ps(qp, &mut w, null_mut()), libc::EINVAL, "before RTS, bad_wr NULL");
        let pr = (*fx.ctx).ops.post_recv.unwrap();
        let mut r = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: null_mut(), num_sge: 3 };
        let mut rbad = null_mut();
        assert_eq!(pr(qp, &mut r, &mut rbad), libc::EINVAL, "NULL list with num_sge 3");
        assert_eq!(rbad, &mut r as *mut _);
        r.num_sge = -1;
        assert_eq!(pr(qp, &mut r, null_mut()), libc::EINVAL);
        assert_eq!(((*fx.ctx).ops.post_srq_recv.unwrap())(null_mut(), null_mut(), null_mut()), libc::EINVAL);
        assert_eq!(
            ibv_read_sysfs_file(c"/proc/self".as_ptr(), c"comm".as_ptr(), null_mut(), 0),
            0,
            "size 0, NULL buffer"
        );
        assert_eq!(ibv_read_sysfs_file(c"/nonexistent".as_ptr(), c"x".as_ptr(), null_mut(), 0), -1);
        let mut pa: ibv_port_attr = std::mem::zeroed();
        for port in [0u8, 2, 255] {
            assert_eq!(ibv_query_port(fx.ctx, port, &mut pa), libc::EINVAL, "port {port}");
        }
        let mut g = ibv_gid::default();
        assert_eq!(ibv_query_gid(fx.ctx, 1, i32::MAX, &mut g), -1);
        assert_eq!(ibv_query_gid(fx.ctx, 0, 0, &mut g), -1);
        let mut pk = 0u16;
        assert_eq!(ibv_query_pkey(fx.ctx, 1, 70_000, &mut pk), -1);
        assert_eq!(ibv_query_pkey(fx.ctx, 1, -1, &mut pk), -1);
        assert_eq!(ibv_get_pkey_index(fx.ctx, 9, 0xffff), -1);
        let mut ge: ibv_gid_entry = std::mem::zeroed();
        assert_eq!(
            _ibv_query_gid_ex(fx.ctx, 1 << 20, 0, &mut ge, 0, std::mem::size_of::<ibv_gid_entry>()),
            libc::EINVAL
        );
        assert_eq!(
            _ibv_query_gid_ex(fx.ctx, 1, u32::MAX, &mut ge, 0, std::mem::size_of::<ibv_gid_entry>()),
            libc::EINVAL
        );
        assert_eq!(
            _ibv_query_gid_table(fx.ctx, null_mut(), 0, 0, std::mem::size_of::<ibv_gid_entry>()),
            -(libc::EINVAL as isize),
            "max_entries 0: Linux's UVERBS_METHOD_QUERY_GID_TABLE refuses an empty array"
        );
        assert!(ibv_get_device_name(null_mut()).is_null());
        assert_eq!(ibv_get_device_index(null_mut()), -1);
        ibv_free_device_list(null_mut());
        destroy_qp(qp);
    }
    fx.close();
}

#[test]
fn modify_with_out_of_range_enums_is_einval_and_keeps_the_qp() {
    let fx = fixture(64);
    let qp = create_qp(fx.pd, fx.cq, 16);
    for state in [7, 8, u32::MAX] {
        let mut a = ibv_qp_attr { qp_state: state, ..Default::default() };
        assert_eq!(modify(qp, &mut a, STATE), libc::EINVAL, "state {state}");
        let mut a = ibv_qp_attr { qp_state: 1, cur_qp_state: state, ..Default::default() };
        assert_eq!(modify(qp, &mut a, STATE | 2), libc::EINVAL, "cur state {state}");
    }
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qp_access_flags: 7, ..Default::default() };
    // Mask bits past IBV_QP_DEST_QPN: libibverbs's legacy command and Linux's
    // `ib_uverbs_modify_qp` refuse them with EOPNOTSUPP (issue 21 §3).
    assert_eq!(modify(qp, &mut a, u32::MAX), libc::EOPNOTSUPP, "every mask bit");
    assert_eq!(modify(qp, &mut a, 1 << 30), libc::EOPNOTSUPP, "an unknown bit");
    assert_eq!(modify(qp, &mut a, INIT_MASK | 1 << 19), libc::EINVAL, "IBV_QP_CAP: no transition takes it");
    assert_eq!(modify(qp, &mut a, INIT_MASK), 0);
    let mut r = ibv_qp_attr { qp_state: 2, path_mtu: 3, dest_qp_num: 1, min_rnr_timer: 12, ..Default::default() };
    r.ah_attr = ibv_ah_attr { is_global: 1, port_num: 1, ..Default::default() };
    assert_eq!(modify(qp, &mut r, RTR_MASK), libc::EINVAL, "a zero dgid: the device finds no route");
    let mut q = ibv_qp_attr::default();
    let mut init = init_attr(null_mut(), null_mut(), 0, 0);
    // SAFETY: a live QP.
    let r = unsafe { ibv_query_qp(qp, &mut q, STATE as i32, &mut init) };
    assert_eq!(r, 0);
    // SAFETY: a live QP.
    assert_eq!((q.qp_state, unsafe { (*qp).state }), (1, 1), "still INIT");
    destroy_qp(qp);
    fx.close();
}
