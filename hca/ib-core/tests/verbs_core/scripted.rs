//! A small scripted provider for the core's own tests: no device, no threads. The test drives
//! what a device would do — publish a CQE (firing the CQ's arm if the core armed it), raise a CQ
//! error, a QP event, a port event, go fatal — at the exact moment it wants, so races are
//! deterministic.

#![allow(dead_code)]

use ib_core::provider::*;
use ib_core::*;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The scripted function's PCI ID.
pub const ID: PciId = PciId { vendor: 0x1234, device: 0x5678 };

/// The provider.
pub struct ScriptDriver;

impl Driver for ScriptDriver {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn match_table(&self) -> &'static [PciId] {
        &[ID]
    }
    fn probe(&self, func: &PciFunction) -> Result<Arc<dyn DeviceOps>> {
        let _ = func;
        Ok(Arc::new(Script::default()))
    }
}

/// A new scripted device in the core's list.
pub fn open() -> Device {
    register_driver(Arc::new(ScriptDriver));
    let func = PciFunction { id: ID, location: "script".into(), handle: Arc::new(()) };
    add_device(&func).expect("scripted device")
}

/// The scripted device behind `dev`.
pub fn script(dev: &Device) -> &Script {
    dev.provider::<Script>().expect("a scripted device")
}

/// The scripted CQ behind `cq`.
pub fn scq(cq: &Cq) -> &SCq {
    cq.provider_cq::<SCq>().expect("a scripted CQ")
}

/// The device: handles count up from 1; every CQ and QP it made stays reachable for the script.
#[derive(Default)]
pub struct Script {
    pub fatal: AtomicBool,
    handler: OnceLock<Arc<dyn DeviceEventHandler>>,
    next: AtomicU32,
    pub cqs: Mutex<Vec<Arc<SCqInner>>>,
    pub qps: Mutex<Vec<Arc<SQpInner>>>,
}

impl Script {
    fn handle(&self) -> u32 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The device goes fatal.
    pub fn go_fatal(&self) {
        self.fatal.store(true, Ordering::SeqCst);
        self.handler.get().unwrap().fatal();
    }

    /// A port event.
    pub fn port_event(&self, port: u8, ev: AsyncEventType) {
        self.handler.get().unwrap().port_event(port, ev);
    }

    /// The QP events handler the core gave for QP `num` (kept after the QP is gone, as a stale
    /// table entry a buggy device might still name).
    pub fn qp_events(&self, num: u32) -> Arc<dyn QpEventHandler> {
        let qps = self.qps.lock().unwrap();
        qps.iter().find(|q| q.num == num).unwrap().events.clone()
    }
}

impl DeviceOps for Script {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn set_event_handler(&self, handler: Arc<dyn DeviceEventHandler>) {
        let _ = self.handler.set(handler);
    }
    fn location(&self) -> String {
        "script".into()
    }
    fn query_device(&self) -> DeviceAttr {
        DeviceAttr {
            phys_port_cnt: 1,
            max_qp: 64,
            max_qp_wr: 64,
            max_sge: 4,
            max_cq: 64,
            max_cqe: 256,
            max_mr: 64,
            max_pd: 64,
            max_mr_size: 1 << 20,
            gid_tbl_len: 2,
            max_pkeys: 1,
            fw_ver: 0x0001_0002_0003,
            ..Default::default()
        }
    }
    fn fw_ver_string(&self) -> String {
        "1.2.3".into()
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(Error::InvalidArgument("no such port"));
        }
        Ok(PortAttr { state: PortState::Active, max_mtu: 1024, active_mtu: 1024, gid_tbl_len: 2, ..Default::default() })
    }
    fn query_gid(&self, _port: u8, index: u32) -> Result<Gid> {
        Ok([index as u8; 16])
    }
    fn query_gid_type(&self, _port: u8, _index: u32) -> Result<GidType> {
        Ok(GidType::RoceV2)
    }
    fn query_pkey(&self, _port: u8, _index: u16) -> Result<u16> {
        Ok(0xffff)
    }
    fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::SeqCst)
    }
    fn alloc_ucontext(&self) -> Result<Box<dyn UcontextOps>> {
        Ok(Box::new(Handle(self.handle())))
    }
    fn alloc_pd(&self, _uctx: Option<&dyn UcontextOps>) -> Result<Box<dyn PdOps>> {
        Ok(Box::new(Handle(self.handle())))
    }
    fn create_cq(
        &self,
        _uctx: Option<&dyn UcontextOps>,
        cqe: u32,
        events: Arc<dyn CqEventHandler>,
    ) -> Result<Arc<dyn CqOps>> {
        let inner = Arc::new(SCqInner {
            handle: self.handle(),
            cqe,
            events,
            queued: AtomicU32::new(0),
            armed: Mutex::new(None),
            arms: Mutex::new(Vec::new()),
            destroyed: AtomicBool::new(false),
        });
        self.cqs.lock().unwrap().push(inner.clone());
        Ok(Arc::new(SCq(inner)))
    }
    fn create_qp(
        &self,
        _pd: &dyn PdOps,
        init: &QpCreate<'_>,
        events: Arc<dyn QpEventHandler>,
    ) -> Result<Box<dyn QpOps>> {
        let send_cq = init.send_cq.as_any().downcast_ref::<SCq>().unwrap().0.clone();
        let inner = Arc::new(SQpInner {
            num: self.handle(),
            events,
            state: Mutex::new(QpState::Reset),
            modifies: Mutex::new(Vec::new()),
            attrs: Mutex::new(QpAttr::default()),
            send_cq,
        });
        self.qps.lock().unwrap().push(inner.clone());
        Ok(Box::new(SQp(inner)))
    }
    fn alloc_mr(&self, _pd: &dyn PdOps, len: usize, _access: u32) -> Result<Box<dyn MrOps>> {
        Ok(Box::new(SMr { handle: self.handle(), len, addr: 0x1000 }))
    }
    fn reg_user_mr(&self, _pd: &dyn PdOps, mem: UserMemory, _access: u32) -> Result<Box<dyn MrOps>> {
        Ok(Box::new(SMr { handle: self.handle(), len: mem.len(), addr: mem.addr() as u64 }))
    }
}

