//! The SRQ verbs through the C ABI: `ibv_create_srq` and the extended ops' `create_srq_ex`,
//! `ibv_modify_srq`, `ibv_query_srq`, `ibv_post_srq_recv` (the ops slot the header's inline
//! calls), `ibv_create_qp` with an SRQ, `ibv_destroy_srq`, and an SRQ's async event naming it.
//! (Data through an SRQ: Debian's `ibv_srq_pingpong` in the rdma-core stage.)

use crate::ports::{
    async_event, connect, destroy_qp, poll_for, poll_n, post_send, qpn, run, send_wr, sides, to_error, Side, PORTS,
};
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
    run(|| {
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

            let mut init = ibv_srq_init_attr {
                srq_context: 7 as *mut _,
                attr: ibv_srq_attr { max_wr: 10, max_sge: 1, srq_limit: 0 },
            };
            let srq = ibv_create_srq(pd, &mut init);
            assert!(!srq.is_null(), "ibv_create_srq: errno {}", errno());
            assert_eq!((init.attr.max_wr, (*srq).context, (*srq).pd, (*srq).srq_context), (16, ctx, pd, 7 as *mut _));
            let mut too_big = ibv_srq_init_attr {
                srq_context: null_mut(),
                attr: ibv_srq_attr { max_wr: 1 << 20, max_sge: 1, srq_limit: 0 },
            };
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
            assert_eq!(
                ibv_modify_srq(srq, &mut ibv_srq_attr { max_wr: 32, ..Default::default() }, 1),
                libc::EINVAL,
                "no resize"
            );
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
                cap: ibv_qp_cap {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: IBV_QPT_RC,
                sq_sig_all: 0,
            };
            let qp = ibv_create_qp(pd, &mut qa);
            assert!(!qp.is_null(), "ibv_create_qp with an SRQ: errno {}", errno());
            assert_eq!(((*qp).srq, qa.cap.max_recv_wr, qa.cap.max_recv_sge), (srq, 0, 0));

            // Posting: to the SRQ through the ops slot; never to the QP's missing RQ.
            let mut sge = ibv_sge { addr: buf.as_ptr() as u64, length: 64, lkey: (*mr).lkey };
            let mut wrs: Vec<ibv_recv_wr> =
                (0..17).map(|i| ibv_recv_wr { wr_id: i, next: null_mut(), sg_list: &mut sge, num_sge: 1 }).collect();
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
    });
}

/// `IBV_EVENT_SRQ_LIMIT_REACHED` (15) and `IBV_EVENT_QP_LAST_WQE_REACHED` (16).
const SRQ_LIMIT_REACHED: u32 = 15;
const QP_LAST_WQE_REACHED: u32 = 16;

/// Posts `n` receives of 256 bytes to `srq` through the ops slot.
fn post_srq(side: &Side, srq: *mut ibv_srq, first: u64, n: u64) {
    for i in 0..n {
        let mut s = side.sge(8192 + 256 * i as usize, 256);
        let mut w = ibv_recv_wr { wr_id: first + i, next: null_mut(), sg_list: &mut s, num_sge: 1 };
        let mut bad = null_mut();
        // SAFETY: a live SRQ of `side`'s context; the WR is ours.
        assert_eq!(unsafe { ((*side.ctx).ops.post_srq_recv.unwrap())(srq.cast(), &mut w, &mut bad) }, 0);
    }
}

/// An RC QP of `a` connected to a QP of `b` on `srq`: (sender, receiver).
fn pair_on(a: &Side, b: &Side, srq: *mut ibv_srq) -> (*mut ibv_qp, *mut ibv_qp) {
    let (qa, qb) = (a.qp(IBV_QPT_RC, null_mut()), b.qp(IBV_QPT_RC, srq));
    connect(a, qa, b, qb);
    connect(b, qb, a, qa);
    (qa, qb)
}

/// Sends `len` bytes on `qa` and returns the sender's status.
fn send(a: &Side, qa: *mut ibv_qp, wr_id: u64, len: u32) -> u32 {
    let mut s = a.sge(0, len);
    assert_eq!(post_send(qa, &mut send_wr(wr_id, IBV_WR_SEND, &mut s, 1)), 0);
    poll_n(a.scq, 1)[0].status
}

