//! Every field of a create command means what it says: CREATE_QP types, SRQ and CQ handles,
//! inline data and flags outside their meaning, MR access flags that describe nothing, and
//! creates on a destroyed context are refused.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::*;
use pvrdma_abi::errno::EINVAL;
use pvrdma_abi::verbs::access;
use zerocopy::little_endian::{U16, U32, U64};

type QpEdit = fn(&mut CreateQp);

/// Which of `cases` a fresh device accepts as CREATE_QP edits of a good request.
fn accepted_creates(cases: &[(&'static str, QpEdit)]) -> Vec<&'static str> {
    let mut accepted = Vec::new();
    for &(what, edit) in cases {
        let mut d = Drv::new(SimConfig::default());
        let pd = d.create_pd(0);
        let cq = d.create_cq(0, 16).handle;
        let (mut req, _) = d.qp_request(pd, cq, cq, 8, 2);
        assert_eq!(d.post(req).1, 0, "the unedited request");
        let (mut req2, _) = d.qp_request(pd, cq, cq, 8, 2);
        edit(&mut req2);
        req = req2;
        if d.post(req).1 != EINVAL {
            accepted.push(what);
        }
    }
    accepted
}

/// From issue 10's third round of attacks on the model.
#[test]
fn create_qp_types_srqs_and_cq_handles_that_do_not_exist_are_refused() {
    let cases: [(&str, QpEdit); 5] = [
        ("qp_type UC", |r| r.qp_type = 3),
        ("qp_type 255", |r| r.qp_type = 255),
        ("is_srq 1", |r| r.is_srq = 1),
        ("send_cq_handle 0", |r| r.send_cq_handle = U32::new(0)),
        ("recv_cq_handle 999", |r| r.recv_cq_handle = U32::new(999)),
    ];
    assert_eq!(accepted_creates(&cases), Vec::<&str>::new());
}

/// (Linux's `pvrdma_create_qp` always sends `max_inline_data` 0.)
///
/// From issue 10's third round of attacks on the model.
#[test]
fn inline_data_the_device_does_not_have_is_refused() {
    let cases: [(&str, QpEdit); 3] = [
        ("max_inline_data 1", |r| r.max_inline_data = U32::new(1)),
        ("max_inline_data 64", |r| r.max_inline_data = U32::new(64)),
        ("max_inline_data u32::MAX", |r| r.max_inline_data = U32::new(u32::MAX)),
    ];
    assert_eq!(accepted_creates(&cases), Vec::<&str>::new());
}

/// From issue 10's third round of attacks on the model.
#[test]
fn create_qp_fields_outside_their_meaning_are_refused() {
    let cases: [(&str, QpEdit); 8] = [
        ("access_flags bit 6 (no such access)", |r| r.access_flags = U32::new(1 << 6)),
        ("access_flags u32::MAX", |r| r.access_flags = U32::new(u32::MAX)),
        ("access_flags MW_BIND (an MR flag)", |r| r.access_flags = U32::new(access::MW_BIND)),
        ("access_flags ZERO_BASED (an MR flag)", |r| r.access_flags = U32::new(access::ZERO_BASED)),
        ("sq_sig_all 2 (a bool)", |r| r.sq_sig_all = 2),
        ("sq_sig_all 255", |r| r.sq_sig_all = 255),
        ("srq_handle 5 with is_srq 0", |r| r.srq_handle = U32::new(5)),
        ("max_atomic_arg 0xffff (no atomics reported)", |r| r.max_atomic_arg = U16::new(0xffff)),
    ];
    assert_eq!(accepted_creates(&cases), Vec::<&str>::new());
}

/// From issue 10's third round of attacks on the model.
#[test]
fn mr_access_flags_that_describe_nothing_are_refused() {
    let mut accepted = Vec::new();
    for (what, acc) in [
        ("REMOTE_WRITE without LOCAL_WRITE", access::REMOTE_WRITE),
        ("REMOTE_ATOMIC without LOCAL_WRITE", access::REMOTE_ATOMIC),
    ] {
        let mut d = Drv::new(SimConfig::default());
        let pd = d.create_pd(0);
        let base = d.dev.mem().alloc(PAGE).unwrap();
        let req = CreateMr {
            start: U64::new(0x1000),
            length: U64::new(PAGE),
            pdir_dma: U64::new(build_pdir(&d.dev, &[base])),
            pd_handle: U32::new(pd),
            access_flags: U32::new(acc),
            nchunks: U32::new(1),
            ..Default::default()
        };
        if d.post(req).1 != EINVAL {
            accepted.push(what);
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}

/// From issue 10's third round of attacks on the model.
#[test]
fn a_destroyed_context_takes_no_new_cq_or_pd() {
    let mut d = Drv::new(SimConfig::default());
    let ctx = d.create_uc(1);
    d.ok(DestroyUc { ctx_handle: U32::new(ctx), ..Default::default() });
    let (req, _) = d.cq_request(ctx, 16);
    assert_eq!(d.post(req).1, EINVAL, "CREATE_CQ");
    assert_eq!(d.post(CreatePd { ctx_handle: U32::new(ctx), ..Default::default() }).1, EINVAL);
}
