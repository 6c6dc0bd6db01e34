//! The device list, contexts and object lifetimes, on the scripted provider: devices found by
//! name with the provider picked by PCI ID, objects of one context never combined with another's,
//! and each destroy refusing while something still uses the object (libibverbs's EBUSY).

use crate::scripted::open;
use ib_core::provider::PciFunction;
use ib_core::{access, Error, PciId, QpCap, QpInitAttr, QpType, UserBuffer};
use std::sync::Arc;
use std::time::Duration;

fn cap() -> QpCap {
    QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
}

#[test]
fn devices_are_named_listed_opened_by_name_and_picked_by_pci_id() {
    let dev = open();
    let name = dev.name();
    assert!(name.starts_with("scripted"), "{name}");
    assert!(ib_core::device_list().iter().any(|d| d.name == name));
    let again = ib_core::open_device(&name).unwrap();
    assert!(again.context().same(dev.context()), "one device, one kernel context");
    assert_eq!(again.fw_ver(), "1.2.3");
    let unknown = PciFunction { id: PciId { vendor: 1, device: 2 }, location: "x".into(), handle: Arc::new(()) };
    assert!(matches!(ib_core::add_device(&unknown), Err(Error::NoDevice(_))));
    assert!(matches!(ib_core::open_device("no_such_dev0"), Err(Error::NoDevice(_))));
    drop((dev, again));
    assert!(!ib_core::device_list().iter().any(|d| d.name == name), "gone with its last handle");
}

#[test]
fn a_channel_of_another_context_or_device_cannot_be_used() {
    let dev1 = open();
    let dev2 = open();
    let ch1 = dev1.create_comp_channel().unwrap();
    assert!(matches!(dev2.create_cq(16, Some(&ch1)), Err(Error::InvalidArgument(_))));
    let uctx = dev1.alloc_ucontext().unwrap();
    assert!(uctx.is_user() && !dev1.is_user());
    assert!(matches!(uctx.create_cq(16, Some(&ch1)), Err(Error::InvalidArgument(_))));
    let uch = uctx.create_comp_channel().unwrap();
    assert!(matches!(dev1.create_cq(16, Some(&uch)), Err(Error::InvalidArgument(_))));
    // A refused CQ leaves the channel unused: it can be destroyed.
    ch1.destroy().map_err(|(_, e)| e).unwrap();
    let ucq = uctx.create_cq(16, Some(&uch)).unwrap();
    let kcq = dev1.create_cq(16, None).unwrap();
    let upd = uctx.alloc_pd().unwrap();
    let attr = QpInitAttr {
        send_cq: &kcq,
        recv_cq: &ucq,
        cap: cap(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    assert!(matches!(upd.create_qp(&attr), Err(Error::InvalidArgument(_))));
    let other_dev_cq = dev2.create_cq(16, None).unwrap();
    let attr = QpInitAttr { send_cq: &other_dev_cq, recv_cq: &ucq, ..attr };
    assert!(matches!(upd.create_qp(&attr), Err(Error::InvalidArgument(_))));
}

#[test]
fn destroy_refuses_while_the_object_is_used_and_succeeds_after() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(16, Some(&ch)).unwrap();
    let ch = match ch.destroy() {
        Err((ch, Error::Busy(_))) => ch,
        other => panic!("a channel with a CQ: {other:?}"),
    };
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let pd = match pd.dealloc() {
        Err((pd, Error::Busy(_))) => pd,
        other => panic!("a PD with an MR: {other:?}"),
    };
    mr.dereg();
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        cap: cap(),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 9,
        srq: None,
    };
    let qp = pd.create_qp(&attr).unwrap();
    let pd = match pd.dealloc() {
        Err((pd, Error::Busy(_))) => pd,
        other => panic!("a PD with a QP: {other:?}"),
    };
    let cq = match cq.destroy(None) {
        Err((cq, Error::Busy(_))) => cq,
        other => panic!("a CQ with a QP: {other:?}"),
    };
    qp.destroy(None).map_err(|(_, e)| e).unwrap();
    cq.destroy(None).map_err(|(_, e)| e).unwrap();
    ch.destroy().map_err(|(_, e)| e).unwrap();
    pd.dealloc().map_err(|(_, e)| e).unwrap();
}

#[test]
fn an_mr_over_a_user_buffer_names_its_address_and_keeps_it_alive() {
    let dev = open();
    let pd = dev.alloc_pd().unwrap();
    let buf = UserBuffer::new(10_000).unwrap();
    let mr = pd.reg_buffer(&buf, access::LOCAL_WRITE | access::REMOTE_WRITE).unwrap();
    assert_eq!((mr.addr(), mr.len()), (buf.addr(), 10_000));
    drop(buf); // the MR holds the memory
    assert!(matches!(
        pd.reg_buffer(&UserBuffer::new(8).unwrap(), access::REMOTE_WRITE),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(pd.alloc_mr(2 << 20, 0), Err(Error::InvalidArgument(_))), "beyond max_mr_size");
    drop(mr);
    pd.dealloc().map_err(|(_, e)| e).unwrap();
}

#[test]
fn a_fatal_device_fails_verbs_and_wakes_every_waiter() {
    let dev = open();
    let ch = dev.create_comp_channel().unwrap();
    let cq = dev.create_cq(8, Some(&ch)).unwrap();
    let req = cq.notify(ib_core::NotifyKind::ErrorOnly, false).unwrap();
    let waiter = std::thread::spawn({
        let ch = ch.clone();
        move || ch.get_cq_event(Duration::from_secs(10)).map(|c| c.handle())
    });
    std::thread::sleep(Duration::from_millis(30));
    crate::scripted::script(&dev).go_fatal();
    assert_eq!(waiter.join().unwrap(), Err(Error::DeviceFatal));
    assert_eq!(req.wait(Duration::from_secs(5)), Ok(ib_core::NotifyStatus::Failure));
    let ev = dev.get_async_event(Duration::from_secs(5)).unwrap();
    assert_eq!(ev.event_type, ib_core::AsyncEventType::DeviceFatal);
    ev.ack();
    assert_eq!(dev.get_async_event(Duration::from_secs(5)).map(|e| e.event_type), Err(Error::DeviceFatal));
    assert!(matches!(dev.alloc_pd(), Err(Error::DeviceFatal)));
    assert!(matches!(
        dev.create_comp_channel().and_then(|c| c.get_cq_event(Duration::ZERO).map(|_| ())),
        Err(Error::DeviceFatal)
    ));
}
