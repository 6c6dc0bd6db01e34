//! `rdma_bind_addr`, `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_get_src_port`,
//! `rdma_get_dst_port`: an id's addresses and the port it holds in its port space. Port spaces
//! are this process's (a kernel's are the host's): two processes may bind the same port on
//! different device addresses, and each process's CM sees only its own listeners.

use crate::abi::*;
use crate::channel::Event;
use crate::devices;
use crate::events::complete;
use crate::ffi::{err, family, guard, read_sockaddr, ret};
use crate::qpattr::PACKET_LIFETIME;
use crate::route::{self, Local};
use crate::world::{lock, IdState, Phase, World};
use rdma_cm::cm::Path;
use rdma_cm::mad::ip_cm::ip_to_gid;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// The ephemeral ports the kernel hands out (`inet_get_local_port_range`'s default).
const EPHEMERAL: std::ops::Range<u16> = 32768..61000;
/// The hop limit of a RoCE v2 path (the IP TTL Linux gives a route by default).
const HOP_LIMIT: u8 = 64;

/// Every device's RoCE v2 addresses (a removed device's none).
pub fn locals() -> Vec<Local> {
    let mut out = Vec::new();
    for (d, dev) in devices::all().iter().enumerate().filter(|(_, dev)| !dev.removed()) {
        out.extend(dev.addrs.iter().map(|&(g, a)| (d, g, a)));
    }
    out
}

/// Whether `ip` binds as the wildcard does: the unspecified address, or a loopback address that
/// is no device's `roce=` address. Linux's CM counts loopback addresses as "any" (`cma_any_addr` in
/// `drivers/infiniband/core/cma.c`): `rdma_bind_addr` to 127.0.0.1 or ::1 takes no device
/// (`id->verbs` stays NULL, as libfabric's verbs provider expects of `localhost`) and a
/// listener bound there hears every device's addresses. A loopback address a device of ours
/// holds (`roce=127.0.0.1`) is that device's, as any other held address, and a removed device's
/// is no one's (`ENODEV`).
pub fn any_addr(ip: IpAddr) -> bool {
    ip.is_unspecified() || (ip.is_loopback() && !devices::named(ip))
}

/// Whether two bound addresses overlap (the same, or a wildcard covering the other).
fn overlap(a: &IdState, b: IpAddr, b_afonly: bool) -> bool {
    let Some(a_ip) = a.src.map(|s| s.ip()) else { return false };
    if a_ip == b {
        return true;
    }
    let covers = |w: IpAddr, afonly: bool, o: IpAddr| any_addr(w) && (w.is_ipv4() == o.is_ipv4() || !afonly);
    covers(a_ip, a.afonly, b) || covers(b, b_afonly, a_ip)
}

fn port_free(w: &World, me: usize, ps: u32, port: u16, ip: IpAddr) -> bool {
    let s = &w.ids[&me];
    w.ids.iter().filter(|(&k, o)| k != me && o.port == Some(port)).all(|(&k, o)| {
        // SAFETY: ids in `ids` are live boxes.
        let ops = unsafe { (*crate::world::cma(k)).id.ps };
        ops != ps || !overlap(o, ip, s.afonly) || (s.reuseaddr && o.reuseaddr && o.phase != Phase::Listen)
    })
}

/// Binds id `p` to `addr` (`cma_bind_addr`/`cma_get_port`): `EINVAL` unless idle,
/// `EADDRNOTAVAIL` for an address the host lacks, `ENODEV` for one no device holds (but a
/// loopback address, which binds as the wildcard: [`any_addr`]), `EADDRINUSE` for a port taken.
pub fn bind(w: &mut World, p: usize, addr: SocketAddr) -> Result<(), i32> {
    let s = w.ids.get(&p).ok_or(libc::EINVAL)?;
    if s.phase != Phase::Idle {
        return Err(libc::EINVAL);
    }
    let ip = addr.ip();
    let held = if any_addr(ip) {
        None
    } else {
        match devices::holding(ip) {
            Some(h) => Some(h),
            None if UdpSocket::bind(SocketAddr::new(ip, 0)).is_err() => return Err(libc::EADDRNOTAVAIL),
            None => return Err(libc::ENODEV),
        }
    };
    // SAFETY: a live id box.
    let ps = unsafe { (*crate::world::cma(p)).id.ps };
    let port = if addr.port() != 0 {
        if !port_free(w, p, ps, addr.port(), ip) {
            return Err(libc::EADDRINUSE);
        }
        addr.port()
    } else {
        let start = fastrand::u16(EPHEMERAL);
        let span = EPHEMERAL.end - EPHEMERAL.start;
        (0..span)
            .map(|i| EPHEMERAL.start + (start - EPHEMERAL.start + i) % span)
            .find(|&c| port_free(w, p, ps, c, ip))
            .ok_or(libc::EADDRINUSE)?
    };
    let s = w.ids.get_mut(&p).ok_or(libc::EINVAL)?;
    s.src = Some(SocketAddr::new(ip, port));
    s.port = Some(port);
    if let Some((d, g)) = held {
        s.dev = Some(d);
        s.sgid_index = g;
    }
    s.phase = Phase::Bound;
    w.publish_addrs(p);
    Ok(())
}

