//! The SRQ verbs through the C ABI: `ibv_create_srq` and the extended ops' `create_srq_ex`,
//! `ibv_modify_srq`, `ibv_query_srq`, `ibv_post_srq_recv` (the ops slot the header's inline
//! calls), `ibv_create_qp` with an SRQ, `ibv_destroy_srq`, and an SRQ's async event naming it.
//! (Data through an SRQ: Debian's `ibv_srq_pingpong` in the rdma-core stage.)

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use pvrdma_abi::event::EqeType;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn ctx_ex(ctx: *mut ibv_context) -> *mut verbs_context {
    let at = std::mem::offset_of!(verbs_context, context);
    // SAFETY: every context of this library is the last field of a `verbs_context`.
    unsafe { ctx.cast::<u8>().sub(at).cast() }
}

/// An SRQ limit event of the context within `within`, acknowledged; `None` if none came.
fn srq_event(ctx: *mut ibv_context, within: Duration) -> Option<*mut libc::c_void> {
    let end = Instant::now() + within;
    let mut ev = ibv_async_event { element: ibv_async_event_element { port_num: -1 }, event_type: 99 };
    // SAFETY: an open context; its async fd made non-blocking; `ev` is writable.
    unsafe {
        let fd = (*ctx).async_fd;
        libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
        loop {
            if ibv_get_async_event(ctx, &mut ev) == 0 {
                assert_eq!(ev.event_type, 15, "IBV_EVENT_SRQ_LIMIT_REACHED");
                let srq = ev.element.srq;
                ibv_ack_async_event(&mut ev);
                return Some(srq);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn srq_verbs_answer_as_libibverbs() {
    // SAFETY: every pointer is an object of this library created here, or NULL on purpose.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        let dev = *list;
        let model = test_model(dev).expect("a model device");
        let ctx = ibv_open_device(dev);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 64, null_mut(), null_mut(), 0);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        assert!(!ctx.is_null() && !pd.is_null() && !cq.is_null() && !mr.is_null());

        let mut init = ibv_srq_init_attr { srq_context: 7 as *mut _, attr: ibv_srq_attr { max_wr: 10, max_sge: 1, srq_limit: 0 } };
        let srq = ibv_create_srq(pd, &mut init);
        assert!(!srq.is_null(), "ibv_create_srq: errno {}", errno());
        assert_eq!((init.attr.max_wr, (*srq).context, (*srq).pd, (*srq).srq_context), (16, ctx, pd, 7 as *mut _));
        let mut too_big = ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 1 << 20, max_sge: 1, srq_limit: 0 } };
        assert!(ibv_create_srq(pd, &mut too_big).is_null());
        assert_eq!(errno(), libc::EINVAL);

        // The extended create: basic with a PD works, XRC and tag matching do not.
        let create_ex = (*ctx_ex(ctx)).create_srq_ex.expect("create_srq_ex");
        let mut ex = ibv_srq_init_attr_ex {
            srq_context: null_mut(),
            attr: ibv_srq_attr { max_wr: 4, max_sge: 1, srq_limit: 0 },
            comp_mask: IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ,
            srq_type: IBV_SRQT_BASIC,
            pd,
            xrcd: null_mut(),
            cq,
            tm_cap: [0; 2],
        };
        let basic = create_ex(ctx, &mut ex);
        assert!(!basic.is_null(), "create_srq_ex basic: errno {}", errno());
        assert_eq!(ibv_destroy_srq(basic), 0);
        for ty in [1, 2] {
            ex.srq_type = ty;
            assert!(create_ex(ctx, &mut ex).is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP, "SRQ type {ty}");
        }

        let mut a = ibv_srq_attr::default();
        assert_eq!(ibv_query_srq(srq, &mut a), 0);
        assert_eq!((a.max_wr, a.max_sge, a.srq_limit), (16, 1, 0));
        assert_eq!(ibv_modify_srq(srq, &mut ibv_srq_attr { max_wr: 32, ..Default::default() }, 1), libc::EINVAL, "no resize");
        assert_eq!(ibv_modify_srq(srq, &mut ibv_srq_attr { srq_limit: 17, ..Default::default() }, 2), libc::EINVAL);
        assert_eq!(ibv_modify_srq(srq, &mut ibv_srq_attr { srq_limit: 3, ..Default::default() }, 2), 0);
        assert_eq!(ibv_query_srq(srq, &mut a), 0);
        assert_eq!(a.srq_limit, 3);

        // A QP on the SRQ: no RQ of its own.
        let mut qa = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq,
            cap: ibv_qp_cap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        let qp = ibv_create_qp(pd, &mut qa);
        assert!(!qp.is_null(), "ibv_create_qp with an SRQ: errno {}", errno());
        assert_eq!(((*qp).srq, qa.cap.max_recv_wr, qa.cap.max_recv_sge), (srq, 0, 0));

        // Posting: to the SRQ through the ops slot; never to the QP's missing RQ.
        let mut sge = ibv_sge { addr: buf.as_ptr() as u64, length: 64, lkey: (*mr).lkey };
        let mut wrs: Vec<ibv_recv_wr> = (0..17)
            .map(|i| ibv_recv_wr { wr_id: i, next: null_mut(), sg_list: &mut sge, num_sge: 1 })
            .collect();
        for i in 0..16 {
            wrs[i].next = &mut wrs[i + 1];
        }
        let post_srq = (*ctx).ops.post_srq_recv.expect("post_srq_recv");
        let mut bad = null_mut();
        assert_eq!(post_srq(srq.cast(), &mut wrs[0], &mut bad), libc::ENOMEM, "the 17th does not fit");
        assert_eq!(bad, &mut wrs[16] as *mut _);
        wrs[0].num_sge = 2;
        wrs[0].next = null_mut();
        assert_eq!(post_srq(srq.cast(), &mut wrs[0], &mut bad), libc::EINVAL, "more SGEs than the SRQ takes");
        assert_eq!(((*ctx).ops.post_recv.unwrap())(qp, &mut wrs[0], &mut bad), libc::EINVAL);

        // Its async event names the SRQ (a live one).
        model.device().inject_async_event(EqeType::SrqLimitReached, (*srq).handle);
        assert_eq!(srq_event(ctx, Duration::from_secs(5)), Some(srq.cast()));

        assert_eq!(ibv_destroy_srq(srq), libc::EBUSY, "a QP uses it");
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_srq(srq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
