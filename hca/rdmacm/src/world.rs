//! The library's state: every live id and delivered event, under one lock (the
//! program's calls and the engine thread both take it; blocking waits happen outside it). A C
//! pointer from a program is looked up here before it is used, so a stale or garbage pointer
//! gives `EINVAL` instead of a crash.

use crate::abi::*;
use crate::channel::{Channel, Event};
use rdma_cm::cm::Path;
use rdma_cm::{Cm, CmId, MadAddr};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// An id as programs see it: the C struct first, then the path its route points at.
#[repr(C)]
pub struct CmaId {
    pub id: rdma_cm_id,
    pub path: ibv_sa_path_rec,
}

/// Where an id is in its life (librdmacm's and the kernel's `enum rdma_cm_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listen,
    /// REQ (or SIDR_REQ) sent.
    Connect,
    /// A connection request received, not yet accepted.
    Request,
    /// REP sent.
    Accepted,
    /// REP received by an id without a QP (`CONNECT_RESPONSE`), awaiting `rdma_establish`.
    Response,
    Connected,
    Disconnect,
    Dead,
}

/// What the peer told us in its REQ/REP (or SIDR), for the QP's RTR/RTS and the REP.
#[derive(Clone, Debug, Default)]
pub struct Remote {
    pub from: MadAddr,
    pub qpn: u32,
    /// The peer's Starting PSN: the one our send queue starts at (`qpattr`).
    pub psn: u32,
    pub qkey: u32,
}

/// The QP attributes `rdma_create_ep` keeps for the requests of a listener.
#[derive(Clone, Copy)]
pub struct SavedQpAttr(pub ibv_qp_init_attr);
// SAFETY: the CQ/SRQ pointers inside are only handed back to libibverbs by the thread using them.
unsafe impl Send for SavedQpAttr {}

/// The library's side of an id.
pub struct IdState {
    pub channel: usize,
    /// Created with a NULL channel: each call waits for its own event (librdmacm's sync ids).
    pub sync: bool,
    pub dev: Option<usize>,
    pub sgid_index: u8,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// The port this id holds in its port space.
    pub port: Option<u16>,
    pub phase: Phase,
    pub reuseaddr: bool,
    pub afonly: bool,
    pub tos: Option<u8>,
    pub ack_timeout: Option<u8>,
    /// The CM ID of a connection (device index, ID).
    pub cm: Option<(usize, CmId)>,
    /// A listener's CM IDs, one per device it listens on.
    pub listens: Vec<(usize, CmId)>,
    pub path: Option<Path>,
    pub remote: Remote,
    /// The Starting PSN of our REQ or REP: the one our receive queue expects (`qpattr`).
    pub psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// Events delivered to the program and not yet acknowledged.
    pub unacked: u32,
    /// CQs and completion channels `rdma_create_qp` made (freed by `rdma_destroy_qp`).
    pub own_cqs: bool,
    pub qp_init: Option<SavedQpAttr>,
    /// Multicast groups joined (`rdma_join_multicast`).
    pub mcast: Vec<SocketAddr>,
}

impl IdState {
    pub fn new(channel: usize, sync: bool) -> Self {
        IdState {
            channel,
            sync,
            dev: None,
            sgid_index: 0,
            src: None,
            dst: None,
            port: None,
            phase: Phase::Idle,
            reuseaddr: false,
            afonly: false,
            tos: None,
            ack_timeout: None,
            cm: None,
            listens: Vec::new(),
            path: None,
            remote: Remote::default(),
            psn: fastrand::u32(..) & 0xff_ffff,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            unacked: 0,
            own_cqs: false,
            qp_init: None,
            mcast: Vec::new(),
        }
    }
}

/// Everything under the lock.
#[derive(Default)]
pub struct World {
    pub ids: HashMap<usize, IdState>,
    /// Events handed to the program, not yet acknowledged.
    pub events: HashSet<usize>,
    /// The id of each connection's (and listener's) CM ID.
    pub by_cm: HashMap<(usize, CmId), usize>,
    /// Each device's CM and GSI, made on first connection use (`engine`).
    pub cms: Vec<Option<DevCm>>,
}

/// A device's CM over its GSI QP.
pub struct DevCm {
    pub cm: Arc<Cm>,
    /// The `struct hca_gsi` of the device's port 1, and its fd.
    pub gsi: usize,
    pub fd: i32,
}

static WORLD: Mutex<Option<World>> = Mutex::new(None);
/// Signalled when an event is acknowledged (`rdma_destroy_id` waits on it).
pub static ACKED: Condvar = Condvar::new();

/// The state, locked (a panic that poisoned the lock does not stop the library).
pub struct Locked(MutexGuard<'static, Option<World>>);

impl std::ops::Deref for Locked {
    type Target = World;
    fn deref(&self) -> &World {
        self.0.as_ref().expect("initialised by lock()")
    }
}
impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut World {
        self.0.as_mut().expect("initialised by lock()")
    }
}

/// Takes the lock.
pub fn lock() -> Locked {
    let mut g = WORLD.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        *g = Some(World::default());
    }
    Locked(g)
}

