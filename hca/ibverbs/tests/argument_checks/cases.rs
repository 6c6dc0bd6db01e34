//! The cases of `docs/argument-checks.md`'s rows, by verb: each returns the outcome a C program
//! sees, in the words of the table (the helpers are `main.rs`'s).

use super::*;

/// One row's case.
pub(super) type Case = fn() -> String;

/// Every case, by the name its row gives.
pub(super) fn cases() -> BTreeMap<&'static str, Case> {
    let mut m: BTreeMap<&'static str, Case> = BTreeMap::new();
    queries(&mut m);
    mrs(&mut m);
    cqs(&mut m);
    qp_create(&mut m);
    qp_modify(&mut m);
    posting(&mut m);
    srqs(&mut m);
    ahs(&mut m);
    contexts(&mut m);
    m
}

/// Device, port, GID and P_Key queries.
fn queries(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("query_port.port0", || {
        let fx = Fx::new();
        // SAFETY: an open context; all-zero is a valid `ibv_port_attr`.
        int(unsafe { ibv_query_port(fx.ctx, 0, &mut std::mem::zeroed()) })
    });
    m.insert("query_port.port2", || {
        let fx = Fx::new();
        // SAFETY: as above.
        int(unsafe { ibv_query_port(fx.ctx, 2, &mut std::mem::zeroed()) })
    });
    m.insert("query_device_ex.comp_mask", || query_device_ex(1, std::mem::size_of::<ibv_device_attr_ex>()));
    m.insert("query_device_ex.short", || query_device_ex(0, std::mem::size_of::<ibv_device_attr>() - 1));
    m.insert("query_gid.empty", || {
        let fx = Fx::new();
        let mut g = ibv_gid { raw: [1; 16] };
        // SAFETY: an open context.
        let r = int(unsafe { ibv_query_gid(fx.ctx, 1, 1, &mut g) });
        if g.raw == [0; 16] {
            r
        } else {
            format!("{r} (not zeros)")
        }
    });
    m.insert("query_gid.beyond", || {
        let fx = Fx::new();
        // SAFETY: an open context.
        int(unsafe { ibv_query_gid(fx.ctx, 1, 1000, &mut ibv_gid::default()) })
    });
    m.insert("query_gid.port0", || {
        let fx = Fx::new();
        // SAFETY: an open context.
        int(unsafe { ibv_query_gid(fx.ctx, 0, 0, &mut ibv_gid::default()) })
    });
    m.insert("query_gid_ex.empty", || gid_ex(1, 1, 0, 32));
    m.insert("query_gid_ex.flags", || gid_ex(1, 0, 1, 32));
    m.insert("query_gid_ex.short", || gid_ex(1, 0, 0, 31));
    m.insert("query_gid_ex.long", || gid_ex(1, 0, 0, 64));
    m.insert("query_gid_ex.port0", || gid_ex(0, 0, 0, 32));
    m.insert("query_gid_table.ok", || gid_table(4, 0, 32));
    m.insert("query_gid_table.short", || {
        // A second valid GID (index 1, as the kernel's GID cache binds a RoCE v2 address), room
        // for one entry.
        let fx = Fx::new();
        // SAFETY: an open context's device.
        let dev = test_device(unsafe { (*fx.ctx).device }).expect("a device of this library");
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 9];
        dev.add_gid(1, 1, v4, ib_core::GidType::RoceV2).expect("add_gid");
        let mut e = [ibv_gid_entry::default(); 2];
        // SAFETY: an open context; room for the entries named.
        let short = count(unsafe { _ibv_query_gid_table(fx.ctx, e.as_mut_ptr(), 1, 0, 32) });
        // SAFETY: as above.
        let both = count(unsafe { _ibv_query_gid_table(fx.ctx, e.as_mut_ptr(), 2, 0, 32) });
        dev.del_gid(1, 1).expect("del_gid");
        if both == "2" {
            short
        } else {
            format!("{short} (room for both: {both})")
        }
    });
    m.insert("query_gid_table.flags", || gid_table(4, 1, 32));
    m.insert("query_gid_table.size0", || gid_table(4, 0, 0));
    m.insert("query_gid_table.max0", || gid_table(0, 0, 32));
    m.insert("query_gid_table.huge", || gid_table(65536 / 32 + 1, 0, 32));
    m.insert("query_gid_table.small_entries", || gid_table(4, 0, 16));
    m.insert("query_pkey.beyond", || query_pkey(1, 1));
    m.insert("query_pkey.negative", || query_pkey(1, -1));
    m.insert("query_pkey.port2", || query_pkey(2, 0));
    m.insert("query_pkey.ok", || query_pkey(1, 0));
    m.insert("get_pkey_index.port2", || {
        let fx = Fx::new();
        // SAFETY: an open context.
        int(unsafe { ibv_get_pkey_index(fx.ctx, 2, 0xffff) })
    });
    m.insert("get_pkey_index.absent", || {
        let fx = Fx::new();
        // SAFETY: an open context.
        int(unsafe { ibv_get_pkey_index(fx.ctx, 1, 0x1234u16.to_be()) })
    });
}

