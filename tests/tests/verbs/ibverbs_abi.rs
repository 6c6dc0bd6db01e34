//! libibverbs's structures in `ibverbs-abi` (`hca/ibverbs/abi`, `ibverbs-compat`'s `abi`) against the installed
//! `<infiniband/verbs.h>` (package `libibverbs-dev`, rdma-core 44): for every struct, its size and
//! alignment, and every field's offset and size; plus the enum values the library uses. A C
//! program compiled at test time prints the header's side; all mismatches are reported together.
//! Fields the Rust side renames (an anonymous C union, a keyword) name their C member explicitly;
//! opaque byte runs are checked as the span between their C neighbours.
//!
//! A missing compiler or header fails the test with what to install; it never skips.

use core::mem::{align_of, offset_of, size_of};
use ibverbs_compat::abi::*;
use tests::cprobe::{require_header, CProbe};

const HEADER: &str = "/usr/include/infiniband/verbs.h";

struct Check {
    name: String,
    c: String,
    rust: i64,
}

#[derive(Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn add(&mut self, name: String, c: String, rust: usize) {
        self.0.push(Check { name, c, rust: rust as i64 });
    }
}

/// The size of a field, from a projection (no value needed).
fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// `layout!(checks, RustType, "struct c_name", field, field = "c_member", ...)`; a field written
/// `field ~ "c_member"` is an opaque run starting at that C member: its offset is checked here,
/// its extent by [`spans`]. `layout!(checks, RustType, "struct c_name" in "path", ...)` checks a
/// struct nested at member `path`: offsets relative to it, its size against the member's.
macro_rules! layout {
    ($ck:expr, $t:ident, $c:literal $(in $path:literal)?, $($f:ident $(= $cf:literal)? $(~ $of:literal)?),+ $(,)?) => {{
        let path: &str = layout!(@path $($path)?);
        let (base, whole) = if path.is_empty() {
            ("0".to_owned(), format!("sizeof({})", $c))
        } else {
            (format!("offsetof({}, {path})", $c), format!("sizeof(MEMBER({}, {path}))", $c))
        };
        let member = |f: &str| if path.is_empty() { f.to_owned() } else { format!("{path}.{f}") };
        $ck.add(format!("sizeof {} {path}", $c), whole, size_of::<$t>());
        if path.is_empty() {
            $ck.add(format!("alignof {}", $c), format!("_Alignof({})", $c), align_of::<$t>());
        }
        $(
            let cf = member(layout!(@c $f $(, $cf)? $(, $of)?));
            $ck.add(format!("{}.{}", $c, cf), format!("offsetof({}, {cf}) - {base}", $c), offset_of!($t, $f));
            if layout!(@sized $($of)?) {
                $ck.add(
                    format!("sizeof {}.{}", $c, cf),
                    format!("sizeof(MEMBER({}, {cf}))", $c),
                    field_size(|x: &$t| &x.$f),
                );
            }
        )+
    }};
    (@path) => { "" };
    (@path $p:literal) => { $p };
    (@c $f:ident) => { stringify!($f) };
    (@c $f:ident, $cf:literal) => { $cf };
    (@sized) => { true };
    (@sized $of:literal) => { false };
}