/// Takes the lock if no one holds it (the exit handler must not wait on a thread stopped
/// inside the library).
pub fn try_lock() -> Option<Locked> {
    let mut g = match WORLD.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    if g.is_none() {
        *g = Some(World::default());
    }
    Some(Locked(g))
}

impl Locked {
    /// Waits on [`ACKED`] (releasing the lock meanwhile).
    pub fn wait_acked(self) -> Locked {
        Locked(ACKED.wait(self.0).unwrap_or_else(|p| p.into_inner()))
    }
}

impl World {
    /// The state of the id at `p`, `EINVAL` if it is none of ours.
    pub fn id(&mut self, p: *const rdma_cm_id) -> Result<&mut IdState, i32> {
        self.ids.get_mut(&(p as usize)).ok_or(libc::EINVAL)
    }

    /// Queues event `e` on the channel of its id (dropped with the id gone).
    pub fn deliver(&self, e: *mut Event) {
        // SAFETY: `e` is a live event box just made; nothing else holds it.
        let id = unsafe { (*e).ev.id as usize };
        match self.ids.get(&id) {
            Some(s) => self.deliver_to(s.channel, e),
            // SAFETY: not queued anywhere: freed here.
            None => unsafe { Event::free(e) },
        }
    }

    /// Queues event `e` on channel `channel` (a listener's, for a connection request).
    pub fn deliver_to(&self, channel: usize, e: *mut Event) {
        if crate::channel::is_live(channel) {
            // SAFETY: a live box of Channel::create; its destroyers take the library's lock,
            // which the caller holds.
            unsafe { (*(channel as *const Channel)).push(e) }
        } else {
            // SAFETY: not queued anywhere: freed here.
            unsafe { Event::free(e) }
        }
    }

    /// The CM of device `dev`, if made.
    pub fn cm(&self, dev: usize) -> Option<Arc<Cm>> {
        self.cms.get(dev)?.as_ref().map(|d| d.cm.clone())
    }
}

/// The `CmaId` box of id `p` (it must be live: looked up in [`World::ids`] first).
pub fn cma(p: usize) -> *mut CmaId {
    p as *mut CmaId
}

impl World {
    /// A new id on `channel` (registered; its C struct zeroed but for the given fields).
    pub fn new_id(&mut self, state: IdState, context: *mut libc::c_void, ps: u32, qp_type: u32) -> *mut CmaId {
        // SAFETY: rdma_cm_id and the path record are plain C data; all-zero is valid (NULLs).
        let mut c: Box<CmaId> = Box::new(unsafe { std::mem::zeroed() });
        c.id.channel = state.channel as *mut rdma_event_channel;
        c.id.context = context;
        c.id.ps = ps;
        c.id.qp_type = qp_type;
        let p = Box::into_raw(c);
        self.ids.insert(p as usize, state);
        p
    }

    /// Writes the id's addresses (as `rdma_get_local_addr`/`peer_addr` read them) and the
    /// GIDs of `route.addr.ibaddr` from its state.
    pub fn publish_addrs(&self, p: usize) {
        let Some(s) = self.ids.get(&p) else { return };
        let c = cma(p);
        let gid = |a: Option<SocketAddr>| a.map_or([0; 16], |a| rdma_cm::mad::ip_cm::ip_to_gid(a.ip()));
        // SAFETY: a live id box (in `ids`); the program reads these fields only after the call
        // or event that set them, as with librdmacm.
        unsafe {
            (*c).id.route.addr.src = crate::ffi::storage(s.src);
            (*c).id.route.addr.dst = crate::ffi::storage(s.dst);
            (*c).id.route.addr.ibaddr.sgid = ibv_gid { raw: gid(s.src) };
            (*c).id.route.addr.ibaddr.dgid = ibv_gid { raw: gid(s.dst) };
            (*c).id.route.addr.ibaddr.pkey = 0xffffu16.to_be();
            (*c).id.verbs = s.dev.map_or(std::ptr::null_mut(), |d| crate::devices::all()[d].ctx);
            (*c).id.port_num = if s.dev.is_some() { crate::devices::PORT } else { 0 };
            if let (Some(d), true) = (s.dev, (*c).id.pd.is_null()) {
                (*c).id.pd = crate::devices::pd(d);
            }
        }
    }

    /// Writes the id's resolved path into its route (`route.path_rec`, one path).
    pub fn publish_path(&self, p: usize) {
        let Some(path) = self.ids.get(&p).and_then(|s| s.path) else { return };
        let c = cma(p);
        let rec = ibv_sa_path_rec {
            dgid: ibv_gid { raw: path.dgid },
            sgid: ibv_gid { raw: path.sgid },
            flow_label: path.flow_label.to_be(),
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
            reversible: 1,
            numb_path: 1,
            pkey: path.pkey.to_be(),
            sl: path.sl,
            mtu_selector: 2,
            mtu: path.mtu,
            rate_selector: 2,
            rate: path.rate,
            packet_life_time_selector: 2,
            packet_life_time: path.packet_life_time,
            ..Default::default()
        };
        // SAFETY: a live id box; `path_rec` points into the same box.
        unsafe {
            (*c).path = rec;
            (*c).id.route.path_rec = &mut (*c).path;
            (*c).id.route.num_paths = 1;
        }
    }
}
