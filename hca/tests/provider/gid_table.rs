//! GIDs beyond index 0 through the verbs core: `Device::add_gid` / `del_gid` reach the model as
//! CREATE_BIND / DESTROY_BIND, `query_gid` / `query_gid_type` answer what was bound, and
//! `open_sim` binds a RoCE configuration's addresses as RoCE v2 GIDs.

use hca::open_sim;
use ib_core::{gid_from_ip, AsyncEventType, Error, GidType};
use pvrdma_abi::cmd::{CreateBind, DestroyBind};
use pvrdma_sim::roce::RoceConfig;
use pvrdma_sim::SimConfig;
use std::time::Duration;

fn ip_gid(s: &str) -> ib_core::Gid {
    gid_from_ip(s.parse().unwrap())
}

#[test]
fn gids_are_added_queried_and_deleted_through_the_core() {
    let (dev, _sim) = open_sim(SimConfig::default()).unwrap();
    let len = dev.query_port(1).unwrap().gid_tbl_len;
    assert!(len >= 3, "the model's table has room: {len}");
    let v4 = ip_gid("10.9.0.1");
    let v6 = ip_gid("fd00::1");
    assert_eq!(dev.query_gid(1, 1).unwrap(), [0; 16], "empty before");
    assert!(dev.query_gid_type(1, 1).is_err());

    dev.add_gid(1, 1, v4, GidType::RoceV2).unwrap();
    dev.add_gid(1, 2, v6, GidType::RoceV1).unwrap();
    assert_eq!((dev.query_gid(1, 1).unwrap(), dev.query_gid_type(1, 1).unwrap()), (v4, GidType::RoceV2));
    assert_eq!((dev.query_gid(1, 2).unwrap(), dev.query_gid_type(1, 2).unwrap()), (v6, GidType::RoceV1));
    assert_eq!(dev.query_gid_type(1, 0).unwrap(), GidType::RoceV1, "index 0 stays the probe's");
    assert_eq!(dev.query_gid(1, 0).unwrap()[..2], [0xfe, 0x80]);

    // Rebinding replaces the entry.
    dev.add_gid(1, 2, v6, GidType::RoceV2).unwrap();
    assert_eq!(dev.query_gid_type(1, 2).unwrap(), GidType::RoceV2);

    dev.del_gid(1, 1).unwrap();
    assert_eq!(dev.query_gid(1, 1).unwrap(), [0; 16]);
    assert!(dev.query_gid_type(1, 1).is_err());
    // The second delete: the device's ENOENT, as an error.
    let e = dev.del_gid(1, 1).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{e}");
    assert_eq!(dev.query_gid(1, 2).unwrap(), v6, "the other entry is untouched");
}

#[test]
fn bad_indexes_and_ports_are_refused_and_change_nothing() {
    let (dev, _sim) = open_sim(SimConfig::default()).unwrap();
    let len = dev.query_port(1).unwrap().gid_tbl_len;
    let g = ip_gid("10.9.0.2");
    let gid0 = dev.query_gid(1, 0).unwrap();
    for index in [0, len, len + 1, u32::MAX] {
        assert!(matches!(dev.add_gid(1, index, g, GidType::RoceV2), Err(Error::InvalidArgument(_))), "add {index}");
        assert!(matches!(dev.del_gid(1, index), Err(Error::InvalidArgument(_))), "del {index}");
    }
    assert!(matches!(dev.add_gid(2, 1, g, GidType::RoceV2), Err(Error::InvalidArgument(_))), "port 2");
    assert!(matches!(dev.add_gid(0, 1, g, GidType::RoceV2), Err(Error::InvalidArgument(_))), "port 0");
    assert_eq!(dev.query_gid(1, 0).unwrap(), gid0);
    assert_eq!(dev.query_gid_type(1, 0).unwrap(), GidType::RoceV1);
    // The last entry is usable.
    dev.add_gid(1, len - 1, g, GidType::RoceV2).unwrap();
    assert_eq!(dev.query_gid(1, len - 1).unwrap(), g);
    // A GID the device refuses (multicast) is not recorded.
    let mcast = ip_gid("ff02::1");
    assert!(dev.add_gid(1, 1, mcast, GidType::RoceV2).is_err());
    assert_eq!(dev.query_gid(1, 1).unwrap(), [0; 16]);
}