fn structs(ck: &mut Checks) {
    layout!(ck, ibv_device, "struct ibv_device", _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path);
    layout!(
        ck,
        ibv_device_attr,
        "struct ibv_device_attr",
        fw_ver,
        node_guid,
        sys_image_guid,
        max_mr_size,
        page_size_cap,
        vendor_id,
        vendor_part_id,
        hw_ver,
        max_qp,
        max_qp_wr,
        device_cap_flags,
        max_sge,
        max_sge_rd,
        max_cq,
        max_cqe,
        max_mr,
        max_pd,
        max_qp_rd_atom,
        max_ee_rd_atom,
        max_res_rd_atom,
        max_qp_init_rd_atom,
        max_ee_init_rd_atom,
        atomic_cap,
        max_ee,
        max_rdd,
        max_mw,
        max_raw_ipv6_qp,
        max_raw_ethy_qp,
        max_mcast_grp,
        max_mcast_qp_attach,
        max_total_mcast_qp_attach,
        max_ah,
        max_fmr,
        max_map_per_fmr,
        max_srq,
        max_srq_wr,
        max_srq_sge,
        max_pkeys,
        local_ca_ack_delay,
        phys_port_cnt
    );
    layout!(
        ck,
        ibv_port_attr,
        "struct ibv_port_attr",
        state,
        max_mtu,
        active_mtu,
        gid_tbl_len,
        port_cap_flags,
        max_msg_sz,
        bad_pkey_cntr,
        qkey_viol_cntr,
        pkey_tbl_len,
        lid,
        sm_lid,
        lmc,
        max_vl_num,
        sm_sl,
        subnet_timeout,
        init_type_reply,
        active_width,
        active_speed,
        phys_state,
        link_layer,
        flags,
        port_cap_flags2
    );
    layout!(ck, ibv_gid_entry, "struct ibv_gid_entry", gid, gid_index, port_num, gid_type, ndev_ifindex);
    layout!(ck, ibv_pd, "struct ibv_pd", context, handle);
    layout!(ck, ibv_mr, "struct ibv_mr", context, pd, addr, length, handle, lkey, rkey);
    layout!(
        ck,
        ibv_cq,
        "struct ibv_cq",
        context,
        channel,
        cq_context,
        handle,
        cqe,
        mutex,
        cond,
        comp_events_completed,
        async_events_completed
    );
    layout!(ck, ibv_comp_channel, "struct ibv_comp_channel", context, fd, refcnt);
    layout!(
        ck,
        ibv_cq_init_attr_ex,
        "struct ibv_cq_init_attr_ex",
        cqe,
        cq_context,
        channel,
        comp_vector,
        wc_flags,
        comp_mask,
        flags,
        parent_domain
    );
    layout!(ck, ibv_sge, "struct ibv_sge", addr, length, lkey);
    layout!(ck, ibv_send_wr, "struct ibv_send_wr", wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data,
        wr, qp_type, bind_mw ~ "bind_mw");
    layout!(ck, ibv_send_wr_rdma, "struct ibv_send_wr" in "wr.rdma", remote_addr, rkey);
    layout!(ck, ibv_send_wr_atomic, "struct ibv_send_wr" in "wr.atomic", remote_addr, compare_add, swap, rkey);
    layout!(ck, ibv_send_wr_ud, "struct ibv_send_wr" in "wr.ud", ah, remote_qpn, remote_qkey);
    layout!(ck, ibv_recv_wr, "struct ibv_recv_wr", wr_id, next, sg_list, num_sge);
    layout!(
        ck,
        ibv_wc,
        "struct ibv_wc",
        wr_id,
        status,
        opcode,
        vendor_err,
        byte_len,
        imm_data,
        qp_num,
        src_qp,
        wc_flags,
        pkey_index,
        slid,
        sl,
        dlid_path_bits
    );
    layout!(
        ck,
        ibv_qp,
        "struct ibv_qp",
        context,
        qp_context,
        pd,
        send_cq,
        recv_cq,
        srq,
        handle,
        qp_num,
        state,
        qp_type,
        mutex,
        cond,
        events_completed
    );
    layout!(
        ck,
        ibv_qp_ex,
        "struct ibv_qp_ex",
        qp_base,
        comp_mask,
        wr_id,
        wr_flags,
        wr_atomic_cmp_swp,
        wr_atomic_fetch_add,
        wr_bind_mw,
        wr_local_inv,
        wr_rdma_read,
        wr_rdma_write,
        wr_rdma_write_imm,
        wr_send,
        wr_send_imm,
        wr_send_inv,
        wr_send_tso,
        wr_set_ud_addr,
        wr_set_xrc_srqn,
        wr_set_inline_data,
        wr_set_inline_data_list,
        wr_set_sge,
        wr_set_sge_list,
        wr_start,
        wr_complete,
        wr_abort,
        wr_atomic_write
    );
    layout!(ck, ibv_data_buf, "struct ibv_data_buf", addr, length);
    layout!(ck, ibv_qp_cap, "struct ibv_qp_cap", max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data);
    layout!(
        ck,
        ibv_qp_init_attr,
        "struct ibv_qp_init_attr",
        qp_context,
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all
    );
    layout!(
        ck,
        ibv_qp_init_attr_ex,
        "struct ibv_qp_init_attr_ex",
        qp_context,
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all,
        comp_mask,
        pd,
        xrcd,
        create_flags,
        max_tso_header,
        rwq_ind_tbl,
        rx_hash_conf,
        source_qpn,
        send_ops_flags
    );
    layout!(ck, ibv_global_route, "struct ibv_global_route", dgid, flow_label, sgid_index, hop_limit, traffic_class);
    layout!(ck, ibv_ah_attr, "struct ibv_ah_attr", grh, dlid, sl, src_path_bits, static_rate, is_global, port_num);
    layout!(
        ck,
        ibv_qp_attr,
        "struct ibv_qp_attr",
        qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        cap,
        ah_attr,
        alt_ah_attr,
        pkey_index,
        alt_pkey_index,
        en_sqd_async_notify,
        sq_draining,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
        alt_port_num,
        alt_timeout,
        rate_limit
    );
    layout!(ck, ibv_srq, "struct ibv_srq", context, srq_context, pd, handle, mutex, cond, events_completed);
    layout!(ck, ibv_srq_attr, "struct ibv_srq_attr", max_wr, max_sge, srq_limit);
    layout!(ck, ibv_srq_init_attr, "struct ibv_srq_init_attr", srq_context, attr);
    layout!(
        ck,
        ibv_srq_init_attr_ex,
        "struct ibv_srq_init_attr_ex",
        srq_context,
        attr,
        comp_mask,
        srq_type,
        pd,
        xrcd,
        cq,
        tm_cap
    );
    layout!(ck, ibv_ah, "struct ibv_ah", context, pd, handle);
    layout!(ck, ibv_context, "struct ibv_context", device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat);
    layout!(
        ck,
        ibv_context_ops,
        "struct ibv_context_ops",
        _compat_query_device,
        _compat_query_port,
        _compat_alloc_pd,
        _compat_dealloc_pd,
        _compat_reg_mr,
        _compat_rereg_mr,
        _compat_dereg_mr,
        alloc_mw,
        bind_mw,
        dealloc_mw,
        _compat_create_cq,
        poll_cq,
        req_notify_cq,
        _compat_cq_event,
        _compat_resize_cq,
        _compat_destroy_cq,
        _compat_create_srq,
        _compat_modify_srq,
        _compat_query_srq,
        _compat_destroy_srq,
        post_srq_recv,
        _compat_create_qp,
        _compat_query_qp,
        _compat_modify_qp,
        _compat_destroy_qp,
        post_send,
        post_recv,
        _compat_create_ah,
        _compat_destroy_ah,
        _compat_attach_mcast,
        _compat_detach_mcast,
        _compat_async_event
    );
    layout!(ck, verbs_context, "struct verbs_context", query_port, unused_ops ~ "advise_mr", priv_ = "priv",
        query_device_ex, ibv_destroy_flow, abi_placeholder2 = "ABI_placeholder2", ibv_create_flow,
        abi_placeholder1 = "ABI_placeholder1", open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd,
        close_xrcd, abi_placeholder3 = "_ABI_placeholder3", sz, context);
    layout!(ck, ibv_async_event, "struct ibv_async_event", element, event_type);
    layout!(ck, ibv_device_attr_ex, "struct ibv_device_attr_ex", orig_attr, comp_mask, odp_caps ~ "odp_caps",
        completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, caps ~ "tso_caps",
        xrc_odp_caps, phys_port_cnt_ex);
}