/// MRs.
fn mrs(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("reg_mr.mw_bind", || reg_mr(1 | 1 << 4));
    m.insert("reg_mr.zero_based", || reg_mr(1 | 1 << 5));
    m.insert("reg_mr.hugetlb", || reg_mr(1 | 1 << 7));
    m.insert("reg_mr.relaxed", || reg_mr(1 | 4 | 1 << 20));
    m.insert("reg_mr.optional29", || reg_mr(1 << 29));
    m.insert("reg_mr.on_demand", || reg_mr(1 | 1 << 6));
    m.insert("reg_mr.flush", || reg_mr(1 | 1 << 8));
    m.insert("reg_mr.bit10", || reg_mr(1 | 1 << 10));
    m.insert("reg_mr.remote_write_alone", || reg_mr(2));
    m.insert("reg_mr.length0", || {
        let fx = Fx::new();
        set_errno(SENTINEL);
        // SAFETY: the fixture's PD over its own buffer.
        ptr(unsafe { ibv_reg_mr(fx.pd, fx.buf.as_ptr() as *mut _, 0, 1) })
    });
    m.insert("reg_mr.over_max", || {
        let fx = Fx::new();
        let max = fx.device_attr().max_mr_size as usize;
        set_errno(SENTINEL);
        // SAFETY: refused before any of the range is touched.
        ptr(unsafe { ibv_reg_mr(fx.pd, fx.buf.as_ptr() as *mut _, max + 1, 1) })
    });
    m.insert("reg_mr_iova2.same_offset", || {
        let fx = Fx::new();
        let addr = fx.buf.as_ptr() as u64;
        set_errno(SENTINEL);
        // SAFETY: the fixture's PD over its own buffer.
        let mr = unsafe { ibv_reg_mr_iova2(fx.pd, addr as *mut _, 4096, (addr % 4096) + (1 << 40), 1) };
        // SAFETY: as above, when it was made.
        if !mr.is_null() && unsafe { (*mr).addr } as u64 != addr {
            return "ok (mr->addr is not addr)".into();
        }
        ptr(mr)
    });
    m.insert("reg_mr_iova2.other_offset", || {
        let fx = Fx::new();
        let addr = fx.buf.as_ptr() as u64;
        set_errno(SENTINEL);
        // SAFETY: as above.
        ptr(unsafe { ibv_reg_mr_iova2(fx.pd, addr as *mut _, 4096, addr + 8, 1) })
    });
    m.insert("rereg_mr.unknown_flag", || {
        let fx = Fx::new();
        // SAFETY: the fixture's MR and PD.
        int(unsafe { ibv_rereg_mr(fx.mr, 8, fx.pd, null_mut(), 0, 0) })
    });
    m.insert("rereg_mr.access_without_flag", || {
        let fx = Fx::new();
        // SAFETY: as above.
        int(unsafe { ibv_rereg_mr(fx.mr, 2, fx.pd, null_mut(), 0, 1) })
    });
    m.insert("rereg_mr.supported", || {
        let fx = Fx::new();
        // SAFETY: as above.
        int(unsafe { ibv_rereg_mr(fx.mr, 4, fx.pd, null_mut(), 0, 1) })
    });
    m.insert("alloc_mw.type1", || {
        let fx = Fx::new();
        // The header's inline `ibv_alloc_mw`: a NULL `ops.alloc_mw` is EOPNOTSUPP.
        // SAFETY: an open context.
        let op = unsafe { (*fx.ctx).ops.alloc_mw };
        if op.is_some() {
            return "an alloc_mw op".into();
        }
        set_errno(libc::EOPNOTSUPP);
        ptr(null_mut::<u8>())
    });
}