/// DESTROY_BIND names the GID the driver bound (`dest_gid`), and the model checks it: when the
/// model's entry was changed behind the driver's back, the driver's delete is refused, which it
/// would not be if the driver sent the zero ("unstated") GID.
#[test]
fn destroy_bind_names_the_gid_the_driver_bound() {
    let (dev, _sim) = open_sim(SimConfig::default()).unwrap();
    let pv = hca::pvrdma(&dev).unwrap();
    let (ours, other) = (ip_gid("10.9.0.3"), ip_gid("10.9.0.4"));
    dev.add_gid(1, 3, ours, GidType::RoceV2).unwrap();
    let wrong = DestroyBind { index: 3.into(), dest_gid: other, ..Default::default() };
    assert_eq!(pv.post_command(wrong).unwrap_err().errno(), libc::EINVAL, "the model holds ours");
    let swap = CreateBind {
        mtu: 1024.into(),
        vlan: 0xfff.into(),
        index: 3.into(),
        new_gid: other,
        gid_type: pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2,
        ..Default::default()
    };
    pv.post_command(swap).unwrap();
    assert_eq!(dev.del_gid(1, 3).unwrap_err().errno(), libc::EINVAL, "dest_gid names ours, the model holds another");
    assert_eq!(dev.query_gid(1, 3).unwrap(), ours, "a refused delete keeps the copy");
    pv.post_command(DestroyBind { index: 3.into(), dest_gid: other, ..Default::default() }).unwrap();
    // The entry is empty on the device now: the driver's delete gets ENOENT.
    assert_eq!(dev.del_gid(1, 3).unwrap_err().errno(), libc::ENOENT);
}

#[test]
fn a_gid_change_reaches_every_context_as_a_port_event() {
    let (dev, _sim) = open_sim(SimConfig::default()).unwrap();
    let uctx = dev.alloc_ucontext().unwrap();
    dev.add_gid(1, 1, ip_gid("10.9.0.5"), GidType::RoceV2).unwrap();
    let ev = uctx.get_async_event(Duration::from_secs(5)).unwrap();
    assert_eq!((ev.event_type, ev.port()), (AsyncEventType::GidChange, Some(1)));
    ev.ack();
    dev.del_gid(1, 1).unwrap();
    let ev = uctx.get_async_event(Duration::from_secs(5)).unwrap();
    assert_eq!(ev.event_type, AsyncEventType::GidChange);
    ev.ack();
    assert!(dev.del_gid(1, 1).is_err());
    assert!(uctx.get_async_event(Duration::ZERO).is_err(), "a refused change raises no event");
}

/// `open_sim` binds a RoCE configuration's addresses as RoCE v2 GIDs at 1, 2, ... in order, and
/// the first at index 0 too, at probe, before the arm self-test.
/// (Addresses of their own: fresh ones tried until the RoCE port binds both, and holds them.)
#[test]
fn open_sim_binds_the_roce_addresses_as_roce_v2_gids() {
    let (dev, sim) = netlease::hold("the RoCE port's two addresses", |f| {
        let cfg = SimConfig { roce: Some(RoceConfig::new(vec![f.v4().into(), f.v4().into()])), ..SimConfig::default() };
        netlease::Attempt::of(open_sim(cfg))
    });
    let addrs = &sim.device().config().roce.as_ref().unwrap().addrs;
    let [std::net::IpAddr::V4(a), std::net::IpAddr::V4(b)] = addrs[..] else { panic!("{addrs:?}") };
    let (a, b) = (a.octets(), b.octets());
    // The probe's arm self-test sent from the first RoCE v2 GID and decided (a failed test
    // falls back to QEMU 7.2's encoding).
    assert_eq!(hca::pvrdma(&dev).unwrap().arm_encoding(), doorbell::ArmEncoding::Ibta);
    // Index 0 is the first address too, as RoCE v2 (the default GID of most programs speaks on
    // the port); without a RoCE port it is the link-local RoCE v1 GID (above).
    let mapped = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3]];
    assert_eq!(dev.query_gid(1, 0).unwrap(), mapped);
    assert_eq!(dev.query_gid_type(1, 0).unwrap(), GidType::RoceV2);
    assert_eq!(dev.query_gid(1, 1).unwrap(), mapped);
    assert_eq!(dev.query_gid_type(1, 1).unwrap(), GidType::RoceV2);
    assert_eq!(dev.query_gid(1, 2).unwrap()[12..], b);
    assert_eq!(dev.query_gid_type(1, 2).unwrap(), GidType::RoceV2);
    assert_eq!(dev.query_gid(1, 3).unwrap(), [0; 16]);
}