/// Opaque runs: each spans exactly from its first C member to the next named field.
fn spans(ck: &mut Checks) {
    let mut span = |name: &str, c: &str, rust: usize| ck.add(format!("span {name}"), c.to_owned(), rust);
    span(
        "verbs_context.unused_ops",
        "offsetof(struct verbs_context, priv) - offsetof(struct verbs_context, advise_mr)",
        size_of::<[Option<unsafe extern "C" fn()>; 25]>(),
    );
    span("ibv_device_attr_ex.odp_caps", "sizeof(struct ibv_odp_caps)", size_of::<[u64; 3]>());
    span(
        "ibv_device_attr_ex.caps",
        "offsetof(struct ibv_device_attr_ex, xrc_odp_caps) - offsetof(struct ibv_device_attr_ex, tso_caps)",
        size_of::<[u64; 13]>(),
    );
    span("ibv_send_wr.bind_mw", "sizeof(struct ibv_send_wr) - offsetof(struct ibv_send_wr, bind_mw)", 48);
}

fn constants(ck: &mut Checks) {
    let consts: &[(&str, i64)] = &[
        ("IBV_WR_RDMA_WRITE", IBV_WR_RDMA_WRITE.into()),
        ("IBV_WR_RDMA_WRITE_WITH_IMM", IBV_WR_RDMA_WRITE_WITH_IMM.into()),
        ("IBV_WR_SEND", IBV_WR_SEND.into()),
        ("IBV_WR_SEND_WITH_IMM", IBV_WR_SEND_WITH_IMM.into()),
        ("IBV_WR_RDMA_READ", IBV_WR_RDMA_READ.into()),
        ("IBV_WR_ATOMIC_CMP_AND_SWP", IBV_WR_ATOMIC_CMP_AND_SWP.into()),
        ("IBV_WR_ATOMIC_FETCH_AND_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD.into()),
        ("IBV_SEND_FENCE", IBV_SEND_FENCE.into()),
        ("IBV_SEND_SIGNALED", IBV_SEND_SIGNALED.into()),
        ("IBV_SEND_SOLICITED", IBV_SEND_SOLICITED.into()),
        ("IBV_SEND_INLINE", IBV_SEND_INLINE.into()),
        ("IBV_SEND_IP_CSUM", IBV_SEND_IP_CSUM.into()),
        ("IBV_WC_SEND", IBV_WC_SEND.into()),
        ("IBV_WC_RDMA_WRITE", IBV_WC_RDMA_WRITE.into()),
        ("IBV_WC_RDMA_READ", IBV_WC_RDMA_READ.into()),
        ("IBV_WC_COMP_SWAP", IBV_WC_COMP_SWAP.into()),
        ("IBV_WC_FETCH_ADD", IBV_WC_FETCH_ADD.into()),
        ("IBV_WC_BIND_MW", IBV_WC_BIND_MW.into()),
        ("IBV_WC_LOCAL_INV", IBV_WC_LOCAL_INV.into()),
        ("IBV_WC_TSO", IBV_WC_TSO.into()),
        ("IBV_WC_RECV", IBV_WC_RECV.into()),
        ("IBV_WC_RECV_RDMA_WITH_IMM", IBV_WC_RECV_RDMA_WITH_IMM.into()),
        ("IBV_WC_GRH", IBV_WC_GRH.into()),
        ("IBV_WC_WITH_IMM", IBV_WC_WITH_IMM.into()),
        ("IBV_QPT_RC", IBV_QPT_RC.into()),
        ("IBV_QPT_UC", IBV_QPT_UC.into()),
        ("IBV_QPT_UD", IBV_QPT_UD.into()),
        ("IBV_QP_INIT_ATTR_PD", IBV_QP_INIT_ATTR_PD.into()),
        ("IBV_QP_INIT_ATTR_SEND_OPS_FLAGS", IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.into()),
        ("IBV_QP_INIT_ATTR_XRCD", IBV_QP_INIT_ATTR_XRCD.into()),
        ("IBV_QPT_XRC_SEND", IBV_QPT_XRC_SEND.into()),
        ("IBV_QPT_XRC_RECV", IBV_QPT_XRC_RECV.into()),
        ("IBV_SRQ_INIT_ATTR_TYPE", IBV_SRQ_INIT_ATTR_TYPE.into()),
        ("IBV_SRQ_INIT_ATTR_PD", IBV_SRQ_INIT_ATTR_PD.into()),
        ("IBV_SRQ_INIT_ATTR_XRCD", IBV_SRQ_INIT_ATTR_XRCD.into()),
        ("IBV_SRQ_INIT_ATTR_CQ", IBV_SRQ_INIT_ATTR_CQ.into()),
        ("IBV_SRQT_BASIC", IBV_SRQT_BASIC.into()),
        ("IBV_SRQT_XRC", IBV_SRQT_XRC.into()),
        ("IBV_QP_EX_WITH_RDMA_WRITE", IBV_QP_EX_WITH_RDMA_WRITE as i64),
        ("IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM", IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as i64),
        ("IBV_QP_EX_WITH_SEND", IBV_QP_EX_WITH_SEND as i64),
        ("IBV_QP_EX_WITH_SEND_WITH_IMM", IBV_QP_EX_WITH_SEND_WITH_IMM as i64),
        ("IBV_QP_EX_WITH_RDMA_READ", IBV_QP_EX_WITH_RDMA_READ as i64),
        ("IBV_NODE_CA", IBV_NODE_CA.into()),
        ("IBV_TRANSPORT_IB", IBV_TRANSPORT_IB.into()),
        ("IBV_LINK_LAYER_INFINIBAND", IBV_LINK_LAYER_INFINIBAND.into()),
        ("IBV_LINK_LAYER_ETHERNET", IBV_LINK_LAYER_ETHERNET.into()),
        ("IBV_GID_TYPE_IB", IBV_GID_TYPE_IB.into()),
        ("IBV_GID_TYPE_ROCE_V1", IBV_GID_TYPE_ROCE_V1.into()),
        ("IBV_GID_TYPE_ROCE_V2", IBV_GID_TYPE_ROCE_V2.into()),
        ("IBV_SYSFS_NAME_MAX", IBV_SYSFS_NAME_MAX as i64),
        ("IBV_SYSFS_PATH_MAX", IBV_SYSFS_PATH_MAX as i64),
        ("(long long)(uintptr_t)__VERBS_ABI_IS_EXTENDED", VERBS_ABI_IS_EXTENDED as usize as i64),
        ("offsetof(struct ibv_port_attr, link_layer) + 1", COMPAT_PORT_ATTR_LEN as i64),
    ];
    for &(c, v) in consts {
        ck.0.push(Check { name: c.to_owned(), c: c.to_owned(), rust: v });
    }
}

#[test]
fn libibverbs_structures_match_the_installed_header() {
    require_header(HEADER, "libibverbs-dev").unwrap_or_else(|e| panic!("{e}"));
    let mut ck = Checks::default();
    structs(&mut ck);
    spans(&mut ck);
    constants(&mut ck);
    let mut probe = CProbe::new();
    probe.include("stdint.h").include("infiniband/verbs.h");
    for c in &ck.0 {
        probe.expr(&c.c);
    }
    let got = probe.run().unwrap_or_else(|e| panic!("{e}"));
    let bad: Vec<String> =
        ck.0.iter()
            .zip(&got)
            .filter(|(c, &v)| c.rust != v)
            .map(|(c, v)| format!("{}: Rust {} vs header {v}", c.name, c.rust))
            .collect();
    assert!(bad.is_empty(), "{} of {} checks differ:\n{}", bad.len(), ck.0.len(), bad.join("\n"));
    assert!(ck.0.len() > 400, "only {} checks: the list lost its fields", ck.0.len());
}
