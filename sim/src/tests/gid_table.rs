//! The port's GID table: CREATE_BIND and DESTROY_BIND refuse GID types the device does not
//! have, fields outside their meaning, and an unbind naming another GID than the entry holds.

use crate::testutil::minidrv::*;
use crate::SimConfig;
use pvrdma_abi::cmd::*;
use pvrdma_abi::errno::EINVAL;
use zerocopy::little_endian::U32;

/// From issue 10's second round of attacks on the model.
#[test]
fn a_bind_of_a_gid_type_the_device_does_not_have_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    let (mtu, vlan) = (U32::new(1024), U32::new(0xfff));
    let bind =
        |gid_type: u8| CreateBind { index: U32::new(1), new_gid: GID0, gid_type, mtu, vlan, ..Default::default() };
    d.ok(bind(pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V1));
    d.ok(bind(pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V2));
    for t in [0, 0x80, 0x03] {
        assert_eq!(d.err(bind(t)), EINVAL, "gid_type {t}");
    }
}

/// From issue 10's second round of attacks on the model.
#[test]
fn an_unbind_naming_another_gid_than_the_entry_holds_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    d.bind_gid(0, GID0);
    let mut other = GID0;
    other[15] ^= 1;
    let u = |gid| DestroyBind { index: U32::new(0), dest_gid: gid, ..Default::default() };
    assert_eq!(d.err(u(other)), EINVAL, "unbind of a GID the entry does not hold");
    d.ok(u(GID0));
}

/// From issue 10's third round of attacks on the model.
#[test]
fn bind_fields_outside_their_meaning_are_refused() {
    type Edit = fn(&mut CreateBind);
    let cases: [(&str, Edit); 5] = [
        ("mtu 0 (no MTU)", |b| b.mtu = U32::new(0)),
        ("mtu 99", |b| b.mtu = U32::new(99)),
        ("vlan 4096 (12 bits)", |b| b.vlan = U32::new(4096)),
        ("vlan u32::MAX", |b| b.vlan = U32::new(u32::MAX)),
        ("multicast GID ff02::1", |b| b.new_gid = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
    ];
    let mut accepted = Vec::new();
    for (what, edit) in cases {
        let mut d = Drv::new(SimConfig::default());
        let mut b = CreateBind {
            index: U32::new(1),
            new_gid: GID0,
            gid_type: pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V1,
            mtu: U32::new(1024),
            vlan: U32::new(0xfff),
            ..Default::default()
        };
        assert_eq!(d.post(b).1, 0, "the unedited bind");
        edit(&mut b);
        b.index = U32::new(2);
        if d.post(b).1 != EINVAL {
            accepted.push(what);
        }
    }
    assert_eq!(accepted, Vec::<&str>::new());
}