/// CQs.
fn cqs(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("create_cq.cqe0", || create_cq(0, 0));
    m.insert("create_cq.negative", || create_cq(-5, 0));
    m.insert("create_cq.over_max", || create_cq(Fx::new().device_attr().max_cqe + 1, 0));
    m.insert("create_cq.max", || create_cq(Fx::new().device_attr().max_cqe, 0));
    m.insert("create_cq.vector", || {
        // SAFETY: reads the fixture's open context.
        let n = unsafe { (*Fx::new().ctx).num_comp_vectors };
        create_cq(4, n)
    });
    m.insert("create_cq.negative_vector", || create_cq(4, -1));
    m.insert("create_cq.rounded", || {
        let fx = Fx::new();
        // SAFETY: an open context.
        let cq = unsafe { ibv_create_cq(fx.ctx, 5, null_mut(), null_mut(), 0) };
        let out = ptr(cq);
        // SAFETY: a live CQ when it was made.
        let cqe = if cq.is_null() { 0 } else { unsafe { (*cq).cqe } };
        if out == "ok" && cqe != 8 {
            format!("ok (cqe {cqe})")
        } else {
            out
        }
    });
}

/// QP create.
fn qp_create(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("create_qp.uc", || create_qp(|a| a.qp_type = IBV_QPT_UC));
    m.insert("create_qp.xrc_send", || create_qp(|a| a.qp_type = IBV_QPT_XRC_SEND));
    m.insert("create_qp.driver", || create_qp(|a| a.qp_type = IBV_QPT_DRIVER));
    m.insert("create_qp.xrc_recv", || create_qp(|a| a.qp_type = IBV_QPT_XRC_RECV));
    m.insert("create_qp.type77", || create_qp(|a| a.qp_type = 77));
    m.insert("create_qp.inline1000", || {
        let fx = Fx::new();
        let mut a = fx.qp_attr(IBV_QPT_RC);
        a.cap.max_inline_data = 1000;
        // SAFETY: the fixture's PD and CQ.
        let out = ptr(unsafe { ibv_create_qp(fx.pd, &mut a) });
        if out == "ok" && a.cap.max_inline_data != 512 {
            return format!("ok (granted {})", a.cap.max_inline_data);
        }
        out
    });
    m.insert("create_qp.send_wr0", || create_qp(|a| a.cap.max_send_wr = 0));
    m.insert("create_qp.send_wr_over", || create_qp(|a| a.cap.max_send_wr = 1 << 20));
    m.insert("create_qp.sge_over", || create_qp(|a| a.cap.max_send_sge = 1000));
}

