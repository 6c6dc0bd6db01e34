//! Device, port, GID, P_Key, PD and MR verbs through the C entry points, on the default device
//! (the built-in model, `vmw_pvrdma0`), with libibverbs's return conventions.

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;

fn open() -> *mut ibv_context {
    let mut n = 0;
    // SAFETY: plain library calls with valid pointers; the list is freed after use.
    unsafe {
        let list = ibv_get_device_list(&mut n);
        assert!(n >= 1 && !list.is_null(), "no device");
        let name = std::ffi::CStr::from_ptr(ibv_get_device_name(*list)).to_str().unwrap().to_owned();
        assert_eq!(name, "vmw_pvrdma0");
        assert!((*list.add(n as usize)).is_null(), "NULL-terminated");
        let ctx = ibv_open_device(*list);
        ibv_free_device_list(list);
        assert!(!ctx.is_null());
        ctx
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

#[test]
fn device_and_port_queries_answer_as_libibverbs() {
    let ctx = open();
    // SAFETY: `ctx` is open; every out pointer is a local.
    unsafe {
        let mut a: ibv_device_attr = std::mem::zeroed();
        assert_eq!(ibv_query_device(ctx, &mut a), 0);
        assert_eq!((a.vendor_id, a.vendor_part_id, a.phys_port_cnt), (0x15ad, 0x0820, 1));
        assert_eq!(ibv_get_device_guid((*ctx).device), a.node_guid);
        assert_eq!(ibv_query_device(ctx, null_mut()), libc::EINVAL);

        let mut p: ibv_port_attr = std::mem::zeroed();
        assert_eq!(ibv_query_port(ctx, 1, &mut p), 0);
        assert_eq!(p.link_layer, IBV_LINK_LAYER_ETHERNET);
        assert!(p.active_mtu >= 1 && p.active_mtu <= 5, "enum ibv_mtu: {}", p.active_mtu);
        assert_eq!(ibv_query_port(ctx, 0, &mut p), libc::EINVAL);
        assert_eq!(ibv_query_port(ctx, 2, &mut p), libc::EINVAL);

        let mut ex: ibv_device_attr_ex = std::mem::zeroed();
        ex.comp_mask = 0xdead;
        let vctx = &*(ctx.cast::<u8>().sub(320).cast::<verbs_context>());
        assert_eq!(vctx.sz, std::mem::size_of::<verbs_context>());
        let q = vctx.query_device_ex.unwrap();
        assert_eq!(q(ctx, std::ptr::null(), &mut ex, std::mem::size_of::<ibv_device_attr_ex>()), 0);
        assert_eq!((ex.comp_mask, ex.phys_port_cnt_ex, ex.orig_attr.max_qp), (0, 1, a.max_qp));
        let bad = ibv_query_device_ex_input { comp_mask: 1 };
        assert_eq!(q(ctx, &bad, &mut ex, std::mem::size_of::<ibv_device_attr_ex>()), libc::EINVAL);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn gid_and_pkey_queries_follow_libibverbs_conventions() {
    let ctx = open();
    // SAFETY: as above.
    unsafe {
        let mut gid = ibv_gid::default();
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        assert_eq!(&gid.raw[..2], &[0xfe, 0x80], "index 0: the link-local RoCE v1 GID");
        let mut ty = 9u32;
        assert_eq!(ibv_query_gid_type(ctx, 1, 0, &mut ty), 0);
        assert_eq!(ty, 0, "IBV_GID_TYPE_SYSFS_IB_ROCE_V1");
        // An empty entry: zeros and success from ibv_query_gid, ENODATA from the _ex form.
        gid.raw = [1; 16];
        assert_eq!(ibv_query_gid(ctx, 1, 5, &mut gid), 0);
        assert_eq!(gid.raw, [0; 16]);
        let mut e = ibv_gid_entry::default();
        assert_eq!(_ibv_query_gid_ex(ctx, 1, 5, &mut e, 0, std::mem::size_of::<ibv_gid_entry>()), libc::ENODATA);
        assert_eq!(_ibv_query_gid_ex(ctx, 1, 0, &mut e, 0, std::mem::size_of::<ibv_gid_entry>()), 0);
        assert_eq!((e.gid_index, e.port_num, e.gid_type), (0, 1, IBV_GID_TYPE_ROCE_V1));
        assert_eq!(_ibv_query_gid_ex(ctx, 1, 0, &mut e, 1, std::mem::size_of::<ibv_gid_entry>()), libc::EINVAL);
        assert_eq!(ibv_query_gid(ctx, 1, 100_000, &mut gid), -1);
        assert_eq!(errno(), libc::EINVAL);
        let mut table = [ibv_gid_entry::default(); 4];
        let n = _ibv_query_gid_table(ctx, table.as_mut_ptr(), 4, 0, std::mem::size_of::<ibv_gid_entry>());
        assert_eq!(n, 1, "one valid GID on the default model");
        assert_eq!(
            _ibv_query_gid_table(ctx, table.as_mut_ptr(), 0, 0, std::mem::size_of::<ibv_gid_entry>()),
            -(libc::EINVAL as isize)
        );

        let mut pkey = 0u16;
        assert_eq!(ibv_query_pkey(ctx, 1, 0, &mut pkey), 0);
        assert_eq!(u16::from_be(pkey), 0xffff);
        assert_eq!(ibv_get_pkey_index(ctx, 1, 0xffffu16.to_be()), 0);
        assert_eq!(ibv_get_pkey_index(ctx, 1, 0x1234u16.to_be()), -1);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn pds_and_mrs_over_program_memory() {
    let ctx = open();
    let mut buf = vec![0u8; 8192];
    // SAFETY: as above; `buf` outlives the MR.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let addr = buf.as_mut_ptr().cast();
        let mr = ibv_reg_mr(pd, addr, buf.len(), 1 | 2 | 4);
        assert!(!mr.is_null(), "errno {}", errno());
        assert_eq!(((*mr).addr, (*mr).length, (*mr).pd), (addr, 8192, pd));
        assert_ne!((*mr).lkey, 0);
        assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY, "an MR still uses it");
        assert!(ibv_reg_mr(pd, addr, 0, 1).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(ibv_reg_mr(pd, addr, 16, 2).is_null(), "remote write needs local write");
        assert_eq!(errno(), libc::EINVAL);
        let relaxed = ibv_reg_mr(pd, addr, 64, 1 | (1 << 20));
        assert!(!relaxed.is_null(), "IBV_ACCESS_RELAXED_ORDERING is optional");
        assert_eq!(ibv_dereg_mr(relaxed), 0);
        // libibverbs 44's input checks (IBV_REREG_MR_ERR_INPUT, EINVAL), then the provider's
        // refusal (IBV_REREG_MR_ERR_CMD, EOPNOTSUPP).
        for (flags, a, len, access) in [(0, addr, 16, 1), (8, addr, 16, 0), (1, null_mut(), 16, 0), (1, addr, 0, 0)] {
            assert_eq!(ibv_rereg_mr(mr, flags, pd, a, len, access), -1, "flags {flags} access {access}");
            assert_eq!(errno(), libc::EINVAL);
        }
        assert_eq!(ibv_rereg_mr(mr, 4, pd, addr, 16, 1), -4);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_dealloc_pd(null_mut()), libc::EINVAL);
        assert!(ibv_alloc_pd(null_mut()).is_null());
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// An address handle does not keep its PD from being deallocated: rdma-core's pvrdma provider
/// builds AHs in user space, so the kernel counts none of them against the PD (an MR or QP it
/// does count: `EBUSY`). Found comparing `ibv_dealloc_pd` with rdma-core (issue 21 §5): it
/// answered `EBUSY` while an AH existed.
#[test]
fn an_address_handle_does_not_keep_its_pd_busy() {
    let ctx = open();
    // SAFETY: as above; the AH is destroyed after its PD, as a program may.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let dgid = ibv_gid { raw: std::net::Ipv4Addr::new(127, 0, 0, 9).to_ipv6_mapped().octets() };
        let mut attr = ibv_ah_attr {
            grh: ibv_global_route { dgid, flow_label: 0, sgid_index: 0, hop_limit: 64, traffic_class: 0 },
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        let ah = ibv_create_ah(pd, &mut attr);
        assert!(!ah.is_null(), "errno {}", errno());
        assert_eq!(ibv_dealloc_pd(pd), 0, "an AH is not counted against its PD");
        assert_eq!(ibv_destroy_ah(ah), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
