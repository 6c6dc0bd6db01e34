//! The engine: one thread per process, started with the first CM, that polls every device's
//! GSI fd (our libibverbs's `hca_gsi_*`), a wake eventfd and the CMs' timers, feeds MADs to
//! each device's [`Cm`] and hands what they raise to [`dispatch`]. A [`GsiTransport`] is the
//! CMs' way out: `hca_gsi_send`. Each round also asks whether a device went fatal
//! ([`devices::newly_fatal`]): its ids get DEVICE_REMOVAL and its GSI is polled no more.

use crate::devices;
use crate::dispatch;
use crate::events;
use crate::sys::*;
use crate::world::{lock, DevCm, World};
use osdep::{EventFd, EventFdOptions};
use rdma_cm::{Cm, MadAddr, MadTransport, ReceivedMad};
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The longest the engine sleeps without looking at its CMs' deadlines again.
const MAX_SLEEP: Duration = Duration::from_millis(200);

/// MADs go out through a device's GSI QP.
pub struct GsiTransport {
    gsi: usize,
}

impl MadTransport for GsiTransport {
    fn send(&self, to: &MadAddr, mad: &[u8]) -> std::io::Result<()> {
        let a = hca_gsi_addr {
            gid: to.gid,
            qpn: to.qpn,
            qkey: to.qkey,
            flow_label: to.flow_label,
            pkey_index: to.pkey_index,
            sgid_index: to.sgid_index,
            hop_limit: to.hop_limit,
            traffic_class: to.traffic_class,
            reserved: [0; 3],
        };
        // SAFETY: `gsi` stays open for the process's life; `a` and `mad` are valid for the call.
        let r = unsafe { hca_gsi_send(self.gsi as *mut hca_gsi, &a, mad.as_ptr().cast(), mad.len()) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// The CM of device `dev`, made (with its GSI opened and the engine started) on first use:
/// `ENODEV` for a device without a RoCE port, `ENOSYS` for a libibverbs that is not ours.
pub fn cm_of(w: &mut World, dev: usize) -> Result<Arc<Cm>, i32> {
    if let Some(cm) = w.cm(dev) {
        return Ok(cm);
    }
    let d = devices::all().get(dev).ok_or(libc::ENODEV)?;
    let (gsi, fd) = gsi_of(dev)?;
    let transport = Arc::new(GsiTransport { gsi });
    let cm = Arc::new(Cm::new(transport, d.guid));
    if w.cms.len() <= dev {
        w.cms.resize_with(dev + 1, || None);
    }
    w.cms[dev] = Some(DevCm { cm: cm.clone(), gsi, fd });
    start();
    crate::exit::register();
    Ok(cm)
}

/// Device `dev`'s GSI (its handle and fd), opened once for the process's life. Opened without
/// the library's lock (the engine opens them while the program's calls go on); a caller that
/// needs one being opened waits for it.
fn gsi_of(dev: usize) -> Result<(usize, i32), i32> {
    /// A device's GSI once opened: its handle and fd.
    type Slot = Mutex<Option<(usize, i32)>>;
    static GSIS: OnceLock<Vec<Slot>> = OnceLock::new();
    let gsis = GSIS.get_or_init(|| devices::all().iter().map(|_| Mutex::new(None)).collect());
    let mut slot = gsis.get(dev).ok_or(libc::ENODEV)?.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(g) = *slot {
        return Ok(g);
    }
    let d = devices::all().get(dev).ok_or(libc::ENODEV)?;
    // SAFETY: an open context of ours; port 1.
    let gsi = unsafe { hca_gsi_open(d.ctx, devices::PORT) };
    if gsi.is_null() {
        return Err(errno());
    }
    // SAFETY: `gsi` was just opened.
    let fd = unsafe { hca_gsi_get_fd(gsi) };
    *slot = Some((gsi as usize, fd));
    Ok((gsi as usize, fd))
}

fn waker() -> &'static EventFd {
    static WAKE: OnceLock<EventFd> = OnceLock::new();
    WAKE.get_or_init(|| EventFd::new(EventFdOptions { semaphore: false, nonblocking: true }).expect("an eventfd"))
}

/// Makes the engine look at its CMs' deadlines again (after a call that armed a timer).
pub fn wake() {
    let _ = waker().add(1);
}

/// Starts the engine, which first makes the CM of every device (as a kernel's CM is there before
/// a program's first connection): called with the program's first id, so that opening the GSIs
/// (QP1, its CQs and receive buffers: a third of a connection's setup when made by the first
/// `rdma_connect`, `rdma_listen` or SIDR request) overlaps the program's addressing.
pub fn prepare() {
    start();
}

fn start() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let _ = waker();
        let _ = std::thread::Builder::new().name("rdmacm-engine".into()).spawn(|| {
            let _ = std::panic::catch_unwind(open_all);
            loop {
                // A panic in one round (a CM bug) must not end the engine for the process.
                let _ = std::panic::catch_unwind(round);
            }
        });
    });
}