/// QP modify.
fn qp_modify(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("modify_qp.mask21", || init_case(|_| {}, INIT_MASK | 1 << 21));
    m.insert("modify_qp.rate_limit", || init_case(|_| {}, INIT_MASK | 1 << 25));
    m.insert("modify_qp.cap", || init_case(|_| {}, INIT_MASK | 1 << 19));
    m.insert("modify_qp.state7", || init_case(|a| a.qp_state = 7, STATE));
    m.insert("modify_qp.illegal", || {
        let fx = Fx::new();
        let qp = fx.qp(IBV_QPT_RC);
        int(modify(qp, &mut ibv_qp_attr { qp_state: 3, ..Default::default() }, STATE))
    });
    m.insert("modify_qp.port0", || init_case(|a| a.port_num = 0, INIT_MASK));
    m.insert("modify_qp.port2", || init_case(|a| a.port_num = 2, INIT_MASK));
    m.insert("modify_qp.pkey1", || init_case(|a| a.pkey_index = 1, INIT_MASK));
    m.insert("modify_qp.av_port0", || rtr_case(|a| a.ah_attr.port_num = 0, 0, |_| true));
    m.insert("modify_qp.av_not_global", || rtr_case(|a| a.ah_attr.is_global = 0, 0, |_| true));
    m.insert("modify_qp.sgid_beyond", || rtr_case(|a| a.ah_attr.grh.sgid_index = 200, 0, |_| true));
    m.insert("modify_qp.sgid_empty", || rtr_case(|a| a.ah_attr.grh.sgid_index = 1, 0, |_| true));
    m.insert("modify_qp.alt_path", || {
        rtr_case(|a| (a.alt_port_num, a.alt_ah_attr) = (1, a.ah_attr), 1 << 14, |_| true)
    });
    m.insert("modify_qp.min_rnr32", || rtr_case(|a| a.min_rnr_timer = 32, 0, |_| true));
    m.insert("modify_qp.psn25", || rtr_case(|a| a.rq_psn = 1 << 24 | 5, 0, |q| q.rq_psn == 5));
    m.insert("modify_qp.dest_qpn25", || rtr_case(|a| a.dest_qp_num = 1 << 24 | 5, 0, |q| q.dest_qp_num == 5));
    m.insert("modify_qp.mtu4096", || rtr_case(|a| a.path_mtu = 5, 0, |q| q.path_mtu == 3));
    m.insert("modify_qp.mtu0", || rtr_case(|a| a.path_mtu = 0, 0, |q| q.path_mtu == 3));
    m.insert("modify_qp.flow_label", || {
        rtr_case(|a| a.ah_attr.grh.flow_label = 1 << 20 | 0x1_2345, 0, |q| q.ah_attr.grh.flow_label == 0x1_2345)
    });
    m.insert("modify_qp.sl_rate_hop", || {
        rtr_case(
            |a| {
                (a.ah_attr.sl, a.ah_attr.static_rate, a.ah_attr.grh.hop_limit, a.ah_attr.src_path_bits) =
                    (16, 200, 0, 1)
            },
            0,
            |_| true,
        )
    });
    m.insert("modify_qp.access_unknown", || init_case(|a| a.qp_access_flags = 1 << 6 | 1 << 4, INIT_MASK));
    m.insert("modify_qp.timeout200", || rts_case(|a| a.timeout = 200, |q| q.timeout == 8));
    m.insert("modify_qp.retry9", || {
        rts_case(|a| (a.retry_cnt, a.rnr_retry) = (9, 15), |q| (q.retry_cnt, q.rnr_retry) == (1, 7))
    });
    m.insert("modify_qp.rd_atomic255", || rts_case(|a| a.max_rd_atomic = 255, |q| q.max_rd_atomic == 16));
    m.insert("modify_qp.mask0", || init_case(|a| a.qp_state = 99, 0));
}