/// `rdma_bind_addr`.
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> i32 {
    guard(-1, || {
        // SAFETY: the program passes a sockaddr of its family's size (librdmacm's contract).
        let Some(a) = (unsafe { read_sockaddr(addr) }) else { return err(libc::EINVAL) };
        let mut w = lock();
        ret(bind(&mut w, id as usize, a))
    })
}

fn wildcard_like(dst: IpAddr) -> IpAddr {
    if dst.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    }
}

fn resolve(p: usize, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), i32> {
    let mut w = lock();
    let s = w.ids.get_mut(&p).ok_or(libc::EINVAL)?;
    if s.phase == Phase::Idle {
        let from = src.unwrap_or_else(|| SocketAddr::new(wildcard_like(dst.ip()), 0));
        bind(&mut w, p, from)?;
    }
    let s = w.ids.get_mut(&p).ok_or(libc::EINVAL)?;
    if !matches!(s.phase, Phase::Bound | Phase::AddrResolved) {
        return Err(libc::EINVAL);
    }
    s.dst = Some(dst);
    let bound = s.src.ok_or(libc::EINVAL)?;
    let from = Some(bound.ip()).filter(|&ip| !any_addr(ip));
    let e = match route::pick(from, dst.ip(), &locals()) {
        Ok((d, g, ip)) => {
            s.dev = Some(d);
            s.sgid_index = g;
            s.src = Some(SocketAddr::new(ip, bound.port()));
            s.phase = Phase::AddrResolved;
            Event::new(p, RDMA_CM_EVENT_ADDR_RESOLVED, 0)
        }
        Err(status) => Event::new(p, RDMA_CM_EVENT_ADDR_ERROR, status),
    };
    w.publish_addrs(p);
    w.deliver(e);
    Ok(())
}

/// `rdma_resolve_addr`: ADDR_RESOLVED (or ADDR_ERROR) follows on the id's channel.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    _timeout_ms: i32,
) -> i32 {
    guard(-1, || {
        // SAFETY: the program's sockaddrs, of their family's size.
        let (src, dst) = unsafe { (read_sockaddr(src_addr), read_sockaddr(dst_addr)) };
        let Some(dst) = dst else { return err(libc::EINVAL) };
        // SAFETY: as above.
        if src.is_none() && unsafe { family(src_addr) } != 0 {
            return err(libc::EINVAL);
        }
        ret(resolve(id as usize, src, dst).and_then(|()| complete(id)))
    })
}

fn route_of(p: usize) -> Result<(), i32> {
    let mut w = lock();
    let s = w.ids.get_mut(&p).ok_or(libc::EINVAL)?;
    if s.phase != Phase::AddrResolved {
        return Err(libc::EINVAL);
    }
    let (src, dst, dev) = (s.src.ok_or(libc::EINVAL)?, s.dst.ok_or(libc::EINVAL)?, s.dev.ok_or(libc::EINVAL)?);
    let tos = s.tos.unwrap_or(0);
    s.path = Some(Path {
        sgid: ip_to_gid(src.ip()),
        dgid: ip_to_gid(dst.ip()),
        sgid_index: s.sgid_index,
        flow_label: 0,
        traffic_class: tos,
        hop_limit: HOP_LIMIT,
        mtu: devices::all()[dev].active_mtu as u8,
        rate: 0,
        packet_life_time: PACKET_LIFETIME,
        pkey: 0xffff,
        sl: tos >> 5,
    });
    s.phase = Phase::RouteResolved;
    w.publish_path(p);
    w.deliver(Event::new(p, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
    Ok(())
}

/// `rdma_resolve_route`: the path (MTU of the port, both GIDs, hop limit, traffic class from
/// `RDMA_OPTION_ID_TOS`); ROUTE_RESOLVED follows.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: i32) -> i32 {
    guard(-1, || ret(route_of(id as usize).and_then(|()| complete(id))))
}

fn port_of(id: *mut rdma_cm_id, local: bool) -> u16 {
    let mut w = lock();
    match w.id(id) {
        Ok(s) => if local { s.src } else { s.dst }.map_or(0, |a| a.port().to_be()),
        Err(_) => 0,
    }
}

/// `rdma_get_src_port` (network order; 0 for an id without one).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || port_of(id, true))
}

/// `rdma_get_dst_port` (network order).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || port_of(id, false))
}