/// Issue 21 §5, on both ports: `ibv_create_srq` writes back `max_wr` rounded up to a power of
/// two and `max_sge` at least 1 (rdma-core's pvrdma provider) and ignores `srq_limit` (0 on
/// query); a limit above `max_wr` is `EINVAL`; a limit armed above the WQEs already posted
/// raises nothing until a QP takes a WQE (rxe's `get_srq_wqe`); then one event naming the SRQ,
/// the limit reads 0 and the next take raises none.
#[test]
fn the_srq_limit_fires_once_when_a_wqe_is_taken_and_then_reads_0() {
    run(|| {
        for port in PORTS {
            let (a, b) = sides(port);
            let mut init = ibv_srq_init_attr {
                srq_context: null_mut(),
                attr: ibv_srq_attr { max_wr: 5, max_sge: 0, srq_limit: 3 },
            };
            // SAFETY: `b`'s PD; the attributes are ours.
            let srq = unsafe { ibv_create_srq(b.pd, &mut init) };
            assert!(!srq.is_null(), "errno {}", errno());
            assert_eq!((init.attr.max_wr, init.attr.max_sge), (8, 1), "{port:?}");
            let mut q = ibv_srq_attr::default();
            // SAFETY: a live SRQ; the answers go to `q`.
            let query = |q: &mut ibv_srq_attr| unsafe { ibv_query_srq(srq, q) };
            assert_eq!(
                (query(&mut q), q.max_wr, q.max_sge, q.srq_limit),
                (0, 8, 1, 0),
                "{port:?}: the create's limit ignored"
            );
            // SAFETY: as above.
            let arm =
                |limit| unsafe { ibv_modify_srq(srq, &mut ibv_srq_attr { srq_limit: limit, ..Default::default() }, 2) };
            assert_eq!(arm(9), libc::EINVAL, "above max_wr");
            let (qa, qb) = pair_on(&a, &b, srq);
            post_srq(&b, srq, 100, 2);
            assert_eq!(arm(4), 0, "armed above the 2 posted");
            assert_eq!(async_event(b.ctx, Duration::from_millis(200)), None, "{port:?}: nothing until a WQE is taken");
            assert_eq!(send(&a, qa, 1, 10), 0);
            assert_eq!(poll_n(b.rcq, 1)[0].wr_id, 100);
            assert_eq!(async_event(b.ctx, crate::ports::WAIT), Some((SRQ_LIMIT_REACHED, srq.cast())), "{port:?}");
            assert_eq!((query(&mut q), q.srq_limit), (0, 0), "{port:?}: disarmed");
            assert_eq!(send(&a, qa, 2, 10), 0);
            assert_eq!(poll_n(b.rcq, 1)[0].wr_id, 101);
            assert_eq!(async_event(b.ctx, Duration::from_millis(200)), None, "{port:?}: once");
            destroy_qp(qa);
            destroy_qp(qb);
            // SAFETY: no QP uses it any more.
            assert_eq!(unsafe { ibv_destroy_srq(srq) }, 0);
            a.close();
            b.close();
        }
    });
}

/// Issue 21 §5, on both ports: a QP on an SRQ that enters ERR — by `ibv_modify_qp` with no WQE
/// outstanding, or by an error completion (a message longer than the SRQ's WQE) — raises
/// `IBV_EVENT_QP_LAST_WQE_REACHED` once, naming the QP (IBTA 11.6.3.3 o11-5.2.5; Linux rxe's
/// `flush_recv_queue`), after its last completion.
#[test]
fn last_wqe_reached_comes_once_when_a_qp_of_an_srq_enters_err() {
    run(|| {
        for port in PORTS {
            let (a, b) = sides(port);
            let mut init = ibv_srq_init_attr {
                srq_context: null_mut(),
                attr: ibv_srq_attr { max_wr: 8, max_sge: 1, srq_limit: 0 },
            };
            // SAFETY: `b`'s PD; the attributes are ours.
            let srq = unsafe { ibv_create_srq(b.pd, &mut init) };
            assert!(!srq.is_null());
            let (qa, qb) = pair_on(&a, &b, srq);
            to_error(qb);
            assert_eq!(
                async_event(b.ctx, crate::ports::WAIT),
                Some((QP_LAST_WQE_REACHED, qb.cast())),
                "{port:?}: by modify"
            );
            assert_eq!(async_event(b.ctx, Duration::from_millis(200)), None, "{port:?}: once");
            let (qc, qd) = pair_on(&a, &b, srq);
            post_srq(&b, srq, 200, 1);
            assert_ne!(send(&a, qc, 3, 1000), 0, "the receiver's WQE holds 256 bytes");
            let r = poll_n(b.rcq, 1)[0];
            assert_eq!((r.wr_id, r.status, r.qp_num), (200, 1, qpn(qd)), "{port:?}: IBV_WC_LOC_LEN_ERR");
            assert_eq!(
                async_event(b.ctx, crate::ports::WAIT),
                Some((QP_LAST_WQE_REACHED, qd.cast())),
                "{port:?}: by an error"
            );
            assert_eq!(async_event(b.ctx, Duration::from_millis(200)), None, "{port:?}: once");
            assert!(poll_for(b.rcq, Duration::from_millis(20)).is_empty(), "nothing flushed: the SRQ keeps its WQEs");
            for q in [qa, qb, qc, qd] {
                destroy_qp(q);
            }
            // SAFETY: no QP uses it any more.
            assert_eq!(unsafe { ibv_destroy_srq(srq) }, 0);
            a.close();
            b.close();
        }
    });
}

/// `ibv_create_srq` with `max_wr` and `max_sge` 0: rdma-core's pvrdma provider asks the kernel
/// for one of each and writes them back, so the SRQ is made with room for one WR of one SGE.
/// Before the fix the library answered EINVAL.
#[test]
fn create_srq_takes_zero_sizes_as_one_as_rdma_core() {
    // SAFETY: every pointer is an object of this library created here.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        test_model(*list).expect("a model device");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        let pd = ibv_alloc_pd(ctx);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        let mut init =
            ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 0, max_sge: 0, srq_limit: 0 } };
        let srq = ibv_create_srq(pd, &mut init);
        assert!(!srq.is_null(), "errno {}", std::io::Error::last_os_error());
        assert_eq!((init.attr.max_wr, init.attr.max_sge), (1, 1));
        let mut sge = ibv_sge { addr: buf.as_ptr() as u64, length: 64, lkey: (*mr).lkey };
        let mut wr = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: &mut sge, num_sge: 1 };
        let mut bad = null_mut();
        let post = (*ctx).ops.post_srq_recv.expect("post_srq_recv");
        assert_eq!(post(srq.cast(), &mut wr, &mut bad), 0);
        assert_eq!(post(srq.cast(), &mut wr, &mut bad), libc::ENOMEM, "one WR fills it");
        let mut three =
            ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 3, max_sge: 2, srq_limit: 0 } };
        let s3 = ibv_create_srq(pd, &mut three);
        assert!(!s3.is_null());
        assert_eq!((three.attr.max_wr, three.attr.max_sge), (4, 2), "rounded up; SGEs as asked");
        assert_eq!(ibv_destroy_srq(s3), 0);
        assert_eq!(ibv_destroy_srq(srq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