/// Posting.
fn posting(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("post_send.before_rts", || {
        let fx = Fx::new();
        let qp = fx.init();
        let mut sg = [fx.sge(0, 8)];
        post_send(qp, &mut send_wr(sg.as_mut_ptr(), 1, IBV_WR_SEND, 0))
    });
    m.insert("post_send.unknown_opcode", || rc_post(|_, sg| send_wr(sg, 1, 99, IBV_SEND_SIGNALED)));
    m.insert("post_send.ud_rdma_write", || {
        let fx = Fx::new();
        let qp = fx.ud_rts();
        let mut a = fx.ah_attr();
        // SAFETY: the fixture's PD.
        let ah = unsafe { ibv_create_ah(fx.pd, &mut a) };
        assert!(!ah.is_null());
        let mut sg = [fx.sge(0, 8)];
        let mut w = send_wr(sg.as_mut_ptr(), 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED);
        // SAFETY: a live QP.
        let qpn = unsafe { (*qp).qp_num };
        w.wr = ibv_send_wr_wr { ud: ibv_send_wr_ud { ah, remote_qpn: qpn, remote_qkey: 0x11 } };
        post_send(qp, &mut w)
    });
    m.insert("post_send.unknown_flag", || rc_post(|_, sg| send_wr(sg, 1, IBV_WR_SEND, 1 << 20)));
    m.insert("post_send.inline_read", || rc_post(|_, sg| send_wr(sg, 1, IBV_WR_RDMA_READ, IBV_SEND_INLINE)));
    m.insert("post_send.inline_long", || {
        rc_post(|fx, _| {
            let big = Box::leak(Box::new([fx.sge(0, 4000)]));
            send_wr(big.as_mut_ptr(), 1, IBV_WR_SEND, IBV_SEND_INLINE)
        })
    });
    m.insert("post_send.too_many_sges", || rc_post(|_, sg| send_wr(sg, 3, IBV_WR_SEND, 0)));
    m.insert("post_send.negative_sges", || rc_post(|_, sg| send_wr(sg, -1, IBV_WR_SEND, 0)));
    m.insert("post_send.null_list", || rc_post(|_, _| send_wr(null_mut(), 1, IBV_WR_SEND, 0)));
    m.insert("post_send.null_list_empty", || rc_post(|_, _| send_wr(null_mut(), 0, IBV_WR_SEND, 0)));
    m.insert("post_send.ud_null_ah", || {
        let fx = Fx::new();
        let qp = fx.ud_rts();
        let mut sg = [fx.sge(0, 8)];
        post_send(qp, &mut send_wr(sg.as_mut_ptr(), 1, IBV_WR_SEND, 0))
    });
    m.insert("post_recv.srq", || {
        let fx = Fx::new();
        let mut sa =
            ibv_srq_init_attr { srq_context: null_mut(), attr: ibv_srq_attr { max_wr: 4, max_sge: 1, srq_limit: 0 } };
        // SAFETY: the fixture's PD.
        let srq = unsafe { ibv_create_srq(fx.pd, &mut sa) };
        let mut a = fx.qp_attr(IBV_QPT_RC);
        a.srq = srq;
        // SAFETY: the fixture's PD, CQ and SRQ.
        let qp = unsafe { ibv_create_qp(fx.pd, &mut a) };
        assert!(!qp.is_null());
        let mut sg = [fx.sge(0, 8)];
        let mut w = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: sg.as_mut_ptr(), num_sge: 1 };
        let untouched = 0x5a5a as *mut ibv_recv_wr;
        let mut bad = untouched;
        // SAFETY: a live QP; the WR is ours.
        let r = int(unsafe { ((*fx.ctx).ops.post_recv.unwrap())(qp, &mut w, &mut bad) });
        if bad == untouched {
            r
        } else {
            format!("{r} (bad_wr written)")
        }
    });
    m.insert("post_recv.reset", || {
        let fx = Fx::new();
        let qp = fx.qp(IBV_QPT_RC);
        let mut sg = [fx.sge(0, 8)];
        post_recv(qp, sg.as_mut_ptr(), 1)
    });
    m.insert("post_recv.too_many_sges", || {
        let fx = Fx::new();
        let qp = fx.init();
        let mut sg = [fx.sge(0, 8), fx.sge(8, 8), fx.sge(16, 8)];
        post_recv(qp, sg.as_mut_ptr(), 3)
    });
}

/// SRQs.
fn srqs(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("create_srq.wr0", || create_srq(0, 0));
    m.insert("create_srq.wr_over", || create_srq(Fx::new().device_attr().max_srq_wr as u32 + 1, 1));
    m.insert("create_srq.sge_over", || create_srq(4, Fx::new().device_attr().max_srq_sge as u32 + 1));
    m.insert("modify_srq.mask0", || modify_srq(1, 0));
    m.insert("modify_srq.max_wr", || modify_srq(1, 1 | 2));
    m.insert("modify_srq.limit_over", || modify_srq(1000, 2));
    m.insert("modify_srq.limit", || modify_srq(4, 2));
}

/// AHs.
fn ahs(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("create_ah.not_global", || create_ah(|a| a.is_global = 0));
    m.insert("create_ah.zero_dgid", || create_ah(|a| a.grh.dgid.raw = [0; 16]));
    m.insert("create_ah.port0", || create_ah(|a| a.port_num = 0));
    m.insert("create_ah.port2", || create_ah(|a| a.port_num = 2));
    m.insert("create_ah.sgid_beyond", || create_ah(|a| a.grh.sgid_index = 200));
    m.insert("create_ah.sgid_empty", || create_ah(|a| a.grh.sgid_index = 1));
    m.insert("create_ah.flow_label", || create_ah(|a| a.grh.flow_label = 1 << 20 | 0x1_2345));
    m.insert("create_ah.hop_limit0", || create_ah(|a| (a.grh.hop_limit, a.sl, a.static_rate, a.dlid) = (0, 15, 3, 7)));
    m.insert("init_ah_from_wc.no_grh", || init_ah(0, |_| {}));
    m.insert("init_ah_from_wc.v1", || init_ah(IBV_WC_GRH, |_| {}));
    m.insert("init_ah_from_wc.unknown_gid", || init_ah(IBV_WC_GRH, |g| g[24..40].copy_from_slice(&[0xfd; 16])));
    m.insert("init_ah_from_wc.multicast", || init_ah(IBV_WC_GRH, |g| g[24] = 0xff));
    m.insert("init_ah_from_wc.next_header", || init_ah(IBV_WC_GRH, |g| g[6] = 99));
}