/// A user context or a PD: a handle.
pub struct Handle(pub u32);

impl UcontextOps for Handle {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn handle(&self) -> u32 {
        self.0
    }
}

impl PdOps for Handle {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn handle(&self) -> u32 {
        self.0
    }
}

/// An MR with no memory behind it.
pub struct SMr {
    handle: u32,
    len: usize,
    addr: u64,
}

impl MrOps for SMr {
    fn handle(&self) -> u32 {
        self.handle
    }
    fn lkey(&self) -> u32 {
        self.handle
    }
    fn rkey(&self) -> u32 {
        self.handle
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, _offset: usize, buf: &mut [u8]) -> Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn write(&self, _offset: usize, _data: &[u8]) -> Result<()> {
        Ok(())
    }
}

/// A CQ: a count of unpolled CQEs and a one-shot arm, as a device keeps them.
pub struct SCq(pub Arc<SCqInner>);

pub struct SCqInner {
    pub handle: u32,
    pub cqe: u32,
    pub events: Arc<dyn CqEventHandler>,
    pub queued: AtomicU32,
    pub armed: Mutex<Option<ArmKind>>,
    /// Every arm the core rang, in order.
    pub arms: Mutex<Vec<ArmKind>>,
    pub destroyed: AtomicBool,
}

impl SCqInner {
    /// The device publishes a CQE and tests-and-clears the arm under one lock (design decision 2);
    /// if it fired, the provider reports it. Returns whether the arm fired.
    pub fn publish(&self, solicited: bool) -> bool {
        let fired = {
            let mut arm = self.armed.lock().unwrap();
            self.queued.fetch_add(1, Ordering::SeqCst);
            let fire = matches!(*arm, Some(ArmKind::Next)) || (*arm == Some(ArmKind::Solicited) && solicited);
            if fire {
                *arm = None;
            }
            fire
        };
        if fired {
            drop(self.events.completion());
        }
        fired
    }
}

impl SCq {
    pub fn publish(&self, solicited: bool) -> bool {
        self.0.publish(solicited)
    }

    /// Arms the core rang so far.
    pub fn arms(&self) -> Vec<ArmKind> {
        self.0.arms.lock().unwrap().clone()
    }
}

impl CqOps for SCq {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn handle(&self) -> u32 {
        self.0.handle
    }
    fn cqe(&self) -> u32 {
        self.0.cqe
    }
    fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let mut n = 0;
        while n < wc.len() && self.0.queued.load(Ordering::SeqCst) > 0 {
            self.0.queued.fetch_sub(1, Ordering::SeqCst);
            wc[n] = Wc { wr_id: n as u64, ..Default::default() };
            n += 1;
        }
        Ok(n)
    }
    fn arm(&self, kind: ArmKind) {
        let mut arm = self.0.armed.lock().unwrap();
        *arm = (*arm).max(Some(kind));
        self.0.arms.lock().unwrap().push(kind);
    }
    fn can_arm_solicited(&self) -> bool {
        true
    }
    fn has_unpolled(&self) -> bool {
        self.0.queued.load(Ordering::SeqCst) > 0
    }
    fn fenced(&self, change: &mut dyn FnMut()) {
        change()
    }
    fn destroy(&self) {
        self.0.destroyed.store(true, Ordering::SeqCst);
    }
}

/// A QP: its state and the attributes of every modify, as a device keeps them.
pub struct SQp(pub Arc<SQpInner>);

pub struct SQpInner {
    pub num: u32,
    pub events: Arc<dyn QpEventHandler>,
    pub state: Mutex<QpState>,
    pub modifies: Mutex<Vec<(QpAttr, QpAttrMask)>>,
    pub attrs: Mutex<QpAttr>,
    /// Posted sends complete into it (flushed in ERR).
    pub send_cq: Arc<SCqInner>,
}

impl QpOps for SQp {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn qp_num(&self) -> u32 {
        self.0.num
    }
    fn post_send(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), (usize, ib_core::Error)> {
        for _ in wrs {
            self.0.send_cq.publish(false);
        }
        Ok(())
    }
    fn post_recv(&self, _wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, ib_core::Error)> {
        Ok(())
    }
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.0.modifies.lock().unwrap().push((*attr, mask));
        if mask.contains(QpAttrMask::STATE) {
            *self.0.state.lock().unwrap() = attr.qp_state;
        }
        let mut a = self.0.attrs.lock().unwrap();
        if mask.contains(QpAttrMask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if mask.contains(QpAttrMask::AV) {
            a.ah_attr = attr.ah_attr;
        }
        Ok(())
    }
    fn query(&self, _mask: QpAttrMask) -> Result<QpAttr> {
        let mut a = *self.0.attrs.lock().unwrap();
        a.qp_state = *self.0.state.lock().unwrap();
        Ok(a)
    }
}