/// Makes the CM of every live device not made yet (a device without a RoCE port has none), its
/// GSI opened before the library's lock is taken.
fn open_all() {
    for dev in 0..devices::all().len() {
        if devices::all()[dev].removed() || devices::all()[dev].addrs.is_empty() || gsi_of(dev).is_err() {
            continue;
        }
        let _ = cm_of(&mut lock(), dev);
    }
}

/// One round: wait for a MAD, a wake or the next deadline, then run what is due.
fn round() {
    let (ports, deadline) = {
        let mut w = lock();
        for dev in devices::newly_fatal() {
            events::device_removal(&mut w, dev);
        }
        let live = |i: usize| devices::all().get(i).is_some_and(|d| !d.removed());
        let ports: Vec<(usize, usize, i32)> = w
            .cms
            .iter()
            .enumerate()
            .filter(|&(i, _)| live(i))
            .filter_map(|(i, d)| d.as_ref().map(|d| (i, d.gsi, d.fd)))
            .collect();
        let deadline = w.cms.iter().flatten().filter_map(|d| d.cm.next_deadline()).min();
        (ports, deadline)
    };
    let now = Instant::now();
    let sleep = deadline.map_or(MAX_SLEEP, |d| d.saturating_duration_since(now).min(MAX_SLEEP));
    let mut fds = vec![waker().raw()];
    fds.extend(ports.iter().map(|p| p.2));
    // SAFETY: the fds stay open for the process's life (the GSIs are never closed).
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) }).collect();
    let mut ready = vec![false; fds.len()];
    let _ = osdep::poll_readable(&borrowed, sleep, &mut ready);
    if ready[0] {
        let _ = waker().read();
    }
    for (k, &(dev, gsi, _)) in ports.iter().enumerate() {
        if ready[k + 1] {
            drain(dev, gsi);
        }
    }
    let now = Instant::now();
    let mut w = lock();
    for dev in 0..w.cms.len() {
        if let Some(cm) = w.cm(dev) {
            if cm.next_deadline().is_some_and(|d| d <= now) {
                let events = cm.on_timer(now);
                dispatch::events(&mut w, dev, events);
            }
        }
    }
}

/// Feeds every MAD waiting on `gsi` to device `dev`'s CM.
fn drain(dev: usize, gsi: usize) {
    let mut buf = [0u8; rdma_cm::transport::MAD_SIZE];
    for _ in 0..256 {
        let mut from = hca_gsi_addr::default();
        // SAFETY: an open GSI; `from` and `buf` are valid for the lengths passed.
        let n = unsafe { hca_gsi_recv(gsi as *mut hca_gsi, &mut from, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return;
        }
        let from = MadAddr {
            gid: from.gid,
            qpn: from.qpn,
            qkey: from.qkey,
            pkey_index: from.pkey_index,
            sgid_index: from.sgid_index,
            hop_limit: from.hop_limit,
            traffic_class: from.traffic_class,
            flow_label: from.flow_label,
        };
        let mad = ReceivedMad { from, mad: buf[..(n as usize).min(buf.len())].to_vec() };
        let mut w = lock();
        if let Some(cm) = w.cm(dev) {
            let events = cm.recv(&mad, Instant::now());
            dispatch::events(&mut w, dev, events);
        }
    }
}