/// Contexts and importing.
fn contexts(m: &mut BTreeMap<&'static str, Case>) {
    m.insert("import_device.cmd_fd", || {
        let fx = Fx::new();
        // SAFETY: the open context's descriptor; the copy is closed here.
        unsafe {
            let copy = libc::dup((*fx.ctx).cmd_fd);
            assert!(copy >= 0, "dup: errno {}", errno());
            let out = import_device(copy);
            assert_eq!(libc::close(copy), 0);
            out
        }
    });
    m.insert("import_device.eventfd", || {
        // SAFETY: a new eventfd, closed here.
        unsafe {
            let fd = libc::eventfd(0, libc::EFD_CLOEXEC);
            let out = import_device(fd);
            libc::close(fd);
            out
        }
    });
    m.insert("import_device.bad_fd", || import_device(-1));
    m.insert("import_device.dev_zero", || {
        // SAFETY: a NUL-terminated path; the descriptor is closed here.
        unsafe {
            let fd = libc::open(c"/dev/zero".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            assert!(fd >= 0);
            let out = import_device(fd);
            libc::close(fd);
            out
        }
    });
    m.insert("import_pd.any", || {
        let fx = Fx::new();
        set_errno(SENTINEL);
        // SAFETY: an open context.
        ptr(unsafe { ibv_import_pd(fx.ctx, 1) })
    });
    m.insert("import_mr.any", || {
        let fx = Fx::new();
        set_errno(SENTINEL);
        // SAFETY: the fixture's PD.
        ptr(unsafe { ibv_import_mr(fx.pd, 1) })
    });
    m.insert("import_dm.any", || {
        let fx = Fx::new();
        set_errno(SENTINEL);
        // SAFETY: an open context.
        ptr(unsafe { ibv_import_dm(fx.ctx, 1) })
    });
}

/// The outcome of an RTR -> RTS modify (an RC QP connected to itself) with `edit`, `check`ing
/// what `ibv_query_qp` reads back after a success.
fn rts_case(edit: impl Fn(&mut ibv_qp_attr), check: impl Fn(&ibv_qp_attr) -> bool) -> String {
    let fx = Fx::new();
    let qp = fx.init();
    let mut a = fx.rtr(qp);
    assert_eq!(modify(qp, &mut a, RTR_MASK), 0, "RTR");
    let mut a =
        ibv_qp_attr { qp_state: 3, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1, ..Default::default() };
    edit(&mut a);
    let r = modify(qp, &mut a, RTS_MASK);
    read_back(qp, r, check)
}

/// The outcome of `ibv_init_ah_from_wc` for a completion with `wc_flags` whose receive buffer
/// began with a RoCE v1 GRH (IPv6, next header 0x1b) from `fd00::1` to the port's GID 0, `edit`ed.
fn init_ah(wc_flags: u32, edit: impl Fn(&mut [u8; 40])) -> String {
    let fx = Fx::new();
    let mut grh = [0u8; 40];
    grh[0] = 0x60;
    grh[6] = 0x1b;
    grh[7] = 64;
    grh[8] = 0xfd;
    grh[23] = 1;
    grh[24..40].copy_from_slice(&fx.gid);
    edit(&mut grh);
    let mut wc = ibv_wc { wc_flags, ..Default::default() };
    let mut out = ibv_ah_attr::default();
    // SAFETY: an open context; the completion, its 40-byte GRH area and the attributes are ours.
    int(unsafe { ibv_init_ah_from_wc(fx.ctx, 1, &mut wc, grh.as_mut_ptr().cast(), &mut out) })
}
